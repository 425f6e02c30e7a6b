"""Issue 48 item 7, the expert ranking on a really trained mixture of experts (torch and transformers; skipped
without them, as in CI): a Qwen3-MoE built by transformers from a config (4 layers of 8 routed experts, top-2,
GQA 4 query over 2 key/value heads, hidden 64, a character vocabulary), pre-trained on prose (Debian's
licence texts), continued on Python code (the standard library's sources) and, as the reference, continued on
the same prose for the same steps: about a CPU-minute in all. transformers saves it per expert by default and
packed (`mlp.experts.gate_up_proj`, `down_proj`) with save_original_format=False; both are tested.
- compare ranks every routed expert of every layer once; each update norm, the router drift and Eq. 1 equal
  numpy's on the matrices safetensors loads; the packed copy ranks exactly as the per-expert one; the
  findings line is printed exactly when no expert stands out;
- the noise floor: a quantised copy of the base (int8, one scale per 32 entries) has no expert that stands
  out, while one expert given a large planted update does, alone;
- `edit rewind --unit experts` (CLI and Python): the lowest-ranked experts take the base's bytes (their
  slices, when packed), everything else is the CPT's, and transformers loads the result;
- `sweep rewind --unit experts`: random orderings rewind exactly as many experts and weights as the
  importance ordering, at every x;
- `sweep validate --unit experts`: the Spearman of the summary is the one of experts_validation.csv, the
  matched random sets rewind as much weight as the sets they match, and one expert's harm is the perplexity
  change of rewinding it by hand (numpy) and scoring the result.
The measured outcome is in docs/experts.md ("A really trained MoE"); `pytest -s` prints it.
"""
import csv
import json
import math
import re
import shutil
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, run

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
st = pytest.importorskip("safetensors.numpy")
import diffract_spectral as diffract  # noqa: E402
from diffract_spectral.eval.clm import perplexity  # noqa: E402
from test_eval_models import char_tokenizer  # noqa: E402
from trained_models import corpus, quantised, train  # noqa: E402

LAYERS, EXPERTS, HIDDEN, INTERMEDIATE = 4, 8, 64, 32
EXPERT_PARAMETERS = 3 * HIDDEN * INTERMEDIATE  # gate, up and down of one expert
PROJECTIONS = ("gate", "up", "down")


def domains():
    """(prose, code, held-out code): Debian's licence texts (the project's documentation where they are
    absent) and the Python standard library's sources, text that does not change with the project."""
    prose = (corpus(sorted(Path("/usr/share/common-licenses").glob("*"))) or
             corpus(sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]))
    code = corpus(sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")), limit=66000)
    return prose, code[:60000], code[60000:]


def train_family(d):
    """The base, the CPT and the reference (trained with the torch threads set, one in the tests), each saved
    per expert (transformers' default) in d/NAME and packed in d/NAME_packed; the held-out code in d/code.txt."""
    tok = char_tokenizer()
    prose, code, held_out = domains()
    config = transformers.Qwen3MoeConfig(
        vocab_size=len(tok), hidden_size=HIDDEN, moe_intermediate_size=INTERMEDIATE, intermediate_size=128,
        num_hidden_layers=LAYERS, num_local_experts=EXPERTS, num_experts_per_tok=2, norm_topk_prob=True,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
        tie_word_embeddings=False, output_router_logits=True, router_aux_loss_coef=0.01)
    torch.manual_seed(0)
    models = {"base": train(transformers.Qwen3MoeForCausalLM(config), tok, prose, 800, 1)}
    for name, text in (("cpt", code), ("ref", prose)):  # the same steps, seed and rate
        m = transformers.Qwen3MoeForCausalLM(config)
        m.load_state_dict(models["base"].state_dict())
        models[name] = train(m, tok, text, 200, 2, lr=1e-3)
    paths = {}
    for name, m in models.items():
        for suffix, per_expert in (("", True), ("_packed", False)):
            m.save_pretrained(d / (name + suffix), save_original_format=per_expert)
            tok.save_pretrained(d / (name + suffix))
            paths[name + suffix] = d / (name + suffix)
    (d / "code.txt").write_text(held_out)  # code the CPT never saw
    return {**paths, "text": d / "code.txt", "dir": d}


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    # One torch thread: about a CPU-minute of training, and evaluations that do not contend with the
    # sweep's own threads (several times faster on a busy machine).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield train_family(tmp_path_factory.mktemp("moe"))
    torch.set_num_threads(threads)


def score(moe, path):
    return perplexity(path, moe["text"])["perplexity"]


def weights(path):
    return st.load_file(str(path / "model.safetensors"))


def expert_names(layer, expert):
    return [f"model.layers.{layer}.mlp.experts.{expert}.{p}_proj.weight" for p in PROJECTIONS]


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def scale01(x):
    x = np.asarray(x, dtype=np.float64)
    return (x - x.min()) / (x.max() - x.min())


def ranks(x):
    """Ranks from 1 with ties averaged (Spearman's)."""
    x = np.asarray(x, dtype=np.float64)
    r = np.empty(len(x))
    r[np.argsort(x, kind="stable")] = np.arange(1, len(x) + 1)
    for v in np.unique(x):
        r[x == v] = r[x == v].mean()
    return r


def test_transformers_writes_what_diffract_reads(moe):
    packed = weights(moe["cpt_packed"])
    assert packed["model.layers.0.mlp.experts.gate_up_proj"].shape == (EXPERTS, 2 * INTERMEDIATE, HIDDEN)
    assert packed["model.layers.0.mlp.experts.down_proj"].shape == (EXPERTS, HIDDEN, INTERMEDIATE)
    per_expert = weights(moe["cpt"])
    for layer in range(LAYERS):
        for e in range(EXPERTS):
            gate, up, down = (per_expert[n] for n in expert_names(layer, e))
            gate_up = packed[f"model.layers.{layer}.mlp.experts.gate_up_proj"][e]
            np.testing.assert_array_equal(gate_up, np.concatenate([gate, up]))  # the v5 chunking, as documented
            np.testing.assert_array_equal(packed[f"model.layers.{layer}.mlp.experts.down_proj"][e], down)
    for name in ("cpt", "cpt_packed"):
        info = json.loads(run(["inspect", "--json", moe[name]]).stdout)
        assert info["experts"] == {"routed": EXPERTS, "layers": LAYERS, "shared": False}
        matrices = sorted((t["layer"], t["expert"], t["role"]) for t in info["tensors"] if t["expert"] is not None)
        assert matrices == sorted((layer, e, "mlp_" + p) for layer in range(LAYERS) for e in range(EXPERTS)
                                  for p in PROJECTIONS), name


@pytest.fixture(scope="module")
def compared(moe, tmp_path_factory):
    d = tmp_path_factory.mktemp("compare")
    p = run(["compare", "--base", moe["base"], moe["cpt"], moe["cpt_packed"], "--reference", moe["ref"], "--out",
             d / "c", "--store", d / "s.sqlite"])
    return read_csv(d / "c" / "experts.csv"), p.stderr


def test_compare_ranks_every_routed_expert_once_with_numpy_fields(moe, compared):
    rows, _ = compared
    base, cpt, ref = weights(moe["base"]), weights(moe["cpt"]), weights(moe["ref"])
    mine = [r for r in rows if r["model"] == "cpt"]
    assert sorted((int(r["layer"]), int(r["expert"])) for r in mine) == [
        (layer, e) for layer in range(LAYERS) for e in range(EXPERTS)]
    assert {r["expert_kind"] for r in mine} == {"routed"}
    assert sorted(int(r["rank"]) for r in mine) == list(range(LAYERS * EXPERTS))
    for r in mine:
        names = expert_names(r["layer"], r["expert"])
        deltas = [np.linalg.norm(cpt[n].astype(np.float64) - base[n]) for n in names]
        for p, dn in zip(PROJECTIONS, deltas):
            assert float(r[f"{p}_update_norm"]) == pytest.approx(dn, rel=1e-9), (r["layer"], r["expert"], p)
        assert float(r["update_norm"]) == pytest.approx(math.hypot(*deltas), rel=1e-9)
        ref_delta = math.hypot(*(np.linalg.norm(ref[n].astype(np.float64) - base[n]) for n in names))
        assert float(r["ref_update_norm"]) == pytest.approx(ref_delta, rel=1e-9)
        router = f"model.layers.{r['layer']}.mlp.gate.weight"
        a, b = base[router][int(r["expert"])].astype(np.float64), cpt[router][int(r["expert"])].astype(np.float64)
        assert float(r["router_update_norm"]) == pytest.approx(np.linalg.norm(b - a), rel=1e-9)
        cos = np.clip(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)), -1, 1)
        assert float(r["router_angle_degrees"]) == pytest.approx(np.degrees(np.arccos(cos)), rel=1e-6, abs=1e-6)
    # Eq. 1 with the experts as units, and the rank its order (0: the first to rewind).
    importance = np.array([float(r["importance"]) for r in mine])
    assert np.isfinite(importance).all()
    expected = scale01([float(r["update_norm"]) for r in mine]) - scale01([float(r["ref_update_norm"]) for r in mine])
    np.testing.assert_allclose(importance, expected, rtol=0, atol=1e-12)
    assert [int(mine[i]["rank"]) for i in np.argsort(importance, kind="stable")] == list(range(len(mine)))


def test_the_packed_checkpoint_ranks_as_the_per_expert_one(compared):
    rows, _ = compared
    by = {(r["model"], r["layer"], r["expert"]): r for r in rows}
    columns = ("update_norm", "gate_update_norm", "up_update_norm", "down_update_norm", "ref_update_norm",
               "importance", "rank", "update_z", "stands_out", "router_update_norm", "router_angle_degrees")
    for (model, layer, e), r in by.items():
        if model == "cpt":
            packed = by[("cpt_packed", layer, e)]
            assert [float(packed[c]) for c in columns] == pytest.approx([float(r[c]) for c in columns],
                                                                        rel=1e-12, abs=1e-12), (layer, e)


def test_the_findings_line_says_what_the_table_says(moe, compared):
    rows, stderr = compared
    for model in ("cpt", "cpt_packed"):
        out = [(r["layer"], r["expert"]) for r in rows if r["model"] == model and r["stands_out"] == "1"]
        assert (f"{model}: no routed expert's update stands out" in stderr) == (not out), (model, out)
    # The Python table: rank 1 = the most important expert.
    res = diffract.compare(moe["cpt"], base=moe["base"], reference=moe["ref"], store=moe["dir"] / "py.sqlite")
    top = res.experts.sort_values("rank").iloc[0]
    best = max((r for r in rows if r["model"] == "cpt"), key=lambda r: int(r["rank"]))
    assert (int(top["layer"]), int(top["expert"])) == (int(best["layer"]), int(best["expert"]))
    mine = sorted((r for r in rows if r["model"] == "cpt"), key=lambda r: -int(r["rank"]))
    print("\nmost important:", [(r["layer"], r["expert"], round(float(r["importance"]), 3)) for r in mine[:4]],
          "\nleast important:", [(r["layer"], r["expert"], round(float(r["importance"]), 3)) for r in mine[-4:]],
          "\nstanding out:", [(r["layer"], r["expert"], round(float(r["relative_update"]), 2)) for r in mine
                              if r["stands_out"] == "1"])


def test_noise_floor_on_a_trained_moe(moe, tmp_path):
    base = weights(moe["base"])
    q = {k: quantised(v) if v.ndim == 2 else v for k, v in base.items()}
    rng = np.random.default_rng(0)
    planted = {}
    for k, v in base.items():  # every matrix moves by 0.1% of its scale, as training would ...
        rms = np.sqrt(np.mean(v.astype(np.float64) ** 2))
        relative = 0.5 if k in expert_names(2, 5) else 1e-3  # ... and expert 5 of layer 2 by half of it
        planted[k] = (v + relative * rms * rng.standard_normal(v.shape)).astype(np.float32) if v.ndim == 2 else v
    for label, tensors in (("q8", q), ("planted", planted)):
        shutil.copytree(moe["base"], tmp_path / label)
        st.save_file(tensors, str(tmp_path / label / "model.safetensors"), metadata={"format": "pt"})
    p = run(["compare", "--base", moe["base"], tmp_path / "q8", tmp_path / "planted", "--out", tmp_path / "c",
             "--store", tmp_path / "s.sqlite"])
    rows = read_csv(tmp_path / "c" / "experts.csv")
    q8 = [r for r in rows if r["model"] == "q8"]
    assert len(q8) == LAYERS * EXPERTS and not any(r["stands_out"] == "1" for r in q8)
    assert "q8: no routed expert's update stands out" in p.stderr
    out = {(int(r["layer"]), int(r["expert"])) for r in rows if r["model"] == "planted" and r["stands_out"] == "1"}
    assert out == {(2, 5)}


# --unit experts: rewinds, rewind curves and the validation with the experts as units.

def assert_rewound(out, base_dir, cpt_dir, rewound):
    """`out` holds the CPT's bytes except the experts `rewound` ({(layer, expert)}), which hold the base's
    (packed tensors: their slices); the routers keep the CPT's rows."""
    got, base, cpt = weights(out), weights(base_dir), weights(cpt_dir)
    assert sorted(got) == sorted(cpt)
    for k, v in got.items():
        assert v.dtype == cpt[k].dtype and v.shape == cpt[k].shape, k
        m = re.match(r"model\.layers\.(\d+)\.mlp\.experts\.(?:(\d+)\.)?", k)
        if m and m.group(2) is not None:  # one expert's matrix
            want = base[k] if (int(m.group(1)), int(m.group(2))) in rewound else cpt[k]
            assert v.tobytes() == want.tobytes(), k
        elif m:  # packed: expert e is slice e
            for e in range(EXPERTS):
                want = base[k][e] if (int(m.group(1)), e) in rewound else cpt[k][e]
                assert v[e].tobytes() == want.tobytes(), (k, e)
        else:
            assert v.tobytes() == cpt[k].tobytes(), k


def changed_in_transformers(out, cpt_dir):
    """{(layer, expert)} whose weights differ between `out` and the CPT as transformers loads them."""
    load = transformers.Qwen3MoeForCausalLM.from_pretrained
    a = load(str(out), dtype=torch.float32).state_dict()
    b = load(str(cpt_dir), dtype=torch.float32).state_dict()
    changed = set()
    for k, v in a.items():
        if torch.equal(v, b[k]):
            continue
        m = re.match(r"model\.layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)$", k)
        assert m, k  # nothing but the experts changes
        changed |= {(int(m.group(1)), e) for e in range(EXPERTS) if not torch.equal(v[e], b[k][e])}
    return changed


@pytest.mark.parametrize("layout", ["", "_packed"])
def test_edit_rewind_experts_gives_the_lowest_ranked_experts_the_base_bytes(moe, compared, tmp_path, layout):
    rows, _ = compared
    out = tmp_path / "rw"
    run(["edit", "rewind", "--base", moe["base" + layout], "--model", moe["cpt" + layout], "--reference",
         moe["ref" + layout], "--unit", "experts", "--fraction", "0.25", "--out", out, "--store",
         tmp_path / "s.sqlite", "--quiet"])
    listed = read_csv(out / "rewound_experts.csv")
    ranked = {(int(r["layer"]), int(r["expert"])): r for r in rows if r["model"] == "cpt"}
    lowest = {k for k, r in ranked.items() if int(r["rank"]) < round(0.25 * LAYERS * EXPERTS)}
    rewound = {(int(r["layer"]), int(r["expert"])) for r in listed}
    assert len(listed) == len(lowest) == 8 and rewound == lowest
    for r in listed:
        want = ranked[(int(r["layer"]), int(r["expert"]))]
        assert int(r["rank"]) == int(want["rank"])
        assert float(r["importance"]) == pytest.approx(float(want["importance"]), rel=1e-12, abs=1e-12)
        assert int(r["parameters"]) == EXPERT_PARAMETERS
    assert_rewound(out, moe["base" + layout], moe["cpt" + layout], rewound)
    assert changed_in_transformers(out, moe["cpt" + layout]) == rewound


def test_python_rewinds_the_same_experts(moe, tmp_path):
    run(["edit", "rewind", "--base", moe["base"], "--model", moe["cpt"], "--reference", moe["ref"], "--unit",
         "experts", "--fraction", "0.5", "--out", tmp_path / "cli", "--store", tmp_path / "s.sqlite", "--quiet"])
    diffract.edit.rewind(base=moe["base"], model=moe["cpt"], reference=moe["ref"], unit="experts", fraction=0.5,
                         out=tmp_path / "py", store=tmp_path / "s.sqlite")
    assert read_csv(tmp_path / "py" / "rewound_experts.csv") == read_csv(tmp_path / "cli" / "rewound_experts.csv")
    cli, py = weights(tmp_path / "cli"), weights(tmp_path / "py")
    assert sorted(cli) == sorted(py) and all(cli[k].tobytes() == py[k].tobytes() for k in cli)


def test_random_orderings_rewind_as_many_experts_as_importance(moe, tmp_path):
    res = diffract.sweep.rewind(base=moe["base"], model=moe["cpt"], reference=moe["ref"], unit="experts",
                                fractions=[0, 0.25, 0.5], seeds=2, direction="lower", out=tmp_path / "rw",
                                store=tmp_path / "s.sqlite", eval=lambda p: score(moe, p), quiet=True)
    curve = res.curve
    header = next(csv.reader(open(tmp_path / "rw" / "curve.csv")))
    assert header[:6] == ["order", "seed", "x", "experts", "parameters", "score"]
    assert set(curve["order"]) == {"importance", "random"} and curve[curve["order"] == "random"]["seed"].nunique() == 2
    for x, rows in curve.groupby("x"):
        amounts = {tuple(r) for r in rows[["experts", "parameters"]].itertuples(index=False)}
        n = round(x * LAYERS * EXPERTS)
        assert amounts == {(n, n * EXPERT_PARAMETERS)}, (x, amounts)
    unedited = score(moe, moe["cpt"])
    assert list(curve[curve["x"] == 0]["score"]) == pytest.approx([unedited] * 3, rel=1e-9)
    print("\n" + curve[["order", "seed", "x", "experts", "score"]].to_string(index=False))


def test_validate_with_the_experts_as_units(moe, tmp_path):
    out = tmp_path / "v"
    res = diffract.sweep.validate(base=moe["base"], model=moe["cpt"], reference=moe["ref"], unit="experts", k=4,
                                  seeds=2, direction="lower", out=out, store=tmp_path / "s.sqlite",
                                  eval=lambda p: score(moe, p), quiet=True)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["unit"] == "experts"
    rows = read_csv(out / "experts_validation.csv")
    assert sorted((int(r["layer"]), int(r["expert"])) for r in rows) == [
        (layer, e) for layer in range(LAYERS) for e in range(EXPERTS)]
    importance = np.array([float(r["importance"]) for r in rows])
    harm = np.array([float(r["harm"]) for r in rows])
    assert np.isfinite(importance).all() and np.isfinite(harm).all()
    predictive = summary["predictive"]
    rho = np.corrcoef(ranks(importance), ranks(harm))[0, 1]
    assert predictive["spearman"] == pytest.approx(rho, rel=1e-9, abs=1e-12)
    low, high = predictive["ci95"]
    assert -1 <= low <= high <= 1 and 0 <= predictive["p_value"] <= 1
    # The sets and their matched random sets rewind k experts, as many weights.
    sets = read_csv(out / "sets.csv")
    assert {s["set"] for s in sets} == {"bottom", "top", "random_bottom", "random_top"}
    assert all((int(s["experts"]), int(s["parameters"])) == (4, 4 * EXPERT_PARAMETERS) for s in sets)
    assert sum(s["set"] == "random_top" for s in sets) == 2
    # One expert's harm, measured by hand: the base's bytes copied into the CPT with numpy, then scored.
    r = rows[5]
    layer, e = int(r["layer"]), int(r["expert"])
    by_hand = tmp_path / "by_hand"
    shutil.copytree(moe["cpt"], by_hand)
    w, base = weights(moe["cpt"]), weights(moe["base"])
    w.update({n: base[n] for n in expert_names(layer, e)})
    st.save_file(w, str(by_hand / "model.safetensors"), metadata={"format": "pt"})
    assert float(r["harm"]) == pytest.approx(score(moe, by_hand) - score(moe, moe["cpt"]), rel=1e-9, abs=1e-12)
    print("\n" + "\n".join(res.verdict), "\n" + "\n".join(f"{s['set']} {s['seed']}: harm {s['harm']}" for s in sets))


if __name__ == "__main__":  # `python tests/python/test_trained_moe.py DIR`: the models of docs/experts.md
    import sys

    torch.set_num_threads(1)
    out = Path(sys.argv[1])
    out.mkdir(parents=True)
    print(train_family(out)["dir"])
