"""Inputs whose tensor sets differ follow one rule in every edit (issue 14, "Tensor sets that
differ"): a tensor only the primary input has is carried from it as is, a tensor only another input
has is left out, both reported; interpolation at omega 0 and 1 equals the corresponding input tensor
for tensor, in both argument orders, however the sets differ.

The situation is BERT's integer `embeddings.position_ids` buffer, saved by older transformers and not
by newer ones. Read back with the safetensors package.
"""

import json

import numpy as np
import pytest

from conftest import run

st = pytest.importorskip("safetensors.numpy")


def tensors(seed, with_buffer):
    rng = np.random.default_rng(seed)
    t = {f"encoder.layer.{i}.attention.self.query.weight": rng.normal(size=(16, 16)).astype(np.float32)
         for i in range(2)}
    t["embeddings.word_embeddings.weight"] = rng.normal(size=(32, 16)).astype(np.float32)
    if with_buffer:
        t["embeddings.position_ids"] = np.arange(64, dtype=np.int64).reshape(1, 64)
    return t


@pytest.fixture()
def pair(tmp_path):
    cfg = {"model_type": "bert", "architectures": ["BertModel"], "num_attention_heads": 2, "hidden_size": 16,
           "num_hidden_layers": 2}
    out = {}
    for name, seed, buf in (("old", 1, True), ("new", 2, False)):
        d = tmp_path / name
        d.mkdir()
        (d / "config.json").write_text(json.dumps(cfg))
        out[name] = tensors(seed, buf)
        st.save_file(out[name], str(d / "model.safetensors"))
    return tmp_path, out


def same(got, want):
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]), k


@pytest.mark.parametrize("order", [("old", "new"), ("new", "old")])
def test_interpolation_endpoints_equal_their_inputs(pair, order):
    root, t = pair
    a, b = order
    for omega, want in (("0", a), ("1", b)):
        out = root / f"{a}-{b}-{omega}"
        p = run(["edit", "interpolate", root / a, root / b, "--omega", omega, "--out", out])
        same(st.load_file(str(out / "model.safetensors")), t[want])
        record = json.loads((out / "diffract_edit.json").read_text())
        # The buffer is reported whichever side has it.
        assert "embeddings.position_ids" in (record["only_in_primary"] + [x.split(" ")[0] for x in record["only_in_other"]])
        assert "embeddings.position_ids" in p.stderr


def test_grid_with_zero_and_middle_follow_the_same_rule(pair):
    root, t = pair
    out = root / "grid"
    run(["edit", "interpolate", root / "old", root / "new", "--grid", "0,0.5,1", "--out", out])
    mid = st.load_file(str(out / "omega_0.50" / "model.safetensors"))
    # Carried from the primary (A = old) as is.
    assert np.array_equal(mid["embeddings.position_ids"], t["old"]["embeddings.position_ids"])
    w = "encoder.layer.0.attention.self.query.weight"
    np.testing.assert_allclose(mid[w], (0.5 * t["old"][w].astype(np.float64) + 0.5 * t["new"][w]).astype(np.float32))
    same(st.load_file(str(out / "omega_0.00" / "model.safetensors")), t["old"])
    same(st.load_file(str(out / "omega_1.00" / "model.safetensors")), t["new"])


def test_other_edits_carry_the_primary_only_tensor(pair):
    root, t = pair
    out = root / "tr"
    p = run(["edit", "truncate", "--base", root / "new", "--model", root / "old", "--keep", "0.5", "--out", out])
    got = st.load_file(str(out / "model.safetensors"))
    assert np.array_equal(got["embeddings.position_ids"], t["old"]["embeddings.position_ids"])
    assert "carried from the primary" in p.stderr
    out2 = root / "tr2"
    p = run(["edit", "truncate", "--base", root / "old", "--model", root / "new", "--keep", "0.5", "--out", out2])
    assert "embeddings.position_ids" not in st.load_file(str(out2 / "model.safetensors"))
    assert "left out" in p.stderr
