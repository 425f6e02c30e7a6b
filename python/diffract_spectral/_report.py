"""`diffract report` from Python: the same figures as the CLI's page, drawn by the same C++ code.

    import diffract_spectral as diffract
    figs = diffract.figures("results/compare", store="results.sqlite")   # a list of Figure
    figs["layers-pl_alpha"]                    # shows itself in a notebook cell (SVG)
    diffract.report("results/analyze", "results/compare", out="report.html")

Options are the keys of docs/report.md (the CLI's flags and its --config file): metrics, roles, layers,
models, colours, scatter, esd_tensor, heatmap_role, agreement_field, reference, title, evolution,
overlap_layer.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

from . import _core
from ._keywords import keywords_checked

PathLike = Union[str, os.PathLike]

_KEYS = ("title", "metrics", "roles", "layers", "models", "colours", "scatter", "esd_tensor", "heatmap_role",
         "agreement_field", "reference", "evolution", "overlap_layer")


@dataclass(frozen=True)
class Figure:
    """One figure of the report: its id (the page anchor and file stem), title, caption and SVG document.
    Displays itself in Jupyter (`_repr_svg_`); `save(path)` writes the SVG."""
    id: str
    title: str
    caption: str
    svg: str

    def _repr_svg_(self) -> str:
        return self.svg

    def save(self, path: PathLike) -> None:
        """Writes the SVG document to `path`, as `diffract report --format svg` writes it."""
        with open(os.fspath(path), "w", encoding="utf-8") as f:
            f.write('<?xml version="1.0" encoding="UTF-8"?>\n' + self.svg)


class Figures(list):
    """The report's figures in page order; `figs["layers-pl_alpha"]` finds one by id, `notes` says which
    panels were not drawn and why (the page's "Not shown" section)."""

    def __init__(self, figures, notes):
        super().__init__(figures)
        self.notes: list = list(notes)

    def __getitem__(self, key):
        if isinstance(key, str):
            for f in self:
                if f.id == key:
                    return f
            raise KeyError(f"no figure '{key}' (figures: {', '.join(f.id for f in self)})")
        return super().__getitem__(key)

    def ids(self) -> list:
        return [f.id for f in self]


# A result object's tables as the CLI's files (the report reads result directories).
_RESULT_FILES = {"Analysis": {"metrics": "metrics.csv", "aggregates": "aggregates.csv"},
                 "Comparison": {"matrices": "compare.csv", "heads": "heads.csv", "experts": "experts.csv",
                                "expert_overlap": "expert_overlap.csv"},
                 "Watch": {"checkpoints": "checkpoints.csv", "metrics": "metrics.csv", "aggregates": "aggregates.csv",
                           "compare": "compare.csv", "heads": "heads.csv", "trends": "trends.csv",
                           "alerts": "alerts.csv"}}


def _cell(name: str, value) -> str:
    if value is None or (isinstance(value, float) and value != value) or type(value).__name__ == "NAType":
        return "" if name in ("layer", "head", "step", "expert") else "nan"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return "inf" if value == float("inf") else "-inf" if value == float("-inf") else repr(value)
    return str(value)


def _write_tables(result, directory: str) -> None:
    """Writes a result object's tables into `directory` as the CLI names them; a head table's `rank`
    goes back to heads.csv's meaning (rewind_order: 0 = the least important head)."""
    import csv

    from . import _display

    for attribute, file in _RESULT_FILES[type(result).__name__].items():
        columns = dict(_display._columns(getattr(result, attribute)))
        if not columns:
            continue
        if "rewind_order" in columns:
            columns["rank"] = columns.pop("rewind_order")
        with open(os.path.join(directory, file), "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(columns)
            for row in zip(*columns.values()):
                w.writerow([_cell(n, v) for n, v in zip(columns, row)])


def _inputs(inputs, store, scratch) -> tuple:
    """(inputs, store) for the engine: result directories, result objects (analyze's, compare's,
    watch's and the sweeps' results: their tables written into `scratch`, or a sweep's `out`) and/or a
    store; a store alone is the input (as `diffract report STORE`)."""
    if isinstance(store, (bytes, bytearray)) or any(isinstance(i, (bytes, bytearray)) for i in inputs):
        raise TypeError("report: a path is a str or os.PathLike, not bytes")
    if not inputs and store is None:
        raise _core.InputError("report: no input (give result directories or result objects as arguments, "
                               "or store=)")
    if not inputs:
        return [os.fspath(store)], ""
    paths = []
    for n, i in enumerate(inputs):
        kind = type(i).__name__
        if kind == "SweepResult" and hasattr(i, "out"):
            paths.append(os.fspath(i.out))
        elif kind in _RESULT_FILES and type(i).__module__.startswith("diffract_spectral"):
            directory = os.path.join(scratch(), f"{n}-{kind.lower()}")
            os.mkdir(directory)
            _write_tables(i, directory)
            paths.append(directory)
        elif isinstance(i, (str, os.PathLike)):
            paths.append(os.fspath(i))
        else:
            raise TypeError(f"report: an input is a result directory, a store (a path) or a result of analyze, "
                            f"compare, watch or a sweep, not {kind}")
    return paths, "" if store is None else os.fspath(store)


class _Scratch:
    """A temporary directory made on first use (for result objects' tables), removed on exit."""

    def __init__(self):
        self.path = None

    def __call__(self) -> str:
        if self.path is None:
            import tempfile

            self.path = tempfile.mkdtemp(prefix="diffract-report-")
        return self.path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.path is not None:
            import shutil

            shutil.rmtree(self.path, ignore_errors=True)


Strings = Union[str, Sequence[str], None]


def _config_json(options: dict) -> str:
    from . import _layers_spec, _roles_spec  # the selection's spelling, as analyze and compare take it

    config: dict[str, Any] = {}
    for key in _KEYS:
        value = options[key]
        if value is None:
            continue
        if key in ("metrics", "models", "scatter") and not isinstance(value, str):
            value = list(value)
        if key == "layers":
            value = _layers_spec(value)
        if key == "roles":
            value = _roles_spec(value)
        config[key] = value
    return json.dumps(config) if config else ""


_OPTIONS_DOC = """
    Options (the report's keys, docs/report.md; None: the report's default): title (page title),
    metrics (layer curves, box plots, evolution; default ["pl_alpha", "stable_rank"]), roles ("a,b" or a
    list), layers ("0-3,7" or a list of ints), models (subset and order), colours ({"math": "#d55e00"}),
    scatter ([x, y] fields), esd_tensor (the ESD figure's matrix), heatmap_role, agreement_field,
    reference (the model subtracted in difference panels), evolution (True/False: force the
    evolution figures on/off), overlap_layer (the expert overlap map's layer; default: the layer whose
    mean overlap changed most)."""


@keywords_checked("figures")
def figures(*inputs: Union[PathLike, Any], store: Optional[PathLike] = None, title: Optional[str] = None,
            metrics: Strings = None, roles: Strings = None, layers: Union[str, int, Sequence[int], None] = None,
            models: Strings = None, colours: Optional[dict] = None, scatter: Strings = None,
            esd_tensor: Optional[str] = None, heatmap_role: Optional[str] = None,
            agreement_field: Optional[str] = None, reference: Optional[str] = None,
            evolution: Optional[bool] = None, overlap_layer: Optional[int] = None) -> Figures:
    """The report's figures for result directories, result objects (figures(res, cmp): the results of
    analyze, compare, watch or a sweep) and/or a store (a store alone: store=), without writing a file: a
    Figures list (index by position or id). The ESD figures read singular values from the store: pass
    the store= the results were computed with."""
    options = _config_json(locals())
    with _Scratch() as scratch:
        paths, store_path = _inputs(inputs, store, scratch)
        r = _core.report_figures(paths, store_path, options)
    return Figures([Figure(f["id"], f["title"], f["caption"], f["svg"]) for f in r["figures"]], r["notes"])


@keywords_checked("report")
def report(*inputs: Union[PathLike, Any], out: PathLike, store: Optional[PathLike] = None, format: str = "html",
           title: Optional[str] = None, metrics: Strings = None, roles: Strings = None,
           layers: Union[str, int, Sequence[int], None] = None, models: Strings = None,
           colours: Optional[dict] = None, scatter: Strings = None, esd_tensor: Optional[str] = None,
           heatmap_role: Optional[str] = None, agreement_field: Optional[str] = None,
           reference: Optional[str] = None, evolution: Optional[bool] = None,
           overlap_layer: Optional[int] = None) -> list:
    """`diffract report INPUT... --out OUT` (inputs: result directories, result objects of analyze,
    compare, watch or a sweep, and/or a store): writes the self-contained HTML page (or, format="svg"/"png",
    one file per figure into the directory OUT) and returns the paths written. The notes of the panels
    not drawn are on the page; `figures(...)` returns them as `.notes`."""
    options = _config_json(locals())
    with _Scratch() as scratch:
        paths, store_path = _inputs(inputs, store, scratch)
        r = _core.write_report(paths, store_path, options, os.fspath(out), format)
    return list(r["written"])


figures.__doc__ += _OPTIONS_DOC
report.__doc__ += _OPTIONS_DOC
