"""Hostile adapters and regular expressions (issue 33, classes 3 and 4): an adapter whose base is itself
or a cycle of adapters is bad input in every command (it recursed until SIGSEGV); every regular
expression the program evaluates (--match/--exclude, an adapter's target_modules and pattern keys, model
names) runs in linear time with bounded stack, keeping PEFT's semantics (re.fullmatch for a string,
suffix match for a list).

Independent facts: Python's re for what a pattern matches; a wall-clock bound far above the linear
run time for what a backtracking matcher would never finish.
"""

import csv
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_input_error, run

st = pytest.importorskip("safetensors.numpy")

E = 16


def write_base(d: Path, names):
    rng = np.random.default_rng(3)
    d.mkdir(parents=True)
    st.save_file({n: rng.normal(size=(E, E)).astype(np.float32) for n in names}, str(d / "model.safetensors"))
    return d


def write_adapter(d: Path, base, target_modules, modules, extra=None):
    rng = np.random.default_rng(5)
    d.mkdir(parents=True)
    config = {"peft_type": "LORA", "base_model_name_or_path": str(base), "r": 2, "lora_alpha": 4,
              "target_modules": target_modules}
    config.update(extra or {})
    (d / "adapter_config.json").write_text(json.dumps(config))
    t = {}
    for m in modules:
        t[f"base_model.model.{m}.lora_A.weight"] = rng.normal(size=(2, E)).astype(np.float32)
        t[f"base_model.model.{m}.lora_B.weight"] = rng.normal(size=(E, 2)).astype(np.float32)
    st.save_file(t, str(d / "adapter_model.safetensors"))
    return d


COMMANDS = [
    lambda m, out: ["inspect", m],
    lambda m, out: ["analyze", m, "--out", out / "a", "--store", out / "s.sqlite", "--quiet"],
    lambda m, out: ["compare", "--base", m, m, "--out", out / "c", "--store", out / "s.sqlite", "--quiet"],
    lambda m, out: ["edit", "merge-lora", "--adapter", m, "--out", out / "m"],
]


@pytest.mark.parametrize("command", range(len(COMMANDS)))
def test_an_adapter_that_is_its_own_base_is_bad_input(tmp_path, command):
    """base_model_name_or_path "." run from the adapter's directory, given as "." or by its full path."""
    ad = write_adapter(tmp_path / "ad", ".", ["q"], ["layers.0.q"])
    for spec in (".", ad, "./"):
        p = run(COMMANDS[command](spec, tmp_path), check=False, cwd=ad, timeout=60)
        assert_input_error(p, "adapter_config.json", "leads back to this adapter")


@pytest.mark.parametrize("command", range(len(COMMANDS)))
def test_a_cycle_of_adapters_is_bad_input(tmp_path, command):
    a, b = tmp_path / "a", tmp_path / "b"
    write_adapter(a, b, ["q"], ["layers.0.q"])
    write_adapter(b, tmp_path / "c", ["q"], ["layers.0.q"])
    write_adapter(tmp_path / "c", a, ["q"], ["layers.0.q"])
    p = run(COMMANDS[command](a, tmp_path), check=False, timeout=60)
    assert_input_error(p, "adapter_config.json", "leads back to this adapter")


def test_a_stack_of_distinct_adapters_still_opens(tmp_path):
    base = write_base(tmp_path / "base", ["layers.0.q.weight", "layers.0.k.weight"])
    inner = write_adapter(tmp_path / "inner", base, ["q"], ["layers.0.q"])
    outer = write_adapter(tmp_path / "outer", inner, ["k"], ["layers.0.k"])
    assert "layers.0.k.weight" in run(["inspect", outer]).stdout


def long_name_model(d: Path, length):
    name = "x" * length + ".q_proj.weight"
    write_base(d, [name, "layers.0.k_proj.weight"])
    return name


@pytest.mark.parametrize("flag", ["--match", "--exclude"])
def test_selection_regex_on_a_50000_character_name(tmp_path, flag):
    long = long_name_model(tmp_path / "m", 50_000)
    p = run(["analyze", tmp_path / "m", "--out", tmp_path / "a", "--store", tmp_path / "s.sqlite", flag,
             ".*q_proj", "--quiet"], check=False, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    tensors = {r["tensor"] for r in csv.DictReader(open(tmp_path / "a" / "metrics.csv"))}
    assert tensors == ({long} if flag == "--match" else {"layers.0.k_proj.weight"})


@pytest.mark.parametrize("pattern", ["(.*.*)*(x|y)", "(a|aa)*b", "(x+x+)+y", "((.*)*)*z"])
def test_pathological_selection_patterns_finish(tmp_path, pattern):
    long_name_model(tmp_path / "m", 5_000)
    start = time.monotonic()
    p = run(["inspect", tmp_path / "m", "--json"], check=False, timeout=120)
    assert p.returncode == 0
    p = run(["analyze", tmp_path / "m", "--out", tmp_path / "a", "--store", tmp_path / "s.sqlite", "--match",
             pattern, "--quiet"], check=False, timeout=120)
    assert time.monotonic() - start < 60
    assert p.returncode in (0, 2), p.stderr  # 2: nothing selected


def test_invalid_and_unsupported_patterns_are_named(tmp_path):
    write_base(tmp_path / "m", ["layers.0.q.weight"])
    for bad in ["(", "a{99999}", r"(a)\1"]:
        p = run(["analyze", tmp_path / "m", "--out", tmp_path / "a", "--store", tmp_path / "s.sqlite", "--match",
                 bad], check=False)
        assert_input_error(p, "--match", "invalid regular expression")


@pytest.mark.parametrize("target", ["(.*.*)*(x|y)", "(.*.*)*q", "((a|aa)*)*c"])
def test_pathological_target_modules_finish(tmp_path, target):
    base = write_base(tmp_path / "base", ["layers.0.q.weight", "layers.0.k.weight"])
    ad = write_adapter(tmp_path / "ad", base, target, ["layers.0.q"])
    start = time.monotonic()
    p = run(["analyze", ad, "--out", tmp_path / "a", "--store", tmp_path / "s.sqlite", "--quiet"], check=False,
            timeout=120)
    assert time.monotonic() - start < 60
    import re

    matches = re.fullmatch(target, "layers.0.q") is not None
    if matches:
        assert p.returncode == 0, p.stderr
    else:  # the adapter's factors target a module its config does not: named, exit 2
        assert p.returncode == 2, p.stderr


@pytest.mark.parametrize("target, module, expected", [
    ("q", "layers.0.q", False),             # a string is re.fullmatch: no suffix rule
    (".*q", "layers.0.q", True),
    ("layers\\.0\\..*", "layers.0.q", True),
    ("q|k", "layers.0.q", False),
    (["q"], "layers.0.q", True),            # a list is a suffix match on whole components
    (["0.q"], "layers.0.q", True),
    (["yers.0.q"], "layers.0.q", False),
])
def test_target_modules_keep_peft_semantics(tmp_path, target, module, expected):
    import re

    if isinstance(target, str):
        assert (re.fullmatch(target, module) is not None) == expected  # the reference's own rule
    base = write_base(tmp_path / "base", ["layers.0.q.weight"])
    ad = write_adapter(tmp_path / "ad", base, target, [module])
    p = run(["analyze", ad, "--out", tmp_path / "a", "--store", tmp_path / "s.sqlite", "--quiet"], check=False)
    assert (p.returncode == 0) == expected, p.stderr


def test_long_module_name_against_target_modules(tmp_path):
    name = "m" * 50_000 + ".q"
    base = write_base(tmp_path / "base", [name + ".weight"])
    ad = write_adapter(tmp_path / "ad", base, ".*\\.q", [name])
    p = run(["analyze", ad, "--out", tmp_path / "a", "--store", tmp_path / "s.sqlite", "--quiet"], check=False,
            timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]


def test_long_model_names_in_a_report_series(tmp_path):
    """Model names are matched for training steps when the report orders a series."""
    base = write_base(tmp_path / "base", ["layers.0.q.weight"])
    name = "step" + "1" * 30_000
    run(["analyze", f"{name}={base}", "--out", tmp_path / "a", "--store", tmp_path / "s.sqlite", "--quiet"])
    p = run(["report", tmp_path / "a", "--out", tmp_path / "r.html"], check=False, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]


@pytest.mark.parametrize("key", ["(.*.*)*(x|y)", "((a|aa)*)*c", "(.*)*" * 20])
def test_pathological_pattern_keys_finish(tmp_path, key):
    """rank_pattern / alpha_pattern keys are regular expressions too (PEFT: (.*\\.)?(KEY)$)."""
    base = write_base(tmp_path / "base", ["layers.0.q.weight"])
    ad = write_adapter(tmp_path / "ad", base, ["q"], ["layers.0.q"],
                       extra={"rank_pattern": {key: 2}, "alpha_pattern": {key: 3}})
    start = time.monotonic()
    p = run(["analyze", ad, "--out", tmp_path / "a", "--store", tmp_path / "s.sqlite", "--quiet"], check=False,
            timeout=120)
    assert time.monotonic() - start < 60
    assert p.returncode == 0, p.stderr  # no key matches "layers.0.q": r and lora_alpha apply
