"""Every panel a figure cannot draw is listed under "Not shown" (and, with --verbose, as a `diffract: note:` line),
naming the figure, the panel (model / role) and why: per figure, inputs with one panel's data removed."""
import csv
import json
import re
import shutil

import pytest

from conftest import run
from report_inputs import figures_of, make_results, not_shown


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return make_results(tmp_path_factory.mktemp("notshown"))


def filtered_copy(src_dir, dst_dir, name, drop):
    """dst_dir/name: src_dir/name without the rows for which drop(row) holds."""
    dst_dir.mkdir(exist_ok=True)
    with open(src_dir / name, newline="") as f:
        rows = list(csv.DictReader(f))
    with open(dst_dir / name, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(r for r in rows if not drop(r))


def report(inputs, out, *extra):
    p = run(["report", *inputs, "--out", out, "--no-evolution", "--verbose", *extra])
    html = out.read_text()
    notes = not_shown(html)
    stderr_notes = [line.removeprefix("diffract: note: ") for line in p.stderr.splitlines()
                    if line.startswith("diffract: note: ")]
    assert notes == stderr_notes
    # Without --verbose the notes are counted on the summary line, not printed.
    quiet = run(["report", *inputs, "--out", out, "--no-evolution", *extra])
    assert "diffract: note:" not in quiet.stderr
    if notes:
        assert f"({len(notes)} panels not drawn" in quiet.stderr
    return html, notes


def assert_noted(notes, figure, *needles):
    hits = [n for n in notes if n.startswith(figure + ":") and all(x in n for x in needles)]
    assert hits, (figure, needles, notes)


def test_esd_and_update_spectrum_panels_missing_from_the_store(results, tmp_path):
    """The case of issue 19: the store lacks the base's singular values (it holds other names) — the
    base's ESD panel is noted with what the store holds; the updates' spectra are noted too."""
    fam = results["fam"]
    store = tmp_path / "other.sqlite"
    run(["analyze", f"bert={fam / 'pretrained'}", fam / "math", "--out", tmp_path / "an", "--store", store,
         "--quiet"])
    html, notes = report([results["root"] / "cmp"], tmp_path / "r.html", "--store", store)
    esd = [fid for fid in figures_of(html) if fid.startswith("esd-")]
    assert len(esd) == 1
    # 'pretrained' (the compare base) and code/text (compared) have no weights_svals under those names
    # ... except where the store knows the same content under the compare's name: analyze registered
    # only bert and math.
    for model in ("code", "text"):
        assert_noted(notes, esd[0], f"panel '{model}'", "the store has no weights_svals", "it holds: ")
    holds = [n for n in notes if n.startswith(esd[0]) and "panel 'code'" in n][0]
    assert "bert" in holds and "math" in holds
    for model in ("math", "code", "text"):
        assert_noted(notes, f"delta-spectrum-{model}", f"model '{model}'", "no delta_svals")


def test_base_named_differently_in_the_store(results, tmp_path):
    """compare.csv names the base 'pretrained' but the only store holds analyze results under other
    names and no compare results: the base's ESD panel is noted, naming what the store holds."""
    fam = results["fam"]
    store = tmp_path / "s.sqlite"
    run(["analyze", f"base={fam / 'pretrained'}", f"m={fam / 'math'}", "--out", tmp_path / "an", "--store",
         store, "--quiet"])
    cmp = tmp_path / "cmp"
    shutil.copytree(results["root"] / "cmp", cmp)
    html, notes = report([cmp], tmp_path / "r.html", "--store", store)
    # No spectrum under any name of the report: the figure is skipped with one note naming both sides.
    esd = [n for n in notes if n.startswith("esd")]
    assert len(esd) == 1 and "pretrained" in esd[0] and "it holds weights_svals for: base, m" in esd[0], esd
    assert not [f for f in figures_of(html) if f.startswith("esd")]


def test_missing_rows_are_noted_per_figure(results, tmp_path):
    an, cmp = results["root"] / "an", results["root"] / "cmp"
    d_an, d_cmp = tmp_path / "an", tmp_path / "cmp"
    # metrics: code has no attn_v rows; text has none at all (it stays a model through compare.csv)
    filtered_copy(an, d_an, "metrics.csv",
                  lambda r: r["model"] == "text" or (r["model"] == "code" and r["role"] == "attn_v"))
    # compare: code has no attn_q rows (head or whole); heads.csv has no code rows
    filtered_copy(cmp, d_cmp, "compare.csv", lambda r: r["model"] == "code" and r["role"] == "attn_q")
    filtered_copy(cmp, d_cmp, "heads.csv", lambda r: r["model"] == "code")
    html, notes = report([d_an, d_cmp], tmp_path / "r.html", "--store", results["store"])
    figs = figures_of(html)
    assert_noted(notes, "layers-stable_rank", "panel 'attn_v', model 'code'", "no row of role attn_v")
    assert_noted(notes, "boxes-stable_rank", "panel 'attn_v', model 'code'", "no whole-matrix row of role attn_v")
    assert_noted(notes, "layers-stable_rank", "model 'text' (every panel)", "no metrics.csv row of model 'text'")
    assert_noted(notes, "boxes-pl_alpha", "model 'text' (every panel)")
    assert_noted(notes, "scatter-pl_alpha-stable_rank", "model 'text'", "no metrics.csv row of model 'text'")
    assert_noted(notes, "heads-agreement-attn_q", "panel 'code'", "no compare.csv head rows of attn_q")
    assert_noted(notes, "heads-agreement-attn_q", "panel 'pretrained'", "base of the comparison")
    assert_noted(notes, "agreement-layers-avg_l_agreement", "panel 'attn_q', model 'code'", "no row of role attn_q")
    assert_noted(notes, "agreement-layers-avg_r_agreement", "panel 'attn_q', model 'code'")
    assert_noted(notes, "heads-update-norm", "panel 'code'", "heads.csv has no rows of model 'code'")
    # ... and the panels that are drawn are not noted
    assert not [n for n in notes if ("model 'math'" in n or "panel 'math'" in n) and "pl_alpha" not in n]
    assert "heads-agreement-attn_q" in figs and ">code<" not in figs["heads-agreement-attn_q"]


def test_flagged_fits_name_their_status(results, tmp_path):
    """A model whose every fit of a role is flagged is noted with the statuses where the figure leaves
    flagged fits out (the box plots; the tiny family's attention matrices are too small to fit: too_few),
    and drawn hollow, not noted, in the layer-wise figure (issue 31)."""
    html, notes = report([results["root"] / "an"], tmp_path / "r.html")
    assert_noted(notes, "boxes-pl_alpha", "panel 'attn_q', model 'pretrained'", "fits behind pl_alpha are flagged",
                 "too_few")
    assert not [n for n in notes if n.startswith("layers-pl_alpha:") and "attn_q" in n], notes
    layers = figures_of(html)["layers-pl_alpha"]
    assert re.search(r'fill="#ffffff"[^>]*><title>pretrained · [^<]*flagged too_few \(tail of \d+ points\)', layers)


def test_roles_asked_for_but_absent(results, tmp_path):
    d = tmp_path / "an"
    filtered_copy(results["root"] / "an", d, "metrics.csv", lambda r: r["role"] == "attn_v")
    html, notes = report([d], tmp_path / "r.html", "--roles", "attn_q,attn_v", "--metric", "stable_rank")
    assert_noted(notes, "layers-stable_rank", "panel 'attn_v'", "of role attn_v")
    assert_noted(notes, "boxes-stable_rank", "panel 'attn_v'", "of role attn_v")


def test_evolution_checkpoint_missing_a_role(results, tmp_path):
    d = tmp_path / "an"
    filtered_copy(results["root"] / "an", d, "metrics.csv", lambda r: r["model"] == "code" and r["role"] == "mlp_down")
    p = run(["report", d, "--out", tmp_path / "r.html", "--evolution", "--metric", "stable_rank", "--verbose"])
    notes = not_shown((tmp_path / "r.html").read_text())
    assert_noted(notes, "evolution-stable_rank", "panel 'mlp_down', model 'code'")
    assert_noted(notes, "evolution-boxes-stable_rank", "panel 'mlp_down', model 'code'")
    assert "diffract: note: evolution-stable_rank" in p.stderr


def test_sweep_panels_and_references_that_cannot_be_drawn(results, tmp_path):
    empty = tmp_path / "rewind-empty"
    empty.mkdir()
    (empty / "curve.csv").write_text("order,seed,x,score,eval_seconds\n")
    noscore = tmp_path / "rewind-noscore"
    noscore.mkdir()
    (noscore / "curve.csv").write_text("order,seed,x,score\nimportance,0,0,0.5\nimportance,0,1,0.4\n")
    (noscore / "summary.json").write_text(json.dumps(
        {"sweep": "rewind", "references": {"base": {"score": None, "eval_seconds": 1.0}, "model": 0.55}}))
    interp = tmp_path / "interp-one-score-reference"
    interp.mkdir()
    (interp / "curve.csv").write_text("order,seed,x,score_a,score_b\nlinear,0,0,0.1,0.9\nlinear,0,1,0.9,0.1\n")
    (interp / "summary.json").write_text(json.dumps({"sweep": "interpolate", "references": {"a": {"score": 0.8}}}))
    html, notes = report([empty, noscore, interp], tmp_path / "r.html")
    assert_noted(notes, "sweep-rewind", "panel 'rewind-empty'", "has no rows")
    assert any("rewind-noscore/summary.json: reference 'base' has no numeric score" in n for n in notes), notes
    assert_noted(notes, "sweep-interpolate", "panel 'interp-one-score-reference', reference 'a'",
                 "no score for score_a or score_b")
    rewind = figures_of(html)["sweep-rewind"]
    assert ">model 0.55<" in rewind and ">base " not in rewind


def test_every_model_panel_is_drawn_or_noted(results, tmp_path):
    """On the full inputs: each per-model figure shows a panel titled by each model, or a note says why not."""
    out = tmp_path / "r.html"
    html, notes = report(results["dirs"], out, "--store", results["store"])
    figs = figures_of(html)
    models = ["pretrained", "math", "code", "text"]
    for fid in ["heads-agreement-attn_q", "heads-update-norm"] + [f for f in figs if f.startswith("esd-")]:
        titles = set(re.findall(r'font-weight="bold">([^<]+)</text>', figs[fid]))
        for m in models:
            drawn = m in titles or f"{m} (reference)" in titles
            noted = any(n.startswith(fid + ":") and f"'{m}'" in n for n in notes)
            assert drawn != noted, (fid, m, titles, notes)
    for m in ("math", "code", "text"):
        assert f"delta-spectrum-{m}" in figs
    assert not any(n.startswith("delta-spectrum") for n in notes)
