"""`mpirun -np 2 diffract analyze|compare`: the matrices are split across ranks, rank 0 gathers them into the
one store, and the CSVs are byte-identical to a single-process run."""
import shutil
import sqlite3
import subprocess

from conftest import binary, run


def test_two_ranks_match_a_single_process(family_f32, tmp_path):
    assert shutil.which("mpirun"), "openmpi-bin is installed by scripts/setup_debian.sh"
    models = [family_f32 / "math", family_f32 / "code"]
    run(["analyze", *models, "--out", tmp_path / "single", "--store", tmp_path / "single.sqlite", "--quiet"])
    p = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", binary(), "analyze", *map(str, models),
                        "--out", str(tmp_path / "mpi"), "--store", str(tmp_path / "mpi.sqlite"), "--threads", "1"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "computed" in p.stderr and p.stderr.count("analyze:") == 1  # only rank 0 reports
    for f in ("metrics.csv", "aggregates.csv"):
        assert (tmp_path / "single" / f).read_bytes() == (tmp_path / "mpi" / f).read_bytes(), f
    # Everything reached the one store: a re-run computes nothing.
    rerun = run(["analyze", *models, "--out", tmp_path / "again", "--store", tmp_path / "mpi.sqlite"])
    assert "(0 computed" in rerun.stderr
    n = sqlite3.connect(tmp_path / "mpi.sqlite").execute("SELECT COUNT(DISTINCT content || block) FROM results").fetchone()[0]
    assert n > 0


def test_two_ranks_compare_matches_a_single_process(family_f32, tmp_path):
    base = family_f32 / "pretrained"
    models = [family_f32 / "math", family_f32 / "code"]
    common = ["--base", str(base), *map(str, models), "--reference", str(family_f32 / "text")]
    run(["compare", *common, "--out", tmp_path / "single", "--store", tmp_path / "single.sqlite", "--quiet"])
    p = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", binary(), "compare", *common,
                        "--out", str(tmp_path / "mpi"), "--store", str(tmp_path / "mpi.sqlite"), "--threads", "1"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("compare:") == 1  # only rank 0 reports
    for f in ("compare.csv", "heads.csv"):
        assert (tmp_path / "single" / f).read_bytes() == (tmp_path / "mpi" / f).read_bytes(), f
    # Rank 1's share reached the one store, vectors included: a re-run computes nothing.
    rerun = run(["compare", *common, "--out", tmp_path / "again", "--store", tmp_path / "mpi.sqlite"])
    assert "(0 computed" in rerun.stderr
    assert (tmp_path / "again" / "compare.csv").read_bytes() == (tmp_path / "single" / "compare.csv").read_bytes()
    con = sqlite3.connect(tmp_path / "mpi.sqlite")
    assert con.execute("SELECT COUNT(*) FROM results").fetchone()[0] == \
        sqlite3.connect(tmp_path / "single.sqlite").execute("SELECT COUNT(*) FROM results").fetchone()[0]
