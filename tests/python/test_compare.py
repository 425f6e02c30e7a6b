"""`diffract compare` on the synthetic family, checked against numpy computed independently.

Tolerances: the CLI computes in f64 from F32 weights (LAPACK gesdd); numpy's np.linalg.svd in f64 on
the same F32 data. Norms agree to 1e-9 relative; agreement means to 1e-8 absolute (singular values
of the test blocks are separated by ~1e-2, so vector differences between two LAPACK builds are
~1e-13); the noise-free rotation keeps the spectrum to F32 rounding (rel_sval_change < 1e-5).
"""

import csv
import json
import shutil

import numpy as np
import pytest

from conftest import run

st = pytest.importorskip("safetensors.numpy")


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def rows_of(rows, model, tensor=None, head=None, role=None):
    out = [r for r in rows if r["model"] == model]
    if tensor is not None:
        out = [r for r in out if r["tensor"] == tensor]
    if role is not None:
        out = [r for r in out if r["role"] == role]
    if head is not None:
        out = [r for r in out if r["head"] == ("" if head == "" else str(head))]
    return out


def weights(model_dir):
    return st.load_file(str(model_dir / "model.safetensors"))


def agreement(a, b):
    """avg_l/r agreement fields of metrics.md, by numpy: O = |U1^T U2| with ascending components."""
    u1, s1, v1t = np.linalg.svd(a.astype(np.float64), full_matrices=False)
    u2, s2, v2t = np.linalg.svd(b.astype(np.float64), full_matrices=False)
    u1, u2, v1, v2 = u1[:, ::-1], u2[:, ::-1], v1t[::-1].T, v2t[::-1].T
    lo, ro = np.abs(u1.T @ u2), np.abs(v1.T @ v2)
    return {
        "avg_l_agreement": np.mean(np.diag(lo)),
        "avg_max_l_agreement": np.mean(lo.max(axis=1)),
        "avg_r_agreement": np.mean(np.diag(ro)),
        "avg_max_r_agreement": np.mean(ro.max(axis=1)),
        "topk_avg_l_agreement": np.mean(np.diag(lo[-10:, -10:])),
        "rel_sval_change": np.linalg.norm(s2[::-1] - s1[::-1]) / np.linalg.norm(s1),
    }


@pytest.fixture(scope="module")
def family(family_f32):
    return family_f32


@pytest.fixture(scope="module")
def planted(family):
    return json.loads((family / "planted.json").read_text())


@pytest.fixture(scope="module")
def compared(family, tmp_path_factory):
    out = tmp_path_factory.mktemp("cmp")
    store = out / "store.sqlite"
    run(["compare", "--base", family / "pretrained", family / "math", family / "code",
         "--reference", family / "text", "--out", out / "res", "--store", store, "--quiet"])
    return out, store, read_csv(out / "res" / "compare.csv"), read_csv(out / "res" / "heads.csv")


def test_columns_and_reference_rows(compared):
    _, _, rows, heads = compared
    for col in ["model", "base", "tensor", "layer", "role", "head", "delta_frob_norm", "rel_delta_frob_norm",
                "delta_l2_norm", "delta_stable_rank", "delta_effective_rank", "rel_sval_change", "esd_ks",
                "avg_l_agreement", "avg_max_l_agreement", "avg_r_agreement", "avg_max_r_agreement",
                "topk_avg_l_agreement", "topk_avg_max_l_agreement", "topk_avg_r_agreement",
                "topk_avg_max_r_agreement", "chance_l_agreement", "chance_max_l_agreement",
                "chance_r_agreement", "chance_max_r_agreement"]:
        assert col in rows[0], col
    assert {r["model"] for r in rows} == {"math", "code", "text"}  # the reference is compared too
    assert {r["base"] for r in rows} == {"pretrained"}
    for col in ["model", "layer", "head", "update_norm", "q_update_norm", "k_update_norm", "v_update_norm",
                "o_update_norm", "importance", "rank", "scale_scope", "order"]:
        assert col in heads[0], col
    assert {h["model"] for h in heads} == {"math", "code"}
    assert {h["scale_scope"] for h in heads} == {"global"} and {h["order"] for h in heads} == {"importance"}


def test_delta_and_agreement_match_numpy(compared, family):
    _, _, rows, _ = compared
    pre, math = weights(family / "pretrained"), weights(family / "math")
    d = 128 // 4
    cases = [("model.layers.0.self_attn.q_proj.weight", "", slice(None), slice(None)),
             ("model.layers.1.mlp.down_proj.weight", "", slice(None), slice(None)),
             ("model.layers.0.self_attn.q_proj.weight", 1, slice(d, 2 * d), slice(None)),
             ("model.layers.1.self_attn.o_proj.weight", 2, slice(None), slice(2 * d, 3 * d)),
             ("model.layers.1.self_attn.v_proj.weight", 3, slice(3 * d, 4 * d), slice(None))]
    for tensor, head, rs, cs in cases:
        (row,) = rows_of(rows, "math", tensor, head)
        a, b = pre[tensor][rs, cs].astype(np.float64), math[tensor][rs, cs].astype(np.float64)
        delta = b - a
        frob = np.linalg.norm(delta)
        assert float(row["delta_frob_norm"]) == pytest.approx(frob, rel=1e-9), (tensor, head)
        assert float(row["rel_delta_frob_norm"]) == pytest.approx(frob / np.linalg.norm(a), rel=1e-9)
        assert float(row["delta_l2_norm"]) == pytest.approx(np.linalg.norm(delta, 2), rel=1e-7)
        for field, value in agreement(a, b).items():
            assert float(row[field]) == pytest.approx(value, abs=1e-8), (tensor, head, field)
        assert float(row["chance_l_agreement"]) == pytest.approx(1 / np.sqrt(a.shape[0]))
        assert float(row["chance_r_agreement"]) == pytest.approx(1 / np.sqrt(a.shape[1]))
        k = min(a.shape)
        assert float(row["chance_max_l_agreement"]) == pytest.approx(np.sqrt(2 * np.log(k) / a.shape[0]))


def test_planted_heads_rank_lowest_and_highest(compared, family, planted, tmp_path):
    _, store, _, heads = compared
    generic = {tuple(x) for x in planted["generic_heads"]}
    domain = {tuple(x) for x in planted["domain_heads"]["math"]}
    for scope in ["global", "layer", "projection"]:
        if scope == "global":
            hs = heads
        else:
            run(["compare", "--base", family / "pretrained", family / "math", "--reference", family / "text",
                 "--out", tmp_path / scope, "--store", store, "--scale-scope", scope, "--quiet"])
            hs = read_csv(tmp_path / scope / "heads.csv")
        rank = {(int(h["layer"]), int(h["head"])): int(h["rank"]) for h in hs if h["model"] == "math"}
        assert sorted(rank.values()) == list(range(len(rank)))
        assert max(rank[x] for x in generic) < min(rank[x] for x in domain), scope
        assert {h["scale_scope"] for h in hs} == {scope}


def test_head_update_norm_combines_blocks(compared):
    _, _, rows, heads = compared
    for h in heads[:6]:
        blocks = [float(h[f"{p}_update_norm"]) for p in "qkvo"]
        assert float(h["update_norm"]) == pytest.approx(np.sqrt(np.sum(np.square(blocks))), rel=1e-12)
        (q,) = rows_of(rows, h["model"], f"model.layers.{h['layer']}.self_attn.q_proj.weight", h["head"])
        assert float(h["q_update_norm"]) == float(q["delta_frob_norm"])


def test_rotated_blocks_low_agreement_only_where_planted(compared, planted):
    _, _, rows, _ = compared
    generic = {tuple(x) for x in planted["generic_heads"]}
    domain = {tuple(x) for x in planted["domain_heads"]["math"]}
    q_rows = [r for r in rows_of(rows, "math", role="attn_q") if r["head"] != ""]
    for r in q_rows:
        key = (int(r["layer"]), int(r["head"]))
        avg_l, chance = float(r["avg_l_agreement"]), float(r["chance_l_agreement"])
        if key in domain:
            assert avg_l < 1.5 * chance, key  # random rotation of U: chance level
            # The spectrum is kept up to the family's 2% noise on every matrix (no rotation effect).
            assert float(r["rel_sval_change"]) < 5e-3, key
        elif key not in generic:
            assert avg_l > 0.9, key


def test_noise_free_rotation_keeps_the_spectrum(family, planted, tmp_path):
    """A rotation without the family's noise: spectra equal to F32 rounding, agreement at chance."""
    pre = weights(family / "pretrained")
    rot_dir = tmp_path / "rotated"
    shutil.copytree(family / "pretrained", rot_dir)
    d = planted["head_dim"]
    rng = np.random.default_rng(0)
    rotated = set()
    for layer, head in planted["domain_heads"]["math"]:
        name = f"model.layers.{layer}.self_attn.q_proj.weight"
        q, _ = np.linalg.qr(rng.standard_normal((d, d)))
        w = pre[name].copy()
        w[head * d:(head + 1) * d] = (q @ w[head * d:(head + 1) * d].astype(np.float64)).astype(np.float32)
        pre[name] = w
        rotated.add((layer, head))
    st.save_file(pre, str(rot_dir / "model.safetensors"))
    run(["compare", "--base", family / "pretrained", f"rot={rot_dir}", "--out", tmp_path / "out",
         "--store", tmp_path / "s.sqlite", "--roles", "attn_q", "--quiet"])
    rows = read_csv(tmp_path / "out" / "compare.csv")
    for r in rows:
        if r["head"] == "":
            continue
        key = (int(r["layer"]), int(r["head"]))
        if key in rotated:
            assert float(r["rel_sval_change"]) < 1e-5, key
            assert float(r["esd_ks"]) <= 0.25, key
            assert float(r["avg_l_agreement"]) < 1.5 * float(r["chance_l_agreement"]), key
            assert float(r["avg_r_agreement"]) == pytest.approx(1.0, abs=1e-5)  # V untouched
        else:
            assert float(r["delta_frob_norm"]) == 0.0
            assert float(r["avg_l_agreement"]) == pytest.approx(1.0, abs=1e-12)


def test_self_compare_is_zero(family, tmp_path):
    run(["compare", "--base", family / "pretrained", family / "pretrained", "--out", tmp_path / "out",
         "--store", tmp_path / "s.sqlite", "--quiet"])
    rows = read_csv(tmp_path / "out" / "compare.csv")
    assert rows
    for r in rows:
        for f in ["delta_frob_norm", "rel_delta_frob_norm", "delta_l2_norm", "rel_sval_change", "esd_ks"]:
            assert float(r[f]) == 0.0, (r["tensor"], r["head"], f)
        for f in ["avg_l_agreement", "avg_max_l_agreement", "avg_r_agreement", "avg_max_r_agreement",
                  "topk_avg_l_agreement", "topk_avg_r_agreement"]:
            assert float(r[f]) == pytest.approx(1.0, abs=1e-12), (r["tensor"], r["head"], f)
    heads = read_csv(tmp_path / "out" / "heads.csv")
    assert all(float(h["update_norm"]) == 0.0 for h in heads)


def test_reuses_the_store_and_exports_vectors(compared, family, tmp_path):
    out, store, rows, _ = compared
    p = run(["compare", "--base", family / "pretrained", family / "math", "--out", tmp_path / "again",
             "--store", store])
    assert "0 computed" in p.stderr
    again = read_csv(tmp_path / "again" / "compare.csv")
    assert again == [r for r in rows if r["model"] == "math"]
    exported = run(["export", "--store", store, "--format", "jsonl"]).stdout.splitlines()
    fields = {json.loads(line)["field"] for line in exported}
    assert {"l_agreement", "r_agreement", "max_l_agreement", "max_r_agreement"} <= fields


def test_orders(family, planted, tmp_path):
    base = ["compare", "--base", family / "pretrained", family / "math", "--reference", family / "text",
            "--store", tmp_path / "s.sqlite", "--quiet"]
    run(base + ["--out", tmp_path / "r1", "--order", "random", "--seed", "7"])
    run(base + ["--out", tmp_path / "r2", "--order", "random", "--seed", "7"])
    run(base + ["--out", tmp_path / "r3", "--order", "random", "--seed", "8"])
    r1, r2, r3 = (read_csv(tmp_path / d / "heads.csv") for d in ("r1", "r2", "r3"))
    assert [h["rank"] for h in r1] == [h["rank"] for h in r2]
    assert [h["rank"] for h in r1] != [h["rank"] for h in r3]
    assert sorted(int(h["rank"]) for h in r1) == list(range(len(r1)))
    run(base + ["--out", tmp_path / "ag", "--order", "agreement"])
    ag = read_csv(tmp_path / "ag" / "heads.csv")
    assert {h["order"] for h in ag} == {"agreement"}
    rank = {(int(h["layer"]), int(h["head"])): int(h["rank"]) for h in ag}
    domain = {tuple(x) for x in planted["domain_heads"]["math"]}
    # Rotated heads agree least: they are ranked last (kept longest).
    assert min(rank[x] for x in domain) >= len(rank) - len(domain) - len(planted["generic_heads"])
    run(base + ["--out", tmp_path / "ks", "--order", "pl_ks"])
    assert {h["order"] for h in read_csv(tmp_path / "ks" / "heads.csv")} == {"pl_ks"}
    p = run(base + ["--out", tmp_path / "bad", "--order", "nope"], check=False)
    assert p.returncode == 2


def make_mismatched(family, tmp_path):
    """A copy of `math` whose layer-1 k_proj is missing and whose down_proj of layer 0 has another shape."""
    w = weights(family / "math")
    bad = tmp_path / "bad"
    shutil.copytree(family / "math", bad)
    del w["model.layers.1.self_attn.k_proj.weight"]
    w["model.layers.0.mlp.down_proj.weight"] = w["model.layers.0.mlp.down_proj.weight"][:, :128].copy()
    st.save_file(w, str(bad / "model.safetensors"))
    return bad


def test_mismatch_is_refused_with_one_line(family, tmp_path):
    bad = make_mismatched(family, tmp_path)
    p = run(["compare", "--base", family / "pretrained", bad, "--out", tmp_path / "out", "--store",
             tmp_path / "s.sqlite", "--quiet"], check=False)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "model.layers.0.mlp.down_proj.weight" in lines[0] and "shape" in lines[0]
    assert "model.safetensors" in lines[0]
    assert not (tmp_path / "out" / "compare.csv").exists()


def test_head_geometry_mismatch_is_refused(family, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(family / "math", other)
    cfg = json.loads((other / "config.json").read_text())
    cfg["num_attention_heads"] = cfg["num_key_value_heads"] = 2
    (other / "config.json").write_text(json.dumps(cfg))
    p = run(["compare", "--base", family / "pretrained", other, "--out", tmp_path / "out", "--store",
             tmp_path / "s.sqlite", "--quiet"], check=False)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "head geometry" in p.stderr
    p = run(["compare", "--base", family / "pretrained", other, "--out", tmp_path / "out", "--store",
             tmp_path / "s.sqlite", "--quiet", "--allow-partial"])
    rows = read_csv(tmp_path / "out" / "compare.csv")
    assert rows and all(r["head"] == "" for r in rows)  # whole matrices only
    skipped = read_csv(tmp_path / "out" / "skipped.csv")
    assert [s["block"] for s in skipped] == ["heads"]


def test_allow_partial_reports_what_was_skipped(family, tmp_path):
    bad = make_mismatched(family, tmp_path)
    p = run(["compare", "--base", family / "pretrained", bad, family / "code", "--out", tmp_path / "out",
             "--store", tmp_path / "s.sqlite", "--quiet", "--allow-partial"])
    warnings = [line for line in p.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 2
    skipped = read_csv(tmp_path / "out" / "skipped.csv")
    assert {s["tensor"] for s in skipped} == {"model.layers.1.self_attn.k_proj.weight",
                                              "model.layers.0.mlp.down_proj.weight"}
    assert {s["model"] for s in skipped} == {"bad"}
    rows = read_csv(tmp_path / "out" / "compare.csv")
    bad_tensors = {r["tensor"] for r in rows if r["model"] == "bad"}
    assert "model.layers.1.self_attn.k_proj.weight" not in bad_tensors
    assert "model.layers.1.self_attn.q_proj.weight" in bad_tensors
    code_tensors = {r["tensor"] for r in rows if r["model"] == "code"}
    assert "model.layers.1.self_attn.k_proj.weight" in code_tensors  # other models keep it
    heads = read_csv(tmp_path / "out" / "heads.csv")
    layer1 = [h for h in heads if h["model"] == "bad" and h["layer"] == "1"]
    assert layer1 and all(h["k_update_norm"] == "nan" for h in layer1)
