"""Python habits of issue 31 (item 6 in part, item 1's typing marker): counts come back as integer columns,
and the installed package says it is typed (PEP 561's py.typed)."""

import importlib.resources

import pytest

diffract = pytest.importorskip("diffract_spectral")
pd = pytest.importorskip("pandas")


def test_counts_are_integer_columns(family_f32, tmp_path):
    res = diffract.analyze(family_f32 / "math", store=tmp_path / "s.sqlite")
    m = res.metrics
    for name in ("rows", "cols", "greater_dim", "lower_dim", "hard_rank", "pl_n_tail"):
        assert str(m[name].dtype) == "Int64", (name, m[name].dtype)
    assert str(m["stable_rank"].dtype) == "float64"
    # The values are the CSV's own.
    import csv

    diffract.analyze(family_f32 / "math", store=tmp_path / "s.sqlite", out=tmp_path / "an")
    with open(tmp_path / "an" / "metrics.csv", newline="") as f:
        first = next(csv.DictReader(f))
    assert int(first["hard_rank"]) == int(m["hard_rank"].iloc[0])


def test_the_package_is_typed():
    assert (importlib.resources.files("diffract_spectral") / "py.typed").is_file()


def test_a_wrong_keyword_is_named_with_the_function_called(family_f32, tmp_path):
    with pytest.raises(TypeError) as e:
        diffract.edit.truncate(base=family_f32 / "pretrained", model=family_f32 / "math", out=tmp_path / "t",
                               keep=0.5, threads=2)
    assert "truncate() got an unexpected keyword argument 'threads'" in str(e.value)
    assert "_common" not in str(e.value) and "streaming edits" in str(e.value)
    assert not (tmp_path / "t").exists()
