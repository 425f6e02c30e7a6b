"""Mixture-of-experts, multimodal and latent-attention checkpoints as transformers itself writes them
(tests/fixtures/transformers: the layouts of tiny models saved by transformers 5.25, materialized with seeded
values; tests/tools/make_transformers_layouts.py):
every expert and tower matrix present once with its expert, role and component; σ equal to numpy's on the
true per-expert matrix (1e-12 relative); Gemma 3's text heads split and its vision rows kept apart;
DeepSeek's MLA heads split from q_b_proj, kv_b_proj and o_proj; --experts and --component select; edits of
packed experts written back in the input's layout, bit-exact where untouched (and loading in transformers
where it is installed)."""
import csv
import json
import re
import shutil
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from conftest import ROOT, run

sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "transformers"))
from materialize import NAMES as ALL, materialize  # noqa: E402

FIXTURES = None  # the materialized models' directory (_materialized)


@pytest.fixture(scope="module", autouse=True)
def _materialized(tmp_path_factory):
    global FIXTURES
    FIXTURES = tmp_path_factory.mktemp("transformers")
    for name in ALL:
        materialize(name, FIXTURES)
    return FIXTURES
X_AT_W = {"gpt_oss", "llama4"}  # packed experts stored [E, in, out] (x @ W)


def model_type(d):
    return json.loads((d / "config.json").read_text())["model_type"]


def true_matrices(d):
    """{logical name: out × in matrix} as the model computes with them: packed experts per expert (gate and
    up interleaved for gpt-oss, chunked otherwise), N-D tensors as shape[0] × rest."""
    mt = model_type(d)
    out = {}
    for name, w in load_file(str(d / "model.safetensors")).items():
        if w.ndim < 2 or re.search(r"\.experts\.\w+_bias$", name):  # gpt-oss's [E, ·] biases are vectors
            continue
        m = re.match(r"(.*\.experts)\.(gate_up_proj|down_proj)$", name)
        if not m:
            out[name] = w.reshape(w.shape[0], -1)
            continue
        owner, proj = m.groups()
        for e in range(w.shape[0]):
            W = w[e].T if mt in X_AT_W else w[e]
            if proj == "down_proj":
                out[f"{owner}.{e}.down_proj.weight"] = W
                continue
            half = W.shape[0] // 2
            gate, up = (W[0::2], W[1::2]) if mt == "gpt_oss" else (W[:half], W[half:])
            out[f"{owner}.{e}.gate_proj.weight"], out[f"{owner}.{e}.up_proj.weight"] = gate, up
    return out


def expected_identity(name):
    """(component, expert, expert_kind) of a fixture tensor, from the module names transformers uses."""
    component = ("projector" if "multi_modal_projector" in name else
                 "vision" if re.search(r"(^|\.)(vision_tower|visual|vision_model)\.", name) else "language")
    m = re.search(r"\.experts\.(\d+)\.", name)
    if m:
        return component, m.group(1), "routed"
    if re.search(r"\.shared_experts?\.", name):
        return component, "", "shared"
    return component, "", ""


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory, _materialized):
    out = tmp_path_factory.mktemp("moe")
    run(["analyze", *[FIXTURES / n for n in ALL], "--out", out / "an", "--store", out / "s.sqlite", "--quiet"])
    return read_csv(out / "an" / "metrics.csv"), read_csv(out / "an" / "aggregates.csv")


@pytest.mark.parametrize("name", ALL)
def test_every_matrix_once_with_its_expert_role_and_component_and_numpy_sigma(analyzed, name):
    rows, _ = analyzed
    whole = [r for r in rows if r["model"] == name and r["head"] == ""]
    truth = true_matrices(FIXTURES / name)
    assert sorted(r["tensor"] for r in whole) == sorted(truth)
    for r in whole:
        assert (r["component"], r["expert"], r["expert_kind"]) == expected_identity(r["tensor"]), r["tensor"]
        s = np.linalg.svd(truth[r["tensor"]].astype(np.float64), compute_uv=False)
        assert float(r["l2_norm"]) == pytest.approx(s[0], rel=1e-12), r["tensor"]
        assert float(r["frob_norm"]) == pytest.approx(np.sqrt((s ** 2).sum()), rel=1e-12), r["tensor"]
    roles = {r["tensor"]: r["role"] for r in whole}
    for t, role in roles.items():
        if re.search(r"\.(gate_proj|w1)\.weight$", t):
            assert role == "mlp_gate", t
        if re.search(r"(mlp|block_sparse_moe|feed_forward)\.(gate|router)\.weight$", t):
            assert role == "router", t
        if t.endswith("shared_expert_gate.weight"):
            assert role == "shared_expert_gate", t


def test_gemma3_splits_its_text_heads_and_keeps_its_vision_rows_apart(analyzed):
    rows, aggregates = analyzed
    g = [r for r in rows if r["model"] == "gemma3"]
    cfg = json.loads((FIXTURES / "gemma3" / "config.json").read_text())
    text, vision = cfg["text_config"], cfg["vision_config"]
    for component, c, layers in (("language", text, text["num_hidden_layers"]),
                                 ("vision", vision, vision["num_hidden_layers"])):
        q = [r for r in g if r["component"] == component and r["role"] == "attn_q" and r["head"] != ""]
        assert len(q) == layers * c["num_attention_heads"], component
        d = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
        assert {int(r["rows"]) for r in q} == {d}, component
    # Aggregates never pool the tower into the language model: one row per component, and the language
    # model's param_norm is the sum over its own whole matrices only.
    agg = {(a["model"], a["component"]): a for a in aggregates}
    assert {"language", "vision", "projector"} == {c for (m, c) in agg if m == "gemma3"}
    lm = [r for r in g if r["component"] == "language" and r["head"] == ""]
    assert float(agg[("gemma3", "language")]["param_norm"]) == pytest.approx(
        sum(float(r["frob_norm"]) ** 2 for r in lm), rel=1e-12)


def test_latent_attention_heads_are_numpy_slices(analyzed):
    rows, _ = analyzed
    for name in ("deepseek_v3", "deepseek_v2_lite"):
        cfg = json.loads((FIXTURES / name / "config.json").read_text())
        H, nope, rope, v = (cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
                            cfg["v_head_dim"])
        w = load_file(str(FIXTURES / name / "model.safetensors"))
        mine = [r for r in rows if r["model"] == name and r["head"] != ""]
        kv = w["model.layers.0.self_attn.kv_b_proj.weight"].astype(np.float64)
        q_name = ("model.layers.0.self_attn.q_b_proj.weight" if cfg.get("q_lora_rank") else
                  "model.layers.0.self_attn.q_proj.weight")
        q = w[q_name].astype(np.float64)
        o = w["model.layers.0.self_attn.o_proj.weight"].astype(np.float64)
        for h in range(H):
            blocks = {"attn_k": (kv, kv[h * (nope + v):h * (nope + v) + nope]),
                      "attn_v": (kv, kv[h * (nope + v) + nope:(h + 1) * (nope + v)]),
                      "attn_q": (q, q[h * (nope + rope):(h + 1) * (nope + rope)]),
                      "attn_o": (o, o[:, h * v:(h + 1) * v])}
            for role, (_, block) in blocks.items():
                r = [x for x in mine if x["role"] == role and x["head"] == str(h) and x["layer"] == "0"]
                assert len(r) == 1, (name, role, h)
                s = np.linalg.svd(block, compute_uv=False)
                assert float(r[0]["l2_norm"]) == pytest.approx(s[0], rel=1e-12), (name, role, h)
        roles = {r["tensor"].split(".")[-2]: r["role"] for r in rows
                 if r["model"] == name and r["layer"] == "0" and r["head"] == ""}
        assert roles["kv_a_proj_with_mqa"] == "attn_kv_a" and roles["kv_b_proj"] == "attn_kv_b"
        if cfg.get("q_lora_rank"):
            assert roles["q_a_proj"] == "attn_q_a" and roles["q_b_proj"] == "attn_q"


def test_experts_and_component_select(tmp_path):
    d = FIXTURES / "qwen2_moe"
    run(["analyze", d, "--experts", "1,shared", "--out", tmp_path / "e", "--store", tmp_path / "s.sqlite", "--quiet"])
    rows = read_csv(tmp_path / "e" / "metrics.csv")
    assert {(r["expert"], r["expert_kind"]) for r in rows} == {("1", "routed"), ("", "shared")}
    assert all(".experts.1." in r["tensor"] or ".shared_expert." in r["tensor"] for r in rows)
    run(["analyze", FIXTURES / "gemma3", "--component", "vision", "--out", tmp_path / "v", "--store",
         tmp_path / "s.sqlite", "--quiet"])
    rows = read_csv(tmp_path / "v" / "metrics.csv")
    assert rows and {r["component"] for r in rows} == {"vision"}
    assert [a["component"] for a in read_csv(tmp_path / "v" / "aggregates.csv")] == ["vision"]
    p = run(["analyze", d, "--experts", "x", "--out", tmp_path / "bad"], check=False)
    assert p.returncode == 2 and "--experts" in p.stderr and not (tmp_path / "bad").exists()
    p = run(["analyze", d, "--component", "speech", "--out", tmp_path / "bad"], check=False)
    assert p.returncode == 2 and "--component" in p.stderr


def test_compare_ranks_only_the_language_models_heads(tmp_path):
    d = FIXTURES / "gemma3"
    moved = tmp_path / "moved"
    shutil.copytree(d, moved)
    w = load_file(str(d / "model.safetensors"))
    rng = np.random.default_rng(0)
    w = {k: (v + 0.01 * rng.standard_normal(v.shape).astype(v.dtype)) for k, v in w.items()}
    save_file(w, str(moved / "model.safetensors"), metadata={"format": "pt"})
    run(["compare", "--base", d, moved, "--out", tmp_path / "c", "--store", tmp_path / "s.sqlite", "--quiet"])
    heads = read_csv(tmp_path / "c" / "heads.csv")
    cfg = json.loads((d / "config.json").read_text())["text_config"]
    assert len(heads) == cfg["num_hidden_layers"] * cfg["num_attention_heads"]
    compared = read_csv(tmp_path / "c" / "compare.csv")
    assert any(r["component"] == "vision" and r["head"] != "" for r in compared)
    assert not (tmp_path / "c" / "experts.csv").exists()  # a dense model has no expert table


def moved_copy(d, out, scale=0.1, seed=1):
    shutil.copytree(d, out)
    rng = np.random.default_rng(seed)
    w = load_file(str(d / "model.safetensors"))
    w = {k: (v + scale * rng.standard_normal(v.shape)).astype(v.dtype) for k, v in w.items()}
    save_file(w, str(out / "model.safetensors"), metadata={"format": "pt"})
    return w


@pytest.mark.parametrize("name", ["gpt_oss", "llama4", "qwen3_moe_packed", "mixtral"])
def test_an_edit_of_one_expert_writes_the_packed_layout_back(tmp_path, name):
    d = FIXTURES / name
    a = load_file(str(d / "model.safetensors"))
    b = moved_copy(d, tmp_path / "moved")
    run(["edit", "interpolate", d, tmp_path / "moved", "--omega", "0.5", "--experts", "1", "--out", tmp_path / "e",
         "--quiet"])
    out = load_file(str(tmp_path / "e" / "model.safetensors"))
    assert sorted(out) == sorted(a)  # the stored names: packed tensors stay packed
    for k, v in out.items():
        assert v.dtype == a[k].dtype and v.shape == a[k].shape, k
        expected = a[k].copy()
        if re.search(r"\.experts\.(gate_up_proj|down_proj)(_bias)?$", k):  # packed: expert 1 is its slice 1
            expected[1] = (0.5 * a[k][1].astype(np.float64) + 0.5 * b[k][1].astype(np.float64)).astype(v.dtype)
        elif ".experts.1." in k:
            expected = (0.5 * a[k].astype(np.float64) + 0.5 * b[k].astype(np.float64)).astype(v.dtype)
        np.testing.assert_array_equal(v, expected, err_msg=k)  # bit-exact, untouched or not
    summary = json.loads((tmp_path / "e" / "diffract_edit.json").read_text())
    assert summary["tensors_edited"] > 0


def write_moe_gguf(path, data, qtype):
    """A one-block qwen3moe GGUF of `data` (name -> F32 array) stored as `qtype` (F32, F16 or Q8_0);
    returns the values a reader decodes (F32)."""
    w = gguf.GGUFWriter(path, "qwen3moe")
    w.add_block_count(1)
    dense = {}
    for name, x in data.items():
        if qtype == gguf.GGMLQuantizationType.Q8_0:
            q = gguf.quants.quantize(x, qtype)
            w.add_tensor(name, q, raw_dtype=qtype)
            dense[name] = gguf.quants.dequantize(q, qtype).reshape(x.shape)
        else:
            y = x.astype(np.float16) if qtype == gguf.GGMLQuantizationType.F16 else x
            w.add_tensor(name, y)
            dense[name] = y.astype(np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dense


@pytest.mark.parametrize("qtype", [gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16,
                                   gguf.GGMLQuantizationType.Q8_0])
def test_a_gguf_edit_of_one_expert_rewrites_its_packed_tensor(tmp_path, qtype):
    rng = np.random.default_rng(5)
    E, H, I = 3, 64, 32
    shapes = {"blk.0.ffn_gate_exps.weight": (E, I, H), "blk.0.ffn_up_exps.weight": (E, I, H),
              "blk.0.ffn_down_exps.weight": (E, H, I)}
    da = write_moe_gguf(tmp_path / "a.gguf", {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()},
                        qtype)
    db = write_moe_gguf(tmp_path / "b.gguf", {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()},
                        qtype)
    run(["edit", "interpolate", tmp_path / "a.gguf", tmp_path / "b.gguf", "--omega", "0.5", "--experts", "1",
         "--out", tmp_path / "e", "--quiet"])
    r = gguf.GGUFReader(str(tmp_path / "e" / "a.gguf"))
    got = {t.name: t for t in r.tensors}
    assert sorted(got) == sorted(shapes)
    src = {t.name: t for t in gguf.GGUFReader(str(tmp_path / "a.gguf")).tensors}
    for name, shape in shapes.items():
        t = got[name]
        if qtype == gguf.GGMLQuantizationType.Q8_0:
            assert t.tensor_type == gguf.GGMLQuantizationType.F32  # an edited block tensor is written as F32
        else:
            assert t.tensor_type == qtype
        values = np.asarray(t.data).astype(np.float32).reshape(shape)
        expected = da[name].copy()
        mixed = 0.5 * da[name][1].astype(np.float64) + 0.5 * db[name][1].astype(np.float64)
        expected[1] = mixed.astype(np.float16).astype(np.float32) if qtype == gguf.GGMLQuantizationType.F16 else mixed
        np.testing.assert_array_equal(values, expected.astype(np.float32), err_msg=name)
        if qtype != gguf.GGMLQuantizationType.Q8_0:  # untouched experts: the stored bytes
            assert np.asarray(t.data).reshape(shape)[0].tobytes() == np.asarray(src[name].data).reshape(shape)[0].tobytes()


def test_edited_packed_experts_load_in_transformers(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    for name, cls in (("gpt_oss", "GptOssForCausalLM"), ("qwen3_moe_packed", "Qwen3MoeForCausalLM"),
                      ("llama4", "Llama4ForConditionalGeneration"), ("gemma3", "Gemma3ForConditionalGeneration"),
                      ("mixtral", "MixtralForCausalLM"), ("olmoe", "OlmoeForCausalLM")):
        d = FIXTURES / name
        moved_copy(d, tmp_path / f"{name}_moved")
        out = tmp_path / f"{name}_e"
        run(["edit", "interpolate", d, tmp_path / f"{name}_moved", "--omega", "0.5", "--experts", "1", "--out", out,
             "--quiet"] if name != "gemma3" else
            ["edit", "interpolate", d, tmp_path / f"{name}_moved", "--omega", "0.5", "--component", "vision",
             "--out", out, "--quiet"])
        model = getattr(transformers, cls).from_pretrained(str(out), dtype=torch.float32)
        ref = getattr(transformers, cls).from_pretrained(str(d), dtype=torch.float32)
        edited = {k: v for k, v in model.state_dict().items()}
        changed = [k for k, v in ref.state_dict().items() if not torch.equal(v, edited[k])]
        assert changed, name
        if name == "gemma3":
            assert all("vision" in k for k in changed), changed
        else:
            assert all("experts" in k for k in changed), changed


def moe_family(tmp_path, E=16, H=48, I=24, layers=2, planted=(3, 11), seed=7):
    """A Qwen3-MoE-style checkpoint (per-expert tensors and a router per layer), a CPT copy whose experts
    `planted` (in every layer) got large updates and whose other experts and routers small ones, a
    reference with small updates only, and a copy with uniform quantisation-like noise."""
    rng = np.random.default_rng(seed)
    cfg = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": H,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12, "num_hidden_layers": layers,
           "moe_intermediate_size": I, "num_experts": E}
    base = {}
    for l in range(layers):
        base[f"model.layers.{l}.mlp.gate.weight"] = rng.standard_normal((E, H)).astype(np.float32)
        for e in range(E):
            for proj, shape in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
                base[f"model.layers.{l}.mlp.experts.{e}.{proj}.weight"] = rng.standard_normal(shape).astype(np.float32)

    def variant(name, scale_of):
        w = {k: (v + scale_of(k) * rng.standard_normal(v.shape)).astype(np.float32) for k, v in base.items()}
        d = tmp_path / name
        d.mkdir()
        save_file(w, str(d / "model.safetensors"), metadata={"format": "pt"})
        (d / "config.json").write_text(json.dumps(cfg))
        return d, w

    def planted_scale(k):
        m = re.search(r"\.experts\.(\d+)\.", k)
        return 0.5 if m and int(m.group(1)) in planted else 0.01

    d_base = tmp_path / "base"
    d_base.mkdir()
    save_file(base, str(d_base / "model.safetensors"), metadata={"format": "pt"})
    (d_base / "config.json").write_text(json.dumps(cfg))
    cpt = variant("cpt", planted_scale)
    ref = variant("ref", lambda k: 0.01)
    noise = variant("noise", lambda k: 0.003)
    return (d_base, base), cpt, ref, noise


def test_experts_csv_ranks_planted_experts_on_top_with_numpy_fields(tmp_path):
    (d_base, base), (d_cpt, cpt), (d_ref, ref), _ = moe_family(tmp_path)
    run(["compare", "--base", d_base, d_cpt, "--reference", d_ref, "--out", tmp_path / "c", "--store",
         tmp_path / "s.sqlite", "--quiet"])
    rows = read_csv(tmp_path / "c" / "experts.csv")
    assert {r["expert_kind"] for r in rows} == {"routed"} and len(rows) == 2 * 16
    for layer in ("0", "1"):
        mine = sorted((r for r in rows if r["layer"] == layer), key=lambda r: -int(r["rank"]))
        assert {int(r["expert"]) for r in mine[:2]} == {3, 11}  # the most important (highest rank) two
        assert {int(r["expert"]) for r in mine if r["stands_out"] == "1"} == {3, 11}
    for r in rows:
        names = [f"model.layers.{r['layer']}.mlp.experts.{r['expert']}.{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")]
        deltas = [np.linalg.norm(cpt[n].astype(np.float64) - base[n]) for n in names]
        for p, dn in zip(("gate", "up", "down"), deltas):
            assert float(r[f"{p}_update_norm"]) == pytest.approx(dn, rel=1e-9)
        assert float(r["update_norm"]) == pytest.approx(np.sqrt(sum(x * x for x in deltas)), rel=1e-9)
        assert float(r["relative_update"]) == pytest.approx(
            np.sqrt(sum(x * x for x in deltas)) / np.sqrt(sum(np.linalg.norm(base[n].astype(np.float64)) ** 2 for n in names)),
            rel=1e-9)
        router = f"model.layers.{r['layer']}.mlp.gate.weight"
        e = int(r["expert"])
        a, b = base[router][e].astype(np.float64), cpt[router][e].astype(np.float64)
        assert float(r["router_update_norm"]) == pytest.approx(np.linalg.norm(b - a), rel=1e-9)
        cos = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
        assert float(r["router_angle_degrees"]) == pytest.approx(np.degrees(np.arccos(np.clip(cos, -1, 1))), rel=1e-6, abs=1e-6)
    # Python: the same table, rank 1 = the most important expert of its model and kind.
    import diffract_spectral as diffract
    res = diffract.compare(d_cpt, base=d_base, reference=d_ref, store=tmp_path / "s.sqlite")
    top = res.experts.sort_values("rank").head(4)
    assert set(top["expert"]) == {3, 11} and set(top["layer"]) == {0, 1}


def test_a_noise_copy_has_no_expert_standing_out(tmp_path):
    (d_base, _), _, _, (d_noise, _) = moe_family(tmp_path)
    p = run(["compare", "--base", d_base, d_noise, "--out", tmp_path / "c", "--store", tmp_path / "s.sqlite"])
    rows = read_csv(tmp_path / "c" / "experts.csv")
    assert rows and not any(r["stands_out"] == "1" for r in rows)
    assert "no routed expert's update stands out" in p.stderr


def test_the_expert_importance_example_runs_and_finds_the_planted_expert(tmp_path):
    import subprocess
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "expert_importance.py"), str(tmp_path)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "experts standing out: [3]" in p.stdout
