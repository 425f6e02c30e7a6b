"""Sweep figures: the references of summary.json as labelled dotted lines at their scores (or, on an
interpolation's two-evaluation plane, as labelled markers), each seed's own line beside the mean ± 1 std
band for every kind with seeds, evaluation times in the hover text; the legacy baseline key."""
import json
import re
import xml.etree.ElementTree as ET

import pytest

from conftest import run
from report_inputs import REFERENCES, SEEDS, SVG_NS, figures_of, label_problems, write_sweeps


@pytest.fixture(scope="module")
def sweep_figures(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweeps")
    out = root / "r.html"
    run(["report", *write_sweeps(root), "--out", out, "--quiet"])
    return figures_of(out.read_text())


def y_scale(svg):
    """The figure's first panel's y axis: pixel = a·value + b, from its tick labels."""
    root = ET.fromstring(svg)
    ticks = []
    for t in root.iter(SVG_NS + "text"):
        if t.get("text-anchor") == "end" and t.get("font-size") == "10" and t.get("transform") is None:
            try:
                ticks.append((float(t.text), float(t.get("y")) - 3.5, float(t.get("x"))))
            except (TypeError, ValueError):
                pass
    x0 = min(x for _, _, x in ticks)
    ticks = [(v, y) for v, y, x in ticks if x == x0]
    (v1, y1), (v2, y2) = ticks[0], ticks[-1]
    a = (y2 - y1) / (v2 - v1)
    return lambda v: y1 + a * (v - v1)


def reference_lines(svg):
    return [float(m[1]) for m in re.finditer(
        r'<line x1="[\d.]+" y1="([\d.]+)" x2="[\d.]+" y2="\1" stroke="#555555" stroke-width="1.2" '
        r'stroke-dasharray="2 3"/>', svg)]


@pytest.mark.parametrize("kind", ["rewind", "truncate"])
def test_references_are_labelled_lines_at_their_scores(sweep_figures, kind):
    svg = sweep_figures[f"sweep-{kind}"]
    to_px = y_scale(svg)
    lines = reference_lines(svg)
    scale = REFERENCES[kind]["model"] if kind == "truncate" else 1.0  # truncation: relative to the model
    for key, score in REFERENCES[kind].items():
        assert f">{key} {score:g}<" in svg, key
        assert any(abs(y - to_px(score / scale)) < 0.6 for y in lines), (key, lines, to_px(score / scale))


def test_interpolation_references_are_markers_on_the_plane(sweep_figures):
    svg = sweep_figures["sweep-interpolate"]
    diamonds = re.findall(r'<polygon points="([^"]+)" fill="#555555"', svg)
    assert len(diamonds) == len(REFERENCES["interpolate"])
    for key, s in REFERENCES["interpolate"].items():
        assert f">{key} ({s['score_math']:g}, {s['score_code']:g})<" in svg


@pytest.mark.parametrize("kind", ["rewind", "truncate", "interpolate"])
def test_each_seed_has_its_own_line_and_the_mean_a_band(sweep_figures, kind):
    svg = sweep_figures[f"sweep-{kind}"]
    group = re.search(r'<g class="seed-lines"[^>]*>(.*?)</g>', svg, re.S)
    assert group, kind
    orders = 2 if kind == "rewind" else 1
    assert group[1].count("<polyline") == orders * SEEDS[kind]
    if kind != "interpolate":  # the plane shows the seeds' paths; a curve also its ±1 std band
        assert svg.count("<polygon") >= orders
        assert re.search(r"± [\d.e-]+ \(n = " + str(SEEDS[kind]) + r"\), evaluated in [\d.]+ s", svg)
    else:
        assert re.search(r"± [\d.e-]+ \(n = 2\)", svg)
    assert not label_problems(svg)


def test_legacy_baseline_and_one_seed(tmp_path):
    d = tmp_path / "sweep-rewind"
    d.mkdir()
    (d / "curve.csv").write_text("order,seed,x,score\nimportance,0,0,0.5\nimportance,0,0.5,0.45\nimportance,0,1,0.3\n")
    (d / "summary.json").write_text(json.dumps({"kind": "rewind", "baseline": 0.5}))
    out = tmp_path / "r.html"
    run(["report", d, "--out", out, "--quiet"])
    svg = figures_of(out.read_text())["sweep-rewind"]
    assert ">unedited 0.5<" in svg
    assert 'class="seed-lines"' not in svg  # one seed: nothing to spread
