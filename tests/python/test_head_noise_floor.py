"""Issue 34: the importance ranking's noise floor. heads.csv gains relative_update, update_z and
stands_out (docs/compare.md); compare says when no head stands out. Planted heads stand out and the
untouched ones do not; a uniform quantisation error (a Q8_0-style copy: int8 values with one scale per 32
entries) has no head standing out, and compare says its ranking orders noise — where the min-max scaled
importance would still spread those heads over 0..1."""
import csv
import json
import shutil
import warnings

import numpy as np
import pytest
import safetensors.numpy as st

import diffract_spectral as diffract
from conftest import run


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    root = tmp_path_factory.mktemp("noise_floor")
    run(["generate", "--out", root / "fam", "--dtype", "F32"])  # 4 layers x 8 heads, 2 planted per layer
    q8 = root / "q8"
    shutil.copytree(root / "fam" / "pretrained", q8)
    for f in q8.glob("*.safetensors"):
        tensors = st.load_file(str(f))
        for k, v in tensors.items():
            if v.ndim == 2:
                x = v.reshape(-1, 32).astype(np.float64)
                scale = np.abs(x).max(axis=1, keepdims=True) / 127
                scale[scale == 0] = 1
                tensors[k] = (np.round(x / scale) * scale).reshape(v.shape).astype(np.float32)
        st.save_file(tensors, str(f))
    return root


def heads_of(path):
    return list(csv.DictReader(open(path)))


def test_planted_heads_stand_out_and_untouched_ones_do_not(family, tmp_path):
    planted = json.loads((family / "fam" / "planted.json").read_text())
    math_heads = {tuple(h) for h in planted["domain_heads"]["math"]}
    changed = math_heads | {tuple(h) for h in planted["generic_heads"]}
    p = run(["compare", family / "fam" / "math", "--base", family / "fam" / "pretrained", "--out", tmp_path / "c",
             "--store", tmp_path / "s.sqlite"])
    assert "stands out" not in p.stderr
    rows = heads_of(tmp_path / "c" / "heads.csv")
    out = {(int(r["layer"]), int(r["head"])) for r in rows if r["stands_out"] == "1"}
    assert math_heads <= out and out <= changed, (sorted(out), sorted(math_heads))
    # relative_update by hand for one planted head: sqrt(sum delta^2 / sum base^2) over its 4 blocks
    cmp = {(r["tensor"], r["head"]): r for r in csv.DictReader(open(tmp_path / "c" / "compare.csv"))}
    layer, head = sorted(math_heads)[0]
    blocks = [r for (t, h), r in cmp.items() if h == str(head) and f"layers.{layer}." in t
              and any(p in t for p in ("q_proj", "k_proj", "v_proj", "o_proj"))]
    assert len(blocks) == 4
    delta = sum(float(r["delta_frob_norm"]) ** 2 for r in blocks)
    base = sum((float(r["delta_frob_norm"]) / float(r["rel_delta_frob_norm"])) ** 2 for r in blocks)
    row = next(r for r in rows if (int(r["layer"]), int(r["head"])) == (layer, head))
    assert float(row["relative_update"]) == pytest.approx(np.sqrt(delta / base), rel=1e-12)


def test_a_uniform_quantisation_error_has_no_head_standing_out(family, tmp_path):
    p = run(["compare", family / "q8", "--base", family / "fam" / "pretrained", "--reference", family / "fam" / "text",
             "--out", tmp_path / "c", "--store", tmp_path / "s.sqlite"])
    assert "q8: no head's update stands out" in p.stderr and "orders noise" in p.stderr
    rows = heads_of(tmp_path / "c" / "heads.csv")
    assert len(rows) == 32 and all(r["stands_out"] == "0" for r in rows)
    relative = np.array([float(r["relative_update"]) for r in rows])
    assert relative.max() / np.median(relative) < 1.1
    importance = [float(r["importance"]) for r in rows]
    assert max(importance) - min(importance) > 0.5  # what the min-max ranking alone would suggest
    # Python says it too, as a warning.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = diffract.compare(family / "q8", base=family / "fam" / "pretrained", store=tmp_path / "s.sqlite")
    assert any("no head's update stands out" in str(w.message) for w in caught)
    assert str(res.heads["stands_out"].dtype) == "Int64" and res.heads["stands_out"].sum() == 0
