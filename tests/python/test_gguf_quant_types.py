"""Every ggml block type that gguf-py can dequantise, decoded by diffract and by `gguf.quants.dequantize`.

Random blocks (random bytes, with the f16 scale fields replaced by small random finite halves) are
written with gguf's GGUFWriter as a 2-D tensor of the type and read back through the `gguf_dump` tool,
which decodes with core/block_quant.cpp. Tolerance: none. diffract performs the same f32 operations in
the same order as gguf-py (itself ggml's reference), so the values are bit-identical.

Then `diffract analyze` on a Q4_K tensor: it is analysed (not skipped) and its singular-value fields
equal numpy's SVD of gguf's dequantised matrix (f64, gesdd route, rtol 1e-10).
"""
import csv
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, run, tool

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf import quants  # noqa: E402

# Byte offsets of the f16 scale fields in one block, by type. IQ1_M spreads its f16 over four nibbles.
F16_FIELDS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "IQ2_XXS": [0], "IQ2_XS": [0], "IQ2_S": [0], "IQ3_XXS": [0], "IQ3_S": [0], "IQ1_S": [0],
    "IQ1_M": [], "IQ4_NL": [0], "IQ4_XS": [0], "TQ1_0": [52], "TQ2_0": [64],
    "MXFP4": [], "NVFP4": [],
}
# What gguf-py 0.19 can dequantise (BF16 is a plain dtype, not a block type).
DECODABLE = sorted(t.name for t in quants._type_traits if t.name != "BF16")


def test_every_decodable_type_is_covered():
    assert sorted(F16_FIELDS) == DECODABLE


def random_blocks(name, rows, cols, rng):
    block, size = gguf.GGML_QUANT_SIZES[QT[name]]
    data = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    halves = lambda n: rng.uniform(-2.0, 2.0, size=n).astype(np.float16).view(np.uint16)  # noqa: E731
    for off in F16_FIELDS[name]:
        data[..., off:off + 2] = halves(data.shape[:2]).reshape(*data.shape[:2], 1).view(np.uint8).reshape(
            *data.shape[:2], 2)
    if name == "IQ1_M":  # d is the top nibbles of the four u16 scales at bytes 48..55
        sc = data[..., 48:56].copy().view(np.uint16)
        h = halves(data.shape[:2])
        for i in range(4):
            sc[..., i] = (sc[..., i] & 0x0FFF) | (((h >> (4 * i)) & 0xF) << 12)
        data[..., 48:56] = sc.view(np.uint8)
    if name == "MXFP4":  # an e8m0 exponent near 2^0 keeps the values (and their products) finite
        data[..., 0] = rng.integers(110, 140, size=data.shape[:2], dtype=np.uint8)
    return data.reshape(rows, -1)


def write_gguf(path, tensors):
    w = gguf.GGUFWriter(path, "llama")
    for name, (data, qt) in tensors.items():
        w.add_tensor(name, data, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("name", DECODABLE)
def test_dequantised_values_equal_gguf(tmp_path, name):
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    block = gguf.GGML_QUANT_SIZES[QT[name]][0]
    rows, cols = 6, 2 * max(block, 256)
    data = random_blocks(name, rows, cols, rng)
    path = tmp_path / f"{name}.gguf"
    write_gguf(path, {"blk.0.ffn_up.weight": (data, QT[name])})
    ref = quants.dequantize(data, QT[name])
    assert ref.shape == (rows, cols) and np.isfinite(ref).all()
    out = tmp_path / "t.f32"
    p = run_tool(path, "blk.0.ffn_up.weight", out)
    assert p.returncode == 0, p.stderr
    got = np.fromfile(out, dtype="<f4").reshape(rows, cols)
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32), err_msg=name)  # bit-identical


def run_tool(*args):
    return subprocess.run([tool("gguf_dump"), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_analyze_q4_k_matches_numpy_svd(tmp_path):
    rng = np.random.default_rng(3)
    # gguf-py cannot quantise to Q4_K: random Q4_K blocks with small finite scales stand in for a quantised
    # matrix (every bit pattern is a valid block).
    packed = random_blocks("Q4_K", 64, 512, rng)
    path = tmp_path / "q4k.gguf"
    write_gguf(path, {"blk.0.ffn_up.weight": (packed, QT.Q4_K)})
    out = tmp_path / "an"
    run(["analyze", path, "--out", out, "--store", tmp_path / "s.sqlite", "--quiet", "--svd-route", "gesdd"])
    rows = list(csv.DictReader(open(out / "metrics.csv")))
    r = [r for r in rows if r["tensor"] == "blk.0.ffn_up.weight"]
    assert len(r) == 1, rows
    w = quants.dequantize(packed, QT.Q4_K).astype(np.float64)
    s = np.linalg.svd(w, compute_uv=False)
    expect = {"max_weights_sval": s.max(), "min_weights_sval": s.min(), "nuclear_norm": s.sum(),
              "frob_norm": np.sqrt((s**2).sum())}
    for field, value in expect.items():
        np.testing.assert_allclose(float(r[0][field]), value, rtol=1e-10, err_msg=field)
    skipped = out / "skipped.csv"
    assert not skipped.exists() or "blk.0.ffn_up.weight" not in skipped.read_text()


def test_generated_grids_are_current():
    """src/core/gguf_grids_impl.hpp is what scripts/gen_gguf_grids.py renders from the installed gguf-py."""
    script = ROOT / "scripts" / "gen_gguf_grids.py"
    p = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
