"""No command destroys data it was not asked to write (issue 13, class 3): one output-path rule for
every command, whole result directories, checked writes (a full disk is injected with a small
tmpfs), and temporaries removed after a kill or an interrupt.
"""

import hashlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import assert_input_error, binary, run

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


def tree_digest(path):
    """A digest of every file's name and bytes under `path` (or of the file)."""
    h = hashlib.sha256()
    p = Path(path)
    files = [p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file())
    for f in files:
        h.update(str(f.relative_to(p.parent)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


@pytest.fixture()
def fam(family_f32, tmp_path):
    d = tmp_path / "fam"
    shutil.copytree(family_f32, d)
    return d


@pytest.fixture()
def results(fam, tmp_path):
    """A store and analyze/compare result directories over the family copy."""
    store = tmp_path / "s.sqlite"
    run(["analyze", fam / "math", "--out", tmp_path / "an", "--store", store, "--no-heads"])
    run(["compare", "--base", fam / "pretrained", fam / "math", "--out", tmp_path / "cmp", "--store", store,
         "--no-heads"])
    return store


@pytest.mark.parametrize("where", ["equal", "inside", "contains"])
def test_analyze_and_compare_never_write_into_inputs(fam, tmp_path, where):
    model = fam / "math"
    out = {"equal": model, "inside": model / "res", "contains": fam}[where]
    before = tree_digest(fam)
    assert_input_error(run(["analyze", model, "--out", out, "--store", tmp_path / "s.sqlite"], check=False), "--out", model)
    assert_input_error(run(["compare", "--base", fam / "pretrained", model, "--out", out, "--store", tmp_path / "s.sqlite"],
                check=False), "--out")
    assert tree_digest(fam) == before
    assert not (tmp_path / "s.sqlite").exists()  # refused before the store was even opened


def test_outputs_never_replace_the_store(fam, tmp_path, results):
    store = results
    before = tree_digest(store)
    assert_input_error(run(["export", "--store", store, "--out", store], check=False), "--out")
    assert_input_error(run(["report", tmp_path / "an", "--store", store, "--out", store], check=False), "--out")
    assert_input_error(run(["analyze", fam / "math", "--out", tmp_path, "--store", store], check=False), "--out")
    assert_input_error(run(["analyze", fam / "math", "--out", store, "--store", store], check=False), "--out")
    assert tree_digest(store) == before


def test_report_never_replaces_an_input_csv(tmp_path, results):
    before = tree_digest(tmp_path / "an")
    for out in (tmp_path / "an" / "metrics.csv", tmp_path / "an"):
        assert_input_error(run(["report", tmp_path / "an", "--store", results, "--out", out], check=False), "--out")
    assert_input_error(run(["report", tmp_path / "an", "--store", results, "--out", tmp_path / "cmp" / "x",
                 "--format", "svg", tmp_path / "cmp"], check=False), "--out")
    assert tree_digest(tmp_path / "an") == before


def test_sweep_refuses_an_output_inside_an_input_before_writing(fam, tmp_path):
    before = tree_digest(fam)
    p = run(["sweep", "interpolate", fam / "pretrained", fam / "math", "--omegas", "0,1",
             "--eval", "echo 1", "--out", fam / "math" / "sweep"], check=False)
    assert_input_error(p, "--out")
    assert tree_digest(fam) == before


def test_result_directory_is_replaced_whole(fam, tmp_path):
    store = tmp_path / "s.sqlite"
    out = tmp_path / "cmp"
    run(["compare", "--base", fam / "pretrained", fam / "math", "--out", out, "--store", store, "--no-heads",
         "--allow-partial"])
    assert (out / "skipped.csv").exists()
    run(["compare", "--base", fam / "pretrained", fam / "math", "--out", out, "--store", store, "--no-heads"])
    # The new result set alone: no skipped.csv of the earlier run beside the new compare.csv.
    assert sorted(p.name for p in out.iterdir()) == ["compare.csv", "heads.csv"]
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_result_directory_with_foreign_files_is_not_replaced(fam, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    p = run(["analyze", fam / "math", "--out", out, "--store", tmp_path / "s.sqlite", "--no-heads"], check=False)
    assert_input_error(p, out, "notes.txt")
    assert (out / "notes.txt").read_text() == "keep me"
    f = tmp_path / "afile"
    f.write_text("x")
    assert_input_error(run(["analyze", fam / "math", "--out", f, "--store", tmp_path / "s.sqlite"], check=False), f)
    assert f.read_text() == "x"


def test_stale_temporaries_of_dead_runs_are_removed(fam, tmp_path):
    # A temporary of a run that was killed (PID not alive), one of an older diffract (no PID), and one
    # of a live process (this one) that must survive.
    dead = tmp_path / ".an.tmp-999999999-deadbeef"
    old = tmp_path / ".an.tmp-0badf00d"
    live = tmp_path / f".an.tmp-{os.getpid()}-12345678"
    for d in (dead, old, live):
        d.mkdir()
        (d / "metrics.csv").write_text("partial")
    run(["analyze", fam / "math", "--out", tmp_path / "an", "--store", tmp_path / "s.sqlite", "--no-heads"])
    assert not dead.exists() and not old.exists()
    assert live.exists()
    edit_dead = tmp_path / ".ed.tmp-999999999-00000000"
    edit_dead.mkdir()
    run(["edit", "interpolate", fam / "pretrained", fam / "math", "--omega", "0.5", "--out",
         tmp_path / "ed"])
    assert not edit_dead.exists()


def big_family(tmp_path):
    out = tmp_path / "big"
    run(["generate", "--out", out, "--dtype", "F32", "--layers", "4", "--hidden", "1024", "--heads", "8",
         "--intermediate", "4096", "--vocab", "8192", "--domain-heads", "1", "--generic-heads", "1"])
    return out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_interrupted_edit_removes_its_temporary(tmp_path, sig):
    fam = big_family(tmp_path)
    out = tmp_path / "ed"
    proc = subprocess.Popen([binary(), "edit", "interpolate", fam / "pretrained", fam / "math",
                             "--omega", "0.5", "--out", out], stderr=subprocess.PIPE, text=True)
    # Stop the process while its temporary directory exists, then signal it: deterministic, not timing.
    deadline = time.time() + 60
    while time.time() < deadline and not list(tmp_path.glob(".ed.tmp-*")):
        time.sleep(0.001)
    proc.send_signal(signal.SIGSTOP)
    if not list(tmp_path.glob(".ed.tmp-*")):
        proc.send_signal(signal.SIGCONT)
        proc.wait()
        pytest.fail("the edit finished before it could be interrupted; use a larger model")
    proc.send_signal(sig)
    proc.send_signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert not out.exists()
    assert not list(tmp_path.glob(".ed.tmp-*"))


def tmpfs(path, size):
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)


def used_pages_except(d, skip):
    """Pages a tmpfs needs for the files under d, except `skip` (tmpfs charges whole pages)."""
    page = os.sysconf("SC_PAGE_SIZE")
    return sum(-(-f.stat().st_size // page) for f in Path(d).rglob("*") if f.is_file() and f.name != skip)


@needs_root
def test_disk_full_at_the_index_is_an_error_and_leaves_nothing(fam, tmp_path):
    # The edit as it should be, sharded so that an index is written last.
    ref = tmp_path / "ref"
    args = ["edit", "interpolate", fam / "pretrained", fam / "math", "--omega", "0.5",
            "--max-shard-size", "200K"]
    run([*args, "--out", ref])
    assert (ref / "model.safetensors.index.json").exists()
    # A disk with room for every file but the index.
    mnt = tmp_path / "small"
    tmpfs(mnt, used_pages_except(ref, "model.safetensors.index.json") * os.sysconf("SC_PAGE_SIZE"))
    try:
        p = run([*args, "--out", mnt / "ed"], check=False)
        # The index and diffract_edit.json (which records what the weights turned out to be) are written
        # after the weights: the one that finds the disk full is named.
        line = assert_input_error(p, "disk full")
        assert "model.safetensors.index.json" in line or "diffract_edit.json" in line, line
        assert not (mnt / "ed").exists()
        assert list(mnt.iterdir()) == []
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@needs_root
def test_disk_full_while_writing_results_keeps_the_old_results(fam, tmp_path):
    mnt = tmp_path / "small"
    tmpfs(mnt, "64k")
    try:
        store = tmp_path / "s.sqlite"
        out = mnt / "an"
        run(["analyze", fam / "math", "--out", out, "--store", store, "--no-heads", "--metrics", "stable_rank"])
        before = tree_digest(out)
        (mnt / "filler").write_bytes(b"\0" * (os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize))
        p = run(["analyze", fam / "math", "--out", out, "--store", store, "--metrics", "default"], check=False)
        assert_input_error(p, "disk full")
        assert tree_digest(out) == before
        assert not [x for x in mnt.iterdir() if ".tmp-" in x.name]
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@needs_root
def test_disk_full_during_a_sweep_is_exit_2_naming_the_path(fam, tmp_path):
    mnt = tmp_path / "small"
    tmpfs(mnt, "48k")  # room for the journal, not for a candidate checkpoint
    try:
        p = run(["sweep", "interpolate", fam / "pretrained", fam / "math", "--omegas", "0,0.5,1",
                 "--eval", "echo 1", "--out", mnt / "sw"], check=False)
        assert_input_error(p, mnt)
        assert not [x for x in mnt.rglob("*") if ".tmp-" in x.name or x.suffix == ".safetensors"]
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_two_runs_racing_for_one_out_never_mix_or_fail_internally(fam, tmp_path):
    out = tmp_path / "an"
    procs = [subprocess.Popen([binary(), "analyze", fam / "math", "--out", out, "--store", tmp_path / f"s{i}.sqlite",
                               "--no-heads", "--quiet", "--metrics", metric], stderr=subprocess.PIPE, text=True)
             for i, metric in enumerate(("stable_rank", "frob_norm"))]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode in (0, 2), err
    # Whichever run came last, the directory is one run's whole result set.
    header = (out / "metrics.csv").read_text().splitlines()[0]
    assert header.endswith(",stable_rank") or header.endswith(",frob_norm")
    assert sorted(x.name for x in out.iterdir()) == ["aggregates.csv", "metrics.csv"]
    assert not [x for x in tmp_path.iterdir() if ".tmp-" in x.name]
    # Two edits racing for one output: exactly one writes it, the other is refused with exit 2.
    edits = [subprocess.Popen([binary(), "edit", "interpolate", fam / "pretrained", fam / "math", "--omega", w,
                               "--out", tmp_path / "ed"], stderr=subprocess.PIPE, text=True) for w in ("0.25", "0.75")]
    codes = sorted(p.wait(timeout=300) for p in edits)
    assert codes == [0, 2]
    assert not [x for x in tmp_path.iterdir() if ".tmp-" in x.name]


def test_out_through_a_link_and_dotdot_is_written_where_it_was_checked(fam, tmp_path):
    # "sub/m/../m/res": the kernel resolves the link sub/m (-> fam/math) before "..", so the path is
    # fam/m/res, beside the model; a writer that dropped "m/.." from the text would write inside it.
    model = fam / "math"
    (tmp_path / "sub").mkdir()
    os.symlink(model, tmp_path / "sub" / "m")
    store = tmp_path / "s.sqlite"
    before = tree_digest(model)
    run(["analyze", model, "--out", f"{tmp_path}/sub/m/../m/res", "--store", store, "--no-heads"])
    run(["compare", "--base", fam / "pretrained", model, "--out", f"{tmp_path}/sub/m/../m/cmp", "--store", store,
         "--no-heads"])
    run(["edit", "interpolate", fam / "pretrained", model, "--omega", "0.5", "--out", f"{tmp_path}/sub/m/../m/ed",
         "--quiet"])
    assert tree_digest(model) == before
    assert (fam / "m" / "res" / "metrics.csv").is_file() and (fam / "m" / "cmp" / "compare.csv").is_file()
    assert (fam / "m" / "ed" / "config.json").is_file()
    # An existing result set reached the same way is the one replaced, not a namesake elsewhere.
    run(["analyze", fam / "code", "--out", tmp_path / "results", "--store", store, "--no-heads"])
    (tmp_path / "far" / "deep").mkdir(parents=True)
    os.symlink(tmp_path / "far" / "deep", tmp_path / "d")
    run(["analyze", model, "--out", f"{tmp_path}/d/../results", "--store", store, "--no-heads"])
    assert (tmp_path / "results" / "metrics.csv").read_text().splitlines()[1].startswith("code,")
    assert (tmp_path / "far" / "results" / "metrics.csv").read_text().splitlines()[1].startswith("math,")
    # And a path that resolves into an input is refused, however it is spelled.
    assert_input_error(run(["analyze", model, "--out", f"{tmp_path}/d/../../fam/math/x", "--store", store],
                           check=False), "--out")
    assert tree_digest(model) == before
