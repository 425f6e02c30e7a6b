"""diffract report: the HTML page from the synthetic family (analyze + compare + sweeps), its figures
parsed and rendered in headless Chromium (screenshot saved; copied to $DIFFRACT_REPORT_SCREENSHOT),
SVG/PNG figure files, the evolution series and the one-line errors."""
import csv
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import run

FIGURE = re.compile(r'<svg class="figure".*?</svg>', re.S)
MARKS = re.compile(r"<(rect|circle|polyline|polygon|line)\b")
# heatmaps (2) + layer curves (2) + boxes (2) + ESD + scatter + rewind + interpolation + truncation
EXPECTED_FIGURES = 11


def write_sweeps(root: Path):
    rewind = root / "sweep-rewind"
    rewind.mkdir()
    rows = ["order,seed,x,score"]
    for order in ("importance", "random"):
        for seed in range(3 if order == "random" else 1):
            for i in range(6):
                x = i / 5
                rows.append(f"{order},{seed},{x},{0.5 + 0.05 * x - 0.2 * x * x + 0.01 * seed}")
    (rewind / "curve.csv").write_text("\n".join(rows) + "\n")
    (rewind / "summary.json").write_text('{"kind": "rewind", "baseline": 0.5}')
    trunc = root / "sweep-truncate"
    trunc.mkdir()
    (trunc / "curve.csv").write_text("order,seed,x,score\n" + "".join(
        f"svd,0,{k / 10},{0.6 * (1 - (1 - k / 10) ** 3)}\n" for k in range(1, 11)))
    interp = root / "sweep-interpolate"
    interp.mkdir()
    (interp / "curve.csv").write_text("order,seed,x,score_math,score_code\n" + "".join(
        f"linear,0,{w / 10},{0.6 - 0.3 * w / 10},{0.2 + 0.3 * w / 10}\n" for w in range(11)))
    return [rewind, trunc, interp]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    fam = root / "fam"
    store = root / "results.sqlite"
    run(["generate", "--out", fam])
    models = [fam / m for m in ("pretrained", "math", "code", "text")]
    run(["analyze", *models, "--out", root / "an", "--store", store, "--quiet"])
    run(["compare", "--base", models[0], models[1], models[2], "--reference", models[3], "--out", root / "cmp",
         "--store", store, "--quiet"])
    sweeps = write_sweeps(root)
    return {"root": root, "fam": fam, "store": store, "dirs": [root / "an", root / "cmp", *sweeps]}


def figures_of(html: str):
    figs = FIGURE.findall(html)
    for f in figs:
        ET.fromstring(f)  # well-formed XML
    return figs


def test_html_report_has_every_figure(results):
    out = results["root"] / "report.html"
    p = run(["report", *results["dirs"], "--store", results["store"], "--out", out])
    html = out.read_text()
    figs = figures_of(html)
    assert len(figs) == EXPECTED_FIGURES, p.stderr
    for f in figs:
        assert len(MARKS.findall(f)) > 30, f[:200]
        assert "<text" in f  # axis labels, titles
    assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert html.count('class="cell"') > 0 and "layer 0, head 0" in html  # heatmap hover text
    assert "evolution figures: off" in p.stderr


def test_report_renders_in_chromium(results):
    chromium = shutil.which("chromium")
    assert chromium, "chromium is not installed (scripts/setup_debian.sh installs it)"
    html = results["root"] / "report.html"
    if not html.exists():
        run(["report", *results["dirs"], "--store", results["store"], "--out", html])
    shot = results["root"] / "report.png"
    base = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1400,6000"]
    url = html.resolve().as_uri()
    p = subprocess.run([*base, "--enable-logging=stderr", "--v=0", f"--screenshot={shot}", url],
                       capture_output=True, text=True, timeout=180)
    assert shot.exists() and shot.stat().st_size > 10000, p.stderr
    assert "Uncaught" not in p.stderr and "SyntaxError" not in p.stderr, p.stderr
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=180).stdout
    assert dom.count('<svg class="figure"') == EXPECTED_FIGURES
    assert "</html>" in dom
    if os.environ.get("DIFFRACT_REPORT_SCREENSHOT"):
        shutil.copy(shot, os.environ["DIFFRACT_REPORT_SCREENSHOT"])


def test_svg_and_png_files(results):
    out = results["root"] / "figs"
    run(["report", *results["dirs"], "--store", results["store"], "--out", out, "--format", "svg", "--quiet"])
    svgs = sorted(out.glob("*.svg"))
    assert len(svgs) == EXPECTED_FIGURES
    for f in svgs:
        ET.parse(f)
    assert shutil.which("rsvg-convert"), "rsvg-convert is not installed (librsvg2-bin)"
    png = results["root"] / "pngs"
    run(["report", results["dirs"][0], "--out", png, "--format", "png", "--quiet", "--no-evolution"])
    pngs = sorted(png.glob("*.png"))
    assert pngs and all(f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for f in pngs)
    assert not list(png.glob("*.tmp*"))


def test_evolution_series_and_config(results):
    fam, root = results["fam"], results["root"]
    named = [f"run-step{s}={fam / m}" for s, m in ((3000, "text"), (0, "pretrained"), (1000, "math"), (2000, "code"))]
    # The tiny family's matrices hold fewer eigenvalues than the default minimum fit size: every fit.
    run(["analyze", *named, "--out", root / "series", "--store", results["store"], "--quiet", "--min-fit-size", "0"])
    cfg = root / "cfg.json"
    cfg.write_text('{"metrics": ["pl_alpha"], "roles": ["attn_q", "mlp_down"], "colours": {"attn_q": "#ff0000"},'
                   ' "title": "series"}')
    out = root / "series.html"
    run(["report", root / "series", "--out", out, "--config", cfg])
    html = out.read_text()
    ids = re.findall(r'<section id="([^"]+)"', html)
    assert "evolution-pl_alpha" in ids and "evolution-boxes-pl_alpha" in ids
    evo = FIGURE.findall(html)[ids.index("evolution-pl_alpha")]
    assert "training step" in evo and "#ff0000" in evo
    # checkpoints in step order on the box plot's axis
    boxes = FIGURE.findall(html)[ids.index("evolution-boxes-pl_alpha")]
    order = re.findall(r">(run-step\d+)<", boxes)[:4]  # the first panel's axis
    assert order == ["run-step0", "run-step1000", "run-step2000", "run-step3000"]


def test_store_alone(results):
    out = results["root"] / "from-store.html"
    run(["report", results["store"], "--out", out, "--no-evolution"])
    figs = figures_of(out.read_text())
    assert len(figs) >= 5  # agreement heatmap, layer curves, boxes, ESD, scatter


def test_bad_inputs_one_line_exit_2(results, tmp_path):
    p = run(["report", tmp_path / "missing", "--out", tmp_path / "r.html"], check=False)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "missing" in p.stderr
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metrics.csv").write_text("model,tensor,layer,role,head,pl_alpha\nm,t,0,attn_q,,1.5\nm,t,x,attn_q,,2\n")
    p = run(["report", bad, "--out", tmp_path / "r.html"], check=False)
    assert p.returncode == 2 and f"{bad / 'metrics.csv'}:3:" in p.stderr, p.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    p = run(["report", empty, "--out", tmp_path / "r.html"], check=False)
    assert p.returncode == 2 and "no metrics.csv" in p.stderr
    p = run(["report", results["dirs"][0], "--out", tmp_path / "r", "--format", "pdf"], check=False)
    assert p.returncode == 2 and "--format" in p.stderr
    assert not (tmp_path / "r.html").exists()


def test_flagged_fits_are_left_out_and_counted(results, tmp_path):
    """A fit whose status is not ok (issue 18: at_bound, too_few, no_convergence) is not drawn, and the
    caption of every figure of that field says how many were flagged, by status."""
    rows = list(csv.DictReader(open(results["root"] / "an" / "metrics.csv")))
    assert "pl_status" in rows[0]
    whole = [i for i, r in enumerate(rows) if r["head"] == "" and r["role"] in ("attn_q", "attn_v", "mlp_down")]
    marked = whole[:3]
    for i in marked:
        rows[i]["pl_status"] = "at_bound:alpha"
        rows[i]["pl_alpha"] = "987.654"  # a value that must not be drawn
    flagged_before = sum(r["pl_status"] not in ("ok", "nan", "") for r in rows)
    d = tmp_path / "an"
    d.mkdir()
    with open(d / "metrics.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    out = tmp_path / "r.html"
    run(["report", d, "--out", out, "--no-evolution", "--quiet"])
    html = out.read_text()
    assert "987.654" not in html and "988" not in html
    counted = [int(m) for m in re.findall(r"(\d+) of \d+ fits behind pl_alpha are flagged", html)]
    assert counted and all(n == flagged_before for n in counted), (counted, flagged_before)
    assert "at_bound:alpha: " in html
    # Fields of no fit, and unflagged data, say nothing.
    assert "fits behind stable_rank" not in html
