"""Non-finite weights (NaN, ±Inf) through the CLI and the bindings.

analyze and compare report them: exit 0, one `diffract: warning:` line per tensor naming its file, a
nonfinite_count column, NaN metrics on exactly the affected matrices and head blocks. Edits refuse them
(exit 2, naming file and tensor) unless --allow-nonfinite, and then never write a non-finite value
where the edit's primary input held a finite one. Non-finite edit parameters are refused.
"""
import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import run

ml_dtypes = pytest.importorskip("ml_dtypes")
st = pytest.importorskip("safetensors.numpy")

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
          "F8_E5M2": ml_dtypes.float8_e5m2, "F8_E4M3": ml_dtypes.float8_e4m3fn}
Q0 = "model.layers.0.self_attn.q_proj.weight"  # family_f32: 4 heads of 32 rows
DOWN1 = "model.layers.1.mlp.down_proj.weight"
# q_proj: NaN in head 0, Inf in head 2 (e4m3fn has no Inf: NaN there too); down_proj: -Inf.
POISON = {Q0: [(2, 3, np.nan), (70, 5, np.inf)], DOWN1: [(0, 0, -np.inf)]}


def copy_as(src: Path, dst: Path, dtype: str, poison=None) -> Path:
    """`src` (one safetensors file) rewritten in `dtype`, with (row, col, value) entries set."""
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.suffix != ".safetensors":
            shutil.copy(f, dst / f.name)
    out = {}
    for name, a in st.load_file(str(src / "model.safetensors")).items():
        a = a.astype(np.float64).astype(DTYPES[dtype])
        for r, c, v in (poison or {}).get(name, []):
            a[r, c] = v
        out[name] = a
    st.save_file(out, str(dst / "model.safetensors"))
    return dst


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def values(d: Path):
    """Every tensor of d/model.safetensors as float64 (read by hand: safetensors.numpy cannot load f8)."""
    raw = (d / "model.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    out = {}
    for name, t in header.items():
        if name != "__metadata__":
            start, stop = t["data_offsets"]
            a = np.frombuffer(data[start:stop], dtype=np.dtype(DTYPES[t["dtype"]]).newbyteorder("<"))
            out[name] = a.reshape(t["shape"]).astype(np.float64)
    return out


def warning(model_dir: Path, tensor: str, n: int) -> str:
    entries = "entry" if n == 1 else "entries"
    return (f"diffract: warning: {model_dir / 'model.safetensors'}: tensor '{tensor}': {n} non-finite {entries} "
            f"(NaN/Inf); its metrics are NaN")


@pytest.fixture(scope="module")
def models(family_f32, tmp_path_factory):
    """Per dtype: (clean pretrained copy, poisoned math copy, clean code copy)."""
    root = tmp_path_factory.mktemp("nonfinite")
    out = {}
    for dt in DTYPES:
        out[dt] = (copy_as(family_f32 / "pretrained", root / dt / "base", dt),
                   copy_as(family_f32 / "math", root / dt / "bad", dt, POISON),
                   copy_as(family_f32 / "code", root / dt / "other", dt))
    return out


def expected_count(tensor, head):
    if tensor == Q0:
        return 2 if head == "" else (1 if head in ("0", "2") else 0)
    return 1 if tensor == DOWN1 else 0


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("precision", ["f32", "f64"])
def test_analyze_reports_nonfinite_matrices_and_analyses_the_rest(models, dtype, precision, tmp_path):
    _, bad, _ = models[dtype]
    args = ["analyze", bad, "--out", tmp_path / "out", "--store", tmp_path / "s.sqlite", "--quiet",
            "--precision", precision]
    p = run(args, check=False)
    assert p.returncode == 0, p.stderr
    assert "internal error" not in p.stderr and "LAPACK" not in p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("diffract: warning:")]
    assert lines == [warning(bad, Q0, 2), warning(bad, DOWN1, 1)]
    rows = read_csv(tmp_path / "out" / "metrics.csv")
    assert list(rows[0])[:12] == ["model", "tensor", "component", "layer", "role", "expert", "expert_kind", "head",
                                  "rows", "cols", "nonfinite_count", "precision"]
    metric_fields = list(rows[0])[12:]
    affected = 0
    for r in rows:
        n = expected_count(r["tensor"], r["head"])
        assert int(r["nonfinite_count"]) == n, (r["tensor"], r["head"])
        if n:
            affected += 1
            assert all(math.isnan(float(r[f])) for f in metric_fields), (r["tensor"], r["head"])
        else:
            for f in ("frob_norm", "l2_norm", "stable_rank", "weights_std"):
                assert math.isfinite(float(r[f])), (r["tensor"], r["head"], f)
    assert affected == 4  # q whole, q heads 0 and 2, down whole
    # Stored with their counts: a re-run reuses everything and says the same.
    again = run(args[:3] + [tmp_path / "again"] + args[4:], check=False)
    assert again.returncode == 0, again.stderr
    assert [ln for ln in again.stderr.splitlines() if ln.startswith("diffract: warning:")] == lines
    assert (tmp_path / "again" / "metrics.csv").read_text() == (tmp_path / "out" / "metrics.csv").read_text()


@pytest.mark.parametrize("route", ["auto", "gram", "gesdd"])
def test_compare_reports_nonfinite_pairs(models, route, tmp_path):
    base, bad, other = models["BF16"]
    p = run(["compare", "--base", base, bad, other, "--out", tmp_path / "out", "--store", tmp_path / "s.sqlite",
             "--svd-route", route, "--quiet"], check=False)
    assert p.returncode == 0, p.stderr
    assert [ln for ln in p.stderr.splitlines() if ln.startswith("diffract: warning:")] == [
        warning(bad, Q0, 2), warning(bad, DOWN1, 1)]
    rows = read_csv(tmp_path / "out" / "compare.csv")
    assert list(rows[0])[:13] == ["model", "base", "tensor", "component", "layer", "role", "expert", "expert_kind",
                                  "head", "rows", "cols", "nonfinite_count", "precision"]
    fields = list(rows[0])[13:]
    for r in rows:
        n = expected_count(r["tensor"], r["head"]) if r["model"] == "bad" else 0
        assert int(r["nonfinite_count"]) == n, (r["model"], r["tensor"], r["head"])
        if n:
            assert all(math.isnan(float(r[f])) for f in fields)
        else:
            assert math.isfinite(float(r["delta_frob_norm"])) and math.isfinite(float(r["avg_l_agreement"]))
    # The base holding the NaN/Inf: every model's rows of those matrices are NaN, one warning per tensor.
    p = run(["compare", "--base", bad, base, other, "--out", tmp_path / "rev", "--store", tmp_path / "s.sqlite",
             "--svd-route", route, "--quiet"], check=False)
    assert p.returncode == 0, p.stderr
    assert [ln for ln in p.stderr.splitlines() if ln.startswith("diffract: warning:")] == [
        warning(bad, Q0, 2), warning(bad, DOWN1, 1)]
    for r in read_csv(tmp_path / "rev" / "compare.csv"):
        assert int(r["nonfinite_count"]) == expected_count(r["tensor"], r["head"])


def test_gguf_f16_and_q8_0_with_nonfinite_entries(tmp_path):
    gguf = pytest.importorskip("gguf")
    from gguf import GGMLQuantizationType as QT

    rng = np.random.default_rng(3)
    path = tmp_path / "tiny.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_uint32("llama.block_count", 1)
    w.add_uint32("llama.attention.head_count", 4)
    w.add_uint32("llama.attention.head_count_kv", 4)
    w.add_uint32("llama.embedding_length", 64)
    w.add_tensor("token_embd.weight", rng.standard_normal((32, 64)).astype(np.float32))
    q = rng.standard_normal((64, 64)).astype(np.float16)
    q[5, 7] = np.inf
    w.add_tensor("blk.0.attn_q.weight", q)
    packed = gguf.quants.quantize(rng.standard_normal((96, 64)).astype(np.float32), QT.Q8_0)
    packed[3, 0:2] = [0x00, 0x7C]  # row 3, first block: its f16 scale is +Inf (32 entries)
    w.add_tensor("blk.0.ffn_up.weight", packed, raw_dtype=QT.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    p = run(["analyze", path, "--out", tmp_path / "out", "--store", tmp_path / "s.sqlite", "--quiet"], check=False)
    assert p.returncode == 0, p.stderr
    assert f"diffract: warning: {path}: tensor 'blk.0.attn_q.weight': 1 non-finite entry" in p.stderr
    assert f"diffract: warning: {path}: tensor 'blk.0.ffn_up.weight': 32 non-finite entries" in p.stderr
    got = {(r["tensor"], r["head"]): r for r in read_csv(tmp_path / "out" / "metrics.csv")}
    assert got[("blk.0.attn_q.weight", "")]["nonfinite_count"] == "1"
    assert got[("blk.0.attn_q.weight", "0")]["nonfinite_count"] == "1"
    assert got[("blk.0.attn_q.weight", "1")]["nonfinite_count"] == "0"
    assert math.isfinite(float(got[("blk.0.attn_q.weight", "1")]["frob_norm"]))
    assert got[("blk.0.ffn_up.weight", "")]["nonfinite_count"] == "32"
    assert math.isnan(float(got[("blk.0.ffn_up.weight", "")]["frob_norm"]))
    assert math.isfinite(float(got[("token_embd.weight", "")]["frob_norm"]))


def edit_args(kind, base, bad, other, out):
    """The CLI arguments of an edit of each kind whose inputs include `bad`, and its primary (the model
    whose stored values the output keeps where an input is non-finite; None: per omega)."""
    args, primary = {
        "permute": (["edit", "permute", "--model", bad, "--per-head"], bad),
        "truncate": (["edit", "truncate", "--base", base, "--model", bad, "--keep", "0.5"], bad),
        "truncate_bad_base": (["edit", "truncate", "--base", bad, "--model", other, "--rank", "3"], other),
        "transplant": (["edit", "transplant", "--base", base, "--model", bad], bad),
        "interpolate": (["edit", "interpolate", base, bad, "--omega", "0.3"], base),
        "interpolate_grid": (["edit", "interpolate", bad, base, "--grid", "0:1:0.5"], None),
        "merge_ties": (["edit", "merge", "--base", base, "--models", f"{bad},{other}", "--method", "ties",
                        "--density", "0.5"], base),
        "merge_dare": (["edit", "merge", "--base", bad, "--models", f"{base},{other}", "--method", "dare_linear",
                        "--density", "0.8"], bad),
        "rewind": (["edit", "rewind", "--base", base, "--model", bad, "--fraction", "0.5"], bad),
    }[kind]
    return args + ["--out", out, "--quiet"], primary


KINDS = ["permute", "truncate", "truncate_bad_base", "transplant", "interpolate", "interpolate_grid", "merge_ties",
         "merge_dare", "rewind"]


@pytest.mark.parametrize("dtype", ["F32", "BF16", "F16", "F8_E5M2"])
@pytest.mark.parametrize("kind", KINDS)
def test_edits_refuse_nonfinite_then_carry_it_through(models, dtype, kind, tmp_path):
    base, bad, other = models[dtype]
    args, primary = edit_args(kind, base, bad, other, tmp_path / "out")
    p = run(args, check=False)
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "internal error" not in p.stderr
    assert f"{bad / 'model.safetensors'}: tensor '" in p.stderr and "non-finite" in p.stderr, p.stderr
    assert "--allow-nonfinite" in p.stderr
    assert not (tmp_path / "out").exists()

    p = run(args + ["--allow-nonfinite"], check=False)
    assert p.returncode == 0, p.stderr
    outs = [tmp_path / "out"] if primary else sorted((tmp_path / "out").glob("omega_*"))
    for out in outs:
        prim = primary or (bad if out.name == "omega_0.00" else base if out.name == "omega_1.00" else bad)
        got, want, poisoned = values(out), values(prim), values(bad)
        for name, v in got.items():
            new_bad = ~np.isfinite(v) & np.isfinite(want[name])
            assert not new_bad.any(), f"{out.name} {name}: non-finite values the input did not have"
            # Where an input is non-finite the output keeps the primary's value, bit for bit.
            mask = ~np.isfinite(poisoned[name])
            np.testing.assert_array_equal(v[mask], want[name][mask])
        if kind == "permute":  # the spectrum of an untouched matrix is permuted, not poisoned
            assert np.isfinite(got[Q0]).sum() == got[Q0].size - 2
            assert not np.array_equal(got["lm_head.weight"], want["lm_head.weight"])


@pytest.mark.parametrize("flags", [
    ["merge", "--lambda", "nan"], ["merge", "--lambda", "inf"], ["merge", "--weights", "1,nan"],
    ["merge", "--weights", "-inf,1"], ["merge", "--density", "nan", "--method", "ties"],
    ["interpolate", "--omega", "inf"], ["interpolate", "--omega", "-inf"], ["interpolate", "--omega", "nan"],
    ["interpolate", "--grid", "0,nan"], ["interpolate", "--grid", "0:inf:0.5"],
    ["truncate", "--keep", "inf"], ["truncate", "--energy", "nan"], ["rewind", "--fraction", "inf"],
])
def test_nonfinite_edit_parameters_are_refused(models, flags, tmp_path):
    base, _, other = models["F32"]
    kind, rest = flags[0], flags[1:]
    inputs = {"merge": ["--base", base, "--models", f"{other},{other}"] if "--weights" in rest
              else ["--base", base, "--models", other],
              "interpolate": [base, other], "truncate": ["--base", base, "--model", other],
              "rewind": ["--base", base, "--model", other]}[kind]
    p = run(["edit", kind, *inputs, *rest, "--out", tmp_path / "out"], check=False)
    assert p.returncode == 2, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "internal error" not in p.stderr
    assert not (tmp_path / "out").exists()


def test_edit_overflowing_the_dtype_is_refused(models, tmp_path):
    base, _, other = models["F16"]
    p = run(["edit", "interpolate", base, other, "--omega", "1e6", "--out", tmp_path / "out"], check=False)
    assert p.returncode == 2 and "overflows" in p.stderr and f"{base / 'model.safetensors'}: tensor '" in p.stderr
    assert not (tmp_path / "out").exists()


def test_bindings_warn_and_refuse(models, tmp_path):
    diffract = pytest.importorskip("diffract_spectral")
    base, bad, _ = models["BF16"]
    with pytest.warns(RuntimeWarning, match=r"non-finite entries \(NaN/Inf\); its metrics are NaN") as rec:
        res = diffract.analyze(bad, store=tmp_path / "s.sqlite")
    lines = [str(w.message) for w in rec if issubclass(w.category, RuntimeWarning)]
    assert len(lines) == 2 and f"tensor '{Q0}': 2 non-finite entries" in lines[0]
    m = res.metrics
    counts = {(t, str(int(h)) if isinstance(h, (int, np.integer)) else ""): int(n)  # no head: <NA>
              for t, h, n in zip(m["tensor"], m["head"], m["nonfinite_count"])}
    assert counts[(Q0, "")] == 2 and counts[(Q0, "1")] == 0 and counts[(DOWN1, "")] == 1
    with pytest.warns(RuntimeWarning):
        cmp = diffract.compare([bad], base=base, store=tmp_path / "s.sqlite")
    assert max(cmp.matrices["nonfinite_count"]) == 2
    with pytest.raises(diffract.InputError, match="non-finite"):
        diffract.edit.permute(model=bad, out=tmp_path / "e")
    diffract.edit.permute(model=bad, out=tmp_path / "e", allow_nonfinite=True)
    assert np.isnan(values(tmp_path / "e")[Q0][2, 3])
