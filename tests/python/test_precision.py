"""The accuracy contract of --precision (docs/metrics.md), against numpy's f64 SVD.

--precision f32 on the CPU forms well-conditioned Gram matrices in f32 (ssyrk) and keeps f64 for the rest
(the kF32GramGuard): every singular value within 1e-4 relative of f64 gesdd, on matrices where an
unguarded f32 product would miss that (a tall matrix with one weak direction).
"""
import csv
import shutil
import sqlite3

import numpy as np
from safetensors.numpy import save_file

from conftest import run

FIELDS = ("max_weights_sval", "min_weights_sval", "nuclear_norm", "frob_norm")
F32_RTOL = 1e-4  # the documented contract of --precision f32 on every singular value
F64_RTOL = 1e-9  # the default: the Gram route against gesdd, well-conditioned matrices


def matrices():
    rng = np.random.default_rng(16)
    tall = rng.standard_normal((1024, 256)) * 0.02
    # One weak direction, not aligned with an axis: lambda_min / lambda_max = 1e-7, where an f32 product's
    # absolute error (~0.05 eps32 lambda_max) would move sigma_min by ~1 %; the guard must send it to f64.
    u, _ = np.linalg.qr(rng.standard_normal((1024, 256)))
    v, _ = np.linalg.qr(rng.standard_normal((256, 256)))
    s = np.linspace(0.5, 1.0, 256)
    s[0] = np.sqrt(1e-7)
    weak = (u * s) @ v.T
    wide = rng.standard_normal((128, 640)) * 0.02  # aspect 5: f32 product tried (kF32GramMinAspect 4)
    square = rng.standard_normal((256, 256)) * 0.02  # ill-conditioned at random: the f64 product
    spiked = tall + 0.5 * np.outer(rng.standard_normal(1024), rng.standard_normal(256)) / 64
    mats = {"tall": tall, "weak": weak, "wide": wide, "square": square, "spiked": spiked}
    return {f"model.layers.0.{name}.weight": m.astype(np.float32) for name, m in mats.items()}


def reference(w):
    s = np.linalg.svd(w.astype(np.float64), compute_uv=False)
    return {"max_weights_sval": s[0], "min_weights_sval": s[-1], "nuclear_norm": s.sum(),
            "frob_norm": np.sqrt((s**2).sum())}


def analyze(ckpt, out, *flags):
    run(["analyze", ckpt, "--out", out, "--store", out.parent / "s.sqlite", "--quiet", "--no-heads",
         "--metrics", ",".join(FIELDS), "--threads", "1", *flags])
    return {r["tensor"]: r for r in csv.DictReader(open(out / "metrics.csv"))}


def checkpoint(tmp_path):
    """The matrices() as one safetensors checkpoint: (its directory, the matrices)."""
    ckpt = tmp_path / "m"
    ckpt.mkdir()
    mats = matrices()
    save_file(mats, str(ckpt / "model.safetensors"))
    return ckpt, mats


def test_precision_f32_and_f64_against_numpy(tmp_path):
    ckpt, mats = checkpoint(tmp_path)
    f32 = analyze(ckpt, tmp_path / "f32", "--precision", "f32")
    f64 = analyze(ckpt, tmp_path / "f64")
    assert set(f32) == set(mats)
    for name, w in mats.items():
        ref = reference(w)
        for field in FIELDS:
            np.testing.assert_allclose(float(f32[name][field]), ref[field], rtol=F32_RTOL, err_msg=f"{name} {field}")
            rtol = F64_RTOL if "square" not in name and "weak" not in name else 1e-6
            np.testing.assert_allclose(float(f64[name][field]), ref[field], rtol=rtol, err_msg=f"{name} {field}")
    # The well-conditioned tall/wide matrices took the f32 product (their values differ from f64's in the
    # last digits); square and weak ones the f64 one (identical to f64's: f32 weights widen exactly).
    for name in mats:
        same = all(f32[name][f] == f64[name][f] for f in FIELDS)
        assert same == (".square." in name or ".weak." in name), name


def test_every_row_says_which_precision_computed_it(tmp_path):
    """Issue 36: a matrix the f32 tier cannot serve within its contract falls back to f64, and its row's
    `precision` column says so — exactly the rows whose values are the f64 tier's (the square matrix and the
    one with a weak direction); the f64 tier says f64 everywhere, f32 sgesdd f32 everywhere; reused results
    keep the column."""
    ckpt, mats = checkpoint(tmp_path)
    f32 = analyze(ckpt, tmp_path / "f32", "--precision", "f32")
    f64 = analyze(ckpt, tmp_path / "f64")
    for name in mats:
        fell_back = all(f32[name][f] == f64[name][f] for f in FIELDS)
        assert f32[name]["precision"] == ("f64" if fell_back else "f32"), name
        assert f64[name]["precision"] == "f64"
    assert {r["precision"] for r in f32.values()} == {"f32", "f64"}
    sgesdd = analyze(ckpt, tmp_path / "sgesdd", "--precision", "f32", "--svd-route", "gesdd")
    assert {r["precision"] for r in sgesdd.values()} == {"f32"}
    again = analyze(ckpt, tmp_path / "again", "--precision", "f32")  # every result from the store
    assert (tmp_path / "again" / "metrics.csv").read_bytes() == (tmp_path / "f32" / "metrics.csv").read_bytes()
    assert again.keys() == f32.keys()


def test_compare_rows_say_which_precision_computed_them(tmp_path):
    """Under --precision f32 compare's Gram route forms the products in f32 where the f32 guard keeps them
    (tall or wide matrices whose base and model spectra have lambda_min/lambda_max >= 1e-3) and in f64
    elsewhere, and decomposes in f64; each row says which. The whole-matrix route (sgesdd) says f32. A
    row computed in f64 is the f64 tier's row, an f32 one agrees with it to the f32 contract."""
    base, model = tmp_path / "base", tmp_path / "model"
    mats = matrices()
    rng = np.random.default_rng(3)
    for d, m in ((base, mats), (model, {k: (v + 1e-3 * rng.standard_normal(v.shape)).astype(np.float32)
                                        for k, v in mats.items()})):
        d.mkdir()
        save_file(m, str(d / "model.safetensors"))

    def compare(out, *flags):
        run(["compare", "--base", base, model, "--out", out, "--store", tmp_path / "s.sqlite", "--quiet",
             "--no-heads", "--threads", "1", *flags])
        return {r["tensor"].split(".")[-2]: r for r in csv.DictReader(open(out / "compare.csv"))}

    f64 = compare(tmp_path / "c64")
    assert {r["precision"] for r in f64.values()} == {"f64"}
    f32 = compare(tmp_path / "c32", "--precision", "f32")
    # tall and wide pass the guard; the weak direction (1e-7) and the square matrix do not.
    assert {n: r["precision"] for n, r in f32.items()} == {
        "tall": "f32", "wide": "f32", "weak": "f64", "square": "f64", "spiked": "f32"}
    for name, row in f32.items():
        for field in ("avg_l_agreement", "avg_r_agreement", "rel_sval_change", "delta_l2_norm", "pl_ks"):
            a, b = float(row[field]), float(f64[name][field])
            if row["precision"] == "f64":
                assert a == b, (name, field)
            else:
                assert abs(a - b) <= 1e-4 * abs(b), (name, field, a, b)
        # The delta's product is f64 in both tiers: its fields agree to f64 rounding.
        assert abs(float(row["delta_l2_norm"]) - float(f64[name]["delta_l2_norm"])) <= 1e-12 * float(
            f64[name]["delta_l2_norm"])
    again = compare(tmp_path / "c32_again", "--precision", "f32")  # every result from the store
    assert {n: r["precision"] for n, r in again.items()} == {n: r["precision"] for n, r in f32.items()}
    sgesdd = compare(tmp_path / "c32g", "--precision", "f32", "--svd-route", "gesdd")
    assert {r["precision"] for r in sgesdd.values()} == {"f32"}


def test_the_report_header_says_the_precision(tmp_path):
    """The report's header says which precision computed its rows, and how many fell back to f64."""
    ckpt, mats = checkpoint(tmp_path)
    f32 = analyze(ckpt, tmp_path / "f32", "--precision", "f32")
    fell_back = sum(r["precision"] == "f64" for r in f32.values())
    analyze(ckpt, tmp_path / "f64")
    for d, want in (("f32", f"Precision: f32 for {len(mats) - fell_back} rows, f64 for {fell_back}"),
                    ("f64", f"Precision: f64 (all {len(mats)} rows)")):
        run(["report", tmp_path / d, "--out", tmp_path / f"{d}.html"])
        assert want in (tmp_path / f"{d}.html").read_text(), d


def test_a_report_from_a_store_never_mixes_configurations(tmp_path):
    """A store keeps a matrix's results under every configuration it was computed in (both tiers, other
    options, an older version's key). A report from the store alone takes each matrix's results from one
    configuration (this version's, then the one most matrices share, then f64) and says that it chose."""
    ckpt, mats = checkpoint(tmp_path)
    store = tmp_path / "s.sqlite"
    f32 = analyze(ckpt, tmp_path / "f32", "--precision", "f32")
    fell_back = sum(r["precision"] == "f64" for r in f32.values())
    assert 0 < fell_back < len(mats) and f32["model.layers.0.tall.weight"]["precision"] == "f32"
    f32_header = f"Precision: f32 for {len(mats) - fell_back} rows, f64 for {fell_back}"

    def report(name, source=store):
        out = tmp_path / f"{name}.html"
        run(["report", source, "--out", out, "--quiet"])
        return out.read_text()

    # One matrix also in f64: the f32 configuration covers more matrices, so every matrix shows it (mixed,
    # the tall matrix would have shown its f64 row's precision beside f32 values).
    analyze(ckpt, tmp_path / "f64_tall", "--match", "tall")
    html = report("more_f32")
    assert f32_header in html and "1 of its 5 units" in html and "never a mix" in html
    # Every matrix in both tiers: a tie, which the f64 tier wins, for every matrix alike.
    analyze(ckpt, tmp_path / "f64")
    html = report("tie")
    assert f"Precision: f64 (all {len(mats)} rows)" in html and "5 of its 5 units" in html
    # The f64 results relabelled as an older version's: this version's f32 results win everywhere.
    older = tmp_path / "older.sqlite"
    shutil.copy(store, older)
    with sqlite3.connect(older) as db:
        db.execute("UPDATE results SET config = replace(config, 'v3;', 'v2;') WHERE config LIKE 'v3;precision=f64;%'")
    html = report("older", older)
    assert f32_header in html and "older diffract version" not in html
    # Nothing but older results: shown, and said to be older.
    with sqlite3.connect(older) as db:
        db.execute("DELETE FROM results WHERE config LIKE 'v3;%'")
    html = report("only_older", older)
    assert f"Precision: f64 (all {len(mats)} rows)" in html
    assert "5 units have only an older diffract version&#39;s results" in html


def test_compare_f32_products_never_mix_with_another_models_f64_base(tmp_path):
    """The base is factorised once for all models. When one model's spectrum fails the f32 guard its unit is
    computed again in f64, the base too, and a model after it uses that f64 base: whatever the order, each
    row is one precision, an f64 row is the f64 tier's row bit for bit, an f32 row agrees to the contract."""
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((1024, 256)) * 0.02).astype(np.float32)
    u, _ = np.linalg.qr(rng.standard_normal((1024, 256)))
    v, _ = np.linalg.qr(rng.standard_normal((256, 256)))
    s = np.linspace(0.5, 1.0, 256)
    s[0] = np.sqrt(1e-7)  # one weak direction: lambda_min / lambda_max = 1e-7, under the f32 guard
    models = {"base": w, "near": w + 1e-3 * rng.standard_normal(w.shape).astype(np.float32),
              "weak": ((u * s) @ v.T).astype(np.float32)}
    for name, m in models.items():
        (tmp_path / name).mkdir()
        save_file({"model.layers.0.mlp.up_proj.weight": m.astype(np.float32)}, str(tmp_path / name / "model.safetensors"))

    def compare(out, order, *flags):
        run(["compare", "--base", tmp_path / "base", *[tmp_path / n for n in order], "--out", tmp_path / out,
             "--store", tmp_path / f"{out}.sqlite", "--quiet", "--no-heads", "--threads", "1", *flags])
        return {r["model"]: r for r in csv.DictReader(open(tmp_path / out / "compare.csv"))}

    f64 = compare("f64", ["near", "weak"])
    fields = [f for f in f64["near"] if f not in ("model", "base", "tensor", "component", "layer", "role", "expert",
                                                  "expert_kind", "head", "rows", "cols", "nonfinite_count",
                                                  "precision")]
    for order in (["near", "weak"], ["weak", "near"]):
        f32 = compare("f32_" + "_".join(order), order, "--precision", "f32")
        assert f32["weak"]["precision"] == "f64"
        assert f32["near"]["precision"] == ("f32" if order[0] == "near" else "f64"), order
        for name, row in f32.items():
            for field in fields:
                a, b = float(row[field]), float(f64[name][field])
                if row["precision"] == "f64":
                    assert a == b or (np.isnan(a) and np.isnan(b)), (order, name, field)
                else:
                    assert abs(a - b) <= 1e-4 * abs(b) + 1e-12, (order, name, field, a, b)
