"""Result tables: the one place where the package turns columns into DataFrames (analyze, compare,
catalog, sweeps), so that every table types its columns alike."""
from __future__ import annotations

import math

# Integer identity columns that may be empty (a whole matrix has no head, an embedding no layer): pandas'
# nullable Int64, so that they stay integers instead of becoming floats with NaN for the missing ones.
NULLABLE_INT_COLUMNS = ("layer", "head", "expert")
# Text identity columns that are empty where they do not apply (expert_kind of a matrix that is no
# expert's): missing values (NaN), as pandas reads the empty cells of the CSV files.
NULLABLE_TEXT_COLUMNS = ("expert_kind",)
# Counts the engine carries as numbers (NaN where a fit was not made): Int64 too, when every value is
# a whole number or missing, so `df.hard_rank` is an integer column as `diffract metrics` describes it.
COUNT_COLUMNS = ("rows", "cols", "greater_dim", "lower_dim", "nonfinite_count", "hard_rank", "mp_num_spikes",
                 "tw_num_spikes", "pl_n_tail", "pl_n_tail_xmin2", "tpl_n_tail", "expon_n_tail", "top_k", "kv_head",
                 "kv_group_size", "rank", "rewind_order", "query_heads", "kv_blocks", "parameters", "stands_out")


def _whole_or_missing(values) -> bool:
    for v in values:
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        if isinstance(v, float) and not math.isnan(v) and not v.is_integer():
            return False
    return True


def table(columns: dict, pd=None):
    """A pandas DataFrame of the columns (`pd`: the pandas module, None when not importable: then the
    dict of lists itself). `layer` and `head` are Int64 columns (missing values are <NA>), and so are
    the counts (COUNT_COLUMNS) whose values are whole numbers."""
    if pd is None:
        return columns
    df = pd.DataFrame(columns)
    for name in NULLABLE_INT_COLUMNS:
        if name in df.columns:
            df[name] = pd.array(list(columns[name]), dtype="Int64")
    for name in NULLABLE_TEXT_COLUMNS:
        if name in df.columns:
            df[name] = [float("nan") if v == "" else v for v in columns[name]]
    for name in COUNT_COLUMNS:
        if name in df.columns and name not in NULLABLE_INT_COLUMNS and _whole_or_missing(columns[name]):
            values = [None if v is None or (isinstance(v, float) and math.isnan(v)) else int(v) for v in columns[name]]
            df[name] = pd.array(values, dtype="Int64")
    return df


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def importance_ranks(columns: dict, group: tuple = ("model",), names: tuple = ("rank",)) -> dict:
    """A head table's ranks as Python presents them: heads.csv's `rank` (0 = the least important head,
    the first to rewind) becomes `rewind_order` (the same values), and `rank` counts from the other end,
    1 = the most important head (the last to rewind) within each group (a model; a model and step).
    The CSV files keep their values; only the returned columns change. Columns `names` are renamed
    alike (`rank_second` → `rank_second` from 1 and `rewind_order_second`)."""
    present = [n for n in names if n in columns]
    if not present:
        return columns
    length = len(next(iter(columns.values()), []))
    keys = [tuple(columns[g][i] for g in group if g in columns) for i in range(length)]
    counts: dict = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    out = {}
    for name, values in columns.items():
        if name not in present:
            out[name] = values
            continue
        out[name] = [None if _missing(v) else counts[k] - int(v) for v, k in zip(values, keys)]
        out[name.replace("rank", "rewind_order")] = values
    return out


_HEADS_FRAME = None


def heads_frame(df):
    """A head table as a DataFrame whose attribute `rank` is its rank column (1 = the most important
    head), so that `heads[heads.rank <= 5]` reads as written; pandas' DataFrame.rank() method stays
    reachable on any column (`heads["importance"].rank()`) and on tables without a rank column. Row
    subsets (filtering, head(), sort_values) keep the class."""
    global _HEADS_FRAME
    if _HEADS_FRAME is None:
        base = type(df)

        class HeadsFrame(base):
            """compare's / watch's / validate's head table (see heads_frame)."""

            @property
            def _constructor(self):
                return HeadsFrame

            @property
            def rank(self):
                if "rank" in self.columns:
                    return self["rank"]
                return base.rank.__get__(self)

        _HEADS_FRAME = HeadsFrame
    return _HEADS_FRAME(df)
