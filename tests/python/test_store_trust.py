"""The results store serves results only for the bytes they were computed from (issue 13, class 1),
keeps names per run, and refuses what is not a store of its schema (class 3's store items).

Checked against independent facts: a byte-modified copy of a model (the safetensors header parsed
here with json), the analyze CSVs of a fresh store, and sqlite3 from Python's standard library.
"""

import csv
import json
import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from conftest import assert_input_error, run


def summary_counts(stderr):
    """(computed, reused) from analyze's or compare's summary line."""
    m = re.search(r"\((\d+) computed.*?, (\d+) reused", stderr)
    assert m, stderr
    return int(m.group(1)), int(m.group(2))


def tensor_ranges(path):
    """{name: (absolute start, end)} of a .safetensors file's tensor data."""
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    return {k: (8 + n + v["data_offsets"][0], 8 + n + v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"}


def flip_bytes(path, tensor, offset_in_tensor=0, count=4):
    """Changes `count` bytes of one tensor's data in place (keeps size; mtime moves)."""
    start, _ = tensor_ranges(path)[tensor]
    with open(path, "r+b") as f:
        f.seek(start + offset_in_tensor)
        b = bytearray(f.read(count))
        f.seek(start + offset_in_tensor)
        f.write(bytes(x ^ 0x5A for x in b))


def read_rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def model_file(d):
    return next(Path(d).glob("*.safetensors"))


@pytest.fixture()
def model_copy(family_f32, tmp_path):
    """A private copy of the F32 family's `math` model (tests modify it)."""
    dst = tmp_path / "math"
    shutil.copytree(family_f32 / "math", dst)
    return dst


def attn_tensor(d):
    return next(n for n in tensor_ranges(model_file(d)) if "q_proj" in n)


def test_edited_tensor_is_recomputed_and_only_it(model_copy, tmp_path):
    store = tmp_path / "s.sqlite"
    first = run(["analyze", model_copy, "--out", tmp_path / "a1", "--store", store])
    computed, reused = summary_counts(first.stderr)
    assert reused == 0 and computed > 0
    before = read_rows(tmp_path / "a1" / "metrics.csv")

    name = attn_tensor(model_copy)
    flip_bytes(model_file(model_copy), name, offset_in_tensor=64, count=8)
    second = run(["analyze", model_copy, "--out", tmp_path / "a2", "--store", store])
    computed2, reused2 = summary_counts(second.stderr)
    changed_units = sum(1 for r in before if r["tensor"] == name)
    # Exactly the changed tensor's matrix and head blocks are recomputed; the rest is reused.
    assert computed2 == changed_units, second.stderr
    assert reused2 == len(before) - changed_units

    # The served numbers equal a fresh computation on an empty store.
    fresh = tmp_path / "fresh.sqlite"
    run(["analyze", model_copy, "--out", tmp_path / "a3", "--store", fresh])
    served, truth = read_rows(tmp_path / "a2" / "metrics.csv"), read_rows(tmp_path / "a3" / "metrics.csv")
    assert served == truth
    # And the changed tensor's whole-matrix metrics did move (the store did not serve the old ones).
    old = next(r for r in before if r["tensor"] == name and r["head"] == "")
    new = next(r for r in served if r["tensor"] == name and r["head"] == "")
    assert old["stable_rank"] != new["stable_rank"] or old["frob_norm"] != new["frob_norm"]


def test_same_size_same_mtime_rewrite_is_rehashed(model_copy, tmp_path):
    """A file rewritten in place with its size and mtime restored is still re-hashed (ctime moved)."""
    store = tmp_path / "s.sqlite"
    run(["analyze", model_copy, "--out", tmp_path / "a1", "--store", store, "--no-heads"])
    f = model_file(model_copy)
    st = os.stat(f)
    flip_bytes(f, attn_tensor(model_copy), count=16)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    p = run(["analyze", model_copy, "--out", tmp_path / "a2", "--store", store, "--no-heads"])
    assert summary_counts(p.stderr)[0] == 1


def test_unchanged_rerun_reads_cached_hashes(model_copy, tmp_path):
    """The opt-in stat-keyed hash cache (DIFFRACT_REUSE_FILE_HASHES=1; off by default: docs/store.md)."""
    store = tmp_path / "s.sqlite"
    env = {**os.environ, "DIFFRACT_REUSE_FILE_HASHES": "1"}
    run(["analyze", model_copy, "--out", tmp_path / "a1", "--store", store, "--no-heads"], env=env)
    with sqlite3.connect(store) as db:
        hashes = db.execute("SELECT COUNT(*) FROM file_hashes").fetchone()[0]
        # One cached hash per analysed (2-D) tensor.
        assert hashes == db.execute("SELECT COUNT(*) FROM model_tensors").fetchone()[0] > 0
    p = run(["analyze", model_copy, "--out", tmp_path / "a2", "--store", store, "--no-heads"], env=env)
    assert summary_counts(p.stderr)[0] == 0
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT COUNT(*) FROM file_hashes").fetchone()[0] == hashes


def test_names_come_from_this_run(family_f32, tmp_path):
    store = tmp_path / "s.sqlite"
    run(["analyze", family_f32 / "pretrained", "--out", tmp_path / "a1", "--store", store, "--no-heads"])
    p = run(["analyze", f"base={family_f32 / 'pretrained'}", "--out", tmp_path / "a2", "--store", store, "--no-heads"])
    assert summary_counts(p.stderr)[0] == 0  # same bytes: everything reused
    assert {r["model"] for r in read_rows(tmp_path / "a2" / "metrics.csv")} == {"base"}
    listing = run(["store", "--store", store, "list"]).stdout
    assert "base" in listing and "pretrained" in listing
    export = read_rows_text(run(["export", "--store", store]).stdout)
    models = {r["model"] for r in export}
    assert models == {"base", "pretrained"}
    # The report's ESD panel finds the spectra under this run's name.
    rep = run(["report", tmp_path / "a2", "--store", store, "--out", tmp_path / "r.html"])
    assert "ESD" not in "".join(l for l in rep.stderr.splitlines() if "Not shown" in l)


def read_rows_text(text):
    return list(csv.DictReader(text.splitlines()))


def test_compare_reuses_per_tensor(family_f32, model_copy, tmp_path):
    store = tmp_path / "s.sqlite"
    base = family_f32 / "pretrained"
    first = run(["compare", "--base", base, model_copy, "--out", tmp_path / "c1", "--store", store, "--no-heads"])
    computed, _ = summary_counts(first.stderr)
    flip_bytes(model_file(model_copy), attn_tensor(model_copy), count=8)
    second = run(["compare", "--base", base, model_copy, "--out", tmp_path / "c2", "--store", store, "--no-heads"])
    assert summary_counts(second.stderr) == (1, computed - 1)
    fresh = tmp_path / "fresh.sqlite"
    run(["compare", "--base", base, model_copy, "--out", tmp_path / "c3", "--store", fresh, "--no-heads"])
    assert read_rows(tmp_path / "c2" / "compare.csv") == read_rows(tmp_path / "c3" / "compare.csv")


def test_erase_matches_names_exactly(family_f32, tmp_path):
    store = tmp_path / "s.sqlite"
    run(["analyze", f"b={family_f32 / 'pretrained'}", f"math={family_f32 / 'math'}", "--out", tmp_path / "a",
         "--store", store, "--no-heads"])
    assert_input_error(run(["store", "--store", store, "erase", "--model", "%"], check=False), "no model named '%'")
    assert_input_error(run(["store", "--store", store, "erase", "--model", "ma"], check=False), "no model named 'ma'")
    run(["store", "--store", store, "erase", "--model", "b"])
    export = read_rows_text(run(["export", "--store", store]).stdout)
    assert {r["model"] for r in export} == {"math"}
    p = run(["analyze", f"math={family_f32 / 'math'}", "--out", tmp_path / "a2", "--store", store, "--no-heads"])
    assert summary_counts(p.stderr)[0] == 0


def test_erase_keeps_results_shared_with_another_name(family_f32, tmp_path):
    store = tmp_path / "s.sqlite"
    for name in ("one", "two"):
        run(["analyze", f"{name}={family_f32 / 'math'}", "--out", tmp_path / name, "--store", store, "--no-heads"])
    run(["store", "--store", store, "erase", "--model", "one"])
    p = run(["analyze", f"two={family_f32 / 'math'}", "--out", tmp_path / "again", "--store", store, "--no-heads"])
    assert summary_counts(p.stderr)[0] == 0


def test_store_schema_is_checked(family_f32, tmp_path):
    old = tmp_path / "old.sqlite"
    with sqlite3.connect(old) as db:
        db.execute("CREATE TABLE models(id INTEGER PRIMARY KEY, fingerprint TEXT, name TEXT, path TEXT)")
    args = [family_f32 / "math", "--out", tmp_path / "a", "--no-heads"]
    assert_input_error(run(["analyze", *args, "--store", old], check=False), old, "schema")
    newer = tmp_path / "newer.sqlite"
    run(["analyze", *args, "--store", newer])
    with sqlite3.connect(newer) as db:
        db.execute("PRAGMA user_version=99")
    assert_input_error(run(["store", "--store", newer, "list"], check=False), newer, "version 99", "newer")
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(os.urandom(8192))
    assert_input_error(run(["store", "--store", junk, "list"], check=False), junk)


def test_merge_refuses_bad_stores_at_once(family_f32, tmp_path):
    store = tmp_path / "s.sqlite"
    run(["analyze", family_f32 / "math", "--out", tmp_path / "a", "--store", store, "--no-heads"])
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"not a database at all" * 100)
    assert_input_error(run(["store", "--store", store, "merge", junk], check=False), junk)
    link = tmp_path / "same.sqlite"
    os.symlink(store, link)
    p = run(["store", "--store", store, "merge", link], check=False, timeout=20)
    assert_input_error(p, "itself")
    other = tmp_path / "o.sqlite"
    run(["analyze", family_f32 / "code", "--out", tmp_path / "b", "--store", other, "--no-heads"])
    run(["store", "--store", store, "merge", other])
    export = read_rows_text(run(["export", "--store", store]).stdout)
    assert {r["model"] for r in export} == {"math", "code"}


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a read-only tmpfs needs root")
def test_read_only_store_can_be_listed_and_exported(family_f32, tmp_path):
    mnt = tmp_path / "ro"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], check=True)
    try:
        store = mnt / "s.sqlite"
        run(["analyze", family_f32 / "math", "--out", tmp_path / "a", "--store", store, "--no-heads"])
        expected = run(["export", "--store", store]).stdout
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        assert run(["export", "--store", store]).stdout == expected
        assert "math" in run(["store", "--store", store, "list"]).stdout
        # Writing to it is refused with one line naming the store.
        p = run(["analyze", family_f32 / "code", "--out", tmp_path / "b", "--store", store, "--no-heads"], check=False)
        assert_input_error(p, store)
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_a_name_moved_to_another_checkpoint_keeps_nothing_of_the_old_one(family_f32, tmp_path):
    store = tmp_path / "s.sqlite"
    run(["analyze", f"m={family_f32 / 'math'}", "--out", tmp_path / "a1", "--store", store, "--no-heads"])
    # The name now names another checkpoint, analysed on one layer only: the other layers' rows of
    # the old checkpoint must not be exported under it.
    run(["analyze", f"m={family_f32 / 'code'}", "--out", tmp_path / "a2", "--store", store, "--no-heads",
         "--layers", "0"])
    exported = {r["tensor"] for r in read_rows_text(run(["export", "--store", store]).stdout) if r["model"] == "m"}
    analysed = {r["tensor"] for r in read_rows(tmp_path / "a2" / "metrics.csv")}
    assert exported == analysed


def test_one_name_is_one_checkpoint_in_a_run(family_f32, tmp_path):
    fam, store = family_f32, tmp_path / "s.sqlite"
    run(["compare", "--base", fam / "pretrained", fam / "math", "fam_code=" + str(fam / "code"), "--out",
         tmp_path / "c", "--store", store, "--no-heads"])
    before = run(["export", "--store", store]).stdout
    # A model named like the base, and two models under one name: refused before the store is touched.
    for models in ([f"pretrained={fam / 'math'}"], [f"x={fam / 'math'}", f"x={fam / 'code'}"],
                   [fam / "math", fam / "math"]):
        assert_input_error(run(["compare", "--base", fam / "pretrained", *models, "--out", tmp_path / "c2",
                                "--store", store, "--no-heads"], check=False), "name")
    for models in ([f"x={fam / 'math'}", f"x={fam / 'code'}"], [fam / "math", fam / "math"]):
        assert_input_error(run(["analyze", *models, "--out", tmp_path / "a2", "--store", store, "--no-heads"],
                               check=False), "name")
    assert run(["export", "--store", store]).stdout == before
    assert not (tmp_path / "c2").exists() and not (tmp_path / "a2").exists()
    # A model compared with itself keeps working (the base's own name, the same checkpoint).
    run(["compare", "--base", fam / "pretrained", fam / "pretrained", "--out", tmp_path / "self", "--store", store,
         "--no-heads"])


def test_erase_leaves_no_comparison_that_cannot_be_exported(family_f32, tmp_path):
    fam, store = family_f32, tmp_path / "s.sqlite"
    run(["compare", "--base", fam / "pretrained", fam / "math", "--out", tmp_path / "c", "--store", store,
         "--no-heads"])
    run(["analyze", f"copy={fam / 'pretrained'}", "--out", tmp_path / "a", "--store", store, "--no-heads",
         "--metrics", "stable_rank"])
    compared = [r for r in read_rows_text(run(["export", "--store", store]).stdout) if r["other"]]
    assert compared
    # "copy" still holds the base's bytes, but no pair links math to it: the comparisons go, and count.
    p = run(["store", "--store", store, "erase", "--model", "pretrained"])
    assert int(re.search(r"(\d+)", p.stdout + p.stderr).group(1)) >= len(compared)
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT COUNT(*) FROM results WHERE other <> ''").fetchone()[0] == 0
    assert {r["model"] for r in read_rows_text(run(["export", "--store", store]).stdout)} == {"copy"}


def test_merge_refuses_a_name_that_means_another_checkpoint(family_f32, tmp_path):
    fam = family_f32
    one, two = tmp_path / "one.sqlite", tmp_path / "two.sqlite"
    run(["compare", "--base", fam / "pretrained", fam / "math", "--out", tmp_path / "c1", "--store", one,
         "--no-heads"])
    run(["compare", "--base", fam / "pretrained", f"math={fam / 'code'}", "--out", tmp_path / "c2", "--store", two,
         "--no-heads"])
    with open(one, "rb") as f:
        before = f.read()
    assert_input_error(run(["store", "--store", one, "merge", two], check=False), two, "'math'", "erase")
    assert one.read_bytes() == before
    # Listed counts include comparisons; `store list --store S` works as well as `store --store S list`.
    listing = run(["store", "list", "--store", one]).stdout
    math_line = next(line for line in listing.splitlines() if line.split()[0] == "math")
    assert re.search(r"\b([1-9]\d*) results", math_line), listing


def test_cli_option_errors_are_one_line(family_f32, tmp_path):
    for args in (["compare", "--base", family_f32 / "pretrained", family_f32 / "math", "--out", tmp_path / "x",
                  "--top-k", "99999999999"],
                 ["analyze", family_f32 / "math", "--threads", "abc"], ["analyze", "--bogus"], ["compare"]):
        p = run(args, check=False)
        line = assert_input_error(p)
        assert line.startswith("diffract: error: "), line
