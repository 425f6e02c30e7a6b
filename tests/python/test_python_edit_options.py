"""Issue 32: the options Python lacked (compare delta_only; rewind o_bias and as_lora; truncate as_lora;
merge_lora; interpolate grid; generate preset and models; sweeps' max_candidates) write what the CLI
writes, byte for byte (diffract_edit.json aside: it records the output's own path)."""
import hashlib
import json
from pathlib import Path

import pytest

import diffract_spectral as diffract
from conftest import run


def digest(d: Path) -> dict:
    out = {}
    for p in sorted(Path(d).rglob("*")):
        if p.is_file() and p.name != "diffract_edit.json":
            out[str(p.relative_to(d))] = hashlib.sha256(p.read_bytes()).hexdigest()
    assert out
    return out


@pytest.fixture(scope="module")
def adapter(family_f32, tmp_path_factory):
    root = tmp_path_factory.mktemp("lora")
    f = family_f32
    run(["edit", "truncate", "--base", f / "pretrained", "--model", f / "math", "--rank", "4", "--as-lora",
         "--out", root / "cli", "--quiet"])
    r = diffract.edit.truncate(base=f / "pretrained", model=f / "math", rank=4, as_lora=True, out=root / "py")
    assert r["modules"] > 0
    assert digest(root / "cli") == digest(root / "py")
    return root / "cli"


def test_truncate_as_lora_needs_a_rank(family_f32, tmp_path):
    with pytest.raises(diffract.InputError, match="give the adapter's rank"):
        diffract.edit.truncate(base=family_f32 / "pretrained", model=family_f32 / "math", keep=0.5, as_lora=True,
                               out=tmp_path / "x")
    with pytest.raises(diffract.InputError, match="per_head= has no LoRA form"):
        diffract.edit.truncate(base=family_f32 / "pretrained", model=family_f32 / "math", rank=2, as_lora=True,
                               per_head=True, out=tmp_path / "y")


def test_merge_lora(family_f32, adapter, tmp_path):
    f = family_f32
    run(["edit", "merge-lora", "--adapter", adapter, "--base", f / "pretrained", "--out", tmp_path / "cli",
         "--quiet"])
    r = diffract.edit.merge_lora(adapter=adapter, base=f / "pretrained", out=tmp_path / "py")
    assert r["changed"] > 0 and digest(tmp_path / "cli") == digest(tmp_path / "py")


@pytest.mark.parametrize("o_bias", ["keep", "base"])
def test_rewind_o_bias_and_as_lora(family_f32, adapter, tmp_path, o_bias):
    f = family_f32
    heads = [(0, 1), (1, 2)]
    (tmp_path / "heads.csv").write_text("layer,head\n0,1\n1,2\n")
    run(["edit", "rewind", "--base", f / "pretrained", "--model", f / "math", "--heads", tmp_path / "heads.csv",
         "--o-bias", o_bias, "--out", tmp_path / "cli", "--quiet"])
    r = diffract.edit.rewind(base=f / "pretrained", model=f / "math", heads=tmp_path / "heads.csv", o_bias=o_bias,
                             out=tmp_path / "py")
    assert r["heads"] == heads and digest(tmp_path / "cli") == digest(tmp_path / "py")
    # The same heads as a list: the same weights (rewound_heads.csv names no source file then).
    diffract.edit.rewind(base=f / "pretrained", model=f / "math", heads=heads, o_bias=o_bias, out=tmp_path / "list")
    weights = {k: v for k, v in digest(tmp_path / "list").items() if k.endswith(".safetensors")}
    assert weights and all(digest(tmp_path / "py")[k] == v for k, v in weights.items())
    spec = f"{f / 'pretrained'}+{adapter}"
    run(["edit", "rewind", "--base", f / "pretrained", "--model", spec, "--heads", tmp_path / "heads.csv",
         "--as-lora", "--o-bias", o_bias, "--out", tmp_path / "cli-lora", "--quiet"])
    diffract.edit.rewind(base=f / "pretrained", model=spec, heads=tmp_path / "heads.csv", as_lora=True, o_bias=o_bias,
                         out=tmp_path / "py-lora")
    lora = digest(tmp_path / "py-lora")
    assert "adapter_model.safetensors" in lora and digest(tmp_path / "cli-lora") == lora


def test_rewind_by_fraction_matches_the_cli(family_f32, tmp_path):
    f = family_f32
    run(["edit", "rewind", "--base", f / "pretrained", "--model", f / "math", "--reference", f / "text",
         "--fraction", "0.25", "--out", tmp_path / "cli", "--quiet", "--store", tmp_path / "s.sqlite"])
    r = diffract.edit.rewind(base=f / "pretrained", model=f / "math", reference=f / "text", fraction=0.25,
                             out=tmp_path / "py", store=tmp_path / "s.sqlite")
    assert len(r["heads"]) > 0 and digest(tmp_path / "cli") == digest(tmp_path / "py")
    with pytest.raises(diffract.InputError, match="exactly one of fraction= and heads="):
        diffract.edit.rewind(base=f / "pretrained", model=f / "math", out=tmp_path / "z")


def test_interpolate_grid(family_f32, tmp_path):
    f = family_f32
    run(["edit", "interpolate", f / "pretrained", f / "math", "--grid", "0:1:0.5", "--out", tmp_path / "cli",
         "--quiet"])
    r = diffract.edit.interpolate(f / "pretrained", f / "math", grid=[0, 0.5, 1], out=tmp_path / "py")
    assert [d for _, d in r["checkpoints"]] == ["omega_0.00", "omega_0.50", "omega_1.00"]
    assert digest(tmp_path / "cli") == digest(tmp_path / "py")
    with pytest.raises(diffract.InputError, match="exactly one of omega= and grid="):
        diffract.edit.interpolate(f / "pretrained", f / "math", out=tmp_path / "q")
    with pytest.raises(diffract.InputError, match="101 candidates exceed the limit"):
        diffract.edit.interpolate(f / "pretrained", f / "math", grid="0:1:0.01", max_candidates=10,
                                  out=tmp_path / "r")


def test_compare_delta_only(family_f32, tmp_path):
    f = family_f32
    run(["compare", f / "math", "--base", f / "pretrained", "--delta-only", "--out", tmp_path / "cli",
         "--store", tmp_path / "s.sqlite", "--quiet"])
    diffract.compare(f / "math", base=f / "pretrained", delta_only=True, out=tmp_path / "py",
                     store=tmp_path / "s2.sqlite")
    assert (tmp_path / "cli" / "compare.csv").read_bytes() == (tmp_path / "py" / "compare.csv").read_bytes()


def test_generate_preset_and_models(tmp_path):
    run(["generate", "--preset", "tiny", "--layers", "2", "--models", "pretrained,math", "--out", tmp_path / "cli"])
    diffract.generate(preset="tiny", layers=2, models=["pretrained", "math"], out=tmp_path / "py")
    assert sorted(p.name for p in (tmp_path / "py").iterdir()) == ["math", "planted.json", "pretrained"]
    assert digest(tmp_path / "cli") == digest(tmp_path / "py")
    # A preset's shapes, a shape argument given overriding its value (the config only: no 1B written).
    with pytest.raises(diffract.InputError, match="unknown preset 'huge'"):
        diffract.generate(preset="huge", out=tmp_path / "x")


def test_sweep_max_candidates(family_f32, tmp_path):
    f = family_f32
    with pytest.raises(diffract.InputError, match="exceed the limit \\(expected at most 3"):
        diffract.sweep.interpolate(f / "pretrained", f / "math", omegas="0:1:0.1", eval="echo 1", max_candidates=3,
                                   out=tmp_path / "s")
