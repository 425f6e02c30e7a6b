"""Issue 49, trust round four: no crash on deep JSON (item 3), outputs never replace a FIFO or device
(item 5), a failed write to stdout is a failed command (item 6), a damaged merge source is named (item 7),
one rule for the score's direction (item 10), and the smaller ones of item 9.

Independent facts: exit statuses and the one line on stderr, file types from os.stat (a FIFO stays a FIFO,
a link stays a link), the inputs' bytes before and after, the summary.json each sweep writes.
"""
import csv
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_input_error, binary, run

st = pytest.importorskip("safetensors.numpy")

E = 16


# --- item 3: deep JSON --------------------------------------------------------------------------------


def nested(depth, inner="1"):
    return "[" * depth + inner + "]" * depth


def write_base(d: Path, names):
    rng = np.random.default_rng(3)
    d.mkdir(parents=True)
    st.save_file({n: rng.normal(size=(E, E)).astype(np.float32) for n in names}, str(d / "model.safetensors"))
    return d


def write_adapter(d: Path, base, config_text):
    rng = np.random.default_rng(5)
    d.mkdir(parents=True)
    (d / "adapter_config.json").write_text(config_text)
    st.save_file({"base_model.model.layers.0.q.lora_A.weight": rng.normal(size=(2, E)).astype(np.float32),
                  "base_model.model.layers.0.q.lora_B.weight": rng.normal(size=(E, 2)).astype(np.float32)},
                 str(d / "adapter_model.safetensors"))
    return d


def adapter_config(base, **deep):
    members = [f'"peft_type": "LORA"', f'"base_model_name_or_path": {json.dumps(str(base))}', '"r": 2',
               '"lora_alpha": 4']
    members += [f'"{k}": {v}' for k, v in deep.items()]
    return "{" + ", ".join(members) + "}"


DEEP_ADAPTERS = {
    "target_modules": lambda: {"target_modules": nested(150_000, '"q"')},
    "rank_pattern": lambda: {"target_modules": '["q"]', "rank_pattern": '{"q": ' + nested(150_000) + "}"},
    "alpha_pattern_object": lambda: {"target_modules": '["q"]',
                                     "alpha_pattern": '{"q": ' + '{"a": ' * 150_000 + "1" + "}" * 150_000 + "}"},
}


@pytest.mark.parametrize("case", sorted(DEEP_ADAPTERS))
def test_deep_adapter_config_is_one_line_never_a_crash(tmp_path, case):
    base = write_base(tmp_path / "base", ["layers.0.q.weight", "layers.0.k.weight"])
    ad = write_adapter(tmp_path / "ad", base, adapter_config(base, **DEEP_ADAPTERS[case]()))
    spec = f"{base}+{ad}"
    before = (ad / "adapter_config.json").read_bytes()
    for args in (["inspect", spec], ["inspect", "--json", spec],
                 ["analyze", spec, "--out", tmp_path / "a", "--store", tmp_path / "s.sqlite", "--quiet"],
                 ["compare", "--base", base, spec, "--out", tmp_path / "c", "--store", tmp_path / "s.sqlite",
                  "--quiet"]):
        p = run(args, check=False, timeout=120)
        assert_input_error(p, "adapter_config.json", "nested deeper than")
    assert (ad / "adapter_config.json").read_bytes() == before
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()


def test_a_value_quoted_in_a_message_is_short(tmp_path):
    """A wrong value is quoted cut short, however large: a 1 MB list as use_rslora."""
    base = write_base(tmp_path / "base", ["layers.0.q.weight"])
    ad = write_adapter(tmp_path / "ad", base, adapter_config(base, target_modules='["q"]',
                                                             use_rslora="[" + ",".join(["[1]"] * 200_000) + "]"))
    line = assert_input_error(run(["inspect", f"{base}+{ad}"], check=False), "use_rslora", "[[1],[1]")
    assert len(line) < 400, line


def test_deep_model_config_is_one_line(family_f32, tmp_path):
    m = tmp_path / "m"
    shutil.copytree(family_f32 / "math", m)
    (m / "config.json").write_text('{"model_type": "llama", "x": ' + nested(150_000) + "}")
    for args in (["inspect", m], ["inspect", "--json", m]):
        assert_input_error(run(args, check=False, timeout=60), "config.json", "nested deeper than")


EVAL_DEEP = """import sys
print('{"score": 1.5, "chunks": ' + '[' * 100000 + ']' * 100000 + '}')
"""


@pytest.mark.parametrize("kind", ["interpolate", "rewind", "validate"])
def test_deep_evaluator_chunks_are_one_line_never_a_crash(family_f32, tmp_path, kind):
    script = tmp_path / "deep.py"
    script.write_text(EVAL_DEEP)
    command = f"{sys.executable} {script} {{model}}"
    fam = family_f32
    common = ["--eval", command, "--out", tmp_path / "s", "--store", tmp_path / "s.sqlite", "--quiet"]
    if kind == "interpolate":
        args = ["sweep", "interpolate", fam / "math", fam / "code", "--omegas", "0,1", *common]
    elif kind == "rewind":
        args = ["sweep", "rewind", "--base", fam / "pretrained", "--model", fam / "math", "--orders", "importance",
                "--fractions", "0,1", *common]
    else:
        args = ["sweep", "validate", "--base", fam / "pretrained", "--model", fam / "math", "--direction", "higher",
                *common]
    p = run(args, check=False, timeout=300)
    assert_input_error(p, "nested deeper than")


# --- item 5: outputs never replace what is not a regular file (or a directory) -----------------------


def specials(tmp_path):
    """A FIFO, a link to a FIFO, a socket and a link to /dev/null (never written through: only its type
    is looked at), each with how to check it is untouched."""
    d = tmp_path / "special"
    d.mkdir()
    os.mkfifo(d / "fifo")
    os.symlink(d / "fifo", d / "fifo-link")
    os.symlink("/dev/null", d / "null-link")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(d / "sock"))
    return sock, {
        "fifo": lambda: stat.S_ISFIFO(os.lstat(d / "fifo").st_mode),
        "fifo-link": lambda: os.path.islink(d / "fifo-link") and stat.S_ISFIFO(os.stat(d / "fifo-link").st_mode),
        "null-link": lambda: os.readlink(d / "null-link") == "/dev/null",
        "sock": lambda: stat.S_ISSOCK(os.lstat(d / "sock").st_mode),
    }, d


@pytest.fixture(scope="module")
def stored(tmp_path_factory, family_f32):
    root = tmp_path_factory.mktemp("stored")
    run(["analyze", family_f32 / "math", "--out", root / "an", "--store", root / "s.sqlite", "--no-heads",
         "--quiet"])
    return root


def test_export_and_report_refuse_fifos_sockets_and_device_links(stored, tmp_path):
    sock, intact, d = specials(tmp_path)
    try:
        for name, check in intact.items():
            out = d / name
            for args in (["export", "--store", stored / "s.sqlite", "--out", out],
                         ["export", "--store", stored / "s.sqlite", "--format", "jsonl", "--out", out],
                         ["report", stored / "an", "--store", stored / "s.sqlite", "--out", out, "--quiet"],
                         ["report", stored / "an", "--store", stored / "s.sqlite", "--format", "svg", "--out", out,
                          "--quiet"]):
                p = run(args, check=False, timeout=60)
                assert_input_error(p, str(out), "refusing to replace it")
                assert check(), (name, args)
            assert sorted(os.listdir(d)) == sorted(intact)  # no temporary left beside it
    finally:
        sock.close()


def test_result_directories_refuse_fifos_and_files(family_f32, stored, tmp_path):
    sock, intact, d = specials(tmp_path)
    (d / "file").write_text("mine")
    try:
        for name in [*intact, "file"]:
            out = d / name
            for args in (["analyze", family_f32 / "math", "--out", out, "--store", stored / "s.sqlite", "--quiet"],
                         ["sweep", "interpolate", family_f32 / "math", family_f32 / "code", "--omegas", "0,1",
                          "--eval", "echo 1", "--out", out, "--store", stored / "s.sqlite", "--quiet"]):
                p = run(args, check=False, timeout=60)
                line = assert_input_error(p, str(out), "not a directory")
                assert "filesystem error" not in line and "cannot create directories" not in line, line
        assert (d / "file").read_text() == "mine"
        assert all(check() for check in intact.values())
    finally:
        sock.close()


def test_a_fifo_inside_a_sweep_directory_is_refused_not_waited_on(family_f32, tmp_path):
    """The journal, found as a FIFO in a sweep's directory: one line, never a sweep blocked on opening it."""
    out = tmp_path / "s"
    out.mkdir()
    os.mkfifo(out / "sweep_state.jsonl")
    p = run(["sweep", "interpolate", family_f32 / "math", family_f32 / "code", "--omegas", "0,1", "--eval", "echo 1",
             "--out", out, "--store", tmp_path / "s.sqlite", "--quiet"], check=False, timeout=60)
    assert_input_error(p, "sweep_state.jsonl", "FIFO")
    assert stat.S_ISFIFO(os.lstat(out / "sweep_state.jsonl").st_mode)


# --- item 6: stdout's write failures ------------------------------------------------------------------


def stdout_cases(family_f32, stored):
    return [["inspect", family_f32 / "math"], ["inspect", "--json", family_f32 / "math"],
            ["store", "--store", stored / "s.sqlite", "list"], ["metrics"], ["metrics", "--json"],
            ["export", "--store", stored / "s.sqlite"], ["completion", "bash"]]


def test_a_full_stdout_is_a_failed_command(family_f32, stored):
    for args in stdout_cases(family_f32, stored):
        assert run(args).stdout  # each prints its result
        with open("/dev/full", "w") as full:
            p = subprocess.run([binary(), *map(str, args)], stdout=full, stderr=subprocess.PIPE, text=True,
                               timeout=60)
        assert p.returncode != 0, args
        assert len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
        assert "standard output" in p.stderr or "No space left" in p.stderr, (args, p.stderr)


def test_a_closed_stdout_is_a_failed_command(family_f32, stored):
    for args in stdout_cases(family_f32, stored):
        quoted = " ".join(f"'{a}'" for a in [binary(), *map(str, args)])
        p = subprocess.run(["bash", "-c", f"exec {quoted} >&-"], stderr=subprocess.PIPE, text=True, timeout=60)
        assert p.returncode != 0, args
        assert len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
    # The store was not written through the closed descriptor (a file opened there would take number 1).
    assert run(["store", "--store", stored / "s.sqlite", "list"]).stdout.startswith("models:")


# --- item 7: store merge names the bad file -----------------------------------------------------------


def test_merge_of_a_damaged_store_names_the_source(family_f32, tmp_path):
    a, b = tmp_path / "A.sqlite", tmp_path / "B.sqlite"
    run(["analyze", family_f32 / "math", "--out", tmp_path / "a", "--store", a, "--no-heads", "--quiet"])
    run(["analyze", family_f32 / "code", "--out", tmp_path / "b", "--store", b, "--no-heads", "--quiet"])
    data = bytearray(b.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    assert len(data) >= 4 * page
    data[2 * page:len(data) - page] = os.urandom(len(data) - 3 * page)  # every page but the first and last
    b.write_bytes(bytes(data))
    before = a.read_bytes()
    p = run(["store", "--store", a, "merge", b], check=False, timeout=60)
    line = assert_input_error(p, str(b))
    assert "A.sqlite" not in line, line
    assert a.read_bytes() == before
    run(["store", "--store", a, "list"])


def test_merge_of_what_is_no_file_is_not_a_store(family_f32, tmp_path):
    a = tmp_path / "A.sqlite"
    run(["analyze", family_f32 / "math", "--out", tmp_path / "a", "--store", a, "--no-heads", "--quiet"])
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    os.symlink(tmp_path / "fifo", tmp_path / "fifo-link")
    for source, what in (("fifo", "FIFO"), ("dir", "directory"), ("fifo-link", "FIFO")):
        p = run(["store", "--store", a, "merge", tmp_path / source], check=False, timeout=20)
        line = assert_input_error(p, str(tmp_path / source), what, "not a results store")
        assert "no such store" not in line
    assert_input_error(run(["store", "--store", a, "merge", tmp_path / "missing"], check=False), "no such store")
    assert_input_error(run(["store", "--store", tmp_path / "fifo", "list"], check=False), "FIFO",
                       "not a results store")


# --- item 10: one rule for the score's direction ------------------------------------------------------


EVAL_KEYED = """import json, os, sys, zlib
seed = 0
for name in sorted(os.listdir(sys.argv[1])):
    if name.endswith(".safetensors"):
        seed = zlib.crc32(open(os.path.join(sys.argv[1], name), "rb").read(), seed)
print(json.dumps({"metrics": {KEY: 10.0 + seed % 1000 / 100.0}}))
"""


def keyed_eval(tmp_path, key):
    script = tmp_path / f"eval_{key}.py"
    script.write_text(EVAL_KEYED.replace("KEY", json.dumps(key)))
    return f"{sys.executable} {script} {{model}}"


def validate_args(fam, out, store, *extra):
    return ["sweep", "validate", "--base", fam / "pretrained", "--model", fam / "math", "--reference", fam / "text",
            "--out", out, "--store", store, "--seeds", "2", "--quiet", *extra]


def test_validate_takes_the_direction_from_the_key_or_requires_it(family_f32, tmp_path):
    fam, store = family_f32, tmp_path / "s.sqlite"
    # A known key: perplexity is lower-is-better, written where the numbers are.
    run(validate_args(fam, tmp_path / "ppl", store, "--eval", keyed_eval(tmp_path, "perplexity"),
                      "--score-key", "metrics.perplexity"))
    ppl = json.loads((tmp_path / "ppl" / "summary.json").read_text())
    assert ppl["direction"] == "lower" and ppl["score_key"] == "metrics.perplexity"
    # The same scores under --direction lower give the same numbers; under higher, the opposite sign.
    run(validate_args(fam, tmp_path / "lo", store, "--eval", keyed_eval(tmp_path, "perplexity"),
                      "--score-key", "metrics.perplexity", "--direction", "lower"))
    lo = json.loads((tmp_path / "lo" / "summary.json").read_text())
    assert lo["predictive"]["spearman"] == ppl["predictive"]["spearman"]
    run(validate_args(fam, tmp_path / "hi", store, "--eval", keyed_eval(tmp_path, "perplexity"),
                      "--score-key", "metrics.perplexity", "--direction", "higher"))
    hi = json.loads((tmp_path / "hi" / "summary.json").read_text())
    assert hi["direction"] == "higher"
    assert hi["predictive"]["spearman"] == pytest.approx(-lo["predictive"]["spearman"], rel=1e-12)
    # accuracy: higher.
    run(validate_args(fam, tmp_path / "acc", store, "--eval", keyed_eval(tmp_path, "accuracy"),
                      "--score-key", "metrics.accuracy"))
    assert json.loads((tmp_path / "acc" / "summary.json").read_text())["direction"] == "higher"
    # Unknown key, or none: refused before any evaluation, naming --direction.
    for extra in (["--score-key", "metrics.reward"], []):
        out = tmp_path / f"unknown{len(extra)}"
        p = run(validate_args(fam, out, store, "--eval", keyed_eval(tmp_path, "reward"), *extra), check=False)
        assert_input_error(p, "--direction")
        assert not out.exists()


def test_sweep_summaries_write_the_direction_and_pick_by_it(family_f32, tmp_path):
    fam, store = family_f32, tmp_path / "s.sqlite"
    ppl = keyed_eval(tmp_path, "perplexity")
    base = ["sweep", "interpolate", fam / "math", fam / "code", "--omegas", "0,0.5,1", "--store", store, "--quiet"]
    run([*base, "--eval", ppl, "--score-key", "metrics.perplexity", "--out", tmp_path / "i"])
    assert json.loads((tmp_path / "i" / "summary.json").read_text())["direction"] == "lower"
    run([*base, "--eval", ppl, "--score-key", "metrics.perplexity", "--direction", "higher", "--out", tmp_path / "h"])
    assert json.loads((tmp_path / "h" / "summary.json").read_text())["direction"] == "higher"
    run([*base, "--eval", "echo 1", "--out", tmp_path / "u"])
    assert json.loads((tmp_path / "u" / "summary.json").read_text())["direction"] is None
    # Picking a best x by --select-eval judges: lower perplexity is the pick.
    run([*base, "--select-eval", ppl, "--report-eval", ppl, "--score-key", "metrics.perplexity",
         "--out", tmp_path / "pick"])
    s = json.loads((tmp_path / "pick" / "summary.json").read_text())
    curve = [r for r in s["selection"]["omega"]["curves"]][0]
    with open(tmp_path / "pick" / "curve.csv", newline="") as f:
        scores = [float(r["select_score"]) for r in csv.DictReader(f)]
    assert curve["select_score"] == min(scores)
    p = run([*base, "--select-eval", "echo 1", "--report-eval", "echo 2", "--out", tmp_path / "nodir"], check=False)
    assert_input_error(p, "--direction")
    # The report labels what the summary says.
    run(["report", tmp_path / "i", "--out", tmp_path / "r.html", "--quiet"])
    assert "perplexity (lower is better)" in (tmp_path / "r.html").read_text()


# --- item 9: the smaller ones -------------------------------------------------------------------------


def test_sweep_out_that_is_a_file_is_our_one_line(family_f32, tmp_path):
    f = tmp_path / "file"
    f.write_text("mine")
    p = run(["sweep", "interpolate", family_f32 / "math", family_f32 / "code", "--omegas", "0,1", "--eval", "echo 1",
             "--out", f, "--quiet"], check=False)
    line = assert_input_error(p, str(f), "a regular file, not a directory")
    assert "filesystem" not in line
    assert f.read_text() == "mine"


def watch(run_dir, out, *extra, check=True):
    return run(["watch", run_dir, "--out", out, "--settle", "0", "--min-fit-size", "0", "--store",
                Path(out).parent / "watch-store.sqlite", *extra], check=check, timeout=300)


def test_watch_quiet_prints_only_the_summary(family_f32, tmp_path):
    r = tmp_path / "run"
    r.mkdir()
    for step, model in ((100, "pretrained"), (200, "math")):
        shutil.copy(family_f32 / model / "model.safetensors", r / f"model-step{step}.safetensors")
    p = watch(r, tmp_path / "w", "--quiet")
    assert p.stderr.splitlines() == [line for line in p.stderr.splitlines() if line.startswith("watch: 2 checkpoints")]
    assert len(p.stderr.splitlines()) == 1, p.stderr
    loud = watch(r, tmp_path / "w2")
    assert "step 100" in loud.stderr and "step 200" in loud.stderr
    assert watch(r, tmp_path / "w3", "--quiet", "--quiet").stderr == ""


def test_watch_steps_beyond_2_53_stay_apart(family_f32, tmp_path):
    r = tmp_path / "run"
    r.mkdir()
    steps = [9007199254740992, 9007199254740993]  # one double, two steps
    for step, model in zip(steps, ("pretrained", "math")):
        shutil.copy(family_f32 / model / "model.safetensors", r / f"model-step{step}.safetensors")
    watch(r, tmp_path / "w")
    with open(tmp_path / "w" / "checkpoints.csv", newline="") as f:
        assert sorted(int(c["step"]) for c in csv.DictReader(f)) == steps
    with open(tmp_path / "w" / "metrics.csv", newline="") as f:
        assert {int(c["step"]) for c in csv.DictReader(f)} == set(steps)


def test_a_checkpoint_link_to_the_root_is_left_out_with_a_warning(family_f32, tmp_path):
    r = tmp_path / "run"
    r.mkdir()
    shutil.copy(family_f32 / "math" / "model.safetensors", r / "model-step100.safetensors")
    os.symlink("/", r / "checkpoint-999")
    os.symlink("..", r / "checkpoint-5")
    p = watch(r, tmp_path / "w")
    warnings = [line for line in p.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 2 and all("left out" in w for w in warnings), p.stderr
    with open(tmp_path / "w" / "checkpoints.csv", newline="") as f:
        assert [c["step"] for c in csv.DictReader(f)] == ["100"]
    # --quiet keeps the warnings.
    q = watch(r, tmp_path / "w2", "--quiet")
    assert sum("left out" in line for line in q.stderr.splitlines()) == 2


def test_a_one_shot_watch_that_read_nothing_exits_2_as_documented(family_f32, tmp_path):
    r = tmp_path / "run"
    r.mkdir()
    whole = (family_f32 / "math" / "model.safetensors").read_bytes()
    (r / "model-step100.safetensors").write_bytes(whole[: len(whole) // 2])  # a copy in progress
    p = watch(r, tmp_path / "w", "--quiet", check=False)
    assert_input_error(p, "no checkpoint could be read", "model-step100.safetensors")
    assert "Exit status" in run(["watch", "--help"]).stdout
    assert "one-shot watch in which no checkpoint ends" in (Path(__file__).parents[2] / "docs" / "watch.md").read_text()


def test_a_checkpoint_link_to_the_output_is_left_out_but_a_real_one_is_refused(family_f32, tmp_path):
    r = tmp_path / "run"
    r.mkdir()
    shutil.copy(family_f32 / "math" / "model.safetensors", r / "model-step100.safetensors")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(out, r / "checkpoint-7")
    p = watch(r, out)
    assert sum("links to a directory holding --out" in line for line in p.stderr.splitlines()) == 1, p.stderr
    with open(out / "checkpoints.csv", newline="") as f:
        assert [c["step"] for c in csv.DictReader(f)] == ["100"]
    # --out inside a real checkpoint directory of the run is still refused.
    (r / "checkpoint-7").unlink()
    shutil.copytree(family_f32 / "code", r / "checkpoint-8")
    p = watch(r, r / "checkpoint-8" / "out", check=False)
    assert_input_error(p, "--out", "checkpoint-8")


# --- item 8: evaluator output edge cases, each a named refusal or a documented result -----------------


def scripted_eval(tmp_path, name, body):
    script = tmp_path / f"{name}.py"
    script.write_text(body)
    return f"{sys.executable} {script} {{model}}"


@pytest.mark.parametrize("output,needles", [
    ('print(json.dumps({"chunks": 5, "score": 1.0}))', ['"chunks" is 5', "not a list"]),
    ('print(json.dumps({"chunks": "x", "score": 1.0}))', ['"chunks" is "x"']),
    ('print(json.dumps("0.93"))', ["JSON string", "not a number"]),
    ('print(json.dumps([0.93]))', ["JSON array", "not a number"]),
    ('print(" ".join(["0.5"] * 1_500_000))', ["bytes long", "too long"]),
])
def test_bad_evaluator_output_is_a_named_refusal(family_f32, tmp_path, output, needles):
    command = scripted_eval(tmp_path, "bad", "import json\n" + output + "\n")
    p = run(["sweep", "interpolate", family_f32 / "math", family_f32 / "code", "--omegas", "0,1", "--eval", command,
             "--out", tmp_path / "s", "--quiet"], check=False, timeout=120)
    line = assert_input_error(p, "--eval", *needles)
    assert "holds 1500000 numbers" not in line


def rewind_with_random(fam, command, out):
    return run(["sweep", "rewind", "--base", fam / "pretrained", "--model", fam / "math", "--orders",
                "importance,random", "--seeds", "2", "--fractions", "0,0.5,1", "--eval", command, "--out", out,
                "--store", out.parent / "s.sqlite", "--quiet"], timeout=300)


def test_ragged_chunks_are_said_not_dropped(family_f32, tmp_path):
    calls = tmp_path / "calls"
    command = scripted_eval(tmp_path, "ragged", f"""import json, sys
with open({str(calls)!r}, "a+") as f:
    f.write("x")
    f.seek(0)
    n = len(f.read())
print(json.dumps({{"chunks": [0.1 * i for i in range(2 + n % 2)], "score": 1.0 + n / 100}}))
""")
    rewind_with_random(family_f32, command, tmp_path / "r")
    s = json.loads((tmp_path / "r" / "summary.json").read_text())["orders"]["importance"]
    assert s["auc_diff_ci95_chunks"] is None
    assert "different numbers of chunks" in s["chunks_note"]


def test_chunks_near_the_largest_double_give_a_finite_interval(family_f32, tmp_path):
    command = scripted_eval(tmp_path, "huge", """import json, os, sys, zlib
seed = 0
for name in sorted(os.listdir(sys.argv[1])):
    if name.endswith(".safetensors"):
        seed = zlib.crc32(open(os.path.join(sys.argv[1], name), "rb").read(), seed)
f = 0.9 + (seed % 1000) / 10000
print(json.dumps({"chunks": [1.7e308 * f, 1.6e308 * f, 1.75e308], "score": f}))
""")
    rewind_with_random(family_f32, command, tmp_path / "r")
    s = json.loads((tmp_path / "r" / "summary.json").read_text())["orders"]["importance"]
    lo, hi = s["auc_diff_ci95_chunks"]
    assert lo is not None and hi is not None and lo <= hi, s
    assert s["chunks"] == 3


def test_an_out_named_like_a_checkpoint_of_the_run_is_refused_at_once(family_f32, tmp_path):
    """--out run/checkpoint-999 would be read as a checkpoint by the next look: refused the first time."""
    r = tmp_path / "run"
    shutil.copytree(family_f32 / "math", r / "step_100")
    for name in ("checkpoint-999", "step_5"):
        p = run(["watch", r, "--out", r / name, "--store", tmp_path / "s.sqlite", "--settle", "0", "--quiet"],
                check=False)
        assert_input_error(p, name, "named like a checkpoint")
        assert not (r / name).exists()
    run(["watch", r, "--out", r / "results", "--store", tmp_path / "s.sqlite", "--settle", "0", "--quiet"])
    run(["watch", r, "--out", r / "results", "--store", tmp_path / "s.sqlite", "--settle", "0", "--quiet"])


def test_the_evaluator_dies_with_diffract(family_f32, tmp_path):
    """kill -9 of diffract during an evaluation: the evaluator (which diffract cannot stop then) is killed
    by the kernel with it (PR_SET_PDEATHSIG), not left running."""
    import signal
    import time
    pid_file = tmp_path / "eval.pid"
    evaluator = tmp_path / "slow_eval.py"
    evaluator.write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(120)\n")
    p = subprocess.Popen([binary(), "sweep", "interpolate", family_f32 / "math", family_f32 / "code",
                          "--omegas", "0,1", "--eval", f"{sys.executable} {evaluator} {{model}}",
                          "--out", tmp_path / "i", "--store", tmp_path / "s.sqlite", "--quiet"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.1)
        evaluator_pid = int(pid_file.read_text())
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
        def alive(pid):  # a zombie waiting for its new parent to reap it is dead
            try:
                return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
            except (FileNotFoundError, ProcessLookupError):
                return False
        for _ in range(100):  # the kernel delivers the signal on the parent's exit
            if not alive(evaluator_pid):
                break
            time.sleep(0.1)
        else:
            os.kill(evaluator_pid, signal.SIGKILL)
            raise AssertionError("the evaluator outlived diffract")
    finally:
        if p.poll() is None:
            p.kill()


def test_a_store_on_a_read_only_mount_serves_a_fully_stored_run(family_f32, tmp_path):
    """A store on a read-only file system: a run whose results it holds succeeds (nothing written); one
    that would have to keep new results is refused in one line naming the store, before computing."""
    src, mnt = tmp_path / "src", tmp_path / "ro"
    src.mkdir(), mnt.mkdir()
    run(["analyze", family_f32 / "pretrained", "--out", tmp_path / "a0", "--store", src / "s.sqlite", "--quiet"])
    if subprocess.run(["mount", "--bind", src, mnt], capture_output=True).returncode != 0:
        pytest.skip("bind mounts need root with CAP_SYS_ADMIN")
    try:
        assert subprocess.run(["mount", "-o", "remount,ro,bind", mnt], capture_output=True).returncode == 0
        before = (src / "s.sqlite").read_bytes()
        p = run(["analyze", family_f32 / "pretrained", "--out", tmp_path / "a1", "--store", mnt / "s.sqlite"])
        assert "reused" in p.stderr
        assert (tmp_path / "a1" / "metrics.csv").read_text() == (tmp_path / "a0" / "metrics.csv").read_text()
        p = run(["analyze", family_f32 / "math", "--out", tmp_path / "a2", "--store", mnt / "s.sqlite"], check=False)
        assert_input_error(p, str(mnt / "s.sqlite"), "read-only file system")
        assert not (tmp_path / "a2").exists()
        assert (src / "s.sqlite").read_bytes() == before
    finally:
        subprocess.run(["umount", mnt], capture_output=True)


def test_a_resumed_analyze_says_how_much_of_the_work_it_redid(family_f32, tmp_path):
    """Units are whole matrices and head blocks of very different cost: the summary of a run that reused
    part of its results gives the computed units' share of the work (their SVD cost, 4mn² + 8n³ with
    m ≥ n, over every unit's), so hundreds of cheap head blocks are not read as most of the run redone."""
    import re
    store = tmp_path / "s.sqlite"
    run(["analyze", family_f32 / "pretrained", "--roles", "mlp_up,mlp_down", "--out", tmp_path / "a0",
         "--store", store, "--quiet"])
    p = run(["analyze", family_f32 / "pretrained", "--out", tmp_path / "a1", "--store", store])
    with open(tmp_path / "a1" / "metrics.csv", newline="") as f:
        units = list(csv.DictReader(f))

    def cost(r):
        m, n = max(int(r["rows"]), int(r["cols"])), min(int(r["rows"]), int(r["cols"]))
        return 4.0 * m * n * n + 8.0 * n ** 3
    redone = sum(cost(r) for r in units if r["role"] not in ("mlp_up", "mlp_down")) / sum(cost(r) for r in units)
    m = re.search(r"\((\d+) computed, (\d+) reused from .*; the computed ones (\d+) % of the work\)", p.stderr)
    assert m, p.stderr
    assert int(m.group(3)) == round(100 * redone)
    assert int(m.group(1)) == sum(r["role"] not in ("mlp_up", "mlp_down") for r in units)
