"""Issue 48, item 4: edits and sweeps with a mixture of experts' experts as the unit.

On the planted family of test_moe_multimodal (experts 3 and 11 of every layer moved far, the others and
the routers a little; a reference with small updates only):
- `edit rewind --unit experts --fraction F` rewinds the round(F × routed experts) least important
  experts of compare's ranking: their tensors hold the base's bytes, every other tensor the model's;
  `--experts`/`--layers` name experts instead; `--router base` rewinds their router rows too;
- in the packed layouts transformers writes (Qwen3-MoE v5, gpt-oss), only the rewound experts' slices
  of the packed tensors change, and they equal the base's;
- `sweep rewind --unit experts`: random orderings rewind exactly as many experts and weight entries as
  the importance ordering at every x; `sweep rewind-each --unit experts` and `sweep validate --unit
  experts` write experts_effect.csv / experts_validation.csv, whose Spearman is scipy's over the
  table, and whose matched random sets rewind as many experts and parameters as their sets;
- bad requests end with exit 2 and one line, nothing written.
The evaluation is a deterministic bench: the score is Σ w_e ‖W_e − W_base,e‖² over the experts'
matrices with w = 10 for the planted experts, so rewinding a planted expert costs most.
"""
import csv
import json
import re
import sys

import gguf
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from conftest import run
from report_inputs import figures_of
from test_sweep_validate import bootstrap, permutation_p
from test_moe_multimodal import materialize, moe_family, moved_copy, write_moe_gguf

stats = pytest.importorskip("scipy.stats")

EVAL = r'''
import re, sys
import numpy as np
from safetensors.numpy import load_file
cand, base = load_file(sys.argv[1] + "/model.safetensors"), load_file(sys.argv[2] + "/model.safetensors")
score = 0.0
for k, v in cand.items():
    m = re.search(r"\.experts\.(\d+)\.", k)
    if m:
        w = 10.0 if int(m.group(1)) in (3, 11) else 1.0
        score += w * float(np.sum((v.astype(np.float64) - base[k]) ** 2))
print(score)
'''


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def expert_of(name):
    m = re.search(r"layers\.(\d+)\.mlp\.experts\.(\d+)\.", name)
    return (int(m.group(1)), int(m.group(2))) if m else None


@pytest.fixture
def family(tmp_path):
    return moe_family(tmp_path)


def check_rewound(out, base, cpt, rewound):
    """Every tensor of OUT is the base's for the rewound experts' and the model's otherwise, bit for bit."""
    got = load_file(str(out / "model.safetensors"))
    assert sorted(got) == sorted(cpt)
    for k, v in got.items():
        want = base[k] if expert_of(k) in rewound else cpt[k]
        assert np.array_equal(v, want), k


def test_rewind_by_fraction_rewinds_the_least_important_experts(family, tmp_path):
    (d_base, base), (d_cpt, cpt), (d_ref, _), _ = family
    out = tmp_path / "r"
    p = run(["edit", "rewind", "--unit", "experts", "--base", d_base, "--model", d_cpt, "--reference", d_ref,
             "--fraction", "0.25", "--out", out, "--store", tmp_path / "s.sqlite"])
    rows = read_csv(out / "rewound_experts.csv")
    assert len(rows) == round(0.25 * 32)
    assert [int(r["rank"]) for r in rows] == list(range(len(rows)))
    rewound = {(int(r["layer"]), int(r["expert"])) for r in rows}
    assert not any(e in (3, 11) for _, e in rewound)  # the planted experts are the most important
    assert {int(r["parameters"]) for r in rows} == {3 * 24 * 48} and {r["router"] for r in rows} == {"keep"}
    check_rewound(out, base, cpt, rewound)
    assert "rewound 8 experts (layer:expert)" in p.stderr
    # The ranking is compare's experts.csv's: the rewound experts are its eight lowest ranks.
    run(["compare", "--base", d_base, d_cpt, "--reference", d_ref, "--out", tmp_path / "c", "--store",
         tmp_path / "s.sqlite", "--quiet"])
    ranked = sorted(read_csv(tmp_path / "c" / "experts.csv"), key=lambda r: int(r["rank"]))
    assert rewound == {(int(r["layer"]), int(r["expert"])) for r in ranked[:8]}
    record = json.loads((out / "diffract_edit.json").read_text())
    assert record["parameters"]["unit"] == "experts" and len(record["parameters"]["experts"]) == 8


def test_named_experts_and_their_router_rows(family, tmp_path):
    (d_base, base), (d_cpt, cpt), _, _ = family
    out = tmp_path / "named"
    # --experts alone makes experts the unit.
    run(["edit", "rewind", "--base", d_base, "--model", d_cpt, "--experts", "3,5", "--layers", "1", "--out", out,
         "--quiet"])
    check_rewound(out, base, cpt, {(1, 3), (1, 5)})
    out = tmp_path / "router"
    run(["edit", "rewind", "--base", d_base, "--model", d_cpt, "--experts", "3", "--router", "base", "--out", out,
         "--quiet"])
    got = load_file(str(out / "model.safetensors"))
    for layer in (0, 1):
        r = f"model.layers.{layer}.mlp.gate.weight"
        want = cpt[r].copy()
        want[3] = base[r][3]
        assert np.array_equal(got[r], want)
        del got[r]
    for k, v in got.items():
        assert np.array_equal(v, base[k] if expert_of(k) in {(0, 3), (1, 3)} else cpt[k]), k
    # Only the down projections with --roles.
    out = tmp_path / "down"
    run(["edit", "rewind", "--base", d_base, "--model", d_cpt, "--experts", "3", "--roles", "mlp_down", "--out", out,
         "--quiet"])
    got = load_file(str(out / "model.safetensors"))
    for k, v in got.items():
        mine = expert_of(k) is not None and expert_of(k)[1] == 3 and "down_proj" in k
        assert np.array_equal(v, base[k] if mine else cpt[k]), k


@pytest.mark.parametrize("name", ["qwen3_moe_packed", "gpt_oss"])
def test_a_packed_rewind_changes_only_the_rewound_experts_slices(tmp_path, name):
    d_base = materialize(name, tmp_path / "base")
    d_cpt = tmp_path / "cpt"
    moved_copy(d_base, d_cpt)
    out = tmp_path / "out"
    run(["edit", "rewind", "--base", d_base, "--model", d_cpt, "--experts", "1", "--layers", "0", "--out", out,
         "--quiet"])
    base, cpt = load_file(str(d_base / "model.safetensors")), load_file(str(d_cpt / "model.safetensors"))
    got = load_file(str(out / "model.safetensors"))
    assert sorted(got) == sorted(cpt)
    changed = [k for k in got if not np.array_equal(got[k], cpt[k])]
    assert changed and all(".layers.0." in k and "experts" in k for k in changed), changed
    for k in changed:
        # Packed [experts, ...]: slice 1 is the base's, every other slice the model's.
        assert got[k].shape[0] > 1
        assert np.array_equal(got[k][1], base[k][1]), k
        rest = [e for e in range(got[k].shape[0]) if e != 1]
        assert np.array_equal(got[k][rest], cpt[k][rest]), k


def bench_command(tmp_path, d_base):
    script = tmp_path / "bench.py"
    script.write_text(EVAL)
    return f"{sys.executable} {script} {{model}} {d_base}"


def test_rewind_sweep_matches_random_orderings_in_experts_and_parameters(family, tmp_path):
    (d_base, _), (d_cpt, _), (d_ref, _), _ = family
    out = tmp_path / "sweep"
    run(["sweep", "rewind", "--unit", "experts", "--base", d_base, "--model", d_cpt, "--reference", d_ref,
         "--fractions", "0,0.25,0.5", "--seeds", "2", "--eval", bench_command(tmp_path, d_base), "--out", out,
         "--store", tmp_path / "s.sqlite", "--quiet"])
    rows = read_csv(out / "curve.csv")
    assert list(rows[0])[:5] == ["order", "seed", "x", "experts", "parameters"]
    for x in ("0", "0.25", "0.5"):
        at = [r for r in rows if r["x"] == x]
        assert len(at) == 3 and len({(r["experts"], r["parameters"]) for r in at}) == 1, at
        assert int(at[0]["experts"]) == round(float(x) * 32)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["unit"] == "experts"
    # Rewinding the least important experts keeps more of the score than rewinding random ones.
    imp = {r["x"]: float(r["score"]) for r in rows if r["order"] == "importance"}
    rnd = [float(r["score"]) for r in rows if r["order"] == "random" and r["x"] == "0.5"]
    assert imp["0.5"] >= max(rnd)
    html = tmp_path / "r.html"
    run(["report", out, "--out", html, "--quiet"])
    assert "fraction of experts rewound" in figures_of(html.read_text())["sweep-rewind"]


def test_rewind_each_and_validate_with_experts(family, tmp_path):
    (d_base, base), (d_cpt, cpt), (d_ref, _), _ = family
    command = bench_command(tmp_path, d_base)
    each = tmp_path / "each"
    run(["sweep", "rewind-each", "--unit", "experts", "--base", d_base, "--model", d_cpt, "--eval", command,
         "--out", each, "--store", tmp_path / "s.sqlite", "--quiet"])
    effects = read_csv(each / "experts_effect.csv")
    assert list(effects[0])[:2] == ["layer", "expert"] and len(effects) == 32
    assert not (each / "heads_effect.csv").exists()
    # An expert's delta is minus its weighted squared update (the bench's score, rewound alone).
    for r in effects:
        l, e = int(r["layer"]), int(r["expert"])
        names = [f"model.layers.{l}.mlp.experts.{e}.{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")]
        w = 10.0 if e in (3, 11) else 1.0
        want = -w * sum(float(np.sum((cpt[n].astype(np.float64) - base[n]) ** 2)) for n in names)
        assert float(r["delta"]) == pytest.approx(want, rel=1e-6)

    out = tmp_path / "validate"
    p = run(["sweep", "validate", "--unit", "experts", "--base", d_base, "--model", d_cpt, "--reference", d_ref,
             "--k", "4", "--seeds", "3", "--direction", "higher", "--eval", command, "--out", out,
             "--store", tmp_path / "s.sqlite"])
    table = read_csv(out / "experts_validation.csv")
    assert list(table[0])[:6] == ["layer", "expert", "importance", "rank", "score", "harm"] and len(table) == 32
    summary = json.loads((out / "summary.json").read_text())
    assert summary["unit"] == "experts" and summary["experts"] == 32 and summary["k"] == 4
    rho = stats.spearmanr([float(r["importance"]) for r in table], [float(r["harm"]) for r in table]).statistic
    assert summary["predictive"]["spearman"] == pytest.approx(rho, abs=1e-12)
    # The interval and p-value, recomputed by brute force from the documented seeded streams.
    x, y = [float(r["importance"]) for r in table], [float(r["harm"]) for r in table]
    assert summary["predictive"]["ci95"] == pytest.approx(list(bootstrap(x, y)), rel=1e-12)
    assert summary["predictive"]["p_value"] == pytest.approx(permutation_p(x, y), rel=1e-12)
    # Each expert's harm is the score its rewind alone loses: rewind-each's delta, negated.
    delta = {(r["layer"], r["expert"]): float(r["delta"]) for r in effects}
    for r in table:
        assert float(r["harm"]) == pytest.approx(-delta[(r["layer"], r["expert"])], rel=1e-9)
    # The planted experts are both the most important and the most harmful to rewind (the others' order
    # is noise in both).
    top = lambda key: {(r["layer"], r["expert"]) for r in sorted(table, key=lambda r: -float(r[key]))[:4]}  # noqa: E731
    assert top("importance") == top("harm") == {(l, e) for l in ("0", "1") for e in ("3", "11")}
    assert rho > 0
    assert "the ranking predicts what rewinding one expert does" in p.stderr
    sets = read_csv(out / "sets.csv")
    assert list(sets[0])[:4] == ["set", "seed", "experts", "parameters"]
    for kind in ("bottom", "top"):
        own = next(s for s in sets if s["set"] == kind)
        for s in (s for s in sets if s["set"] == "random_" + kind):
            assert (s["experts"], s["parameters"]) == (own["experts"], own["parameters"]) == ("4", str(4 * 3 * 24 * 48))

    # The report draws both as the experts' figures: a point per expert, the sets, the verdict.
    html = tmp_path / "r.html"
    run(["report", each, out, "--out", html, "--quiet"])
    figures = figures_of(html.read_text())
    assert "head-effects-rewind-each" not in figures and "head-effects-validate" not in figures
    each_svg, validate_svg = figures["expert-effects-rewind-each"], figures["expert-effects-validate"]
    assert each_svg.count("expert 3: ") == 2 and len(re.findall(r"layer \d+ expert \d+: ", each_svg)) == 32
    assert len(re.findall(r"layer \d+ expert \d+: importance", validate_svg)) == 32
    assert "expert sets" in validate_svg and "the ranking predicts what rewinding one expert does" in html.read_text()


def test_python_rewinds_and_validates_experts(family, tmp_path):
    import diffract_spectral as diffract
    (d_base, base), (d_cpt, cpt), (d_ref, _), _ = family
    r = diffract.edit.rewind(base=d_base, model=d_cpt, out=tmp_path / "r", unit="experts", fraction=0.125,
                             reference=d_ref, store=tmp_path / "s.sqlite")
    assert len(r["experts"]) == 4 and all(isinstance(e, int) for _, e in r["experts"])
    check_rewound(tmp_path / "r", base, cpt, set(r["experts"]))
    r = diffract.edit.rewind(base=d_base, model=d_cpt, out=tmp_path / "n", experts=[11], layers=[0])
    assert r["experts"] == [(0, 11)]

    def score(path):
        cand = load_file(str(path) + "/model.safetensors")
        return sum(float(np.sum((v.astype(np.float64) - base[k]) ** 2)) for k, v in cand.items() if expert_of(k))

    v = diffract.sweep.validate(base=d_base, model=d_cpt, reference=d_ref, out=tmp_path / "v", unit="experts",
                                k=2, seeds=2, direction="higher", eval=score, store=tmp_path / "s.sqlite",
                                quiet=True)
    assert v.heads_validation is None and len(v.experts_validation) == 32
    assert set(v.experts_validation.columns[:2]) == {"layer", "expert"}
    assert v.summary["unit"] == "experts" and len(v.verdict) == 3


def test_bad_expert_rewinds_are_refused_in_one_line(family, tmp_path):
    (d_base, _), (d_cpt, _), _, _ = family
    cases = [
        (["--unit", "experts"], "give --fraction, or name the experts"),
        (["--unit", "experts", "--heads", tmp_path / "h.csv"], "--unit experts"),
        (["--experts", "99"], "names none of the model's 32 experts"),
        (["--unit", "expert", "--fraction", "0.5"], "--unit: expected heads or experts"),
        (["--experts", "1", "--router", "model"], "--router: expected keep or base"),
        (["--experts", "1", "--as-lora"], "--as-lora rewinds heads only"),
    ]
    for extra, message in cases:
        out = tmp_path / "bad"
        p = run(["edit", "rewind", "--base", d_base, "--model", d_cpt, *extra, "--out", out], check=False)
        assert p.returncode == 2 and message in p.stderr, (extra, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert not out.exists()
    # A dense model has no experts to rank.
    dense = tmp_path / "dense"
    dense.mkdir()
    save_file({"model.layers.0.mlp.up_proj.weight": np.ones((8, 4), np.float32)}, str(dense / "model.safetensors"))
    (dense / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 1}))
    p = run(["edit", "rewind", "--unit", "experts", "--fraction", "0.5", "--base", dense, "--model", dense,
             "--out", tmp_path / "bad"], check=False)
    assert p.returncode == 2 and "no experts to rank" in p.stderr and not (tmp_path / "bad").exists()


@pytest.mark.parametrize("name,cls", [("gpt_oss", "GptOssForCausalLM"), ("qwen3_moe_packed", "Qwen3MoeForCausalLM"),
                                      ("mixtral", "MixtralForCausalLM"), ("olmoe", "OlmoeForCausalLM"),
                                      ("llama4", "Llama4ForConditionalGeneration")])
def test_a_rewound_moe_loads_in_transformers_and_differs_only_in_the_rewound_experts(tmp_path, name, cls):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    d_base = materialize(name, tmp_path / "base")
    d_cpt = tmp_path / "cpt"
    moved_copy(d_base, d_cpt)
    out = tmp_path / "out"
    run(["edit", "rewind", "--base", d_base, "--model", d_cpt, "--experts", "1", "--out", out, "--quiet"])
    load = lambda d: getattr(transformers, cls).from_pretrained(str(d), dtype=torch.float32).state_dict()  # noqa: E731
    got, cpt, base = load(out), load(d_cpt), load(d_base)
    assert sorted(got) == sorted(cpt)
    changed = [k for k in got if not torch.equal(got[k], cpt[k])]
    assert changed and all("experts" in k for k in changed), changed
    for k in changed:
        # In the loaded model's own layout: expert 1's slice (or tensors) is the base's, the rest the model's.
        if ".experts.1." in k:
            assert torch.equal(got[k], base[k]), k
            continue
        packed_at = 0 if got[k].shape[0] > 1 else None
        assert packed_at is not None, k
        assert torch.equal(got[k][1], base[k][1]), k
        rest = [e for e in range(got[k].shape[0]) if e != 1]
        assert torch.equal(got[k][rest], cpt[k][rest]), k


@pytest.mark.parametrize("qtype", [gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.Q8_0])
def test_a_gguf_rewind_of_one_expert_writes_its_packed_tensor_back(tmp_path, qtype):
    """GGUF `*_exps`: the model's file with expert 1's slices the base's (an F16 tensor keeps its type and the
    other experts' stored bytes; a rewritten Q8_0 tensor is F32, every other expert the model's decoded values)."""
    rng = np.random.default_rng(3)
    E, H, I = 3, 64, 32
    shapes = {"blk.0.ffn_gate_exps.weight": (E, I, H), "blk.0.ffn_up_exps.weight": (E, I, H),
              "blk.0.ffn_down_exps.weight": (E, H, I)}
    base = write_moe_gguf(tmp_path / "base.gguf",
                          {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}, qtype)
    model = write_moe_gguf(tmp_path / "model.gguf",
                           {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}, qtype)
    run(["edit", "rewind", "--base", tmp_path / "base.gguf", "--model", tmp_path / "model.gguf", "--experts", "1",
         "--out", tmp_path / "e", "--quiet"])
    got = {t.name: t for t in gguf.GGUFReader(str(tmp_path / "e" / "model.gguf")).tensors}
    stored = {t.name: t for t in gguf.GGUFReader(str(tmp_path / "model.gguf")).tensors}
    assert sorted(got) == sorted(shapes)
    for name, shape in shapes.items():
        t = got[name]
        f16 = qtype == gguf.GGMLQuantizationType.F16
        assert t.tensor_type == (qtype if f16 else gguf.GGMLQuantizationType.F32)
        values = np.asarray(t.data).astype(np.float32).reshape(shape)
        expected = model[name].copy()
        expected[1] = base[name][1]
        np.testing.assert_array_equal(values, expected, err_msg=name)
        if f16:
            for e in (0, 2):
                assert (np.asarray(t.data).reshape(shape)[e].tobytes() ==
                        np.asarray(stored[name].data).reshape(shape)[e].tobytes())
    rows = read_csv(tmp_path / "e" / "rewound_experts.csv")
    assert [(r["layer"], r["expert"]) for r in rows] == [("0", "1")]
