"""What a sweep records for the reader: each evaluation's output in DIR/logs/, each candidate's evaluation
time in curve.csv (eval_seconds), the reference points (the inputs evaluated as they are) in summary.json
and the journal, and progress lines with the time left. Hand-written evaluators only (no torch).
"""
import json
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import assert_input_error, run

pytest.importorskip("safetensors.numpy")

from test_sweep import EVAL, calls, read_csv  # noqa: E402  (the deterministic "benchmark")

SLEEPER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    time.sleep(float(sys.argv[2]))
    print("slept in", Path(sys.argv[1]).name)
    print("0.5")
    """
)


@pytest.fixture()
def bench(tmp_path, family_f32):
    script = tmp_path / "bench.py"
    script.write_text(EVAL)
    log = tmp_path / "calls.log"
    return f"{sys.executable} {script} {{model}} {family_f32} 1.0 {log}", script, log


def direct_score(script, model, family, log):
    """The bench's score of `model` run by hand (its last stdout number)."""
    out = subprocess.run([sys.executable, str(script), str(model), str(family), "1.0", str(log)],
                         capture_output=True, text=True, check=True).stdout
    return float(out.split()[-1])


def test_logs_references_journal_and_eta(family_f32, bench, tmp_path):
    fam = family_f32
    command, script, log = bench
    out = tmp_path / "sweep"
    args = ["sweep", "rewind", "--base", fam / "pretrained", "--model", fam / "math", "--reference", fam / "text",
            "--orders", "importance,random", "--seeds", "2", "--fractions", "0,0.5,1", "--eval", command,
            "--out", out, "--store", tmp_path / "s.sqlite"]
    p = run(args)
    # The evaluator's output is not on the sweep's stderr; it is in one log per candidate.
    assert "loaded" not in p.stderr and "evaluating" not in p.stderr
    rows = read_csv(out / "curve.csv")
    logs = sorted(x.name for x in (out / "logs").iterdir())
    assert "reference-base.log" in logs and "reference-model.log" in logs
    cand = (out / "logs" / "importance_s0_x0.5.log").read_text()
    assert "importance_s0_x0.log" not in logs  # fraction 0 is the model: its reference's scores, no run
    assert "== --eval: " in cand and "loaded importance_s0_x0.5" in cand and "evaluating importance_s0_x0.5" in cand
    assert "== exit status 0" in cand
    assert "loaded math" in (out / "logs" / "reference-model.log").read_text()
    # One log per evaluation run: the references and each distinct candidate (fraction 1 is shared; fraction
    # 0 is the model itself).
    assert len(logs) == calls(log) == 2 + 3 * 1 + 1

    # The references: the inputs as they are, evaluated once, as the bench scores them by hand.
    s = json.loads((out / "summary.json").read_text())
    refs = s["references"]
    assert list(refs) == ["base", "model"]
    assert refs["base"]["path"] == str(fam / "pretrained") and refs["model"]["path"] == str(fam / "math")
    n = calls(log)
    by_hand = tmp_path / "by_hand.log"
    assert refs["base"]["score"] == pytest.approx(direct_score(script, fam / "pretrained", fam, by_hand), rel=1e-9)
    assert refs["model"]["score"] == pytest.approx(direct_score(script, fam / "math", fam, by_hand), rel=1e-9)
    x0 = [float(r["score"]) for r in rows if float(r["x"]) == 0]
    assert refs["model"]["score"] == pytest.approx(x0[0], rel=1e-12)  # fraction 0 is the model itself
    assert s["baseline"] == refs["model"]["score"]  # what the report draws as "unedited"
    assert refs["base"]["score"] != refs["model"]["score"]
    assert all(refs[k]["eval_seconds"] > 0 for k in refs)

    # eval_seconds: positive; a candidate that reuses another's evaluation records that evaluation's time.
    by_content = {}
    for r in rows:
        assert float(r["eval_seconds"]) > 0
        if float(r["x"]) in (0.0, 1.0):
            by_content.setdefault(r["x"], set()).add(r["eval_seconds"])
    assert all(len(v) == 1 for v in by_content.values())

    # Progress: [done/total] over this run's evaluations (2 references + 4 distinct candidates), with ETA.
    progress = [ln for ln in p.stderr.splitlines() if ln.startswith("sweep [")]
    assert [re.match(r"sweep \[(\d+)/(\d+)\]", ln).groups() for ln in progress] == \
        [(str(i), "6") for i in range(1, 7)]
    assert all("elapsed" in ln and "ETA" in ln for ln in progress)
    assert progress[0].startswith("sweep [1/6] reference base: score ")
    assert progress[-1].endswith("ETA 0 s")

    # The journal holds the references: a resumed sweep evaluates nothing again, not even them.
    journal = [json.loads(x) for x in (out / "sweep_state.jsonl").read_text().splitlines()]
    assert [j["reference"] for j in journal if "reference" in j] == ["base", "model"]
    run(args)
    assert calls(log) == n
    assert json.loads((out / "summary.json").read_text())["references"] == refs


def test_eval_seconds_measures_the_evaluator(family_f32, tmp_path):
    fam = family_f32
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    out = tmp_path / "tr"
    run(["sweep", "truncate", "--base", fam / "pretrained", "--model", fam / "math", "--keeps", "0,1",
         "--roles", "attn_q", "--eval", f"{sys.executable} {script} {{model}} 0.4", "--out", out, "--quiet"])
    rows = read_csv(out / "curve.csv")
    assert list(rows[0])[-1] == "eval_seconds"
    for r in rows:
        assert 0.4 <= float(r["eval_seconds"]) < 10
    refs = json.loads((out / "summary.json").read_text())["references"]
    assert 0.4 <= refs["model"]["eval_seconds"] < 10
    assert "slept in keep_1" in (out / "logs" / "keep_1.log").read_text()


def test_select_report_times_add_up_and_references_hold_both_scores(family_f32, tmp_path):
    fam = family_f32
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    out = tmp_path / "sel"
    run(["sweep", "interpolate", fam / "math", fam / "code", "--omegas", "0,0.5,1",
         "--select-eval", f"{sys.executable} {script} {{model}} 0.3",
         "--report-eval", f"{sys.executable} {script} {{model}} 0.3", "--direction", "higher", "--out", out,
         "--quiet"])
    for r in read_csv(out / "curve.csv"):
        assert float(r["eval_seconds"]) >= 0.6  # both evaluations of the candidate
    log = (out / "logs" / "omega_0.5.log").read_text()
    assert "== --select-eval: " in log and "== --report-eval: " in log
    s = json.loads((out / "summary.json").read_text())
    assert "baseline" not in s  # interpolation has no "unedited" model: its references are a and b
    assert list(s["references"]) == ["a", "b"]
    assert s["references"]["b"]["path"] == str(fam / "code")
    assert s["references"]["a"]["select_score"] == s["references"]["a"]["report_score"] == 0.5
    assert s["references"]["a"]["eval_seconds"] >= 0.6


def test_a_failing_evaluator_names_its_log(family_f32, tmp_path):
    fam = family_f32
    script = tmp_path / "fail.py"
    script.write_text("import sys\nprint('partial')\nprint('boom: CUDA out of memory', file=sys.stderr)\nsys.exit(3)\n")
    out = tmp_path / "bad"
    p = run(["sweep", "interpolate", fam / "math", fam / "code", "--omegas", "0,1", "--eval",
             f"{sys.executable} {script} {{model}}", "--out", out, "--quiet"], check=False)
    log = out / "logs" / "reference-a.log"
    assert_input_error(p, "--eval", "exit status 3", str(log))
    text = log.read_text()
    assert "partial" in text and "boom: CUDA out of memory" in text and "== exit status 3" in text
    # No score on stdout: the message names the log too.
    script.write_text("print('no score here')\n")
    p = run(["sweep", "interpolate", fam / "math", fam / "code", "--omegas", "0,1", "--eval",
             f"{sys.executable} {script} {{model}}", "--out", tmp_path / "bad2", "--quiet"], check=False)
    assert_input_error(p, "holds no number", "diffract-score:", str(tmp_path / "bad2" / "logs" / "reference-a.log"))
    # A number beyond a double's range (and JSON's) is refused the same way, never an internal error.
    for i, (text, needle) in enumerate([("result: 1e999", "not a finite number"),
                                        ('{"score": -1e999}', "numeric field 'score'")]):
        script.write_text(f"print({text!r})\n")
        extra = ["--score-key", "score"] if text.startswith("{") else []
        out = tmp_path / f"big{i}"
        p = run(["sweep", "interpolate", fam / "math", fam / "code", "--omegas", "0,1", "--eval",
                 f"{sys.executable} {script} {{model}}", "--out", out, "--quiet", *extra], check=False)
        assert_input_error(p, "--eval", needle, str(out / "logs" / "reference-a.log"))
