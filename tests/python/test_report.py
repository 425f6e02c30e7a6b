"""diffract report: the HTML page from the synthetic family (analyze + compare + sweeps), its figures
parsed, their text boxes checked for overlap, and rendered in headless Chromium at 1400 and 800 px (no
horizontal overflow; screenshots copied to the directory $DIFFRACT_REPORT_SCREENSHOT when set), SVG/PNG
figure files, the evolution series and the one-line errors."""
import csv
import html as html_lib
import json
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import run
from report_inputs import FIGURE, figures_of, label_problems, make_results

MARKS = re.compile(r"<(rect|circle|polyline|polygon|line)\b")
# heatmaps (2) + agreement by layer (2) + layer curves (2) + boxes (2) + ESD + update spectra (math,
# code, text) + scatter + rewind + interpolation + truncation
EXPECTED_FIGURES = 16
WIDTHS = (1400, 800)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return make_results(tmp_path_factory.mktemp("report"))


@pytest.fixture(scope="module")
def page(results):
    out = results["root"] / "report.html"
    p = run(["report", *results["dirs"], "--store", results["store"], "--out", out])
    return {"path": out, "html": out.read_text(), "stderr": p.stderr}


def test_html_report_has_every_figure(page):
    html = page["html"]
    figs = figures_of(html)
    assert len(figs) == EXPECTED_FIGURES, page["stderr"]
    for f in figs.values():
        assert len(MARKS.findall(f)) > 30, f[:200]
        assert "<text" in f  # axis labels, titles
    assert "<script" not in html and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert html.count('class="cell"') > 0 and "layer 0, head 0" in html  # heatmap hover text
    assert "evolution figures: off" in html  # a note: in "Not shown", and on stderr with --verbose
    assert "diffract: note:" not in page["stderr"] and "panels not drawn" in page["stderr"]
    # Every model keeps one colour across figures: math's box in the agreement figure is its line's colour.
    layers = figs["layers-stable_rank"]
    math_colour = re.search(r'stroke="(#[0-9A-Fa-f]{6})"[^>]*><title>math mean<', layers)[1]
    assert f'fill="{math_colour}"' in figs["agreement-layers-avg_l_agreement"]


def test_changed_more_has_one_colour_across_head_figures(page):
    """Issue 31: yellow means "changed more" in both head heatmaps (the least agreeing head in the
    agreement figure, the largest update in the update-norm figure), and red in both difference panels."""
    figs = figures_of(page["html"])
    cell = re.compile(r'fill="(#[0-9a-f]{6})" class="cell"><title>([^<]*): ([-\d.e+]+)</title>')

    def extreme(fig, pick, panel_filter):
        cells = [(float(v), c) for c, t, v in cell.findall(fig) if panel_filter(t)]
        return pick(cells)[1]

    agreement = next(f for k, f in figs.items() if k.startswith("heads-agreement"))
    norms = figs["heads-update-norm"]
    plain = lambda t: " − " not in t  # noqa: E731
    diff = lambda t: " − " in t  # noqa: E731
    yellow = "#fde725"
    assert extreme(agreement, min, plain) == yellow
    assert extreme(norms, max, plain) == yellow
    def reddish(c):
        return int(c[1:3], 16) > int(c[5:7], 16)

    assert reddish(extreme(agreement, min, diff)) and not reddish(extreme(agreement, max, diff))
    assert reddish(extreme(norms, max, diff)) and not reddish(extreme(norms, min, diff))
    assert "red: the model rotated more" in page["html"]


# A script appended to a copy of the page (the report itself has none): after layout it records
# whether the page overflows the window and the size of every figure, into a <pre> that
# --dump-dom prints.
PROBE = """<script>
addEventListener('load', () => {
  const doc = document.documentElement;
  const r = {scrollWidth: doc.scrollWidth, innerWidth: innerWidth, height: doc.scrollHeight,
    figures: [...document.querySelectorAll('svg.figure')].map(f => {
      const b = f.getBoundingClientRect();
      return {id: f.closest('section').id, width: b.width, height: b.height, left: b.left, right: b.right,
              marks: f.querySelectorAll('rect,circle,polyline,polygon,line,text').length};
    })};
  const pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(r);
  document.body.appendChild(pre);
});
</script>"""


def chromium_layout(chromium, page_path: Path, width: int):
    probe = page_path.with_name(page_path.stem + f"-probe{width}.html")
    probe.write_text(page_path.read_text().replace("</body>", PROBE + "</body>"))
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           f"--window-size={width},1000", "--virtual-time-budget=5000", "--dump-dom", probe.resolve().as_uri()]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    m = re.search(r'<pre id="probe">(.*?)</pre>', p.stdout, re.S)
    assert m, p.stderr[-2000:]
    return json.loads(html_lib.unescape(m[1]))


def test_report_renders_in_chromium_at_two_widths(page, results):
    """At 1400 and 800 px: no horizontal overflow, every figure present, non-empty and inside the
    window; full-page screenshots saved (copied to $DIFFRACT_REPORT_SCREENSHOT, a directory, when set)."""
    chromium = shutil.which("chromium")
    assert chromium, "chromium is not installed (scripts/setup_debian.sh installs it)"
    ids = list(figures_of(page["html"]))
    keep = os.environ.get("DIFFRACT_REPORT_SCREENSHOT")
    for width in WIDTHS:
        layout = chromium_layout(chromium, page["path"], width)
        assert layout["innerWidth"] == width
        assert layout["scrollWidth"] <= layout["innerWidth"], (width, layout["scrollWidth"])
        figs = layout["figures"]
        assert [f["id"] for f in figs] == ids
        for f in figs:
            assert f["width"] > 200 and f["height"] > 100 and f["marks"] > 30, (width, f)
            assert f["left"] >= 0 and f["right"] <= width, (width, f)
        shot = results["root"] / f"report-{width}.png"
        height = min(int(layout["height"]) + 20, 30000)
        p = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                            f"--window-size={width},{height}", f"--screenshot={shot}", page["path"].resolve().as_uri()],
                           capture_output=True, text=True, timeout=180)
        assert shot.exists() and shot.stat().st_size > 50000, p.stderr[-2000:]
        png = shot.read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert int.from_bytes(png[16:20], "big") == width  # the IHDR width: nothing cut or padded
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copy(shot, Path(keep) / shot.name)


def test_text_labels_do_not_overlap(page):
    """Every figure: no two text boxes (tick labels, axis titles, panel titles, legends, reference labels)
    overlap, and none reaches outside the figure."""
    problems = {fid: label_problems(svg) for fid, svg in figures_of(page["html"]).items()}
    assert not {k: v for k, v in problems.items() if v}


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
    order = re.findall(r">(run-[^<]+)<", boxes)[:4]  # the first panel's axis
    assert order == ["run-step0", "run-step1000", "run-step2000", "run-step3000"]
    assert not [p for svg in figures_of(html).values() for p in label_problems(svg)]


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
    # A result file without one of the columns that place its rows (layer, role, head; compare's
    # base) is malformed, not a file whose rows lack those values.
    for name, dropped in (("compare.csv", "layer"), ("compare.csv", "role"), ("compare.csv", "base"),
                          ("metrics.csv", "head")):
        source = results["root"] / ("cmp" if name == "compare.csv" else "an") / name
        with open(source) as f:
            rows = list(csv.reader(f))
        i = rows[0].index(dropped)
        cut = tmp_path / f"cut-{dropped}"
        cut.mkdir(exist_ok=True)
        with open(cut / name, "w", newline="") as f:
            csv.writer(f, lineterminator="\n").writerows([r[:i] + r[i + 1:] for r in rows])
        p = run(["report", cut, "--out", tmp_path / "r.html"], check=False)
        assert p.returncode == 2 and f"missing column '{dropped}'" in p.stderr, p.stderr
    assert not (tmp_path / "r.html").exists()


def test_flagged_fits_are_drawn_hollow_and_counted(results, tmp_path):
    """A fit whose status is not ok (issue 18: at_bound, too_few, no_convergence) stays out of every mean,
    band and box, and the caption of every figure of that field says how many were flagged, by status;
    issue 31: a flagged whole matrix is still shown in the layer-wise figure, hollow, its status and tail
    size in its tooltip, never as a filled point."""
    rows = list(csv.DictReader(open(results["root"] / "an" / "metrics.csv")))
    assert "pl_status" in rows[0]
    whole = [i for i, r in enumerate(rows) if r["head"] == "" and r["role"] in ("attn_q", "attn_v", "mlp_down")]
    marked = whole[:3]
    for i in marked:
        rows[i]["pl_status"] = "at_bound:alpha"
        rows[i]["pl_alpha"] = "987.654"  # a value that must not enter any mean
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
    hollow = re.findall(r'<circle[^>]*fill="#ffffff"[^>]*stroke="[^"]+"[^>]*><title>([^<]*)</title>', html)
    assert len([t for t in hollow if "987.7" in t]) == len(marked), hollow
    assert all("flagged at_bound:alpha" in t and "tail of" in t for t in hollow if "987.7" in t)
    # Nowhere else: not in a filled point, a mean's tooltip, or any text.
    rest = re.sub(r'<circle[^>]*fill="#ffffff"[^>]*><title>[^<]*</title>', "", html)
    text = re.sub(r'="[^"]*"', "", rest)
    assert "987.654" not in rest and not re.search(r"(?<![\w#.])98[78](?:\.\d+)?(?![\w.])", text)
    counted = [int(m) for m in re.findall(r"(\d+) of \d+ fits behind pl_alpha are flagged", html)]
    assert counted and all(n == flagged_before for n in counted), (counted, flagged_before)
    assert "at_bound:alpha: " in html and "drawn hollow" in html
    # Fields of no fit, and unflagged data, say nothing.
    assert "fits behind stable_rank" not in html


def test_labels_fit_on_a_large_model(tmp_path):
    """24 layers × 16 heads, long model names, values across magnitudes: tick labels are thinned and
    titles shortened until no text box overlaps another or leaves its figure."""
    models = ["continual-pretraining-math-20B", "continual-pretraining-code-20B", "text"]
    an, cmp = tmp_path / "an", tmp_path / "cmp"
    an.mkdir()
    cmp.mkdir()
    metrics = ["model,tensor,layer,role,head,pl_alpha,stable_rank,frob_norm"]
    compare = ["model,base,tensor,layer,role,head,avg_l_agreement,avg_r_agreement,chance_l_agreement,"
               "chance_r_agreement,delta_frob_norm"]
    heads = ["model,reference,layer,head,update_norm,ref_update_norm,importance,agreement"]
    for m, model in enumerate(models):
        for layer in range(24):
            for role in ("attn_q", "attn_v", "mlp_down"):
                t = f"model.layers.{layer}.{role}.weight"
                metrics.append(f"{model},{t},{layer},{role},,{2 + 0.1 * m + 0.01 * layer},{1e-4 * (layer + 1)},"
                               f"{12345.6 * (layer + 1)}")
                compare.append(f"{model},base,{t},{layer},{role},,0.9,0.8,0.01,0.02,{1e3 * layer}")
                if role != "mlp_down":
                    for h in range(16):
                        compare.append(f"{model},base,{t},{layer},{role},{h},{0.5 + 0.02 * (h % 7)},"
                                       f"{0.4 + 0.01 * (layer % 5)},0.05,0.05,{h + layer}")
            for h in range(16):
                heads.append(f"{model},text,{layer},{h},{h * 0.5 + layer},{layer * 0.3},{(h - 8) / 8},0.7")
    (an / "metrics.csv").write_text("\n".join(metrics) + "\n")
    (cmp / "compare.csv").write_text("\n".join(compare) + "\n")
    (cmp / "heads.csv").write_text("\n".join(heads) + "\n")
    sweep = tmp_path / "sweep-rewind"
    sweep.mkdir()
    (sweep / "curve.csv").write_text("order,seed,x,score\n" + "".join(
        f"random,{s},{x / 40},{12345.678 - 30 * x + s}\n" for s in range(3) for x in range(41)))
    out = tmp_path / "r.html"
    run(["report", an, cmp, sweep, "--out", out, "--evolution", "--metric", "pl_alpha,stable_rank,frob_norm",
         "--quiet"])
    figs = figures_of(out.read_text())
    assert len(figs) >= 12
    problems = {fid: label_problems(svg) for fid, svg in figs.items()}
    assert not {k: v for k, v in problems.items() if v}
