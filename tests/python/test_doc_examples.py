"""Every code example of README.md and docs/*.md runs: a documented example cannot fail unnoticed.

The ```python blocks of each document run in order in one fresh namespace (as a notebook would run
them), in an empty temporary directory; the ```sh and ```bash blocks run with bash -e in another,
where `./build/diffract` is the CLI under test. A block that cannot run here (it needs a real Hugging
Face model, torch, a GPU, MPI, a training run) carries the marker `<!-- not run: REASON -->` on the
line before its fence; the reason is required, and such blocks are few (MAX_NOT_RUN).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, binary

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*$")
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(.*?)\s*-->\s*$")
PYTHON, SHELL = ("python",), ("sh", "bash")
MAX_NOT_RUN = 16  # blocks marked `not run` in all the documents together


def blocks(path: Path):
    """(language, first line number, code, not-run reason or None) for each fenced block of a document."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        marker = NOT_RUN.match(lines[start - 1]) if start > 0 else None
        out.append((lang, start + 1, "\n".join(lines[start + 1:j]) + "\n", marker.group(1) if marker else None))
        i = j + 1
    return out


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _docs_with(langs) -> list:
    return [d for d in DOCS if any(lang in langs for lang, *_ in blocks(d))]


def test_markers_have_reasons_and_are_few():
    marked = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(text):
            if "not run" in line and line.lstrip().startswith("<!--"):
                m = NOT_RUN.match(line)
                assert m and m.group(1), f"{_rel(doc)}:{n + 1}: write the marker as <!-- not run: REASON -->"
                nxt = text[n + 1] if n + 1 < len(text) else ""
                assert FENCE.match(nxt), f"{_rel(doc)}:{n + 1}: a not-run marker belongs on the line before a fence"
                marked.append(f"{_rel(doc)}:{n + 1}")
    assert len(marked) <= MAX_NOT_RUN, marked


# A block that runs diffract (or a shipped evaluator) with concrete arguments must be a ```sh block, run or
# marked; a synopsis (`[--option]`, `a|b`, `...`) is not a command and stays untagged.
COMMAND_LINE = re.compile(r"^\s*(\./build/)?(diffract |python3? -m diffract_spectral)")
SYNOPSIS = re.compile(r"\[--|\.\.\.|\w\|\w")


def test_command_examples_are_tagged():
    untagged = [f"{_rel(d)}:{line}" for d in DOCS for lang, line, code, _ in blocks(d)
                if not lang and any(COMMAND_LINE.match(x) for x in code.splitlines()) and not SYNOPSIS.search(code)]
    assert not untagged, f"command examples in untagged fences (make them ```sh): {untagged}"


def test_the_extractor_sees_the_examples():
    """The documents hold runnable examples of both kinds (a parser that finds none would pass vacuously)."""
    py = [b for d in DOCS for b in blocks(d) if b[0] in PYTHON and b[3] is None]
    sh = [b for d in DOCS for b in blocks(d) if b[0] in SHELL and b[3] is None]
    assert len(py) >= 10 and len(sh) >= 1, (len(py), len(sh))


def _python_env() -> dict:
    env = dict(os.environ)
    env.setdefault("MPLBACKEND", "Agg")
    # the package the tests import (PYTHONPATH=build/python, or the installed one), in the child too
    env["PYTHONPATH"] = os.pathsep.join(p for p in [*sys.path] if p)
    return env


@pytest.mark.parametrize("doc", _docs_with(PYTHON), ids=_rel)
def test_python_examples_run(doc, tmp_path):
    """The document's ```python blocks, in order, in one namespace, as one script in a fresh interpreter
    (so that a block that only works after another document's imports fails here)."""
    parts = []
    for lang, line, code, reason in blocks(doc):
        if lang not in PYTHON or reason is not None:
            continue
        parts.append(f"__block__ = {_rel(doc)!r} + ':{line}'\n"
                     f"exec(compile({code!r}, __block__, 'exec'), globals())\n")
    script = tmp_path / "doc_examples.py"
    script.write_text("".join(parts), encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    p = subprocess.run([sys.executable, str(script)], cwd=work, capture_output=True, text=True,
                       env=_python_env(), timeout=600)
    assert p.returncode == 0, f"{_rel(doc)}: an example failed:\n{p.stderr[-4000:]}"


@pytest.mark.parametrize("doc", _docs_with(SHELL), ids=_rel)
def test_shell_examples_run(doc, tmp_path):
    """The document's ```sh/```bash blocks with bash -e, `./build/diffract` being the CLI under test."""
    runnable = [(line, code) for lang, line, code, reason in blocks(doc) if lang in SHELL and reason is None]
    if not runnable:
        pytest.skip("every shell block is marked not run")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "diffract").symlink_to(Path(binary()).resolve())
    env = _python_env()
    env["PATH"] = f"{tmp_path / 'build'}{os.pathsep}{env.get('PATH', '')}"
    for line, code in runnable:
        p = subprocess.run(["bash", "-e", "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env,
                           timeout=600)
        assert p.returncode == 0, f"{_rel(doc)}:{line}: failed ({p.returncode}):\n{p.stderr[-4000:]}"


def test_markers_are_honoured(tmp_path):
    """A marked block is skipped, an unmarked one extracted (the extractor's own check)."""
    doc = tmp_path / "x.md"
    doc.write_text("text\n<!-- not run: needs a GPU -->\n```python\nraise SystemExit(1)\n```\n\n```python\nx = 1\n```\n")
    got = blocks(doc)
    assert [(b[0], b[1], b[3]) for b in got] == [("python", 3, "needs a GPU"), ("python", 7, None)]
    assert got[1][2] == "x = 1\n"
