"""`diffract edit` checked against an independent reader (the safetensors package, ml_dtypes for bf16)
and numpy.

Tolerances (stated per test):
- rewind, interpolation endpoints, untouched tensors: byte-exact.
- truncate (F32 family): diffract computes in f64 and stores f32; numpy's f64 best rank-k approximation
  cast to f32 agrees to 1e-5 · max|W| (a few f32 ulps; the singular values of the deltas are separated,
  so the rank-k subspace is well defined).
- transplant (bf16 family): by Weyl's inequality the stored matrix's singular values differ from the
  base's by at most ‖bf16 rounding error‖₂ ≤ ‖ΔW‖_F ≤ 2⁻⁸ ‖W‖_F; we assert that bound.
- interpolation at 0 < ω < 1 (F32): numpy's f64 result cast to f32, to 1 ulp (rtol 1.2e-7, atol 1e-30).
"""

import csv
import hashlib
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import run

ml_dtypes = pytest.importorskip("ml_dtypes")  # numpy understands bfloat16 once imported
st = pytest.importorskip("safetensors.numpy")


def load_dir(d):
    """All tensors of a model directory (single file or sharded with an index)."""
    d = Path(d)
    index = d / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else ["model.safetensors"]
    out = {}
    for f in files:
        out.update(st.load_file(str(d / f)))
    return out


def raw(a):
    """The bytes of an array, for exact comparison whatever the dtype."""
    return np.ascontiguousarray(a).view(np.uint8)


def hashes(*dirs):
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for d in dirs for p in sorted(Path(d).rglob("*")) if p.is_file()}


def f64(a):
    return a.astype(np.float64)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def config(d):
    c = json.loads((Path(d) / "config.json").read_text())
    heads = c["num_attention_heads"]
    return heads, c.get("num_key_value_heads", heads), c["hidden_size"] // heads, c["num_hidden_layers"]


def expected_rewind(cpt, base, rows, d, group):
    """CPT with the listed heads' Q, O blocks and (kv_rewound) K, V blocks taken from the base."""
    out = {k: v.copy() for k, v in cpt.items()}
    for r in rows:
        layer, h, kv = int(r["layer"]), int(r["head"]), int(r["kv_head"])
        p = f"model.layers.{layer}.self_attn."
        out[p + "q_proj.weight"][h * d:(h + 1) * d] = base[p + "q_proj.weight"][h * d:(h + 1) * d]
        out[p + "o_proj.weight"][:, h * d:(h + 1) * d] = base[p + "o_proj.weight"][:, h * d:(h + 1) * d]
        assert kv == h // group
        if r["kv_rewound"] == "1":
            for n in ("k_proj.weight", "v_proj.weight"):
                out[p + n][kv * d:(kv + 1) * d] = base[p + n][kv * d:(kv + 1) * d]
    return out


def assert_same_bytes(got, want):
    assert set(got) == set(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        assert np.array_equal(raw(got[k]), raw(want[k])), k


@pytest.mark.parametrize("fam", ["family_f32", "family_bf16_sharded"])
def test_rewind_blocks_are_the_base_bytes_and_the_rest_the_cpt(fam, request, tmp_path):
    fam = request.getfixturevalue(fam)
    before = hashes(fam)
    out = tmp_path / "rw"
    p = run(["edit", "rewind", "--base", fam / "pretrained", "--model", fam / "math", "--reference", fam / "text",
             "--fraction", "0.4", "--out", out, "--store", tmp_path / "s.sqlite"])
    assert str(out / "rewound_heads.csv") in p.stdout
    heads, kv_heads, d, layers = config(fam / "math")
    group = heads // kv_heads
    rows = read_csv(out / "rewound_heads.csv")
    assert len(rows) == math.floor(0.4 * heads * layers + 0.5)
    # The heads chosen are compare's lowest-ranked ones.
    run(["compare", "--base", fam / "pretrained", fam / "math", "--reference", fam / "text", "--out", tmp_path / "cmp",
         "--store", tmp_path / "s.sqlite", "--quiet"])
    ranked = [r for r in read_csv(tmp_path / "cmp" / "heads.csv") if r["model"] == "math"]
    lowest = {(int(r["layer"]), int(r["head"])) for r in ranked if int(r["rank"]) < len(rows)}
    assert {(int(r["layer"]), int(r["head"])) for r in rows} == lowest
    # GQA policy "all": a K/V block is rewound only when every query head of its group is.
    chosen = {(int(r["layer"]), int(r["head"])) for r in rows}
    for r in rows:
        layer, kv = int(r["layer"]), int(r["kv_head"])
        assert r["kv_rewound"] == ("1" if all((layer, q) in chosen for q in range(kv * group, (kv + 1) * group)) else "0")
    cpt, base = load_dir(fam / "math"), load_dir(fam / "pretrained")
    assert_same_bytes(load_dir(out), expected_rewind(cpt, base, rows, d, group))
    assert (out / "config.json").read_bytes() == (fam / "math" / "config.json").read_bytes()
    assert hashes(fam) == before


def test_rewind_heads_file_and_any_policy(family_bf16_sharded, tmp_path):
    fam = family_bf16_sharded
    (tmp_path / "heads.csv").write_text("layer,head\n1,2\n3,5\n")
    out = tmp_path / "rw"
    run(["edit", "rewind", "--base", fam / "pretrained", "--model", fam / "math", "--heads", tmp_path / "heads.csv",
         "--kv-policy", "any", "--out", out, "--quiet"])
    rows = read_csv(out / "rewound_heads.csv")
    assert [(r["layer"], r["head"], r["kv_rewound"]) for r in rows] == [("1", "2", "1"), ("3", "5", "1")]
    heads, kv_heads, d, _ = config(fam / "math")
    want = expected_rewind(load_dir(fam / "math"), load_dir(fam / "pretrained"), rows, d, heads // kv_heads)
    assert_same_bytes(load_dir(out), want)


def best_rank_k(delta, k):
    u, s, vt = np.linalg.svd(delta, full_matrices=False)
    return (u[:, :k] * s[:k]) @ vt[:k]


def test_truncate_matches_numpy_best_rank_k(family_f32, tmp_path):
    fam = family_f32
    before = hashes(fam)
    base, cpt = load_dir(fam / "pretrained"), load_dir(fam / "math")
    out = tmp_path / "keep"
    run(["edit", "truncate", "--base", fam / "pretrained", "--model", fam / "math", "--keep", "0.25", "--out", out, "--quiet"])
    got = load_dir(out)
    for name, w in cpt.items():
        if w.ndim < 2:
            assert np.array_equal(raw(got[name]), raw(w)), name
            continue
        k = math.ceil(0.25 * min(w.shape))
        want = (f64(base[name]) + best_rank_k(f64(w) - f64(base[name]), k)).astype(np.float32)
        np.testing.assert_allclose(got[name], want, rtol=0, atol=1e-5 * np.abs(w).max(), err_msg=name)
    # --energy: the smallest k whose squared singular values reach the fraction; --per-head on attention.
    out = tmp_path / "energy"
    run(["edit", "truncate", "--base", fam / "pretrained", "--model", fam / "math", "--energy", "0.9", "--per-head",
         "--roles", "attn_q,mlp_down", "--out", out, "--quiet"])
    got = load_dir(out)
    heads, _, d, _ = config(fam / "math")

    def energy_trunc(b, m):
        delta = f64(m) - f64(b)
        s = np.linalg.svd(delta, compute_uv=False)
        k = int(np.searchsorted(np.cumsum(s**2) / np.sum(s**2), 0.9 * (1 - 1e-12)) + 1)
        return f64(b) + best_rank_k(delta, k)

    for name, w in cpt.items():
        if name.endswith("q_proj.weight"):
            want = np.vstack([energy_trunc(base[name][h * d:(h + 1) * d], w[h * d:(h + 1) * d]) for h in range(heads)])
        elif name.endswith("down_proj.weight"):
            want = energy_trunc(base[name], w)
        else:
            assert np.array_equal(raw(got[name]), raw(w)), name
            continue
        np.testing.assert_allclose(got[name], want.astype(np.float32), rtol=0, atol=1e-5 * np.abs(w).max(), err_msg=name)
    assert hashes(fam) == before


def test_transplant_has_the_base_singular_values_within_bf16_rounding(family_bf16_sharded, tmp_path):
    fam = family_bf16_sharded
    before = hashes(fam)
    out = tmp_path / "tp"
    run(["edit", "transplant", "--base", fam / "pretrained", "--model", fam / "math", "--out", out, "--quiet"])
    base, cpt, got = load_dir(fam / "pretrained"), load_dir(fam / "math"), load_dir(out)
    checked = 0
    for name, w in cpt.items():
        assert got[name].dtype == w.dtype
        if w.ndim < 2:
            assert np.array_equal(raw(got[name]), raw(w)), name
            continue
        g = got[name].astype(np.float64)
        s_got = np.linalg.svd(g, compute_uv=False)
        s_base = np.linalg.svd(base[name].astype(np.float64), compute_uv=False)
        assert np.max(np.abs(s_got - s_base)) <= 2.0**-8 * np.linalg.norm(g), name
        checked += 1
    assert checked > 10
    assert hashes(fam) == before


def test_permute_keeps_the_spectrum_and_is_seeded(family_f32, tmp_path):
    fam = family_f32
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        run(["edit", "permute", "--model", fam / "math", "--seed", seed, "--roles", "attn_v", "--out", tmp_path / name,
             "--quiet"])
    cpt, a, b, c = (load_dir(p) for p in (fam / "math", tmp_path / "a", tmp_path / "b", tmp_path / "c"))
    name = "model.layers.1.self_attn.v_proj.weight"
    assert np.array_equal(raw(a[name]), raw(b[name]))
    assert not np.array_equal(raw(a[name]), raw(c[name]))
    assert not np.allclose(a[name], cpt[name], atol=1e-3)
    s_in = np.linalg.svd(f64(cpt[name]), compute_uv=False)
    np.testing.assert_allclose(np.linalg.svd(f64(a[name]), compute_uv=False), s_in, rtol=0, atol=1e-5 * s_in.max())
    assert np.array_equal(raw(a["model.layers.1.self_attn.q_proj.weight"]), raw(cpt["model.layers.1.self_attn.q_proj.weight"]))


def test_interpolate_matches_numpy_and_endpoints_are_byte_exact(family_f32, tmp_path):
    fam = family_f32
    before = hashes(fam)
    A, B = load_dir(fam / "math"), load_dir(fam / "code")
    run(["edit", "interpolate", fam / "math", fam / "code", "--omega", "0.3", "--out", tmp_path / "w", "--quiet"])
    got = load_dir(tmp_path / "w")
    for k in A:
        want = ((1 - 0.3) * f64(A[k]) + 0.3 * f64(B[k])).astype(np.float32)
        np.testing.assert_allclose(got[k], want, rtol=1.2e-7, atol=1e-30, err_msg=k)
    run(["edit", "interpolate", fam / "math", fam / "code", "--grid", "0:1:0.5", "--out", tmp_path / "g", "--quiet"])
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == ["omega_0.00", "omega_0.50", "omega_1.00"]
    assert_same_bytes(load_dir(tmp_path / "g" / "omega_0.00"), A)
    assert_same_bytes(load_dir(tmp_path / "g" / "omega_1.00"), B)
    assert hashes(fam) == before


def test_merge_ties_and_dare(family_f32, tmp_path):
    fam = family_f32
    base, m = load_dir(fam / "pretrained"), load_dir(fam / "math")
    name = "model.layers.0.mlp.up_proj.weight"
    delta = f64(m[name]) - f64(base[name])
    # TIES with one model: keep the top 30% |delta| (sign election and the normalised mean are identities).
    run(["edit", "merge", "--base", fam / "pretrained", "--models", fam / "math", "--method", "ties", "--density", "0.3",
         "--out", tmp_path / "ties", "--quiet"])
    got = f64(load_dir(tmp_path / "ties")[name])
    k = int(0.3 * delta.size)
    keep = np.zeros(delta.size, bool)
    keep[np.argsort(-np.abs(delta).ravel(), kind="stable")[:k]] = True
    want = (f64(base[name]) + np.where(keep.reshape(delta.shape), delta, 0)).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())
    # DARE: each delta kept with probability density, rescaled by 1/density; seeded.
    for out, seed in (("d1", 7), ("d2", 7), ("d3", 8)):
        run(["edit", "merge", "--base", fam / "pretrained", "--models", fam / "math", "--method", "dare_linear",
             "--density", "0.5", "--weights", "0.5", "--seed", seed, "--out", tmp_path / out, "--quiet"])
    d1, d2, d3 = (f64(load_dir(tmp_path / o)[name]) for o in ("d1", "d2", "d3"))
    assert np.array_equal(d1, d2) and not np.array_equal(d1, d3)
    kept = ~np.isclose(d1, f64(base[name]), rtol=0, atol=1e-7 * np.abs(base[name]).max()) | (delta == 0)
    assert 0.45 < kept.mean() < 0.55
    np.testing.assert_allclose(d1[kept], (f64(base[name]) + 0.5 * delta / 0.5)[kept].astype(np.float32), rtol=1e-6)


def test_refuses_inputs_and_fails_without_leftovers(family_f32, tmp_path):
    fam = family_f32
    before = hashes(fam)
    for out in (fam / "math", fam / "math" / "sub", fam):
        p = run(["edit", "permute", "--model", fam / "math", "--out", out], check=False)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    # Half-way failure: the base's attention tensors are bf16, the model's f32 — rewind copies bytes and
    # stops at the first attention tensor, after the embeddings were written.
    other = tmp_path / "fam_bf16"
    run(["generate", "--out", other, "--dtype", "BF16", "--layers", "2", "--hidden", "128", "--heads", "4",
         "--intermediate", "256", "--vocab", "512", "--domain-heads", "1", "--generic-heads", "1"])
    (tmp_path / "heads.csv").write_text("0,1\n")
    p = run(["edit", "rewind", "--base", other / "pretrained", "--model", fam / "math", "--heads", tmp_path / "heads.csv",
             "--out", tmp_path / "out" / "rw"], check=False)
    assert p.returncode == 2 and "dtype differs" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert list((tmp_path / "out").iterdir()) == []
    assert hashes(fam) == before


@pytest.mark.parametrize("edit", ["truncate", "transplant", "permute", "interpolate", "merge", "merge-lora"])
@pytest.mark.parametrize("option", [["--store", "s.sqlite"], ["--threads", "2"], ["--max-memory", "1G"]])
def test_edits_refuse_options_they_would_ignore(tmp_path, edit, option):
    """Only rewind runs an analysis (its head ranking): the other edits refuse the run options."""
    required = {"truncate": ["--base", "b", "--model", "m", "--rank", "1"], "transplant": ["--base", "b", "--model", "m"],
                "permute": ["--model", "m"], "interpolate": ["a", "b", "--omega", "0.5"],
                "merge": ["--base", "b", "--models", "m"], "merge-lora": ["--adapter", "a"]}[edit]
    p = run(["edit", edit, *required, *option, "--out", tmp_path / "o"], check=False)
    assert p.returncode == 2, p.stderr
    # (interpolate's two positionals take the option's value: CLI11 then says it got 3 models)
    assert option[0] in p.stderr or (edit == "interpolate" and "received 3" in p.stderr), p.stderr
    assert not (tmp_path / "o").exists()


def test_energy_zero_keeps_no_component_and_seeds_are_validated(family_f32, tmp_path):
    fam = family_f32
    # --energy 0: the smallest k whose top-k energy reaches 0 is k = 0, i.e. every matrix is the base's.
    out = tmp_path / "e0"
    run(["edit", "truncate", "--base", fam / "pretrained", "--model", fam / "math", "--energy", "0", "--out", out,
         "--quiet"])
    base, got, cpt = load_dir(fam / "pretrained"), load_dir(out), load_dir(fam / "math")
    for name, w in cpt.items():
        want = base[name] if w.ndim == 2 else w
        np.testing.assert_allclose(got[name], want, rtol=0, atol=1e-6 * max(1.0, float(np.abs(w).max())), err_msg=name)
    # An unsigned --seed is an integer in 0..2^64-1: -1 and 2^64 no longer wrap or saturate to 2^64-1.
    for seed in ("-1", "18446744073709551616", "1.5", ""):
        p = run(["edit", "permute", "--model", fam / "math", "--seed", seed, "--out", tmp_path / "p"], check=False)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "--seed" in p.stderr, p.stderr
    assert not (tmp_path / "p").exists()
    run(["edit", "permute", "--model", fam / "math", "--seed", "18446744073709551615", "--out", tmp_path / "p",
         "--quiet"])


def test_rewind_mismatch_does_not_suggest_a_flag_rewind_lacks(family_f32, tmp_path):
    fam = family_f32
    other = tmp_path / "other"
    run(["generate", "--out", other, "--dtype", "F32", "--layers", "2", "--hidden", "64", "--heads", "4",
         "--intermediate", "128", "--vocab", "128", "--models", "math", "--domains", "math"])
    p = run(["edit", "rewind", "--base", fam / "pretrained", "--model", other / "math", "--fraction", "0.5",
             "--out", tmp_path / "r", "--store", tmp_path / "s.sqlite"], check=False)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "--allow-partial" not in p.stderr, p.stderr


def test_bad_edit_values_are_named_not_taken_for_absent(family_f32, tmp_path):
    fam = family_f32
    P, M = fam / "pretrained", fam / "math"
    for args, needle in ((["interpolate", P, M, "--omega", "nan"], "nan"),
                         (["truncate", "--base", P, "--model", M, "--rank", "-1"], "-1"),
                         (["truncate", "--base", P, "--model", M, "--keep", "nan"], "nan"),
                         (["truncate", "--base", P, "--model", M, "--energy", "nan"], "nan"),
                         (["rewind", "--base", P, "--model", M, "--fraction", "nan", "--store", tmp_path / "s.sqlite"],
                          "nan"),
                         (["merge", "--base", P, "--models", ""], "empty model path")):
        p = run(["edit", *args, "--out", tmp_path / "o"], check=False)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (args, p.stderr)
        assert needle in p.stderr and "give exactly one" not in p.stderr, (args, p.stderr)
    assert not (tmp_path / "o").exists()
