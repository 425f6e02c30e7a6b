"""Issue 31: the report from Python — diffract.report writes the CLI's page, diffract.figures returns
the same figures for a notebook (SVG strings that display themselves), options as the report's keys."""
import pytest

import diffract_spectral as diffract
from conftest import run
from report_inputs import figures_of, make_results


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return make_results(tmp_path_factory.mktemp("pyreport"))


def test_report_writes_the_cli_page(results, tmp_path):
    args = [*results["dirs"], "--store", results["store"], "--metrics", "pl_alpha,frob_norm", "--title", "T"]
    run(["report", *args, "--out", tmp_path / "cli.html", "--quiet"])
    written = diffract.report(*results["dirs"], store=results["store"], out=tmp_path / "py.html",
                              metrics=["pl_alpha", "frob_norm"], title="T")
    assert written == [str(tmp_path / "py.html")]
    cli = (tmp_path / "cli.html").read_text()
    py = (tmp_path / "py.html").read_text()
    assert figures_of(py) == figures_of(cli) and len(figures_of(py)) > 5
    assert "<title>T</title>" in py or ">T<" in py


def test_figures_are_the_pages_figures(results, tmp_path):
    run(["report", *results["dirs"], "--store", results["store"], "--out", tmp_path / "svg", "--format", "svg",
         "--quiet"])
    figs = diffract.figures(*results["dirs"], store=results["store"])
    assert len(figs) == len(list((tmp_path / "svg").glob("*.svg"))) > 5
    for f in figs:
        on_disk = (tmp_path / "svg" / f"{f.id}.svg").read_text()
        assert on_disk.removeprefix('<?xml version="1.0" encoding="UTF-8"?>\n').strip() == f.svg.strip(), f.id
        assert f._repr_svg_() == f.svg and f.title and f.caption
    one = figs["layers-pl_alpha"]
    assert one.id == "layers-pl_alpha" and one is figs[figs.ids().index("layers-pl_alpha")]
    one.save(tmp_path / "one.svg")
    assert (tmp_path / "one.svg").read_text() == (tmp_path / "svg" / "layers-pl_alpha.svg").read_text()
    assert isinstance(figs.notes, list)
    with pytest.raises(KeyError, match="no figure 'nope'"):
        figs["nope"]


def test_options_and_errors_name_the_python_argument(results, tmp_path):
    figs = diffract.figures(results["root"] / "an", metrics="stable_rank", roles=["mlp_down"], layers=range(2))
    ids = figs.ids()
    assert "layers-stable_rank" in ids and "layers-pl_alpha" not in ids
    with pytest.raises(TypeError, match="figures\\(\\) got an unexpected keyword argument 'metrix'"):
        diffract.figures(results["root"] / "an", metrix="pl_alpha")
    with pytest.raises(diffract.InputError, match="report\\(\\): key 'scatter'"):
        diffract.figures(results["root"] / "an", scatter=["pl_alpha"])
    with pytest.raises(diffract.InputError, match="no input"):
        diffract.figures()
    with pytest.raises(diffract.InputError):
        diffract.report(results["root"] / "an", out=tmp_path / "x.html", format="pdf")
