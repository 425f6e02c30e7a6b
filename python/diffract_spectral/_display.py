"""Compact displays of result objects: a short repr (a few lines instead of every table printed whole)
and `_repr_html_` for Jupyter (what was read, the rows, the top heads, the warnings). The tables stay
one attribute away (`res.metrics`, `cmp.heads`, ...)."""
from __future__ import annotations

import html
from typing import Any, Iterable, List, Optional, Tuple

Facts = List[Tuple[str, str]]


def _columns(table) -> dict:
    if table is None:
        return {}
    if isinstance(table, dict):
        return table
    return {name: table[name].tolist() for name in table.columns}


def _length(table) -> int:
    cols = _columns(table)
    return len(next(iter(cols.values()), [])) if cols else 0


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and v != v) or type(v).__name__ == "NAType"


def _distinct(values: Iterable) -> list:
    return [v for v in dict.fromkeys(values) if not _missing(v)]


def _names(values: Iterable, most: int = 6) -> str:
    names = [str(v) for v in _distinct(values)]
    return ", ".join(names[:most]) + (f", … ({len(names)} in all)" if len(names) > most else "")


def _number(v: Any) -> str:
    if _missing(v):
        return "nan"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _nonfinite(table) -> int:
    cols = _columns(table)
    return sum(1 for v in cols.get("nonfinite_count", []) if not _missing(v) and v > 0)


def _top_heads(heads, per_model: int = 5) -> Tuple[List[str], List[list]]:
    """The most important heads of each model (rank 1 first)."""
    cols = _columns(heads)
    if "rank" not in cols or not cols["rank"]:
        return [], []
    names = [n for n in ("model", "step", "layer", "head", "importance", "update_norm", "rank", "stands_out")
             if n in cols]
    order = sorted(range(len(cols["rank"])), key=lambda i: (str(cols.get("step", [0] * len(cols["rank"]))[i]),
                                                            str(cols["model"][i]) if "model" in cols else "",
                                                            cols["rank"][i] if not _missing(cols["rank"][i]) else 1e18))
    rows, shown = [], {}
    for i in order:
        key = (cols["model"][i] if "model" in cols else "", cols["step"][i] if "step" in cols else "")
        if shown.get(key, 0) >= per_model:
            continue
        shown[key] = shown.get(key, 0) + 1
        rows.append([_number(cols[n][i]) for n in names])
    return names, rows


def analysis_facts(res) -> Facts:
    m = _columns(res.metrics)
    heads = [h for h in m.get("head", []) if not _missing(h)]
    facts = [("models", _names(m.get("model", []))),
             ("rows", f"{_length(res.metrics)} ({_length(res.metrics) - len(heads)} matrices, {len(heads)} head blocks)"),
             ("fields", f"{len(res.fields)}: {', '.join(res.fields[:8])}{' …' if len(res.fields) > 8 else ''}"),
             ("computed / reused", f"{res.computed} / {res.reused}")]
    if _nonfinite(res.metrics):
        facts.append(("warnings", f"{_nonfinite(res.metrics)} rows hold NaN/Inf weights (nonfinite_count > 0)"))
    return facts


def comparison_facts(cmp) -> Facts:
    m = _columns(cmp.matrices)
    facts = [("models", _names(m.get("model", []))), ("base", _names(m.get("base", []))),
             ("rows", f"{_length(cmp.matrices)} matrices and head blocks, {_length(cmp.heads)} heads"),
             ("computed / reused", f"{cmp.computed} / {cmp.reused}")]
    refs = _names(_columns(cmp.heads).get("reference", []))
    if refs:
        facts.insert(2, ("reference", refs))
    if _length(cmp.skipped):
        facts.append(("skipped", f"{_length(cmp.skipped)} (allow_partial: see .skipped)"))
    if _nonfinite(cmp.matrices):
        facts.append(("warnings", f"{_nonfinite(cmp.matrices)} rows hold NaN/Inf weights"))
    return facts


def watch_facts(w) -> Facts:
    c = _columns(w.checkpoints)
    facts = [("checkpoints", f"{_length(w.checkpoints)} (steps {_names(c.get('step', []))})"),
             ("rows", f"metrics {_length(w.metrics)}, compare {_length(w.compare)}, heads {_length(w.heads)}"),
             ("alerts", str(_length(w.alerts)))]
    return facts


def sweep_facts(r) -> Facts:
    s = r.summary or {}
    tables = (r.curve, r.heads_effect, r.experts_effect, r.heads_validation, r.experts_validation)
    table = next((t for t in tables if t is not None), None)
    facts = [("sweep", str(s.get("sweep", "?"))), ("out", str(r.out)), ("rows", str(_length(table)))]
    refs = s.get("references") or {}
    if refs:
        facts.append(("references", ", ".join(f"{k} {_number((v or {}).get('score'))}" for k, v in refs.items())))
    if r.verdict:
        facts.append(("verdict", " ".join(r.verdict)))
    return facts


def text(kind: str, facts: Facts, attributes: str) -> str:
    lines = [f"<diffract.{kind}>"] + [f"  {k}: {v}" for k, v in facts] + [f"  tables: {attributes}"]
    return "\n".join(lines)


def html_of(kind: str, facts: Facts, attributes: str, heads: Optional[Any] = None) -> str:
    e = html.escape
    rows = "".join(f"<tr><th style='text-align:left'>{e(k)}</th><td style='text-align:left'>{e(v)}</td></tr>"
                   for k, v in facts)
    out = [f"<div><b>diffract.{e(kind)}</b><table>{rows}</table>"]
    if heads is not None:
        names, top = _top_heads(heads)
        if top:
            head = "".join(f"<th>{e(n)}</th>" for n in names)
            body = "".join("<tr>" + "".join(f"<td>{e(v)}</td>" for v in r) + "</tr>" for r in top)
            out.append(f"<p>Most important heads (rank 1 = most important):</p><table><tr>{head}</tr>{body}</table>")
    out.append(f"<p style='color:#666'>tables: {e(attributes)}</p></div>")
    return "".join(out)
