"""Structural mistakes on the command line are named as the user made them (issue 31, item 4): an option a
command does not have, a mistyped command, a local path that does not exist; progress and summaries
that suit batch logs (item 5).

Independent facts: the commands' own --help listing (what options exist), and the files on disk.
"""

import os
import re
import subprocess

import pytest

from conftest import assert_input_error, binary, run


def options_in_help(*command):
    """The long options --help lists for `command`."""
    text = run([*command, "--help"]).stdout
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", text)) - {"--help", "--help-all"}


def test_an_option_of_another_command_is_named(family_f32, tmp_path):
    fam = family_f32
    p = run(["edit", "interpolate", fam / "math", fam / "code", "--store", tmp_path / "x", "--out", tmp_path / "o"],
            check=False)
    line = assert_input_error(p, "--store is not an option of diffract edit interpolate", "streaming edits")
    listed = set(line.split("its options:")[1].split()) - {"(see", "--help)"}
    assert listed == options_in_help("edit", "interpolate")
    p = run(["edit", "truncate", "--base", fam / "pretrained", "--model", fam / "math", "--keep", "0.5", "--threads",
             "2", "--out", tmp_path / "t"], check=False)
    assert_input_error(p, "--threads is not an option of diffract edit truncate")
    p = run(["inspect", fam / "math", "--eval-timeout", "3"], check=False)
    assert_input_error(p, "--eval-timeout is not an option of diffract inspect", "it is an option of diffract sweep")
    p = run(["analyze", fam / "math", "--out", tmp_path / "a", "--no-such-thing"], check=False)
    assert_input_error(p, "--no-such-thing is not an option of diffract analyze")
    assert not (tmp_path / "o").exists() and not (tmp_path / "t").exists()


@pytest.mark.parametrize("typed, meant", [("anaylze", "analyze"), ("comapre", "compare"), ("insepct", "inspect"),
                                          ("repor", "report")])
def test_a_mistyped_command_gets_a_suggestion(typed, meant):
    p = run([typed, "x"], check=False)
    assert_input_error(p, f"'{typed}' is not a command of diffract", f"did you mean 'diffract {meant}'")


def test_a_mistyped_subcommand_gets_a_suggestion():
    p = run(["edit", "trunacte"], check=False)
    assert_input_error(p, "did you mean 'diffract edit truncate'")
    p = run(["zzzz"], check=False)
    assert_input_error(p, "'zzzz' is not a command of diffract", "commands:", "analyze")


def test_analyse_is_analyze(family_f32, tmp_path):
    run(["analyse", family_f32 / "math", "--out", tmp_path / "a", "--store", tmp_path / "s.sqlite", "--quiet"])
    assert (tmp_path / "a" / "metrics.csv").exists()


def test_a_local_looking_path_is_not_a_cache_miss(family_f32, tmp_path, monkeypatch):
    monkeypatch.chdir(family_f32.parent)
    name = family_f32.name
    p = run(["inspect", f"{name}/mathh"], check=False)
    assert_input_error(p, "no such file or directory", f"did you mean '{name}/math'")
    p = run(["inspect", "org/model.safetensors"], check=False)
    assert_input_error(p, "no such file or directory")
    assert "cache" not in p.stderr
    # A real model id still means the cache.
    p = run(["inspect", "someorg/somemodel"], check=False, env={"HF_HUB_CACHE": str(tmp_path), "PATH": "/usr/bin"})
    assert p.returncode == 2 and "cache" in p.stderr.lower()


def test_batch_progress_lines_and_summaries(family_f32, tmp_path):
    """Not a terminal: no progress for a short run, the summary always unless --quiet is given twice; a fully
    reused run says so."""
    args = ["analyze", family_f32 / "math", "--store", tmp_path / "s.sqlite"]
    first = run([*args, "--out", tmp_path / "a1"])
    assert "\r" not in first.stderr
    again = run([*args, "--out", tmp_path / "a2", "--quiet"])
    assert re.search(r"all \d+ results reused from", again.stderr), again.stderr
    silent = run([*args, "--out", tmp_path / "a3", "--quiet", "--quiet"])
    assert silent.stderr == ""


def test_batch_progress_lines_at_their_interval(family_f32, tmp_path):
    """Not a terminal (a pipe, as under nohup or a batch system): plain lines at the log interval (10 s;
    DIFFRACT_PROGRESS_INTERVAL shortens it here), each with done/total, elapsed and an ETA, counts never
    decreasing, and a last line with the total once any was printed; no carriage returns."""
    env = {**os.environ, "DIFFRACT_PROGRESS_INTERVAL": "0.001"}
    p = run(["analyze", family_f32 / "math", "--store", tmp_path / "s.sqlite", "--out", tmp_path / "a",
             "--threads", "1"], env=env)
    assert "\r" not in p.stderr
    lines = re.findall(r"^analyze: (\d+)/(\d+) matrices, (\S+) elapsed, ETA (\S+)$", p.stderr, re.M)
    assert len(lines) >= 2, p.stderr
    done = [int(d) for d, _, _, _ in lines]
    assert done == sorted(done) and len({t for _, t, _, _ in lines}) == 1
    total = int(lines[0][1])
    assert re.search(rf"^analyze: {total}/{total} matrices in \S+$", p.stderr, re.M), p.stderr
    # The default interval prints nothing for a run this short; a bad value (text, negative, zero, denormal,
    # infinite, below the millisecond lines are timed in) is refused in one line, never a line per update.
    e = {k: v for k, v in os.environ.items() if k != "DIFFRACT_PROGRESS_INTERVAL"}
    q = run(["analyze", family_f32 / "math", "--store", tmp_path / "s-default.sqlite", "--out", tmp_path / "b"], env=e)
    assert "ETA" not in q.stderr, q.stderr
    for i, value in enumerate(("abc", "-1", "0", "1e-320", "inf", "nan", "0.0001", "1e7")):
        q = run(["analyze", family_f32 / "math", "--store", tmp_path / f"s-{i}.sqlite", "--out", tmp_path / f"b-{i}"],
                env={**e, "DIFFRACT_PROGRESS_INTERVAL": value}, check=False)
        assert_input_error(q, "DIFFRACT_PROGRESS_INTERVAL", f"'{value}'")
        assert not (tmp_path / f"b-{i}").exists()
