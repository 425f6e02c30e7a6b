"""The report's expert atlas (issue 48 item 5) from a mixture of experts' compare directory (experts.csv,
expert_overlap.csv): the layer × expert heatmaps of update norm and importance and of the router drift,
the expert × expert overlap maps of the layer whose mean overlap changed most (or --overlap-layer), each
with one cell per layer × expert or expert pair and panel; the experts table lists the planted experts
first and the shared experts apart; a dense model has no atlas; bad CSVs stop the report in one line
naming the file and column; Python's figures() draws the same from the directory or the Comparison."""
import csv
import json
import re
import shutil
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

from conftest import ROOT, assert_input_error, run
from report_inputs import figures_of
from test_moe_multimodal import moe_family, moved_copy

sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "transformers"))
from materialize import materialize  # noqa: E402

CELL = re.compile(r'class="cell"><title>([^<]*)</title>')


def duplicate(d, layer, a, b, noise=1e-3, seed=5):
    """Expert b of `layer` in the model at d made expert a plus noise (per-expert tensors)."""
    w = load_file(str(d / "model.safetensors"))
    rng = np.random.default_rng(seed)
    for k in list(w):
        if f"layers.{layer}.mlp.experts.{b}." in k:
            src = w[k.replace(f".experts.{b}.", f".experts.{a}.")]
            w[k] = (src + noise * rng.standard_normal(src.shape)).astype(src.dtype)
    save_file(w, str(d / "model.safetensors"), metadata={"format": "pt"})


def compared(tmp_path, duplicates=True):
    """compare --base base cpt --reference ref of a 16-expert, 2-layer family: experts 3 and 11 planted to
    move in every layer, and (`duplicates`) expert 5 of layer 1 made a near-duplicate of expert 6 in the
    model (a large update of its own)."""
    (d_base, _), (d_cpt, _), (d_ref, _), _ = moe_family(tmp_path)
    if duplicates:
        duplicate(d_cpt, 1, 6, 5)
    out = tmp_path / "cmp"
    run(["compare", "--base", d_base, d_cpt, "--reference", d_ref, "--out", out, "--store", tmp_path / "s.sqlite",
         "--quiet"])
    return out


def report(tmp_path, *inputs, args=()):
    out = tmp_path / f"r{len(list(tmp_path.glob('r*.html')))}.html"
    run(["report", *inputs, "--out", out, "--quiet", *args])
    return out.read_text()


def cells(fig):
    return CELL.findall(fig)


def test_the_atlas_figures_with_one_cell_per_expert_and_panel(tmp_path):
    cmp = compared(tmp_path)
    html = report(tmp_path, cmp)
    figs = figures_of(html)
    atlas = [i for i in figs if i.startswith("experts-")]
    assert atlas == ["experts-importance", "experts-router-drift", "experts-overlap-read", "experts-overlap-write"]
    # cpt's update norms and its importance (model − reference): 2 layers × 16 experts each.
    assert len(cells(figs["experts-importance"])) == 2 * 2 * 16
    assert "cpt · layer 1, expert 5:" in figs["experts-importance"]
    assert any(t.startswith("cpt − ref (scaled) · layer 0, expert 3:") for t in cells(figs["experts-importance"]))
    assert len(cells(figs["experts-router-drift"])) == 2 * 16
    # Base, model, model − base: 16 × 16 cells each (the diagonal blank), layer 1 chosen by its change.
    for side in ("read", "write"):
        fig = figs[f"experts-overlap-{side}"]
        assert len(cells(fig)) == 3 * 16 * 16
        titles = cells(fig)
        model = {t.split(": ")[0]: float(t.split(": ")[1]) for t in titles if t.startswith("cpt · ")}
        assert model["cpt · expert 5, expert 6"] > 0.99 and model["cpt · expert 6, expert 5"] > 0.99
        assert max(v for k, v in model.items() if not np.isnan(v)) == model["cpt · expert 5, expert 6"]
    assert "layer 1 is the layer whose mean overlap changed most" in html.lower()
    assert "Expert atlas: overlap of the read subspaces, layer 1" in html
    no_overlaps = tmp_path / "no-overlaps"
    shutil.copytree(cmp, no_overlaps)
    (no_overlaps / "expert_overlap.csv").unlink()
    without = report(tmp_path, no_overlaps)
    assert [i for i in figures_of(without) if i.startswith("experts-")] == ["experts-importance", "experts-router-drift"]
    assert "experts-overlap: no expert_overlap.csv rows" in without
    html0 = report(tmp_path, cmp, args=("--overlap-layer", "0"))
    assert "Layer 0 as --overlap-layer asked" in html0
    p = run(["report", cmp, "--out", tmp_path / "bad.html", "--overlap-layer", "7"], check=False)
    assert_input_error(p, "--overlap-layer", "7")


def test_the_experts_table_lists_the_planted_experts_first(tmp_path):
    cmp = compared(tmp_path, duplicates=False)
    html = report(tmp_path, cmp)
    assert html.index("Experts that changed most and least") < html.index("<nav>")
    most = re.search(r"<caption>cpt — changed most \(by importance\)</caption>(.*?)</table>", html, re.S).group(1)
    shown = re.findall(r"<tr><td>\d+</td><td>(\d+):(\d+)</td>", most)
    assert {e for _, e in shown[:4]} == {"3", "11"} and len(shown) == 5
    with open(cmp / "experts.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    ordered = sorted(rows, key=lambda r: (-float(r["importance"]), int(r["layer"]), int(r["expert"])))
    assert shown == [(r["layer"], r["expert"]) for r in ordered[:5]]


def test_shared_experts_are_listed_apart_and_a_dense_model_has_no_atlas(tmp_path, family_f32):
    base = materialize("qwen2_moe", tmp_path / "q")
    moved = tmp_path / "moved"
    moved_copy(base, moved, scale=0.01)
    run(["compare", "--base", base, moved, "--out", tmp_path / "moe", "--store", tmp_path / "s.sqlite", "--quiet"])
    html = report(tmp_path, tmp_path / "moe")
    shared = re.search(r"<caption>moved — shared experts, by layer</caption>(.*?)</table>", html, re.S).group(1)
    layers = json.loads((base / "config.json").read_text())["num_hidden_layers"]
    assert re.findall(r"<td>(\d+):shared</td>", shared) == [str(l) for l in range(layers)]
    assert "experts-importance" in figures_of(html) and "shared" not in "".join(cells(figures_of(html)["experts-importance"]))
    # Without a reference the table ranks by update norm, and the atlas has no importance panel.
    assert "changed most (by update norm)" in html
    run(["compare", "--base", family_f32 / "pretrained", family_f32 / "math", "--out", tmp_path / "dense",
         "--store", tmp_path / "s.sqlite", "--quiet"])
    dense = report(tmp_path, tmp_path / "dense")
    assert not [i for i in figures_of(dense) if i.startswith("experts-")]
    assert "Experts that changed" not in dense and "experts.csv" not in dense


def test_bad_expert_csvs_stop_the_report_in_one_line(tmp_path):
    cmp = compared(tmp_path)

    def broken(name, edit):
        d = tmp_path / f"bad-{len(list(tmp_path.glob('bad-*')))}"
        shutil.copytree(cmp, d)
        path = d / name
        lines = path.read_text().splitlines()
        path.write_text("\n".join(edit(lines)) + "\n")
        return d, path

    def cell(lines, column, value, row=1):
        header = lines[0].split(",")
        cells_ = lines[row].split(",")
        cells_[header.index(column)] = value
        return [lines[0], *lines[1:row], ",".join(cells_), *lines[row + 1:]]

    cases = [
        ("expert_overlap.csv", lambda ls: cell(ls, "side", "sideways"), "column 'side'"),
        ("expert_overlap.csv", lambda ls: cell(ls, "overlap", "1.7"), "column 'overlap'"),
        ("expert_overlap.csv", lambda ls: cell(ls, "expert_b", "0"), "column 'expert_b'"),
        ("expert_overlap.csv", lambda ls: cell(ls, "layer", "-1"), "column 'layer'"),
        ("expert_overlap.csv", lambda ls: [l.replace("overlap_base", "overlap_bass") for l in ls], "missing column 'overlap_base'"),
        ("experts.csv", lambda ls: cell(ls, "expert_kind", "routd"), "column 'expert_kind'"),
        ("experts.csv", lambda ls: cell(ls, "expert", "x"), "column 'expert'"),
        ("experts.csv", lambda ls: cell(ls, "update_norm", "big"), "column 'update_norm'"),
    ]
    for name, edit, needle in cases:
        d, path = broken(name, edit)
        p = run(["report", d, "--out", tmp_path / "x.html"], check=False)
        assert_input_error(p, path, needle)


def test_python_figures_draw_the_atlas_from_the_directory_and_the_comparison(tmp_path):
    import diffract_spectral as diffract
    cmp = compared(tmp_path)
    figs = diffract.figures(cmp, overlap_layer=0)
    assert "experts-overlap-read" in figs.ids() and "layer 0" in figs["experts-overlap-read"].title
    res = diffract.compare(tmp_path / "cpt", base=tmp_path / "base", reference=tmp_path / "ref",
                           store=tmp_path / "s.sqlite")
    from_result = diffract.figures(res)
    from_dir = diffract.figures(cmp)
    for fid in ("experts-importance", "experts-router-drift", "experts-overlap-read", "experts-overlap-write"):
        assert from_result[fid].svg == from_dir[fid].svg, fid
