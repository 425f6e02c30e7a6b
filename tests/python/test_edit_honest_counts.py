"""Edits count the tensors they changed, not only those they rewrote (issue 34, item 5): a rewind of
heads whose update is zero rewrites a tensor without changing it.

Independent fact: the output's tensors compared byte for byte with the model's (safetensors + numpy).
"""

import json
import shutil

import numpy as np
import pytest

from conftest import run

st = pytest.importorskip("safetensors.numpy")


def test_rewind_counts_changed_tensors_by_bytes(family_f32, tmp_path):
    base = family_f32 / "pretrained"
    model = tmp_path / "model"
    shutil.copytree(base, model)
    weights = next(model.glob("*.safetensors"))
    tensors = st.load_file(str(weights))
    q = next(n for n in tensors if "layers.0.self_attn.q_proj.weight" in n)
    tensors[q] = tensors[q] + np.float32(0.01)  # the only tensor the "fine-tune" changed
    st.save_file(tensors, str(weights))
    heads = tmp_path / "heads.csv"
    cfg = json.loads((base / "config.json").read_text())
    heads.write_text("layer,head\n" + "".join(f"{l},{h}\n" for l in range(cfg["num_hidden_layers"])
                                               for h in range(cfg["num_attention_heads"])))
    p = run(["edit", "rewind", "--base", base, "--model", model, "--heads", heads, "--out", tmp_path / "rw"])
    out = {}
    for f in (tmp_path / "rw").glob("*.safetensors"):
        out.update(st.load_file(str(f)))
    differing = sum(not np.array_equal(out[n], tensors[n]) for n in out)
    assert differing == 1
    provenance = json.loads((tmp_path / "rw" / "diffract_edit.json").read_text())
    assert provenance["tensors_changed"] == differing
    assert provenance["tensors_edited"] > differing  # every attention tensor was rewritten
    assert f"({differing} changed)" in p.stderr


@pytest.mark.parametrize("edit", ["interpolate", "merge"])
def test_elementwise_edits_rewrite_only_tensors_whose_inputs_differ(family_f32, tmp_path, edit):
    base = family_f32 / "pretrained"
    model = tmp_path / "model"
    shutil.copytree(base, model)
    weights = next(model.glob("*.safetensors"))
    tensors = st.load_file(str(weights))
    names = [n for n in tensors if "layers.1." in n and n.endswith("weight")][:2]
    for n in names:
        tensors[n] = tensors[n] + np.float32(0.25)
    st.save_file(tensors, str(weights))
    args = {"interpolate": ["edit", "interpolate", base, model, "--omega", "0.5"],
            "merge": ["edit", "merge", "--base", base, "--models", model]}[edit]
    run(args + ["--out", tmp_path / "e", "--quiet"])
    record = json.loads((tmp_path / "e" / "diffract_edit.json").read_text())
    assert (record["tensors_edited"], record["tensors_changed"]) == (2, 2)
    assert record["tensors_copied"] == len(tensors) - 2
    out = {}
    for f in (tmp_path / "e").glob("*.safetensors"):
        out.update(st.load_file(str(f)))
    original = st.load_file(str(next(base.glob("*.safetensors"))))
    assert sorted(n for n in out if not np.array_equal(out[n], original[n])) == sorted(names)
