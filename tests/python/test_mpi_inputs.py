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
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import time
from pathlib import Path

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


def launcher_with_pids(tmp_path, model):
    """Both ranks in one directory holding model/; each rank's pid written to pid.<rank>."""
    shutil.copytree(model, tmp_path / "shared" / "model")
    wrapper = tmp_path / "with_pid.sh"
    wrapper.write_text(f'#!/bin/sh\necho $$ > "{tmp_path}/pid.$OMPI_COMM_WORLD_RANK"\n'
                       f'cd "{tmp_path}/shared" && exec "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def counts(stderr):
    import re
    m = re.search(r"\((\d+) computed, (\d+) reused", stderr)
    return int(m.group(1)), int(m.group(2))


def test_a_worker_killed_late_keeps_its_finished_work(family_f32, tmp_path):
    """Results reach rank 0 as each task finishes: a worker killed before its last task loses only that
    one (and rank 0 what it had in flight); before, the whole share went with it."""
    wrapper = launcher_with_pids(tmp_path, family_f32 / "math")
    env = {**os.environ, "DIFFRACT_TEST_KILL_AFTER_RESULTS": "-1"}
    p = subprocess.run([*MPIRUN, str(wrapper), binary(), "analyze", "model", "--out", "out", "--store", "s.sqlite",
                        "--threads", "1", "--null-draws", "3", "--quiet"], capture_output=True, text=True,
                       timeout=600, env=env)
    assert p.returncode != 0, p.stderr
    total = counts(run(["analyze", tmp_path / "shared" / "model", "--out", tmp_path / "ref", "--store",
                        tmp_path / "ref.sqlite", "--null-draws", "3"]).stderr)[0]
    computed, reused = counts(run(["analyze", tmp_path / "shared" / "model", "--out", tmp_path / "resume",
                                   "--store", tmp_path / "shared" / "s.sqlite", "--null-draws", "3"]).stderr)
    assert computed + reused == total
    assert total >= 20 and computed <= 3, (computed, reused, total)


def test_a_stopped_worker_is_detected_within_the_timeout(family_f32, tmp_path):
    wrapper = launcher_with_pids(tmp_path, family_f32 / "math")
    env = {**os.environ, "DIFFRACT_RANK_TIMEOUT": "3"}
    p = subprocess.Popen([*MPIRUN, str(wrapper), binary(), "analyze", "model", "--out", "out", "--store", "s.sqlite",
                          "--threads", "1", "--null-draws", "400", "--quiet"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    try:
        pid_file = tmp_path / "pid.1"
        end = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < end:
            time.sleep(0.05)
        # Let it start computing (its heartbeats begin with the work), then stop it as a hung host would.
        sqlite = tmp_path / "shared" / "s.sqlite"
        while stored_results(sqlite) == 0 and time.monotonic() < end and p.poll() is None:
            time.sleep(0.1)
        os.kill(int(pid_file.read_text()), signal.SIGSTOP)
        stopped = time.monotonic()
        _, err = p.communicate(timeout=120)
        waited = time.monotonic() - stopped
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 2, err
    assert "rank 1 on host" in err and "has sent nothing for 3 s" in err, err
    assert waited < 3 + 10, waited
    assert stored_results(tmp_path / "shared" / "s.sqlite") > 0  # rank 0's results so far are kept


def with_fault_on_rank(tmp_path, model, rank, variable):
    """launcher_with_pids, with `variable` set in one rank's environment only (a fault on one host)."""
    wrapper = launcher_with_pids(tmp_path, model)
    text = wrapper.read_text().replace(
        "cd ", f'[ "$OMPI_COMM_WORLD_RANK" = "{rank}" ] && export {variable}=1\ncd ', 1)
    wrapper.write_text(text)
    return wrapper


def run_until_detected(wrapper, tmp_path, timeout=3):
    """analyze under mpirun with DIFFRACT_RANK_TIMEOUT=timeout: (exit code, stderr, seconds taken)."""
    env = {**os.environ, "DIFFRACT_RANK_TIMEOUT": str(timeout)}
    started = time.monotonic()
    p = subprocess.run([*MPIRUN, str(wrapper), binary(), "analyze", "model", "--out", "out", "--store",
                        "s.sqlite", "--threads", "1", "--quiet"], capture_output=True, text=True, timeout=300,
                       env=env)
    return p.returncode, p.stderr, time.monotonic() - started


@pytest.mark.parametrize("stopped", [1, 0])
def test_a_rank_stopped_while_the_job_starts_is_named(family_f32, tmp_path, stopped):
    """A rank that stops (SIGSTOP, as a frozen host) while the ranks identify their inputs — before any
    result is computed, where every rank waits on the others in collectives — is named within the timeout:
    a stopped worker by rank 0, a stopped rank 0 by the worker. Before, every rank waited for ever."""
    wrapper = with_fault_on_rank(tmp_path, family_f32 / "math", stopped, "DIFFRACT_TEST_STOP_IN_IDENTIFY")
    code, err, took = run_until_detected(wrapper, tmp_path)
    assert code == 2, err
    assert f"rank {stopped} on host {socket.gethostname()} has sent nothing for 3 s" in err, err
    assert took < 3 + 30, took  # MPI start-up included
    assert stored_results(tmp_path / "shared" / "s.sqlite") == 0


@pytest.mark.parametrize("blocked", [1, 0])
def test_a_rank_whose_computing_threads_are_blocked_is_named(family_f32, tmp_path, blocked):
    """A rank whose computing thread blocks reading its inputs (as on a dead network filesystem: no CPU
    used, while the process's other threads still run and would answer heartbeats) is named with what
    blocks it, within the timeout, instead of being waited on for ever."""
    wrapper = with_fault_on_rank(tmp_path, family_f32 / "math", blocked, "DIFFRACT_TEST_BLOCK_READS")
    code, err, took = run_until_detected(wrapper, tmp_path)
    assert code == 2, err
    assert f"rank {blocked} on host {socket.gethostname()}: a computing thread has used no CPU for" in err, err
    assert "dead network filesystem" in err
    assert took < 3 + 30, took


def test_a_bad_rank_timeout_is_refused(family_f32, tmp_path):
    wrapper = launcher_with_pids(tmp_path, family_f32 / "math")
    env = {**os.environ, "DIFFRACT_RANK_TIMEOUT": "soon"}
    p = subprocess.run([*MPIRUN, str(wrapper), binary(), "analyze", "model", "--out", "out", "--quiet"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 2, p.stderr
    assert "DIFFRACT_RANK_TIMEOUT=soon: expected a positive number of seconds" in p.stderr


def sent_mib(stderr):
    import re
    m = re.search(r"sent ([0-9.]+) MiB of inputs to 1 ranks", stderr)
    assert m, stderr
    return float(m.group(1))


def tensor_bytes(path):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    return len(raw) - 8 - n


def only_on_rank_0(tmp_path, **inputs):
    """rank0/ holds the inputs (name -> source directory), rank1/ nothing: a host without a shared disk."""
    for name, src in inputs.items():
        shutil.copytree(src, tmp_path / "rank0" / name)
    (tmp_path / "rank1").mkdir(parents=True)
    wrapper = tmp_path / "in_rank_dir.sh"
    wrapper.write_text(f'#!/bin/sh\ncd "{tmp_path}/rank$OMPI_COMM_WORLD_RANK" && exec "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def same_tables(a, b, names):
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


@pytest.mark.parametrize("spec", ["model", "model/model.safetensors"])
def test_shipped_inputs_reach_a_worker_without_them(family_f32, tmp_path, spec):
    """--ship-inputs: the worker has no inputs at all; rank 0 sends it the skeleton (headers, config.json)
    and then the bytes of its share only, and the tables are the single process's byte for byte. A lone
    file brings its config.json (the head geometry) along."""
    wrapper = only_on_rank_0(tmp_path, model=family_f32 / "math")
    p = mpi(wrapper, "analyze", spec, "--out", "out", "--store", "s.sqlite", "--ship-inputs")
    assert p.returncode == 0, p.stderr
    run(["analyze", tmp_path / "rank0" / spec, "--out", tmp_path / "single", "--store", tmp_path / "single.sqlite"])
    same_tables(tmp_path / "rank0" / "out", tmp_path / "single", ["metrics.csv", "aggregates.csv"])
    # Its share, not the whole model: the other rank's tensors never travel.
    whole = tensor_bytes(family_f32 / "math" / "model.safetensors") / 2**20
    assert 0.2 * whole < sent_mib(p.stderr) < 0.9 * whole, (sent_mib(p.stderr), whole)
    assert list((tmp_path / "rank1").iterdir()) == []  # nothing left behind on the worker's host
    assert not [d for d in Path(os.environ.get("TMPDIR", "/tmp")).glob("diffract-inputs-*")]


def test_shipped_inputs_of_compare_and_an_adapter(family_f32, tmp_path):
    """compare (base and model, both shipped) and a BASE+ADAPTER model (the adapter's factors shipped
    with the base's tensors) give the single process's tables."""
    from test_lora import E, bert_base, write_adapter
    rng = np.random.default_rng(5)
    bert_base(tmp_path / "src" / "bert", rng)
    q = "encoder.layer.0.attention.self.query"
    write_adapter(tmp_path / "src" / "adapter",
                  {"peft_type": "LORA", "base_model_name_or_path": "bert", "r": 2, "lora_alpha": 2,
                   "target_modules": ["query"], "fan_in_fan_out": False},
                  {f"base_model.model.{q}.lora_A.weight": rng.normal(size=(2, E)).astype(np.float32),
                   f"base_model.model.{q}.lora_B.weight": rng.normal(size=(E, 2)).astype(np.float32)})
    wrapper = only_on_rank_0(tmp_path, base=family_f32 / "pretrained", model=family_f32 / "math",
                             bert=tmp_path / "src" / "bert", adapter=tmp_path / "src" / "adapter")
    p = mpi(wrapper, "compare", "--base", "base", "model", "--out", "cmp", "--store", "s.sqlite", "--ship-inputs")
    assert p.returncode == 0, p.stderr
    r0 = tmp_path / "rank0"
    run(["compare", "--base", r0 / "base", r0 / "model", "--out", tmp_path / "single_cmp", "--store",
         tmp_path / "single.sqlite"])
    same_tables(r0 / "cmp", tmp_path / "single_cmp", ["compare.csv", "heads.csv"])
    p = mpi(wrapper, "analyze", "tuned=bert+adapter", "--out", "lora", "--store", "s.sqlite", "--ship-inputs")
    assert p.returncode == 0, p.stderr
    run(["analyze", f"tuned={r0 / 'bert'}+{r0 / 'adapter'}", "--out", tmp_path / "single_lora", "--store",
         tmp_path / "single.sqlite"])
    same_tables(r0 / "lora", tmp_path / "single_lora", ["metrics.csv"])


def test_a_killed_worker_leaves_no_staged_inputs(family_f32, tmp_path):
    """The staged skeletons live only as open files (their directory is removed once opened): a worker
    killed mid-job leaves nothing in its $TMPDIR, and the results it sent are kept."""
    wrapper = only_on_rank_0(tmp_path, model=family_f32 / "math")
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"), "DIFFRACT_TEST_KILL_AFTER_RESULTS": "-1"}
    p = subprocess.run([*MPIRUN, str(wrapper), binary(), "analyze", "model", "--out", "out", "--store", "s.sqlite",
                        "--threads", "1", "--null-draws", "3", "--ship-inputs", "--quiet"], capture_output=True,
                       text=True, timeout=600, env=env)
    assert p.returncode != 0, p.stderr
    assert list((tmp_path / "tmp").glob("diffract-inputs-*")) == []
    assert stored_results(tmp_path / "rank0" / "s.sqlite") > 0


def test_shipped_inputs_never_touch_a_worker_s_own_copy(family_f32, tmp_path):
    """A worker holding a stale copy at the same path computes rank 0's bytes with --ship-inputs (it reads
    only what rank 0 sent) and leaves its own copy as it was."""
    wrapper = per_rank(tmp_path, [family_f32 / "math", stale_copy(family_f32 / "math", tmp_path / "stale")])
    before = (tmp_path / "rank1" / "model" / "model.safetensors").read_bytes()
    p = mpi(wrapper, "analyze", "model", "--out", "out", "--store", "s.sqlite", "--ship-inputs")
    assert p.returncode == 0, p.stderr
    run(["analyze", tmp_path / "rank0" / "model", "--out", tmp_path / "single", "--store", tmp_path / "single.sqlite"])
    same_tables(tmp_path / "rank0" / "out", tmp_path / "single", ["metrics.csv"])
    assert (tmp_path / "rank1" / "model" / "model.safetensors").read_bytes() == before


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "distributed"


def test_the_mpirun_hostfile_recipe(family_f32, tmp_path):
    (tmp_path / "hosts").write_text("localhost slots=2\n")
    env = {**os.environ, "DIFFRACT": binary(), "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    p = subprocess.run(["sh", EXAMPLES / "mpirun_hostfile.sh", tmp_path / "hosts", "2", "analyze",
                        family_f32 / "math", "--out", tmp_path / "mpi", "--store", tmp_path / "m.sqlite",
                        "--threads", "1"], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    run(["analyze", family_f32 / "math", "--out", tmp_path / "one", "--store", tmp_path / "o.sqlite"])
    assert (tmp_path / "mpi" / "metrics.csv").read_bytes() == (tmp_path / "one" / "metrics.csv").read_bytes()


def test_the_slurm_array_recipe_joins_its_shards(family_f32, tmp_path):
    """The array's tasks run here one after the other with Slurm's variables; then the merge."""
    env = {**os.environ, "DIFFRACT": binary(), "SLURM_ARRAY_TASK_COUNT": "2"}
    for i in (0, 1):
        subprocess.run(["sh", EXAMPLES / "slurm_array_shard.sh", family_f32 / "math", "2"], cwd=tmp_path, check=True,
                       env={**env, "SLURM_ARRAY_TASK_ID": str(i)}, timeout=600)
    p = subprocess.run(["sh", EXAMPLES / "merge_shards.sh", family_f32 / "math", "2", "merged"], cwd=tmp_path,
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    computed, reused = counts(p.stderr)
    assert reused > computed > 0  # the layers came from the shards; the embeddings and head are computed here
    run(["analyze", family_f32 / "math", "--out", tmp_path / "one", "--store", tmp_path / "o.sqlite"])
    assert (tmp_path / "merged" / "metrics.csv").read_bytes() == (tmp_path / "one" / "metrics.csv").read_bytes()


def test_the_srun_recipe_is_what_the_refusal_names():
    text = (EXAMPLES / "slurm_srun.sbatch").read_text()
    assert "srun --mpi=pmix" in text
    assert subprocess.run(["sh", "-n", EXAMPLES / "slurm_srun.sbatch"]).returncode == 0
