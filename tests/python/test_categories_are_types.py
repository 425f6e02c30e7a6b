"""Issue 50: a category is an enum class; its text lives in one name table (core/names.hpp) and appears
only in parsing and output. This test scans src/ for a string literal compared with == or != and fails
on one outside the files below, each a parser of external text or a writer of output, with the reason it
may compare text. A new category compared as text fails here: give it an enum and a name table instead.
A file listed here that no longer compares any literal fails too, so the list only shrinks."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"

# Directories whose every file parses external bytes.
ALLOWED_DIRS = {
    "src/formats": "checkpoint parsers: dtype names, config keys, pickle globals, file names of the formats",
}
# Files that may compare text, and why.
ALLOWED_FILES = {
    "src/model/schema.cpp": "the parser of config.json's architectures and geometry keys (a model's own text)",
    "src/model/tensor_names.cpp": "the parser of tensor names (a model's own text)",
    "src/core/byte_size.cpp": "the parser of sizes (--max-memory 8G: the unit letters)",
    "src/synth/synthetic_family.cpp": "the parser of --preset (tiny, 1b, 7b) and the flag named in a message",
    "src/analysis/catalog.cpp": "the parser of --metrics (all, default)",
    "src/analysis/metrics/kernels.cpp": "catalog field names (weights_lsvs, weights_rsvs): the catalog's own text",
    "src/edit/heads_file.cpp": "the parser of a --heads CSV's header",
    "src/run/content_identity.cpp": "an environment variable's value",
    "src/run/shipped_inputs.cpp": "a file extension found in an input directory",
    "src/store/store.cpp": "SQLite's integrity_check answer",
    "src/sweep/score_direction.cpp": "the parser of score keys (neg, exact match)",
    "src/watch/run_directory.cpp": "the parser of a run directory's names (step, file extensions)",
    "src/report/config.cpp": "the parser of the report's config file",
    "src/report/csv.cpp": "the parser of CSV cells (nan, inf)",
    "src/report/data_dirs.cpp": "the parser of result directories (summary.json keys, CSV columns, file names)",
    "src/report/data_store.cpp": "the reader of store rows (field names)",
    "src/report/figure_util.cpp": "output: figure captions by field prefix",
    "src/report/figures_sweeps.cpp": "output: summary.json's reference keys and column names as drawn",
    "src/report/figures_trajectories.cpp": "output: alerts.csv's kind as read back",
    "src/report/series.cpp": "output: an axis label by the step column's unit",
    "src/report/svg.cpp": "output: SVG attribute text",
}

STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
CHAR = re.compile(r"'(?:[^'\\\n]|\\.)+'")
COMPARED = re.compile(r'(?:==|!=)\s*(?:std::string(?:_view)?\s*\(\s*)?""|""\s*(?:==|!=)')


def code_lines(path):
    """The file's lines with comments removed and every string literal emptied to \"\"."""
    text = path.read_text(errors="replace")
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group().count("\n"), text, flags=re.S)
    for line in text.splitlines():
        line = CHAR.sub("' '", STRING.sub('""', line))
        yield re.sub(r"//.*$", "", line)


def comparisons():
    found = {}
    for path in sorted(SRC.rglob("*")):
        if path.suffix not in (".cpp", ".hpp", ".h", ".cu", ".cuh"):
            continue
        rel = path.relative_to(ROOT).as_posix()
        for number, line in enumerate(code_lines(path), 1):
            if COMPARED.search(line):
                found.setdefault(rel, []).append(number)
    return found


def allowed(rel):
    return rel in ALLOWED_FILES or any(rel.startswith(d + "/") for d in ALLOWED_DIRS)


def test_no_string_literal_is_compared_outside_parsing_and_output():
    outside = {rel: lines for rel, lines in comparisons().items() if not allowed(rel)}
    assert not outside, (
        "string literals compared outside the parsing and output files (give the category an enum class "
        f"and a name table, core/names.hpp): {outside}")


def test_the_allow_list_holds_no_stale_entry():
    found = comparisons()
    stale = [rel for rel in ALLOWED_FILES if rel not in found]
    assert not stale, f"files that no longer compare text: remove them from ALLOWED_FILES: {stale}"


def test_the_scan_sees_a_comparison():
    """The pattern itself: a literal on either side, with or without a std::string_view around it."""
    for line in ('if (kind == "rewind")', 'if ("rewind" != kind)', 'x == std::string_view("a")'):
        assert COMPARED.search(STRING.sub('""', line)), line
    for line in ('log("== {}")', "x == 'a'", "a == b"):
        assert not COMPARED.search(CHAR.sub("' '", STRING.sub('""', line))), line
