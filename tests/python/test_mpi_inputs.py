"""Issue 37: every rank reads what rank 0 reads, or nothing is computed. Hosts are simulated by giving each
rank its own directory with the same relative layout (a wrapper cds into rank<N>/ before running
diffract): a worker holding a stale copy (same shapes, other bytes) or another model stops every rank
with exit 2 and one line naming the rank, host, file and tensor, and nothing is stored; identical
copies give rank 0's single-process results. Launches that would duplicate the work are refused: N
copies started without MPI ranks (srun without --mpi=pmix, a build without MPI under mpirun), and
commands other than analyze/compare under mpirun."""
import json
import os
import shutil
import socket
import sqlite3
import struct
import subprocess
import sys

import numpy as np
import pytest

from conftest import assert_input_error, binary, run, tool

st = pytest.importorskip("safetensors.numpy")

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"]


def per_rank(tmp_path, model_of_rank):
    """rank0/, rank1/ each holding model/ (the given directories) and a wrapper that cds there."""
    for r, src in enumerate(model_of_rank):
        shutil.copytree(src, tmp_path / f"rank{r}" / "model")
    wrapper = tmp_path / "in_rank_dir.sh"
    wrapper.write_text(f'#!/bin/sh\ncd "{tmp_path}/rank$OMPI_COMM_WORLD_RANK" && exec "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def stale_copy(src, dst):
    """src with every stored value scaled by 1.001 in place: the same header (names, shapes, order),
    other bytes — a copy of an older or newer save of the same model."""
    shutil.copytree(src, dst)
    f = dst / "model.safetensors"
    raw = f.read_bytes()
    start = 8 + struct.unpack("<Q", raw[:8])[0]
    values = np.frombuffer(raw[start:], dtype=np.float32) * np.float32(1.001)
    f.write_bytes(raw[:start] + values.astype(np.float32).tobytes())
    return dst


def tensor_names(path):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    return [k for k in json.loads(raw[8:8 + n]) if k != "__metadata__"]


def mpi(wrapper, *args):
    return subprocess.run([*MPIRUN, str(wrapper), binary(), *map(str, args)], capture_output=True, text=True,
                          timeout=600)


def stored_results(store):
    if not os.path.exists(store):
        return 0
    return sqlite3.connect(store).execute("SELECT COUNT(*) FROM results").fetchone()[0]


def error_lines(p):
    return [l for l in p.stderr.splitlines() if l.startswith("diffract: error:")]


@pytest.mark.parametrize("command", ["analyze", "compare"])
def test_a_stale_copy_on_a_worker_stops_every_rank_before_anything_is_stored(family_f32, tmp_path, command):
    assert shutil.which("mpirun")
    wrapper = per_rank(tmp_path, [family_f32 / "math", stale_copy(family_f32 / "math", tmp_path / "stale")])
    shutil.copytree(family_f32 / "pretrained", tmp_path / "rank0" / "base")
    shutil.copytree(family_f32 / "pretrained", tmp_path / "rank1" / "base")
    extra = ["--base", "base"] if command == "compare" else []
    p = mpi(wrapper, command, "model", *extra, "--out", "out", "--store", "s.sqlite", "--threads", "1")
    assert p.returncode == 2, p.stderr
    lines = error_lines(p)
    assert len(lines) == 1, p.stderr
    assert "rank 1 on host " + socket.gethostname() in lines[0]
    assert "model.safetensors" in lines[0] and "differ from rank 0's copy" in lines[0]
    assert any(f"tensor {name}:" in lines[0] for name in tensor_names(tmp_path / "stale" / "model.safetensors"))
    assert "nothing was computed or stored" in lines[0]
    assert stored_results(tmp_path / "rank0" / "s.sqlite") == 0
    assert not (tmp_path / "rank0" / "out").exists()


def test_another_model_on_a_worker_is_named(family_f32, tmp_path):
    other = tmp_path / "other"
    run(["generate", "--out", other, "--dtype", "F32", "--layers", "3", "--hidden", "128", "--heads", "4",
         "--intermediate", "256", "--vocab", "512", "--domain-heads", "1", "--generic-heads", "1", "--models",
         "pretrained"])
    wrapper = per_rank(tmp_path, [family_f32 / "math", other / "pretrained"])
    p = mpi(wrapper, "analyze", "model", "--out", "out", "--store", "s.sqlite", "--threads", "1")
    assert p.returncode == 2, p.stderr
    lines = error_lines(p)
    assert len(lines) == 1 and "rank 1 on host" in lines[0] and "not the same model" in lines[0], p.stderr
    assert stored_results(tmp_path / "rank0" / "s.sqlite") == 0


def test_identical_copies_give_the_single_process_results(family_f32, tmp_path):
    wrapper = per_rank(tmp_path, [family_f32 / "math", family_f32 / "math"])
    p = mpi(wrapper, "analyze", "model", "--out", "out", "--store", "s.sqlite", "--threads", "1")
    assert p.returncode == 0, p.stderr
    run(["analyze", tmp_path / "rank0" / "model", "--out", tmp_path / "single", "--store", tmp_path / "one.sqlite"])
    assert (tmp_path / "rank0" / "out" / "metrics.csv").read_bytes() == (tmp_path / "single" / "metrics.csv").read_bytes()


def test_a_missing_input_on_a_worker_names_its_rank_and_host(family_f32, tmp_path):
    wrapper = per_rank(tmp_path, [family_f32 / "math"])
    (tmp_path / "rank1").mkdir()
    p = mpi(wrapper, "analyze", "model", "--out", "out", "--store", "s.sqlite", "--threads", "1")
    assert p.returncode == 2, p.stderr
    assert any("rank 1 on host" in l and "model" in l for l in error_lines(p)), p.stderr


def test_commands_that_do_not_distribute_are_refused_under_mpi(family_f32, tmp_path):
    wrapper = per_rank(tmp_path, [family_f32 / "math", family_f32 / "math"])
    p = mpi(wrapper, "edit", "rewind", "--base", "model", "--model", "model", "--fraction", "0.5", "--out", "rw")
    assert p.returncode == 2, p.stderr
    assert any("only analyze and compare" in l for l in error_lines(p)), p.stderr


def test_copies_that_are_not_ranks_are_refused(family_f32, tmp_path):
    env = {**os.environ, "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "0"}
    p = run(["analyze", family_f32 / "math", "--out", tmp_path / "o", "--store", tmp_path / "s.sqlite"], check=False,
            env=env)
    assert_input_error(p, "srun", "4 copies", "--mpi=pmix")
    assert not (tmp_path / "o").exists()
    # The Python module is built without MPI: under mpirun each copy would redo everything.
    code = ("import diffract_spectral as d, sys\n"
            "try:\n    d.analyze(sys.argv[1], store=sys.argv[2])\n"
            "except d.InputError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code, str(family_f32 / "math"), str(tmp_path / "p.sqlite")],
                         capture_output=True, text=True, env={**os.environ, "OMPI_COMM_WORLD_SIZE": "2"}, timeout=120)
    assert "built without MPI" in out.stdout and "2 copies" in out.stdout, out.stdout + out.stderr


def test_results_past_2_gib_reach_rank_0():
    """gather_bytes (how rank 0 collects the other ranks' results) in chunks: 2.2 GB from one worker."""
    n = 2_200_000_000
    p = subprocess.run([*MPIRUN, tool("gather_check"), str(n)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"gathered {n} bytes from 1 ranks" in p.stdout
