"""Shared fixtures: the diffract binary, the test tools, and generated synthetic families."""
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def binary() -> str:
    return os.environ.get("DIFFRACT_BIN", str(ROOT / "build" / "diffract"))


def tool(name: str) -> str:
    return str(Path(os.environ.get("DIFFRACT_TOOLS_DIR", str(ROOT / "build" / "tests"))) / name)


def run(args, check=True, env=None, **kw):
    """Runs the diffract CLI; returns the CompletedProcess (text mode)."""
    p = subprocess.run([binary(), *map(str, args)], capture_output=True, text=True, env=env, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"diffract {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr}")
    return p


@pytest.fixture(scope="session")
def family_f32(tmp_path_factory):
    """A small F32 family (numpy can read it without extra dtypes)."""
    out = tmp_path_factory.mktemp("fam") / "f32"
    run(["generate", "--out", out, "--dtype", "F32", "--layers", "2", "--hidden", "128", "--heads", "4",
         "--intermediate", "256", "--vocab", "512", "--domain-heads", "1", "--generic-heads", "1"])
    return out


@pytest.fixture(scope="session")
def family_bf16_sharded(tmp_path_factory):
    """The default tiny family in bf16, sharded into ~1 MB files, with GQA."""
    out = tmp_path_factory.mktemp("fam") / "bf16"
    run(["generate", "--out", out, "--shard-mb", "1", "--kv-heads", "4"])
    return out


def assert_input_error(p, *needles):
    """Exit 2 with exactly one line on stderr that contains every needle (a path, a tensor, a word)."""
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for n in needles:
        assert str(n) in lines[0], lines[0]
    return lines[0]
