"""Expert redundancy (compare's expert_overlap.csv, issue 48 item 3): per layer, every pair of routed
experts' top-k singular subspaces in the hidden space, read (gate and up) and write (down), in the base
and in the model. On materialized transformers layouts with planted structure: two experts made
near-duplicates in the model (not in the base) have the layer's highest overlap, above chance, and a
positive change; every overlap, largest cosine and smallest angle equals numpy's SVD and scipy's
subspace_angles (1e-9) on the true per-expert matrices (packed, interleaved and x @ W layouts, GGUF
F32 and Q8_0 on their decoded values); the
chance floor's mean is k/n and its 99th percentile numpy's Monte-Carlo one; k is bounded by the
matrices' shapes; --overlap-k 0 and a dense model write no file; Python's Comparison.expert_overlap is
the CSV."""
import csv
import shutil
import sys

import gguf
import numpy as np
import pytest
import scipy.linalg
from safetensors.numpy import load_file, save_file

from conftest import ROOT, assert_input_error, run
from test_moe_multimodal import true_matrices, write_moe_gguf

sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "transformers"))
from materialize import materialize  # noqa: E402

COLUMNS = ["model", "base", "layer", "expert_a", "expert_b", "side", "k", "hidden", "overlap_base", "overlap",
           "overlap_change", "max_cos_base", "max_cos", "min_angle_degrees_base", "min_angle_degrees",
           "min_angle_change_degrees", "chance_mean", "chance_p99", "chance_draws", "above_chance_base",
           "above_chance"]


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def planted_copy(d, out, layer=0, a=0, b=1, noise=0.002, dup_noise=1e-3, seed=3):
    """A copy of the materialized model `d` with small noise everywhere, and expert `b` of `layer` made
    expert `a` plus `dup_noise` (in a packed tensor: its slice; per-expert tensors: each matrix)."""
    shutil.copytree(d, out)
    rng = np.random.default_rng(seed)
    w = load_file(str(d / "model.safetensors"))
    w = {k: v + noise * rng.standard_normal(v.shape).astype(v.dtype) for k, v in w.items()}
    for k, v in w.items():
        if f"layers.{layer}." not in k:
            continue
        if k.endswith(("experts.gate_up_proj", "experts.down_proj")):
            v[b] = v[a] + dup_noise * rng.standard_normal(v[a].shape).astype(v.dtype)
        elif f".experts.{b}." in k:
            src = w[k.replace(f".experts.{b}.", f".experts.{a}.")]
            w[k] = src + dup_noise * rng.standard_normal(src.shape).astype(v.dtype)
    save_file(w, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def subspaces(d, k):
    """{(layer, expert, side): orthonormal basis, hidden × k} from numpy's SVD of the true matrices:
    read = the top-k right singular vectors of [gate; up], write = the top-k left ones of down."""
    out = {}
    parts = {}
    for name, w in true_matrices(d).items():
        toks = name.split(".")
        if "experts" not in toks or not toks[toks.index("experts") + 1].isdigit():
            continue
        layer, expert = int(toks[toks.index("layers") + 1]), int(toks[toks.index("experts") + 1])
        proj = toks[toks.index("experts") + 2]
        parts.setdefault((layer, expert), {})[proj] = w.astype(np.float64)
    for (layer, expert), p in parts.items():
        read = np.vstack([p[n] for n in ("gate_proj", "w1", "up_proj", "w3") if n in p])
        down = p.get("down_proj", p.get("w2"))
        kr = min(k, *read.shape)
        out[(layer, expert, "read")] = np.linalg.svd(read)[2][:kr].T
        kw = min(k, *down.shape)
        out[(layer, expert, "write")] = np.linalg.svd(down)[0][:, :kw]
    return out


def numpy_overlap(a, b):
    c = a.T @ b
    return (c ** 2).sum() / a.shape[1], np.linalg.svd(c, compute_uv=False)[0]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    root = tmp_path_factory.mktemp("overlap")
    base = materialize("qwen3_moe_packed", root / "base")
    model = planted_copy(base, root / "model")
    run(["compare", "--base", base, model, "--out", root / "c", "--store", root / "s.sqlite", "--quiet"])
    return base, model, root


def test_the_planted_near_duplicates_overlap_most_above_chance(planted):
    base, model, root = planted
    rows = read_csv(root / "c" / "expert_overlap.csv")
    assert list(rows[0]) == COLUMNS
    assert len(rows) == 2 * 6 * 2  # layers × pairs of 4 experts × sides
    assert [(r["layer"], r["side"], r["expert_a"], r["expert_b"]) for r in rows[:3]] == [
        ("0", "read", "0", "1"), ("0", "read", "0", "2"), ("0", "read", "0", "3")]
    for side in ("read", "write"):
        layer0 = [r for r in rows if r["layer"] == "0" and r["side"] == side]
        top = max(layer0, key=lambda r: float(r["overlap"]))
        assert (top["expert_a"], top["expert_b"]) == ("0", "1"), side
        assert float(top["overlap"]) > 0.99 and top["above_chance"] == "1" and top["above_chance_base"] == "0"
        assert float(top["overlap_change"]) > 0.5 and float(top["min_angle_change_degrees"]) < 0
        # The rest are random subspaces of R^64 (k = 8): near k/n, in the base and in the model alike.
        rest = [r for r in rows if r["side"] == side and (r["layer"], r["expert_a"], r["expert_b"]) != ("0", "0", "1")]
        assert all(float(r["overlap"]) < 0.4 for r in rest)
        assert abs(np.mean([float(r["overlap_base"]) for r in rest]) - 8 / 64) < 0.03


def test_every_overlap_and_angle_equals_numpy_and_scipy(planted):
    base, model, root = planted
    rows = read_csv(root / "c" / "expert_overlap.csv")
    spaces = {"base": subspaces(base, 8), "model": subspaces(model, 8)}
    for r in rows:
        key_a = (int(r["layer"]), int(r["expert_a"]), r["side"])
        key_b = (int(r["layer"]), int(r["expert_b"]), r["side"])
        assert int(r["hidden"]) == 64 and int(r["k"]) == 8
        for which, suffix in (("base", "_base"), ("model", "")):
            a, b = spaces[which][key_a], spaces[which][key_b]
            overlap, max_cos = numpy_overlap(a, b)
            assert float(r["overlap" + suffix]) == pytest.approx(overlap, abs=1e-9), (r, which)
            assert float(r["max_cos" + suffix]) == pytest.approx(max_cos, abs=1e-9), (r, which)
            angles = scipy.linalg.subspace_angles(a, b)  # descending, radians
            assert float(r["min_angle_degrees" + suffix]) == pytest.approx(np.degrees(angles[-1]), abs=1e-7), (r, which)
            assert overlap == pytest.approx(np.mean(np.cos(angles) ** 2), abs=1e-12)
        assert float(r["overlap_change"]) == pytest.approx(float(r["overlap"]) - float(r["overlap_base"]), abs=1e-15)


def test_the_chance_floor_is_k_over_n_and_numpys_monte_carlo_percentile(planted):
    _, _, root = planted
    rows = read_csv(root / "c" / "expert_overlap.csv")
    assert {r["chance_mean"] for r in rows} == {repr(8 / 64)}
    assert {r["chance_draws"] for r in rows} == {"2000"}
    p99 = {float(r["chance_p99"]) for r in rows}
    assert len(p99) == 1  # one floor per (hidden, k), seeded
    rng = np.random.default_rng(0)
    n, k, draws = 64, 8, 20000
    q, _ = np.linalg.qr(rng.standard_normal((draws, n, k)))
    overlaps = (q[:, :k, :] ** 2).sum(axis=(1, 2)) / k  # against span(e_1..e_k)
    assert overlaps.mean() == pytest.approx(k / n, abs=4 * overlaps.std() / np.sqrt(draws))
    # The 99th percentile of 2000 draws: within a few percent of numpy's from 20000.
    assert p99.pop() == pytest.approx(np.quantile(overlaps, 0.99), rel=0.06)


@pytest.mark.parametrize("name,layer", [("mixtral", 0), ("gpt_oss", 0), ("llama4", 1), ("olmoe", 0)])
def test_other_layouts_equal_numpy(tmp_path, name, layer):
    base = materialize(name, tmp_path / "base")
    model = planted_copy(base, tmp_path / "model", layer=layer)  # Llama 4's experts are in layer 1 only
    run(["compare", "--base", base, model, "--out", tmp_path / "c", "--store", tmp_path / "s.sqlite", "--quiet",
         "--overlap-k", "4"])
    rows = read_csv(tmp_path / "c" / "expert_overlap.csv")
    assert rows
    spaces = {"base": subspaces(base, 4), "model": subspaces(model, 4)}
    for r in rows:
        for which, suffix in (("base", "_base"), ("model", "")):
            a = spaces[which][(int(r["layer"]), int(r["expert_a"]), r["side"])]
            b = spaces[which][(int(r["layer"]), int(r["expert_b"]), r["side"])]
            overlap, max_cos = numpy_overlap(a, b)
            assert float(r["overlap" + suffix]) == pytest.approx(overlap, abs=1e-9), (name, r)
            assert float(r["max_cos" + suffix]) == pytest.approx(max_cos, abs=1e-9), (name, r)
    planted_pair = [r for r in rows if (r["layer"], r["expert_a"], r["expert_b"]) == (str(layer), "0", "1")]
    assert planted_pair and all(r["above_chance"] == "1" for r in planted_pair)


@pytest.mark.parametrize("qtype", [gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.Q8_0])
def test_gguf_experts_decode_as_numpy_sees_them(tmp_path, qtype):
    """Packed GGUF experts (blk.N.ffn_*_exps [E, out, in]), plain and block-quantised: the overlaps are
    numpy's on the decoded values, the planted pair above chance."""
    rng = np.random.default_rng(11)
    E, H, I = 4, 64, 32
    shapes = {"blk.0.ffn_gate_exps.weight": (E, I, H), "blk.0.ffn_up_exps.weight": (E, I, H),
              "blk.0.ffn_down_exps.weight": (E, H, I)}

    def write(path, data):
        return {k: v.astype(np.float64) for k, v in write_moe_gguf(path, data, qtype).items()}

    a = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    b = {k: v + 0.01 * rng.standard_normal(v.shape).astype(np.float32) for k, v in a.items()}
    for v in b.values():
        v[1] = v[0] + 0.001 * rng.standard_normal(v[0].shape).astype(np.float32)
    dense = {"base": write(tmp_path / "a.gguf", a), "model": write(tmp_path / "b.gguf", b)}
    run(["compare", "--base", tmp_path / "a.gguf", tmp_path / "b.gguf", "--out", tmp_path / "c", "--store",
         tmp_path / "s.sqlite", "--quiet", "--overlap-k", "4"])
    rows = read_csv(tmp_path / "c" / "expert_overlap.csv")
    assert len(rows) == 6 * 2
    for r in rows:
        for which, suffix in (("base", "_base"), ("model", "")):
            d = dense[which]
            space = {}
            for e in (int(r["expert_a"]), int(r["expert_b"])):
                if r["side"] == "read":
                    m = np.vstack([d["blk.0.ffn_gate_exps.weight"][e], d["blk.0.ffn_up_exps.weight"][e]])
                    space[e] = np.linalg.svd(m)[2][:4].T
                else:
                    space[e] = np.linalg.svd(d["blk.0.ffn_down_exps.weight"][e])[0][:, :4]
            overlap, max_cos = numpy_overlap(space[int(r["expert_a"])], space[int(r["expert_b"])])
            assert float(r["overlap" + suffix]) == pytest.approx(overlap, abs=1e-9), (r, which)
            assert float(r["max_cos" + suffix]) == pytest.approx(max_cos, abs=1e-9), (r, which)
        assert (r["above_chance"] == "1") == ((r["expert_a"], r["expert_b"]) == ("0", "1")), r


def test_k_is_bounded_by_the_shapes_and_zero_writes_nothing(planted, tmp_path):
    base, model, root = planted
    run(["compare", "--base", base, model, "--out", tmp_path / "big", "--store", root / "s.sqlite", "--quiet",
         "--overlap-k", "1000"])
    rows = read_csv(tmp_path / "big" / "expert_overlap.csv")
    assert {(r["side"], r["k"]) for r in rows} == {("read", "48"), ("write", "24")}  # [gate; up] 48 × 64, down 64 × 24
    assert {r["chance_mean"] for r in rows if r["side"] == "write"} == {repr(24 / 64)}
    run(["compare", "--base", base, model, "--out", tmp_path / "off", "--store", root / "s.sqlite", "--quiet",
         "--overlap-k", "0"])
    assert (tmp_path / "off" / "experts.csv").exists() and not (tmp_path / "off" / "expert_overlap.csv").exists()
    p = run(["compare", "--base", base, model, "--out", tmp_path / "bad", "--overlap-k", "-1"], check=False)
    assert_input_error(p, "--overlap-k", "-1")


def test_a_dense_model_writes_no_expert_overlap(family_f32, tmp_path):
    run(["compare", "--base", family_f32 / "pretrained", family_f32 / "math", "--out", tmp_path / "c", "--store",
         tmp_path / "s.sqlite", "--quiet"])
    assert (tmp_path / "c" / "compare.csv").exists() and not (tmp_path / "c" / "expert_overlap.csv").exists()


def test_python_comparison_expert_overlap_is_the_csv(planted):
    import diffract_spectral as diffract
    base, model, root = planted
    res = diffract.compare(model, base=base, store=root / "s.sqlite")
    t = res.expert_overlap
    rows = read_csv(root / "c" / "expert_overlap.csv")
    assert list(t.columns) == COLUMNS and len(t) == len(rows)
    for col in ("overlap", "overlap_base", "max_cos", "chance_p99"):
        np.testing.assert_array_equal(t[col].to_numpy(), [float(r[col]) for r in rows])
    assert list(t["above_chance"]) == [int(r["above_chance"]) for r in rows]
    none = diffract.compare(model, base=base, store=root / "s.sqlite", overlap_k=0)
    assert len(none.expert_overlap) == 0
