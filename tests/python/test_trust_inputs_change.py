"""A result is stored only for the bytes it was computed from, even when an input changes while it is
read (issue 33, classes 1 and 2): a checkpoint rewritten in place during a run, written through a
shared memory map (size, mtime and ctime can stay as they were), or truncated under a read.

Independent facts: the rows of a fresh store over a pristine copy of the same bytes; the file's size
and the absence of temporaries and outputs after a refused run.
"""

import csv
import os
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import binary, run

import subprocess


def rows_without_model(path):
    with open(path) as f:
        return [{k: v for k, v in r.items() if k != "model"} for r in csv.DictReader(f)]


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory):
    """An F32 model whose one-thread analysis takes seconds (a rewrite lands in the middle of it)."""
    out = tmp_path_factory.mktemp("slow") / "fam"
    run(["generate", "--out", out, "--dtype", "F32", "--layers", "3", "--hidden", "1024", "--heads", "8",
         "--intermediate", "2048", "--vocab", "1024", "--models", "pretrained,math"])
    return out


def data_start(path):
    raw = Path(path).read_bytes()[:8]
    return 8 + int.from_bytes(raw, "little")


def analyze_while(model_dir, out, store, action, delay=0.5):
    """Runs a one-thread analyze of `model_dir` and calls `action()` `delay` seconds into it."""
    p = subprocess.Popen([binary(), "analyze", str(model_dir), "--out", str(out), "--store", str(store),
                          "--threads", "1", "--quiet"], stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    action()
    _, err = p.communicate(timeout=600)
    return p.returncode, err


def test_rewritten_in_place_during_a_run_stores_nothing_wrong(slow_model, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(slow_model / "pretrained", work)
    pristine = tmp_path / "pristine"
    shutil.copytree(slow_model / "pretrained", pristine)
    other = (slow_model / "math" / "model.safetensors").read_bytes()
    target = work / "model.safetensors"

    def resave():  # a training job writing the next checkpoint's bytes into the same file
        with open(target, "r+b") as f:
            start = data_start(target)
            f.seek(start)
            f.write(other[start:])

    store = tmp_path / "s.sqlite"
    rc, err = analyze_while(work, tmp_path / "a", store, resave)
    assert rc == 2, err
    assert "changed while being read" in err and str(target) in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "a").exists()

    # The pristine bytes, analysed against that store, are served exactly what a fresh store computes.
    run(["analyze", pristine, "--out", tmp_path / "served", "--store", store])
    run(["analyze", pristine, "--out", tmp_path / "fresh", "--store", tmp_path / "fresh.sqlite"])
    assert rows_without_model(tmp_path / "served" / "metrics.csv") == rows_without_model(
        tmp_path / "fresh" / "metrics.csv")


def test_truncated_under_a_read_is_bad_input_not_sigbus(slow_model, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(slow_model / "pretrained", work)
    target = work / "model.safetensors"
    original = target.read_bytes()

    def truncate_and_rewrite_slowly():  # torch.save / save_file: O_TRUNC, then the bytes
        with open(target, "wb") as f:
            f.write(original[: len(original) // 3])

    rc, err = analyze_while(work, tmp_path / "a", tmp_path / "s.sqlite", truncate_and_rewrite_slowly)
    assert rc == 2, (rc, err)
    assert "changed while being read" in err and str(target) in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "a").exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


@pytest.mark.parametrize("where", ["tmpfs", "disk"])
def test_write_through_a_shared_map_is_seen(family_f32, tmp_path, where):
    """np.memmap(mode='r+') can leave size, mtime and ctime unchanged: results must still follow bytes."""
    root = Path("/dev/shm") if where == "tmpfs" and Path("/dev/shm").is_dir() else tmp_path
    work = Path(root) / f"diffract-mmap-{os.getpid()}-{where}"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(family_f32 / "math", work)
    try:
        store = tmp_path / "s.sqlite"
        f = next(work.glob("*.safetensors"))
        # The page is dirtied before the first run, so the later write through the same map finds it
        # dirty and moves neither mtime nor ctime (ext4); tmpfs never moves them for a mapped write.
        m = np.memmap(f, dtype=np.uint8, mode="r+", offset=data_start(f))
        m[:64] = m[:64].copy()
        run(["analyze", work, "--out", tmp_path / "a1", "--store", store, "--no-heads"])
        st = os.stat(f)
        m[:64] ^= 0x5A
        if where == "tmpfs":
            assert (os.stat(f).st_mtime_ns, os.stat(f).st_ctime_ns, os.stat(f).st_size) == (
                st.st_mtime_ns, st.st_ctime_ns, st.st_size)
        run(["analyze", work, "--out", tmp_path / "a2", "--store", store, "--no-heads"])
        run(["analyze", work, "--out", tmp_path / "a3", "--store", tmp_path / "fresh.sqlite", "--no-heads"])
        assert rows_without_model(tmp_path / "a2" / "metrics.csv") == rows_without_model(
            tmp_path / "a3" / "metrics.csv")
        assert rows_without_model(tmp_path / "a1" / "metrics.csv") != rows_without_model(
            tmp_path / "a2" / "metrics.csv")
        m.flush()
        del m
    finally:
        shutil.rmtree(work, ignore_errors=True)
