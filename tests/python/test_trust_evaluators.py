"""Sweeps do not trust the evaluator (issue 33, class 5): a timeout that ends the command's whole process
group, a background child holding stdout open, signals to diffract alone, inputs checked before the
first evaluation, one documented score rule that refuses ambiguous output, and every write checked.

Independent facts: the process table (/proc) for what is left running, wall-clock bounds far above the
expected run time, the journal's lines, and the files left in the output directory.
"""

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import assert_input_error, binary, run

pytest.importorskip("safetensors.numpy")


def running(marker):
    """Processes whose command line starts with `marker` (the evaluator's own processes, not diffract's
    command line that quotes it)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]
        except OSError:
            continue
        if cmd.startswith(marker) and state != "Z":
            found.append(int(pid))
    return found


def sweep(fam, out, command, *extra, **kw):
    return run(["sweep", "interpolate", fam / "math", fam / "code", "--omegas", "0,1", "--eval", command, "--out",
                out, "--quiet", *extra], check=False, **kw)


def test_timeout_ends_the_command_and_its_children(family_f32, tmp_path):
    marker = f"{3000 + os.getpid() % 997}.5"
    start = time.monotonic()
    p = sweep(family_f32, tmp_path / "s", f"sleep {marker} & sleep {marker}; echo 1", "--eval-timeout", "1",
              timeout=120)
    assert time.monotonic() - start < 30
    assert_input_error(p, "--eval-timeout", "1 s", "reference-a.log")
    time.sleep(0.5)
    assert running(f"sleep {marker}") == []
    assert "timed out" in (tmp_path / "s" / "logs" / "reference-a.log").read_text()


def test_a_background_child_holding_stdout_does_not_hang_the_sweep(family_f32, tmp_path):
    marker = f"{4000 + os.getpid() % 997}.25"
    start = time.monotonic()
    p = sweep(family_f32, tmp_path / "s", f"(sleep {marker} &); echo 1.5", timeout=120)
    assert p.returncode == 0, p.stderr
    assert time.monotonic() - start < 30
    assert running(f"sleep {marker}") == []
    rows = (tmp_path / "s" / "curve.csv").read_text().splitlines()
    assert len(rows) > 1 and all("1.5" in r for r in rows[1:]), rows


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_diffract_alone_ends_the_evaluator_and_exits_130(family_f32, tmp_path, sig):
    marker = f"{5000 + os.getpid() % 997}.{int(sig)}"
    out = tmp_path / "s"
    p = subprocess.Popen([binary(), "sweep", "interpolate", family_f32 / "math", family_f32 / "code", "--omegas",
                          "0,0.5,1", "--eval", f"sleep {marker}; echo 1", "--out", out, "--quiet"],
                         stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not running(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running(f"sleep {marker}"), "the evaluator did not start"
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert running(f"sleep {marker}") == []
    # The journal holds only finished evaluations (none here), and the run resumes cleanly.
    journal = out / "sweep_state.jsonl"
    records = [json.loads(l) for l in journal.read_text().splitlines()[1:]] if journal.exists() else []
    assert all("score" in r or "scores" in r or r for r in records)
    assert not (out / ".candidates").exists() or not any((out / ".candidates").iterdir())


def test_ctrl_c_to_the_whole_group_exits_130(family_f32, tmp_path):
    marker = f"{6000 + os.getpid() % 997}.75"
    p = subprocess.Popen([binary(), "sweep", "interpolate", family_f32 / "math", family_f32 / "code", "--omegas",
                          "0,1", "--eval", f"sleep {marker}; echo 1", "--out", tmp_path / "s", "--quiet"],
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 30
    while not running(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGINT)  # the terminal's Ctrl-C: every process of the foreground group
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert running(f"sleep {marker}") == []


def test_inputs_are_checked_before_the_first_evaluation(family_f32, tmp_path):
    """A shape mismatch between the interpolated models stops the sweep before any evaluation."""
    calls = tmp_path / "calls"
    other = tmp_path / "other"
    run(["generate", "--out", other, "--dtype", "F32", "--layers", "2", "--hidden", "64", "--heads", "4",
         "--intermediate", "128", "--vocab", "512", "--domain-heads", "1", "--generic-heads", "1",
         "--models", "pretrained"])
    for kind, args in [("interpolate", [family_f32 / "math", other / "pretrained", "--omegas", "0,1"]),
                       ("truncate", ["--base", family_f32 / "pretrained", "--model", other / "pretrained",
                                     "--keeps", "0,1"])]:
        p = run(["sweep", kind, *args, "--eval", f"echo x >> {calls}; echo 1", "--out", tmp_path / kind,
                 "--quiet"], check=False)
        assert p.returncode == 2, p.stderr
        assert not calls.exists(), kind
        assert not (tmp_path / kind / ".candidates").exists() or not any((tmp_path / kind / ".candidates").iterdir())


@pytest.mark.parametrize("output, needle", [
    ("loss nan after 3 steps", "holds 2 numbers"),
    ("epoch 3 loss 2.5", "holds 2 numbers"),
    ("done", "holds no number"),
    ("diffract-score: nan", "not a finite number"),
    ("1e999", "not a finite number"),
    ("9" * 30000, "not a finite number"),
])
def test_ambiguous_or_nonfinite_scores_are_refused(family_f32, tmp_path, output, needle):
    script = tmp_path / "e.py"
    script.write_text(f"print({output!r})\n")
    p = sweep(family_f32, tmp_path / "s", f"{sys.executable} {script} {{model}}")
    assert_input_error(p, "--eval", needle)


@pytest.mark.parametrize("output, score", [
    ("diffract-score: 2.5\nloss 7 after 3 steps", 2.5),
    ('noise\n{"loss": 3.0, "perplexity": 20.5}', 20.5),
    ("eval: 0.125", 0.125),
])
def test_the_documented_score_rule(family_f32, tmp_path, output, score):
    script = tmp_path / "e.py"
    script.write_text(f"print({output!r})\n")
    p = sweep(family_f32, tmp_path / "s", f"{sys.executable} {script} {{model}}")
    assert p.returncode == 0, p.stderr
    rows = (tmp_path / "s" / "curve.csv").read_text().splitlines()
    assert any(str(score) in r for r in rows[1:]), rows


def test_a_50mb_output_is_logged_whole_and_scored(family_f32, tmp_path):
    script = tmp_path / "e.py"
    script.write_text("import sys\nfor _ in range(50):\n    sys.stdout.write('x' * (1 << 20) + '\\n')\nprint(0.5)\n")
    p = sweep(family_f32, tmp_path / "s", f"{sys.executable} {script} {{model}}", timeout=300)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "s" / "logs" / "reference-a.log").stat().st_size > 50 << 20


def test_a_log_that_cannot_be_written_is_bad_input(family_f32, tmp_path):
    """RLIMIT_FSIZE makes writes past the limit fail (EFBIG) as a full disk would: exit 2 naming the log."""
    script = tmp_path / "e.py"
    script.write_text("import sys\nfor _ in range(40):\n    sys.stdout.write('x' * (1 << 20) + '\\n')\nprint(0.5)\n")

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))

    p = sweep(family_f32, tmp_path / "s", f"{sys.executable} {script} {{model}}", preexec_fn=limit, timeout=300)
    assert_input_error(p, "cannot write the evaluation log", "reference-a.log")
