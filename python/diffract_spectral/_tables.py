"""Result tables: the one place where the package turns columns into DataFrames (analyze, compare,
catalog, sweeps), so that every table types its columns alike."""
from __future__ import annotations

# Integer identity columns that may be empty (a whole matrix has no head, an embedding no layer): pandas'
# nullable Int64, so that they stay integers instead of becoming floats with NaN for the missing ones.
NULLABLE_INT_COLUMNS = ("layer", "head")


def table(columns: dict, pd=None):
    """A pandas DataFrame of the columns (`pd`: the pandas module, None when not importable: then the
    dict of lists itself). `layer` and `head` are Int64 columns (missing values are <NA>)."""
    if pd is None:
        return columns
    df = pd.DataFrame(columns)
    for name in NULLABLE_INT_COLUMNS:
        if name in df.columns:
            df[name] = pd.array(list(columns[name]), dtype="Int64")
    return df
