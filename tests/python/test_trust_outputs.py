"""Outputs never replace or sit inside an input (issue 33, classes 6 and 7): adapter directories are
inputs; an adapter_config.json that is not a regular file is refused, not ignored; the store is never
inside an input nor an existing empty file; `export --out`, `report --out` and a run's `--out` never
replace or enter a checkpoint any earlier run recorded in the store.

Independent facts: the bytes of the files on disk before and after (hashlib).
"""

import hashlib
import os
from pathlib import Path

import pytest

from conftest import assert_input_error, run
from test_trust_hostile_patterns import write_adapter, write_base


def digest(path: Path):
    return {p.relative_to(path).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(path).rglob("*")) if p.is_file()} if path.is_dir() else \
        hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def lora(tmp_path):
    base = write_base(tmp_path / "base", ["model.layers.0.self_attn.q_proj.weight",
                                          "model.layers.0.mlp.up_proj.weight"])
    ad = write_adapter(tmp_path / "ad", base, ["q_proj"], ["model.layers.0.self_attn.q_proj"])
    return base, ad


@pytest.mark.parametrize("command", [
    lambda base, ad, out, t: ["analyze", f"{base}+{ad}", "--out", out, "--store", t / "s.sqlite"],
    lambda base, ad, out, t: ["analyze", ad, "--out", out, "--store", t / "s.sqlite"],
    lambda base, ad, out, t: ["compare", "--base", base, ad, "--out", out, "--store", t / "s.sqlite"],
    lambda base, ad, out, t: ["edit", "merge-lora", "--adapter", ad, "--out", out],
    lambda base, ad, out, t: ["edit", "interpolate", base, ad, "--omega", "0.5", "--out", out],
    lambda base, ad, out, t: ["edit", "permute", "--model", ad, "--out", out],
    lambda base, ad, out, t: ["edit", "truncate", "--base", base, "--model", ad, "--rank", "1", "--as-lora",
                              "--out", out],
])
def test_outputs_never_go_inside_an_adapter(lora, tmp_path, command):
    base, ad = lora
    before = digest(ad)
    p = run(command(base, ad, ad / "out", tmp_path), check=False)
    assert_input_error(p, "an input")
    assert digest(ad) == before


@pytest.mark.parametrize("kind", ["directory", "fifo", "dev-zero"])
def test_an_adapter_config_that_is_not_a_file_is_refused(lora, tmp_path, kind):
    base, ad = lora
    cfg = ad / "adapter_config.json"
    cfg.unlink()
    if kind == "directory":
        cfg.mkdir()
    elif kind == "fifo":
        os.mkfifo(cfg)
    else:
        cfg.symlink_to("/dev/zero")
    for args in (["inspect", ad], ["analyze", ad, "--out", tmp_path / "a", "--store", tmp_path / "s.sqlite"]):
        p = run(args, check=False, timeout=60)
        assert_input_error(p, "adapter_config.json", "not a regular file")


def test_the_store_is_never_inside_an_input_nor_an_empty_file(lora, tmp_path):
    base, _ = lora
    p = run(["analyze", base, "--out", tmp_path / "a", "--store", base / "s.sqlite"], check=False)
    assert_input_error(p, "--store", "lies inside an input")
    assert not (base / "s.sqlite").exists()
    empty = tmp_path / "notes.txt"
    empty.write_bytes(b"")
    p = run(["analyze", base, "--out", tmp_path / "a", "--store", empty], check=False)
    assert_input_error(p, str(empty), "an empty file, not a diffract results store")
    assert empty.read_bytes() == b""


def test_export_and_report_never_replace_a_checkpoint_the_store_read(lora, tmp_path):
    base, _ = lora
    store = tmp_path / "s.sqlite"
    run(["analyze", base, "--out", tmp_path / "a", "--store", store, "--quiet"])
    weights = base / "model.safetensors"
    before = digest(weights)
    p = run(["export", "--store", store, "--out", weights], check=False)
    assert_input_error(p, "an input")
    p = run(["report", store, "--out", weights], check=False)
    assert_input_error(p, "an input")
    p = run(["report", tmp_path / "a", "--store", store, "--out", base / "report.html"], check=False)
    assert_input_error(p, "lies inside an input")
    assert digest(weights) == before
    # A later run's --out inside a model directory this store has read.
    p = run(["analyze", tmp_path / "a", "--out", base / "an", "--store", store], check=False)
    assert p.returncode == 2
    other = write_base(tmp_path / "other", ["layers.0.q.weight"])
    p = run(["analyze", other, "--out", base / "an", "--store", store], check=False)
    assert_input_error(p, "lies inside an input")
    assert not (base / "an").exists()
