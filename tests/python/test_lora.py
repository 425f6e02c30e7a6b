"""LoRA / PEFT adapters (issue 14 §4): BASE+ADAPTER is the model W + scale·B·A everywhere a model is
accepted; `edit merge-lora` writes it; `edit truncate --as-lora` writes the best rank-R approximation
of a delta as a PEFT adapter.

Adapters are written here in PEFT's layout (adapter_config.json + adapter_model.safetensors, keys
base_model.model.<module>.lora_A/B.weight); the expected weights are computed with numpy in float64.
When peft is importable, adapters made by PEFT itself are merged and compared with merge_and_unload,
and the adapters diffract writes are loaded by PEFT.
"""

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import diffract_spectral as diffract
from conftest import assert_input_error, run

st = pytest.importorskip("safetensors.numpy")

H, D, L = 4, 8, 2
E = H * D


def bert_base(d: Path, rng):
    t = {"embeddings.word_embeddings.weight": rng.normal(size=(50, E)).astype(np.float32),
         "pooler.dense.weight": rng.normal(size=(E, E)).astype(np.float32)}
    for i in range(L):
        p = f"encoder.layer.{i}"
        for proj in ("query", "key", "value"):
            t[f"{p}.attention.self.{proj}.weight"] = rng.normal(size=(E, E)).astype(np.float32)
            t[f"{p}.attention.self.{proj}.bias"] = rng.normal(size=(E,)).astype(np.float32)
        t[f"{p}.attention.output.dense.weight"] = rng.normal(size=(E, E)).astype(np.float32)
        t[f"{p}.intermediate.dense.weight"] = rng.normal(size=(2 * E, E)).astype(np.float32)
        t[f"{p}.output.dense.weight"] = rng.normal(size=(E, 2 * E)).astype(np.float32)
    d.mkdir(parents=True)
    st.save_file(t, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({
        "model_type": "bert", "architectures": ["BertModel"], "num_attention_heads": H, "hidden_size": E,
        "num_hidden_layers": L, "intermediate_size": 2 * E, "vocab_size": 50}))
    (d / "tokenizer.json").write_text("{}")
    return t


def write_adapter(d: Path, config: dict, tensors: dict):
    d.mkdir(parents=True)
    (d / "adapter_config.json").write_text(json.dumps(config))
    st.save_file(tensors, str(d / "adapter_model.safetensors"))


def load(d: Path) -> dict:
    out = {}
    for f in sorted(Path(d).glob("*.safetensors")):
        out.update(st.load_file(str(f)))
    return out


@pytest.fixture()
def setup(tmp_path):
    rng = np.random.default_rng(7)
    base = bert_base(tmp_path / "base", rng)
    q0, v1 = "encoder.layer.0.attention.self.query", "encoder.layer.1.attention.self.value"
    # The adapter was trained on a *ForSequenceClassification: its module paths start with "bert.".
    factors = {q0: 4, v1: 2}
    tensors, expected = {}, {k: v.astype(np.float64) for k, v in base.items()}
    for module, r in factors.items():
        a = rng.normal(size=(r, E)).astype(np.float32)
        b = rng.normal(size=(E, r)).astype(np.float32)
        tensors[f"base_model.model.bert.{module}.lora_A.weight"] = a
        tensors[f"base_model.model.bert.{module}.lora_B.weight"] = b
        alpha = 3.0 if module == v1 else 8.0
        expected[module + ".weight"] += alpha / np.sqrt(r) * (b.astype(np.float64) @ a.astype(np.float64))
    # modules_to_save: the pooler replaced whole.
    pooler = rng.normal(size=(E, E)).astype(np.float32)
    tensors["base_model.model.bert.pooler.dense.weight"] = pooler
    expected["pooler.dense.weight"] = pooler.astype(np.float64)
    config = {"peft_type": "LORA", "base_model_name_or_path": str(tmp_path / "base"), "r": 4, "lora_alpha": 8,
              "use_rslora": True, "target_modules": ["query", "value"], "rank_pattern": {"layer.1.attention.self.value": 2},
              "alpha_pattern": {"value": 3}, "modules_to_save": ["pooler"], "fan_in_fan_out": False}
    write_adapter(tmp_path / "adapter", config, tensors)
    return {"base": tmp_path / "base", "adapter": tmp_path / "adapter", "expected": expected, "q0": q0, "v1": v1,
            "tensors": tensors, "config": config}


def test_base_plus_adapter_is_the_merged_model(setup, tmp_path):
    spec = f"{setup['base']}+{setup['adapter']}"
    out = tmp_path / "a"
    run(["analyze", spec, "--out", out, "--store", tmp_path / "s.sqlite", "--quiet"])
    rows = {r["tensor"]: r for r in csv.DictReader(open(out / "metrics.csv")) if r["head"] == ""}
    assert {r["model"] for r in rows.values()} == {"adapter"}
    for name in (setup["q0"] + ".weight", setup["v1"] + ".weight", "pooler.dense.weight",
                 "encoder.layer.1.attention.self.query.weight"):
        w = setup["expected"][name].astype(np.float32).astype(np.float64)  # materialised in f32
        s = np.linalg.svd(w, compute_uv=False)
        assert float(rows[name]["max_weights_sval"]) == pytest.approx(s[0], rel=1e-10), name
        assert float(rows[name]["min_weights_sval"]) == pytest.approx(s[-1], rel=1e-8), name
    # The store records the model as BASE+ADAPTER (its base's path alone would name another model), and
    # both directories as inputs that no output may overwrite.
    listed = run(["store", "list", "--store", tmp_path / "s.sqlite"]).stdout
    assert f"{setup['base']}+{setup['adapter']}" in listed
    for inside in (setup["base"] / "out", setup["adapter"] / "out"):
        p = run(["analyze", setup["base"], "--out", inside, "--store", tmp_path / "s.sqlite", "--quiet"], check=False)
        assert p.returncode == 2 and not inside.exists(), p.stderr
    # The adapter directory alone: its base_model_name_or_path names the base; NAME= renames it.
    p = run(["inspect", f"ft={setup['adapter']}"]).stdout
    assert "model:        ft" in p


def test_inspect_shows_the_adapter(setup, tmp_path):
    """inspect of an adapter says what it is: its directory and base, r/alpha as configured and per
    module (rank_pattern, alpha_pattern), rslora, targets, and what it replaces whole."""
    d = json.loads(run(["inspect", "--json", setup["adapter"]]).stdout)
    a = d["adapter"]
    assert a["path"] == str(setup["adapter"]) and a["base"] == str(setup["base"])
    assert a["base_model_name_or_path"] == str(setup["base"])
    assert (a["r"], a["lora_alpha"], a["use_rslora"], a["target_modules"]) == (4, 8, True, ["query", "value"])
    by_tensor = {t["tensor"]: t for t in a["targets"]}
    q, v = by_tensor[setup["q0"] + ".weight"], by_tensor[setup["v1"] + ".weight"]
    assert (q["rank"], q["alpha"], v["rank"], v["alpha"]) == (4, 8, 2, 3)
    assert q["scale"] == pytest.approx(8 / np.sqrt(4)) and v["scale"] == pytest.approx(3 / np.sqrt(2))
    assert a["ranks"] == [2, 4] and a["alphas"] == [3, 8] and a["replaced"] == ["pooler.dense.weight"]
    assert d["parameters"] == sum(int(np.prod(t["shape"])) for t in d["tensors"])
    text = run(["inspect", setup["adapter"]]).stdout
    assert f"adapter:      {setup['adapter']} (PEFT LoRA on {setup['base']})" in text
    assert "r 4, lora_alpha 8, rslora; 2 modules (ranks 2, 4; alphas 3, 8)" in text
    assert "target_modules: query, value" in text and "replaced whole: pooler.dense.weight" in text
    # Python describes it alike.
    assert diffract.open(setup["adapter"]).describe() == d
    # A plain model has no adapter section.
    assert "adapter" not in json.loads(run(["inspect", "--json", setup["base"]]).stdout)


def test_merge_lora_writes_the_merge_in_the_base_dtype(setup, tmp_path):
    out = tmp_path / "merged"
    run(["edit", "merge-lora", "--adapter", setup["adapter"], "--out", out, "--quiet"])
    got = load(out)
    assert set(got) == set(setup["expected"])
    for name, want in setup["expected"].items():
        assert got[name].dtype == np.float32
        np.testing.assert_array_equal(got[name], want.astype(np.float32), err_msg=name)
    assert (out / "tokenizer.json").read_text() == "{}"
    record = json.loads((out / "diffract_edit.json").read_text())
    assert record["edit"] == "merge-lora" and record["parameters"]["adapter"] == str(setup["adapter"])
    # Only the tensors the adapter changes are rewritten; the base's others are copied as stored.
    base = st.load_file(str(setup["base"] / "model.safetensors"))
    touched = [n for n, w in setup["expected"].items() if not np.array_equal(w.astype(np.float32), base[n])]
    assert 0 < len(touched) < len(base)
    assert record["tensors_edited"] == len(touched) and record["tensors_changed"] == len(touched)
    assert record["tensors_copied"] == len(base) - len(touched)
    # Provenance names the adapter and its base, not only the base's path.
    merged_input = next(i for i in record["inputs"] if i["role"] == "aligned")
    assert merged_input["adapter"] == str(setup["adapter"]) and merged_input["base"] == str(setup["base"])


def test_compare_base_with_its_adapter(setup, tmp_path):
    out = tmp_path / "c"
    run(["compare", "--base", setup["base"], f"{setup['base']}+{setup['adapter']}", "--out", out,
         "--store", tmp_path / "s.sqlite", "--quiet"])
    rows = {r["tensor"]: r for r in csv.DictReader(open(out / "compare.csv")) if r.get("head", "") == ""}
    name = setup["q0"] + ".weight"
    base = st.load_file(str(setup["base"] / "model.safetensors"))[name].astype(np.float64)
    delta = setup["expected"][name].astype(np.float32).astype(np.float64) - base
    cols = [c for c in rows[name] if "delta" in c and "frob" in c]
    assert cols
    want = np.linalg.norm(delta)
    assert any(float(rows[name][c]) in (pytest.approx(want, rel=1e-9), pytest.approx(want / np.linalg.norm(base), rel=1e-9))
               for c in cols)
    # Untouched matrices have no delta at all.
    untouched = "encoder.layer.0.attention.self.key.weight"
    assert all(float(rows[untouched][c]) == 0 for c in cols)


def test_truncate_as_lora_round_trips(setup, tmp_path):
    rng = np.random.default_rng(3)
    base = st.load_file(str(setup["base"] / "model.safetensors"))
    ft = {k: (v + 0.1 * rng.normal(size=v.shape)).astype(np.float32) for k, v in base.items()}
    (tmp_path / "ft").mkdir()
    st.save_file(ft, str(tmp_path / "ft" / "model.safetensors"))
    shutil.copy(setup["base"] / "config.json", tmp_path / "ft" / "config.json")
    run(["edit", "truncate", "--base", setup["base"], "--model", tmp_path / "ft", "--rank", "3", "--as-lora",
         "--out", tmp_path / "lora", "--quiet"])
    config = json.loads((tmp_path / "lora" / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 3 and config["lora_alpha"] == 3
    factors = st.load_file(str(tmp_path / "lora" / "adapter_model.safetensors"))
    name = "encoder.layer.1.intermediate.dense"
    a, b = factors[f"base_model.model.{name}.lora_A.weight"], factors[f"base_model.model.{name}.lora_B.weight"]
    assert a.shape == (3, E) and b.shape == (2 * E, 3)
    delta = ft[name + ".weight"].astype(np.float64) - base[name + ".weight"].astype(np.float64)
    u, s, vt = np.linalg.svd(delta, full_matrices=False)
    np.testing.assert_allclose(b.astype(np.float64) @ a, (u[:, :3] * s[:3]) @ vt[:3], atol=1e-5)
    assert f"base_model.model.embeddings.word_embeddings.lora_A.weight" not in factors
    record = json.loads((tmp_path / "lora" / "diffract_edit.json").read_text())
    assert "embeddings.word_embeddings.weight" in record["not_in_adapter"]
    # Read back as BASE+ADAPTER, the projections equal `truncate --rank 3` (to f32 rounding).
    run(["edit", "merge-lora", "--adapter", tmp_path / "lora", "--out", tmp_path / "m", "--quiet"])
    run(["edit", "truncate", "--base", setup["base"], "--model", tmp_path / "ft", "--rank", "3",
         "--out", tmp_path / "t", "--quiet"])
    m, t = load(tmp_path / "m"), load(tmp_path / "t")
    np.testing.assert_allclose(m[name + ".weight"], t[name + ".weight"], atol=1e-5)


@pytest.mark.parametrize("case,needles", [
    ("dora", ["adapter_config.json", "DoRA"]),
    ("rank", ["encoder.layer.0.attention.self.query", "rank"]),
    ("unmatched", ["encoder.layer.9.attention.self.query", "does not have"]),
    ("missing_b", ["adapter_model.safetensors", "layer.0.attention.self.query", "B factor"]),
    ("not_targeted", ["target_modules"]),
    ("shape", ["does not fit"]),
])
def test_bad_adapters_are_refused(setup, tmp_path, case, needles):
    config, tensors = dict(setup["config"]), dict(setup["tensors"])
    q = "base_model.model.bert.encoder.layer.0.attention.self.query"
    if case == "dora":
        config["use_dora"] = True
    elif case == "rank":
        config["r"] = 5
    elif case == "unmatched":
        tensors[q.replace("layer.0", "layer.9") + ".lora_A.weight"] = tensors[q + ".lora_A.weight"]
        tensors[q.replace("layer.0", "layer.9") + ".lora_B.weight"] = tensors[q + ".lora_B.weight"]
    elif case == "missing_b":
        del tensors[q + ".lora_B.weight"]
    elif case == "not_targeted":
        config["target_modules"] = ["value"]
    elif case == "shape":
        tensors[q + ".lora_A.weight"] = np.zeros((4, E + 1), np.float32)
    write_adapter(tmp_path / "bad", config, tensors)
    p = run(["inspect", f"{setup['base']}+{tmp_path / 'bad'}"], check=False)
    assert_input_error(p, *needles)


# --- PEFT itself (when importable) -------------------------------------------------------------

def test_peft_adapters_merge_like_peft(tmp_path):
    peft = pytest.importorskip("peft")
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=32, num_attention_heads=4, num_hidden_layers=2, intermediate_size=64,
                                  vocab_size=100, num_labels=3)
    model = transformers.BertForSequenceClassification(cfg)
    model.save_pretrained(tmp_path / "base")
    lc = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value", "dense"], modules_to_save=["classifier"],
                         rank_pattern={"layer.1.attention.self.query": 2}, alpha_pattern={"value": 3}, use_rslora=True)
    pm = peft.get_peft_model(model, lc)
    for n, p in pm.named_parameters():
        if "lora_B" in n or "modules_to_save" in n:
            torch.nn.init.normal_(p)
    pm.save_pretrained(tmp_path / "adapter")
    merged = pm.merge_and_unload().state_dict()
    run(["edit", "merge-lora", "--base", tmp_path / "base", "--adapter", tmp_path / "adapter", "--out",
         tmp_path / "m", "--quiet"])
    got = load(tmp_path / "m")
    for k, v in merged.items():
        if k in got:
            np.testing.assert_allclose(got[k], v.numpy(), rtol=0, atol=2e-6, err_msg=k)
    assert "bert.encoder.layer.1.attention.self.query.weight" in got

    # The adapter diffract writes loads in PEFT and reproduces the truncated delta.
    ft = transformers.BertForSequenceClassification.from_pretrained(tmp_path / "base")
    with torch.no_grad():
        for n, p in ft.named_parameters():
            p.add_(0.05 * torch.randn_like(p))
    ft.save_pretrained(tmp_path / "ft")
    run(["edit", "truncate", "--base", tmp_path / "base", "--model", tmp_path / "ft", "--rank", "2", "--as-lora",
         "--out", tmp_path / "lora", "--quiet"])
    loaded = peft.PeftModel.from_pretrained(
        transformers.BertForSequenceClassification.from_pretrained(tmp_path / "base"), str(tmp_path / "lora"))
    peft_merged = loaded.merge_and_unload().state_dict()
    run(["edit", "merge-lora", "--adapter", tmp_path / "lora", "--out", tmp_path / "m2", "--quiet"])
    ours = load(tmp_path / "m2")
    name = "bert.encoder.layer.0.attention.self.key.weight"
    np.testing.assert_allclose(peft_merged[name].numpy(), ours[name], atol=2e-6)
    assert not np.allclose(ours[name], st.load_file(str(tmp_path / "base" / "model.safetensors"))[name])


def test_rewind_as_lora_zeroes_the_rewound_heads(setup, tmp_path):
    rng = np.random.default_rng(11)
    config, tensors = dict(setup["config"]), dict(setup["tensors"])
    config["target_modules"] = ["query", "value", "dense"]
    o = "encoder.layer.0.attention.output.dense"
    tensors[f"base_model.model.bert.{o}.lora_A.weight"] = rng.normal(size=(4, E)).astype(np.float32)
    tensors[f"base_model.model.bert.{o}.lora_B.weight"] = rng.normal(size=(E, 4)).astype(np.float32)
    qb = "encoder.layer.0.attention.self.query.bias"
    tensors[f"base_model.model.bert.{qb}"] = rng.normal(size=(E,)).astype(np.float32)  # a trained bias
    write_adapter(tmp_path / "ad", config, tensors)
    heads = tmp_path / "heads.csv"
    heads.write_text("layer,head\n0,1\n0,3\n1,2\n")
    spec = f"{setup['base']}+{tmp_path / 'ad'}"
    run(["edit", "rewind", "--base", setup["base"], "--model", spec, "--heads", heads, "--as-lora",
         "--out", tmp_path / "rw", "--quiet"])
    assert (tmp_path / "rw" / "adapter_config.json").read_text() == (tmp_path / "ad" / "adapter_config.json").read_text()
    assert (tmp_path / "rw" / "rewound_heads.csv").exists()
    # base + the written adapter == the full-checkpoint rewind of base + the original adapter.
    run(["edit", "merge-lora", "--base", setup["base"], "--adapter", tmp_path / "rw", "--out", tmp_path / "m",
         "--quiet"])
    run(["edit", "rewind", "--base", setup["base"], "--model", spec, "--heads", heads, "--out", tmp_path / "full",
         "--quiet"])
    got, want = load(tmp_path / "m"), load(tmp_path / "full")
    base = st.load_file(str(setup["base"] / "model.safetensors"))
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-6, err_msg=name)
    # Rewound blocks hold the base's values; the others keep the adapter's change.
    q = "encoder.layer.0.attention.self.query.weight"
    np.testing.assert_array_equal(got[q][D:2 * D], base[q][D:2 * D])
    assert not np.allclose(got[q][0:D], base[q][0:D])
    np.testing.assert_array_equal(got[qb][3 * D:4 * D], base[qb][3 * D:4 * D])
    assert not np.allclose(got[qb][0:D], base[qb][0:D])
    np.testing.assert_array_equal(got[o + ".weight"][:, D:2 * D], base[o + ".weight"][:, D:2 * D])
    assert not np.allclose(got[o + ".weight"][:, 0:D], base[o + ".weight"][:, 0:D])
    record = json.loads((tmp_path / "rw" / "diffract_edit.json").read_text())
    # Zeroed: q0's and v1's B (rows of Q/V heads), the O module's A (columns), and the trained query
    # bias: 4 rewritten; their other factors and the pooler are copied as stored.
    assert (record["tensors_edited"], record["tensors_changed"], record["tensors_copied"]) == (4, 4, 4)
    # Only layer 1's head: the layer-0 factors and bias hold no rewound head and are copied as stored.
    heads.write_text("layer,head\n1,2\n")
    run(["edit", "rewind", "--base", setup["base"], "--model", spec, "--heads", heads, "--as-lora",
         "--out", tmp_path / "rw1", "--quiet"])
    record = json.loads((tmp_path / "rw1" / "diffract_edit.json").read_text())
    assert (record["tensors_edited"], record["tensors_changed"], record["tensors_copied"]) == (1, 1, 7)
    adapter_in = st.load_file(str(tmp_path / "ad" / "adapter_model.safetensors"))
    adapter_out = st.load_file(str(tmp_path / "rw1" / "adapter_model.safetensors"))
    for key in adapter_in:
        if ".layer.1." not in key:
            np.testing.assert_array_equal(adapter_out[key], adapter_in[key], err_msg=key)


# --- PEFT's semantics for its flags (peft/tuners/lora/layer.py, tuners_utils.check_target_module_exists) ---

def peft_layer_index(module, layers_pattern):
    """PEFT's rule, with its own regular expressions (Python's re, as PEFT runs them)."""
    import re
    if not layers_pattern:
        m = re.match(r".*\.[^.]*\.(\d+)\.", module)
    else:
        m = None
        for p in ([layers_pattern] if isinstance(layers_pattern, str) else layers_pattern):
            m = re.match(rf".*\.{p}\.(\d+)\.", module)
            if m:
                break
    return None if m is None else int(m.group(1))


def flag_adapter(setup, tmp_path, rng, **config_changes):
    """Factors on every query and intermediate.dense of both layers (intermediate is 2E x E: not square)."""
    tensors, factors = {}, {}
    for i in range(L):
        for module, (out, inn) in {f"encoder.layer.{i}.attention.self.query": (E, E),
                                   f"encoder.layer.{i}.intermediate.dense": (2 * E, E)}.items():
            a = rng.normal(size=(2, inn)).astype(np.float32)
            b = rng.normal(size=(out, 2)).astype(np.float32)
            tensors[f"base_model.model.bert.{module}.lora_A.weight"] = a
            tensors[f"base_model.model.bert.{module}.lora_B.weight"] = b
            factors["bert." + module] = (a, b)
    config = {"peft_type": "LORA", "base_model_name_or_path": str(setup["base"]), "r": 2, "lora_alpha": 4,
              "target_modules": ["query", "dense"], **config_changes}
    write_adapter(tmp_path / "flags", config, tensors)
    return factors, config


@pytest.mark.parametrize("changes", [
    {"fan_in_fan_out": True},
    {"layers_to_transform": [1]},
    {"layers_to_transform": 0, "layers_pattern": "layer"},
    {"layers_to_transform": [0, 1], "layers_pattern": ["blocks", "layer"]},
    {"layers_to_transform": [1], "layers_pattern": "h", "fan_in_fan_out": True},
])
def test_adapter_flags_merge_as_peft_merges(setup, tmp_path, changes):
    rng = np.random.default_rng(11)
    factors, config = flag_adapter(setup, tmp_path, rng, **changes)
    base = load(setup["base"])
    expected = {k: v.astype(np.float64) for k, v in base.items()}
    merged_any = False
    for module, (a, b) in factors.items():
        if "layers_to_transform" in config:
            idx = peft_layer_index(module, config.get("layers_pattern"))
            wanted = config["layers_to_transform"]
            if idx is None or idx not in ([wanted] if isinstance(wanted, int) else wanted):
                continue
        # BERT's projections are nn.Linear: PEFT sets fan_in_fan_out to False for them (with a warning).
        expected[module[len("bert."):] + ".weight"] += 2.0 * (b.astype(np.float64) @ a.astype(np.float64))
        merged_any = True
    p = run(["edit", "merge-lora", "--adapter", tmp_path / "flags", "--out", tmp_path / "m",
             "--quiet"], check=False)
    if not merged_any:
        assert_input_error(p, "layers_to_transform")
        return
    assert p.returncode == 0, p.stderr
    got = load(tmp_path / "m")
    for name, want in expected.items():
        np.testing.assert_allclose(got[name].astype(np.float64), want, rtol=1e-6, atol=1e-6, err_msg=name)
    # PEFT's warnings, as one line each.
    text = run(["inspect", f"{setup['base']}+{tmp_path / 'flags'}"]).stderr
    if changes.get("fan_in_fan_out"):
        assert "fan_in_fan_out set to True: the flag is ignored" in text
    if "layers_to_transform" in changes:
        skipped = [m for m in factors if (peft_layer_index(m, config.get("layers_pattern")) not in
                   ([config["layers_to_transform"]] if isinstance(config["layers_to_transform"], int)
                    else config["layers_to_transform"]))]
        assert (f"{len(skipped)} module" in text) == bool(skipped), text


def test_an_adapter_config_without_peft_type_is_refused_as_peft_refuses_it(setup, tmp_path):
    config = dict(setup["config"])
    del config["peft_type"]
    write_adapter(tmp_path / "bad", config, dict(setup["tensors"]))
    assert_input_error(run(["inspect", f"{setup['base']}+{tmp_path / 'bad'}"], check=False), "peft_type is missing")

