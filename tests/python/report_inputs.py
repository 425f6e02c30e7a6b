"""Inputs and checks shared by the report tests: the synthetic family analysed and compared into a
store, hand-made sweeps (as `diffract sweep` writes them), the figures of a page, and the text-box
geometry of a figure (labels estimated as code points × font size × 0.6 wide, one font size tall:
the rule the report lays its labels out by)."""
import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from conftest import run

FIGURE = re.compile(r'<svg class="figure".*?</svg>', re.S)
SECTION = re.compile(r'<section id="([^"]+)"')
SVG_NS = "{http://www.w3.org/2000/svg}"

# Scores of the models evaluated once beside each sweep (summary.json's "references").
REFERENCES = {"rewind": {"base": 0.3, "model": 0.5}, "truncate": {"base": 0.2, "model": 0.6},
              "interpolate": {"math": {"score_math": 0.62, "score_code": 0.18},
                              "code": {"score_math": 0.28, "score_code": 0.51}}}
SEEDS = {"rewind": 3, "truncate": 2, "interpolate": 2}


def write_sweeps(root: Path):
    """Rewind (importance and random orderings), truncation and a two-evaluation interpolation, each
    with several seeds, an eval_seconds column and references."""
    def references(kind):
        return {k: ({"score": v, "eval_seconds": 1.5, "path": f"/models/{k}"} if isinstance(v, float)
                    else {**v, "eval_seconds": 2.0}) for k, v in REFERENCES[kind].items()}

    rewind = root / "sweep-rewind"
    rewind.mkdir()
    rows = ["order,seed,x,score,eval_seconds"]
    for order in ("importance", "random"):
        for seed in range(SEEDS["rewind"]):
            for i in range(6):
                x = i / 5
                gain = 0.08 * x * (1 - x) if order == "importance" else 0.0
                rows.append(f"{order},{seed},{x},{0.5 + 0.05 * x - 0.2 * x * x + gain + 0.01 * seed},{1.0 + seed}")
    (rewind / "curve.csv").write_text("\n".join(rows) + "\n")
    (rewind / "summary.json").write_text(json.dumps({"sweep": "rewind", "references": references("rewind")}))
    trunc = root / "sweep-truncate"
    trunc.mkdir()
    (trunc / "curve.csv").write_text("order,seed,x,score,eval_seconds\n" + "".join(
        f"svd,{seed},{k / 10},{0.6 * (1 - (1 - k / 10) ** 3) + 0.02 * seed},0.5\n"
        for seed in range(SEEDS["truncate"]) for k in range(1, 11)))
    (trunc / "summary.json").write_text(json.dumps({"sweep": "truncate", "references": references("truncate")}))
    interp = root / "sweep-interpolate"
    interp.mkdir()
    (interp / "curve.csv").write_text("order,seed,x,score_math,score_code,eval_seconds\n" + "".join(
        f"linear,{seed},{w / 10},{0.6 - 0.3 * w / 10 + 0.01 * seed},{0.2 + 0.3 * w / 10 - 0.01 * seed},3\n"
        for seed in range(SEEDS["interpolate"]) for w in range(11)))
    (interp / "summary.json").write_text(
        json.dumps({"sweep": "interpolate", "references": references("interpolate")}))
    return [rewind, trunc, interp]


def make_results(root: Path):
    """The family (pretrained, math, code, text) analysed and compared (base pretrained, reference
    text) into one store, and the three sweeps."""
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
    """{figure id: its <svg>}, each parsed as XML."""
    ids, figs = SECTION.findall(html), FIGURE.findall(html)
    assert len(ids) == len(figs)
    for f in figs:
        ET.fromstring(f)
    return dict(zip(ids, figs))


def not_shown(html: str):
    """The page's "Not shown" lines."""
    if "<h2>Not shown</h2>" not in html:
        return []
    part = html.split("<h2>Not shown</h2>", 1)[1]
    import html as h
    return [h.unescape(x) for x in re.findall(r"<li>(.*?)</li>", part)]


def text_boxes(svg: str):
    """(text, corners) of every <text> of a figure, rotated as drawn, and the figure's size."""
    root = ET.fromstring(svg)
    boxes = []
    for t in root.iter(SVG_NS + "text"):
        x, y, size = float(t.get("x")), float(t.get("y")), float(t.get("font-size"))
        s = t.text or ""
        w = len(s) * size * 0.6
        anchor = t.get("text-anchor", "start")
        x0 = x - w if anchor == "end" else x - w / 2 if anchor == "middle" else x
        corners = [(x0, y - 0.8 * size), (x0 + w, y - 0.8 * size), (x0 + w, y + 0.2 * size), (x0, y + 0.2 * size)]
        m = re.fullmatch(r"rotate\(([-\d.]+) ([-\d.]+) ([-\d.]+)\)", t.get("transform", "") or "")
        if m:
            a, cx, cy = math.radians(float(m[1])), float(m[2]), float(m[3])
            corners = [(cx + (px - cx) * math.cos(a) - (py - cy) * math.sin(a),
                        cy + (px - cx) * math.sin(a) + (py - cy) * math.cos(a)) for px, py in corners]
        boxes.append((s, corners))
    return boxes, float(root.get("width")), float(root.get("height"))


def _separated(a, b, slack):
    """Separating-axis test of two convex quadrilaterals, allowing `slack` pixels of contact."""
    for poly in (a, b):
        for i in range(4):
            (x1, y1), (x2, y2) = poly[i], poly[(i + 1) % 4]
            nx, ny = y2 - y1, x1 - x2
            norm = math.hypot(nx, ny) or 1
            pa = [(px * nx + py * ny) / norm for px, py in a]
            pb = [(px * nx + py * ny) / norm for px, py in b]
            if max(pa) <= min(pb) + slack or max(pb) <= min(pa) + slack:
                return True
    return False


def label_problems(svg: str, slack=0.5):
    """Pairs of overlapping text boxes, and texts reaching outside the figure."""
    boxes, w, h = text_boxes(svg)
    problems = []
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            if not _separated(boxes[i][1], boxes[j][1], slack):
                problems.append(f"'{boxes[i][0]}' overlaps '{boxes[j][0]}'")
    for s, corners in boxes:
        if any(px < -1 or px > w + 1 or py < -1 or py > h + 1 for px, py in corners):
            problems.append(f"'{s}' reaches outside the {w:g}×{h:g} figure")
    return problems
