"""compare --delta-only (issue 14 §4): the delta fields alone, and for BASE+ADAPTER on the compared
base the adapter's own update scale·B·A computed from its factors (O((m+n)·r²), never an m × n product),
exact for every whole matrix and head block.

The adapter's update is planted small (1e-4 of the weights) so that the merged tensor's f32 rounding
(~6e-8·|W|) would be ~1e-3 of the delta: only the factored route meets the 1e-9 tolerance below.
"""

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_input_error, run

st = pytest.importorskip("safetensors.numpy")

from test_lora import E, D, H, bert_base, write_adapter  # noqa: E402

DELTA = ("delta_frob_norm", "rel_delta_frob_norm", "delta_l2_norm", "delta_stable_rank",
         "delta_effective_rank")
EPS = 1e-16


def delta_fields(d: np.ndarray, base: np.ndarray) -> dict:
    s = np.linalg.svd(d, compute_uv=False)
    frob = np.linalg.norm(d)
    p = s / (s.sum() + EPS)
    return {"delta_frob_norm": frob, "rel_delta_frob_norm": frob / np.linalg.norm(base),
            "delta_l2_norm": s[0], "delta_stable_rank": (frob / (s[0] + EPS)) ** 2,
            "delta_effective_rank": float(np.exp(-(p * np.log(p + EPS)).sum()))}


def rows_of(out: Path) -> dict:
    return {(r["tensor"], r["head"]): r for r in csv.DictReader(open(out / "compare.csv"))}


@pytest.fixture()
def lora(tmp_path):
    rng = np.random.default_rng(11)
    base = bert_base(tmp_path / "base", rng)
    q, o = "encoder.layer.0.attention.self.query", "encoder.layer.1.attention.output.dense"
    emb = "embeddings.word_embeddings"
    tensors, deltas = {}, {}
    for module, r in {q: 3, o: 2}.items():
        a = rng.normal(size=(r, E)).astype(np.float32)
        b = rng.normal(size=(E, r)).astype(np.float32)
        tensors[f"base_model.model.{module}.lora_A.weight"] = a
        tensors[f"base_model.model.{module}.lora_B.weight"] = b
        deltas[module + ".weight"] = 1e-4 / r * (b.astype(np.float64) @ a.astype(np.float64))
    # An embedding module: lora_embedding_A [r, vocab], lora_embedding_B [dim, r], delta (B·A)ᵀ.
    a = rng.normal(size=(2, 50)).astype(np.float32)
    b = rng.normal(size=(E, 2)).astype(np.float32)
    tensors[f"base_model.model.{emb}.lora_embedding_A"] = a
    tensors[f"base_model.model.{emb}.lora_embedding_B"] = b
    deltas[emb + ".weight"] = (1e-4 / 2 * (b.astype(np.float64) @ a.astype(np.float64))).T
    config = {"peft_type": "LORA", "base_model_name_or_path": str(tmp_path / "base"), "r": 2,
              "lora_alpha": 1e-4, "target_modules": ["query", "dense", "word_embeddings"],
              "rank_pattern": {"query": 3}, "fan_in_fan_out": False}
    write_adapter(tmp_path / "adapter", config, tensors)
    return {"base": tmp_path / "base", "spec": f"{tmp_path / 'base'}+{tmp_path / 'adapter'}",
            "weights": {k: v.astype(np.float64) for k, v in base.items()}, "deltas": deltas}


def check(row, want, rel):
    for f in DELTA:
        assert float(row[f]) == pytest.approx(want[f], rel=rel, abs=1e-300), (row["tensor"], row["head"], f)


def test_adapter_delta_is_computed_from_its_factors(lora, tmp_path):
    out = tmp_path / "c"
    p = run(["compare", "--base", lora["base"], lora["spec"], "--delta-only", "--out", out,
             "--store", tmp_path / "s.sqlite"])
    rows = rows_of(out)
    for name, d in lora["deltas"].items():
        w = lora["weights"][name]
        check(rows[(name, "")], delta_fields(d, w), 1e-9)
        # The fields that need both factorisations are not computed.
        for f in ("avg_l_agreement", "rel_sval_change", "esd_ks", "pl_ks"):
            assert rows[(name, "")][f] == "nan"
    # Head blocks: Q heads are row blocks of the delta, O heads column blocks; exact too.
    q, o = "encoder.layer.0.attention.self.query.weight", "encoder.layer.1.attention.output.dense.weight"
    for h in range(H):
        sl = slice(h * D, (h + 1) * D)
        check(rows[(q, str(h))], delta_fields(lora["deltas"][q][sl], lora["weights"][q][sl]), 1e-9)
        check(rows[(o, str(h))], delta_fields(lora["deltas"][o][:, sl], lora["weights"][o][:, sl]), 1e-9)
    # A tensor the adapter leaves alone has no delta.
    k = "encoder.layer.0.attention.self.key.weight"
    assert float(rows[(k, "")]["delta_frob_norm"]) == 0
    # heads.csv: update norms from the Q/K/V/O block norms; the agreement is not computed.
    heads = list(csv.DictReader(open(out / "heads.csv")))
    h0 = next(r for r in heads if r["layer"] == "0" and r["head"] == "1")
    want = np.linalg.norm(lora["deltas"][q][D:2 * D])
    assert float(h0["q_update_norm"]) == pytest.approx(want, rel=1e-9)
    assert h0["agreement"] == "nan"
    assert "compare:" in p.stderr
    # A re-run reuses everything; the full compare does not reuse the delta-only results.
    p = run(["compare", "--base", lora["base"], lora["spec"], "--delta-only", "--out", tmp_path / "c2",
             "--store", tmp_path / "s.sqlite"])
    assert "(0 computed" in p.stderr
    assert (tmp_path / "c2" / "compare.csv").read_bytes() == (out / "compare.csv").read_bytes()


def test_delta_only_of_the_merged_bytes_differs_from_the_factors(lora, tmp_path):
    """The merged checkpoint (f32 bytes) is compared through its bytes, and stored apart: the factored
    results are the adapter's exact update, the merged file's are W32(merged) − W."""
    run(["edit", "merge-lora", "--adapter", Path(lora["spec"].split("+")[1]), "--base", lora["base"],
         "--out", tmp_path / "merged", "--quiet"])
    store = tmp_path / "s.sqlite"
    run(["compare", "--base", lora["base"], lora["spec"], "--delta-only", "--out", tmp_path / "f",
         "--store", store, "--quiet"])
    p = run(["compare", "--base", lora["base"], tmp_path / "merged", "--delta-only", "--out", tmp_path / "m",
             "--store", store])
    assert "reused" in p.stderr and "(0 computed" not in p.stderr
    merged = st.load_file(str(tmp_path / "merged" / "model.safetensors"))
    name = "encoder.layer.0.attention.self.query.weight"
    d = merged[name].astype(np.float64) - lora["weights"][name]
    check(rows_of(tmp_path / "m")[(name, "")], delta_fields(d, lora["weights"][name]), 1e-9)
    factored = float(rows_of(tmp_path / "f")[(name, "")]["delta_frob_norm"])
    assert abs(factored - np.linalg.norm(d)) > 1e-6 * factored  # f32 rounding of the merge is visible


def test_delta_only_equals_the_full_compare_delta_fields(family_f32, tmp_path):
    base, model = family_f32 / "pretrained", family_f32 / "math"
    run(["compare", "--base", base, model, "--out", tmp_path / "full", "--store", tmp_path / "a.sqlite",
         "--quiet"])
    p = run(["compare", "--base", base, model, "--delta-only", "--out", tmp_path / "d", "--store",
             tmp_path / "b.sqlite"])
    # Whole matrices are --delta-only's documented route: the summary does not call them a fallback.
    assert "computed" in p.stderr and "fallback" not in p.stderr
    full, delta = rows_of(tmp_path / "full"), rows_of(tmp_path / "d")
    assert full.keys() == delta.keys()
    for key, row in full.items():
        for f in DELTA:
            assert float(delta[key][f]) == pytest.approx(float(row[f]), rel=1e-8, abs=1e-12), (key, f)
        assert delta[key]["avg_r_agreement"] == "nan"
    hf = {(r["layer"], r["head"]): r for r in csv.DictReader(open(tmp_path / "full" / "heads.csv"))}
    hd = {(r["layer"], r["head"]): r for r in csv.DictReader(open(tmp_path / "d" / "heads.csv"))}
    for key, row in hf.items():
        assert float(hd[key]["update_norm"]) == pytest.approx(float(row["update_norm"]), rel=1e-8)
        assert hd[key]["rank"] == row["rank"]


@pytest.mark.parametrize("extra,needles", [
    (["--order", "agreement"], ["--order agreement", "--delta-only"]),
    (["--order", "pl_ks"], ["--order pl_ks", "--delta-only"]),
    (["--svd-route", "gram"], ["--svd-route", "--delta-only"]),
])
def test_options_that_need_the_full_compare_are_refused(lora, tmp_path, extra, needles):
    p = run(["compare", "--base", lora["base"], lora["spec"], "--delta-only", *extra, "--out", tmp_path / "c",
             "--store", tmp_path / "s.sqlite"], check=False)
    assert_input_error(p, *needles)
    assert not (tmp_path / "c").exists()


def test_the_store_records_the_adapter_models_own_tensors(lora, tmp_path):
    """The store's record of BASE+ADAPTER lists its tensors under their merged ids, not the base's ids
    of the same names, and not the adapter's factors (hashed only to identify the merged tensors)."""
    import sqlite3

    store = tmp_path / "s.sqlite"
    run(["analyze", f"ft={lora['spec']}", "--metrics", "l2_norm", "--out", tmp_path / "a", "--store", store,
         "--quiet"])
    run(["analyze", f"pre={lora['base']}", "--metrics", "l2_norm", "--out", tmp_path / "b", "--store", store,
         "--quiet"])
    db = sqlite3.connect(store)
    ft = dict(db.execute("SELECT tensor, content FROM model_tensors WHERE name = 'ft'"))
    pre = dict(db.execute("SELECT tensor, content FROM model_tensors WHERE name = 'pre'"))
    assert ft.keys() == pre.keys()  # no lora_A/lora_B entries
    for name in lora["deltas"]:
        assert "lora-merge-v1:" in ft[name] and ft[name] != pre[name], name
    untouched = "encoder.layer.0.attention.self.key.weight"
    assert ft[untouched] == pre[untouched]


def test_a_changed_adapter_is_recomputed(lora, tmp_path):
    """A merged tensor is identified by its base tensor and factors (store.md): changing one factor
    recomputes exactly that module's units, with the new values."""
    store = tmp_path / "s.sqlite"
    adapter = Path(lora["spec"].split("+")[1])
    run(["compare", "--base", lora["base"], lora["spec"], "--delta-only", "--out", tmp_path / "c1",
         "--store", store, "--quiet"])
    tensors = st.load_file(str(adapter / "adapter_model.safetensors"))
    key = "base_model.model.encoder.layer.0.attention.self.query.lora_A.weight"
    tensors[key] = (tensors[key] * 2).astype(np.float32)
    changed = tmp_path / "changed"
    shutil.copytree(adapter, changed)
    st.save_file(tensors, str(changed / "adapter_model.safetensors"))
    p = run(["compare", "--base", lora["base"], f"{lora['base']}+{changed}", "--delta-only", "--out",
             tmp_path / "c2", "--store", store])
    assert f"({1 + H} computed" in p.stderr  # the query matrix and its head blocks
    name = "encoder.layer.0.attention.self.query.weight"
    want = 2 * lora["deltas"][name]
    check(rows_of(tmp_path / "c2")[(name, "")], delta_fields(want, lora["weights"][name]), 1e-9)
