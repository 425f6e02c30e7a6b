"""The shipped evaluators (`python -m diffract_spectral.eval ...`) without torch: reading lm-evaluation-harness's
results JSON (hand-made files in its layout), the `lm-eval` runner with a stand-in `lm_eval` script on
PATH inside a real `diffract sweep`, and the one-line message when transformers is missing.
The model evaluators themselves are tested on tiny transformers models in test_eval_models.py.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import assert_input_error, run

pytest.importorskip("diffract_spectral")

# Two tasks as lm-eval 0.4 writes them: metrics keyed "NAME,FILTER", stderr beside them ("N/A" when none).
RESULTS = {
    "results": {
        "hellaswag": {"alias": "hellaswag", "acc,none": 0.4125, "acc_stderr,none": 0.0049,
                      "acc_norm,none": 0.5311, "acc_norm_stderr,none": 0.005},
        "gsm8k": {"alias": "gsm8k", "exact_match,strict-match": 0.25, "exact_match_stderr,strict-match": "N/A",
                  "exact_match,flexible-extract": 0.3, "exact_match_stderr,flexible-extract": 0.012},
    },
    "groups": {},
    "configs": {"hellaswag": {"task": "hellaswag"}},
    "versions": {"hellaswag": 1.0, "gsm8k": 3.0},
    "n-shot": {"hellaswag": 0, "gsm8k": 5},
    "n-samples": {"hellaswag": {"original": 10042, "effective": 10042}},
    "config": {"model": "hf", "model_args": "pretrained=/models/x"},
}


def diffract_eval(*args, env=None):
    return subprocess.run([sys.executable, "-m", "diffract_spectral.eval", *map(str, args)], capture_output=True,
                          text=True, env=env)


def last_json(stdout):
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.fixture()
def results_dir(tmp_path):
    """An lm_eval --output_path directory: OUT/<model, sanitized>/results_<timestamp>.json, two runs."""
    run_dir = tmp_path / "out" / "__models__x"
    run_dir.mkdir(parents=True)
    old = dict(RESULTS, results={"hellaswag": {"acc,none": 0.1}})
    (run_dir / "results_2024-01-01T00-00-00.000001.json").write_text(json.dumps(old))
    newest = run_dir / "results_2024-06-01T00-00-00.000001.json"
    newest.write_text(json.dumps(RESULTS))
    os.utime(run_dir / "results_2024-01-01T00-00-00.000001.json", (1, 1))
    return tmp_path / "out", newest


def test_lm_eval_score_reads_the_results_layout(results_dir):
    out, newest = results_dir
    p = diffract_eval("lm-eval-score", newest, "--task", "hellaswag", "--metric", "acc_norm")
    assert p.returncode == 0, p.stderr
    assert last_json(p.stdout) == {"task": "hellaswag", "metric": "acc_norm,none", "stderr": 0.005, "score": 0.5311}
    # The directory: the newest results file under it; the default metric is acc.
    p = diffract_eval("lm-eval-score", out, "--task", "hellaswag")
    assert last_json(p.stdout)["score"] == 0.4125 and p.stdout.split()[-1] == "0.4125}"
    # A metric with its filter, and a stderr lm-eval could not compute.
    p = diffract_eval("lm-eval-score", newest, "--task", "gsm8k", "--metric", "exact_match,strict-match")
    assert last_json(p.stdout) == {"task": "gsm8k", "metric": "exact_match,strict-match", "stderr": None,
                                   "score": 0.25}
    # What the sweep reads: the last number, or --score-key score.
    from diffract_spectral.eval import lm_eval_score
    assert lm_eval_score(out, "gsm8k", "exact_match,flexible-extract")["score"] == 0.3


def test_lm_eval_score_refuses_with_one_line(results_dir, tmp_path):
    out, newest = results_dir
    p = diffract_eval("lm-eval-score", newest)
    assert_input_error(p, str(newest), "--task", "gsm8k, hellaswag")
    p = diffract_eval("lm-eval-score", newest, "--task", "mmlu")
    assert_input_error(p, "no task 'mmlu'")
    p = diffract_eval("lm-eval-score", newest, "--task", "gsm8k", "--metric", "acc")
    assert_input_error(p, "task 'gsm8k'", "no numeric metric 'acc,none'", "exact_match,flexible-extract")
    (tmp_path / "bad.json").write_text("{\"version\": 1}")
    assert_input_error(diffract_eval("lm-eval-score", tmp_path / "bad.json"), "bad.json", "no \"results\" object")
    (tmp_path / "empty").mkdir()
    assert_input_error(diffract_eval("lm-eval-score", tmp_path / "empty"), "no results*.json")


# A stand-in for lm-evaluation-harness's `lm_eval`: writes a results file whose acc is the mean of the
# model's q_proj (so it moves along an interpolation), as lm_eval lays it out under --output_path.
FAKE_LM_EVAL = textwrap.dedent(
    """\
    #!{python}
    import argparse, json, pathlib, sys
    import numpy as np
    from safetensors.numpy import load_file
    p = argparse.ArgumentParser()
    for flag in ("--model", "--model_args", "--tasks", "--device", "--batch_size", "--output_path", "--limit"):
        p.add_argument(flag)
    a = p.parse_args()
    model = a.model_args.split(",")[0].split("=", 1)[1]
    w = load_file(model + "/model.safetensors")["model.layers.0.self_attn.q_proj.weight"]
    print("Running loglikelihood requests", file=sys.stderr)
    print("|  Tasks  |Version|Filter|n-shot|Metric|   |Value |   |Stderr|")
    out = pathlib.Path(a.output_path) / model.strip("/").replace("/", "__")
    out.mkdir(parents=True)
    acc = float(np.mean(w.astype(np.float64)))
    (out / "results_2024-06-01T00-00-00.json").write_text(json.dumps(
        {{"results": {{a.tasks: {{"alias": a.tasks, "acc,none": acc, "acc_stderr,none": 0.01}}}}}}))
    """
)


def test_lm_eval_runner_in_a_sweep(family_f32, tmp_path):
    np = pytest.importorskip("numpy")
    from safetensors.numpy import load_file

    fam = family_f32
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "lm_eval"
    fake.write_text(FAKE_LM_EVAL.format(python=sys.executable))
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")
    out = tmp_path / "sweep"
    run(["sweep", "interpolate", fam / "math", fam / "code", "--omegas", "0,0.5,1", "--eval",
         f"{sys.executable} -m diffract_spectral.eval lm-eval {{model}} --tasks toy --metric acc --limit 5",
         "--score-key", "score", "--out", out, "--quiet"], env=env)
    mean = {k: float(np.mean(load_file(str(fam / k / "model.safetensors"))["model.layers.0.self_attn.q_proj.weight"]
                             .astype(np.float64))) for k in ("math", "code")}
    rows = (out / "curve.csv").read_text().splitlines()[1:]
    scores = [float(r.split(",")[3]) for r in rows]
    assert scores[0] == pytest.approx(mean["math"], rel=1e-12) and scores[2] == pytest.approx(mean["code"], rel=1e-12)
    assert scores[1] == pytest.approx((mean["math"] + mean["code"]) / 2, rel=1e-5)  # f32 storage
    refs = json.loads((out / "summary.json").read_text())["references"]
    assert refs["b"]["score"] == pytest.approx(mean["code"], rel=1e-12)
    # lm_eval's own output went to the candidate's log, not to the score line.
    log = (out / "logs" / "omega_0.5.log").read_text()
    assert "Running loglikelihood requests" in log and "|  Tasks  |" in log and '"score": ' in log


def test_missing_packages_exit_2_with_what_to_install(tmp_path):
    (tmp_path / "text.txt").write_text("hello")
    block = ("import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None; "
             "from diffract_spectral.eval.__main__ import main; sys.exit(main(sys.argv[1:]))")
    for evaluator, extra in (("clm-perplexity", []), ("mlm-loss", ["--seed", "1"]),
                             ("embedding-similarity", ["--reference", tmp_path])):
        p = subprocess.run([sys.executable, "-c", block, evaluator, tmp_path, "--text", tmp_path / "text.txt", *extra],
                           capture_output=True, text=True)
        assert_input_error(p, f"{evaluator} needs torch and transformers: pip install torch transformers")
    env = dict(os.environ, PATH="/nonexistent")
    no_lm_eval = ("import sys; sys.modules['lm_eval'] = None; "
                  "from diffract_spectral.eval.__main__ import main; sys.exit(main(sys.argv[1:]))")
    p = subprocess.run([sys.executable, "-c", no_lm_eval, "lm-eval", tmp_path, "--tasks", "x"],
                       capture_output=True, text=True, env=env)
    assert_input_error(p, "lm-eval needs lm-evaluation-harness: pip install lm-eval")
    # Without torch installed (the default test environment), the command itself says the same.
    try:
        import transformers  # noqa: F401
    except ImportError:
        p = diffract_eval("clm-perplexity", tmp_path, "--text", tmp_path / "text.txt")
        assert_input_error(p, "clm-perplexity needs")
