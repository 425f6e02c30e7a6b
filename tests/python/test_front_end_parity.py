"""Issue 32: the CLI and Python offer the same options. Every subcommand's long options (read from
`diffract completion bash`, which CLI11 generates from the registered commands) against the parameters
of the Python function's signature, in both directions. A name missing on one side fails, unless the
allow-list below gives the reason it cannot exist there. Issue 51: no public function hides its
options behind **options — every option is an explicit keyword with a default, a type and a docstring,
so help(), IDEs and the signature show them."""
import inspect
import re

import pytest

import diffract_spectral as diffract
from conftest import run
from diffract_spectral import edit, sweep

# CLI command -> the Python function that mirrors it.
FUNCTIONS = {
    "analyze": diffract.analyze, "compare": diffract.compare, "generate": diffract.generate,
    "report": diffract.report, "watch": diffract.watch,
    **{f"edit {n.replace('_', '-')}": getattr(edit, n) for n in
       ("rewind", "truncate", "transplant", "permute", "interpolate", "merge", "merge_lora")},
    **{f"sweep {n.replace('_', '-')}": getattr(sweep, n) for n in ("rewind", "truncate", "interpolate", "rewind_each", "validate")},
}

# Commands with no Python function, and why.
CLI_ONLY_COMMANDS = {
    "": "the program's own --help/--version",
    "edit": "a group: its subcommands are checked", "sweep": "a group: its subcommands are checked",
    "store": "a group: its subcommands are checked",
    "inspect": "diffract.open(...).describe() returns what inspect --json prints (a dict)",
    "metrics": "diffract.catalog() returns the table `diffract metrics` prints",
    "export": "the Python results are DataFrames already; export writes the store as CSV/JSONL files",
    "store list": "a store maintenance command (sqlite3 or the CLI)",
    "store erase": "a store maintenance command (sqlite3 or the CLI)",
    "store merge": "a store maintenance command (sqlite3 or the CLI)",
    "completion": "shell completion",
}
# inspect's Python twin takes a model and returns a dict (inspect --json), so it has no options to mirror.
assert diffract.inspect is diffract.describe

# (command or "*", CLI option) that Python has no parameter for, and why.
CLI_ONLY_OPTIONS = {
    ("*", "--quiet"): "Python prints nothing but warnings; progress= chooses the display",
    ("*", "--help"): "help() and the docstrings",
    ("report", "--config"): "the config file's keys are report()'s keywords",
    ("report", "--metric"): "an alias of --metrics",
    ("report", "--colors"): "an alias of --colours",
    ("report", "--verbose"): "figures(...).notes returns the notes --verbose prints",
    ("report", "--no-evolution"): "evolution=False",
    ("analyze", "--ship-inputs"): "MPI ranks only: the Python module is one process (docs/distributed.md)",
    ("compare", "--ship-inputs"): "MPI ranks only: the Python module is one process (docs/distributed.md)",
}

# (command or "*", Python parameter) that the CLI has no option for, and why.
PYTHON_ONLY_PARAMETERS = {
    ("*", "progress"): "the CLI's progress line is always on (a terminal, or a log line every 10 s)",
    ("*", "models"): "a positional of the CLI (MODEL...)",
    ("*", "a"): "a positional of the CLI (A B)", ("*", "b"): "a positional of the CLI (A B)",
    ("*", "inputs"): "a positional of the CLI (STORE | DIR...)",
    ("watch", "run_dir"): "a positional of the CLI (RUN_DIR)",
    ("analyze", "model"): "WeightWatcher's name of the first argument (models)",
    ("compare", "model"): "WeightWatcher's name of the first argument (models)",
    ("report", "format"): "the CLI's --format (checked under its own name)",
    ("sweep validate", "second_reference"): "the CLI's --reference given a second time",
}


def cli_options():
    script = run(["completion", "bash"]).stdout
    block = script[script.index("_diffract_options()"):]
    return {cmd: opts.split() for cmd, opts in re.findall(r'^    "([^"]*)"\) echo "([^"]*)" ;;', block, re.M)}


def python_parameters(cmd, fn):
    return set(inspect.signature(fn).parameters)


def public_functions():
    """(qualified name, function) of every public function of the package, its edit and sweep modules."""
    out = []
    for prefix, module in (("diffract", diffract), ("edit", edit), ("sweep", sweep)):
        for name in module.__all__:
            f = getattr(module, name)
            if inspect.isfunction(f):
                out.append((f"{prefix}.{name}", f))
    return out


@pytest.mark.parametrize("name,fn", public_functions(), ids=[n for n, _ in public_functions()])
def test_no_hidden_options(name, fn):
    """Every parameter is named in the signature: no **options; after the positionals (models, a, b,
    the report's inputs) every option is keyword-only and annotated; the function has a docstring that
    names its options."""
    sig = inspect.signature(fn)
    assert fn.__doc__ and len(fn.__doc__.strip()) > 40, name
    for p in sig.parameters.values():
        assert p.kind is not inspect.Parameter.VAR_KEYWORD, f"{name}: **{p.name} hides options"
        if p.kind is inspect.Parameter.KEYWORD_ONLY:
            assert p.annotation is not inspect.Parameter.empty, f"{name}: {p.name} has no type"


@pytest.mark.parametrize("module,name", [(edit, n) for n in edit.__all__] + [(sweep, n) for n in sweep.__all__
                                                                            if n != "SweepResult"])
def test_edit_and_sweep_options_are_in_help(module, name):
    """The options every edit/sweep takes are named in its signature and documented in its docstring."""
    fn = getattr(module, name)
    params = inspect.signature(fn).parameters
    shared = ["progress", "roles", "layers", "match", "exclude", "device"]
    if module is sweep:
        shared += ["eval", "score_key", "threads", "store", "select_eval", "report_eval", "eval_timeout", "quiet"]
    for option in shared:
        assert option in params, (name, option)
        assert params[option].default is not inspect.Parameter.empty, (name, option)
        assert option in fn.__doc__, (name, option)


def python_name(option):
    name = option[2:].replace("-", "_")
    return {"lambda": "lambda_"}.get(name, name)


def allowed(table, cmd, name):
    return (cmd, name) in table or ("*", name) in table


def test_every_command_has_its_python_function():
    missing = [c for c in cli_options() if c not in FUNCTIONS and c not in CLI_ONLY_COMMANDS]
    assert not missing, f"CLI commands without a Python function or a reason: {missing}"
    stale = [c for c in FUNCTIONS if c not in cli_options()]
    assert not stale, stale


@pytest.mark.parametrize("cmd", sorted(FUNCTIONS))
def test_options_match_in_both_directions(cmd):
    options = cli_options()[cmd]
    params = python_parameters(cmd, FUNCTIONS[cmd])
    cli_names = set()
    missing_in_python = []
    for o in options:
        name = python_name(o)
        cli_names.add(name)
        if name.startswith("no_"):
            cli_names.add(name[3:])
        if name in params or (name.startswith("no_") and name[3:] in params) or allowed(CLI_ONLY_OPTIONS, cmd, o):
            continue
        missing_in_python.append(o)
    assert not missing_in_python, f"{cmd}: CLI options Python lacks: {missing_in_python}"
    missing_in_cli = sorted(p for p in params
                            if p not in cli_names and not allowed(PYTHON_ONLY_PARAMETERS, cmd, p))
    assert not missing_in_cli, f"{cmd}: Python parameters the CLI lacks: {missing_in_cli}"


def test_the_allow_lists_hold_no_stale_entry():
    options = cli_options()
    for (cmd, opt) in CLI_ONLY_OPTIONS:
        cmds = [cmd] if cmd != "*" else list(FUNCTIONS)
        assert any(opt in options.get(c, []) for c in cmds), (cmd, opt)
    for (cmd, param) in PYTHON_ONLY_PARAMETERS:
        cmds = [cmd] if cmd != "*" else list(FUNCTIONS)
        assert any(param in python_parameters(c, FUNCTIONS[c]) for c in cmds), (cmd, param)


def test_a_foreign_keyword_is_named_with_the_function(tmp_path):
    """per_head belongs to sweep truncate and the SVD edits only; elsewhere it is refused by name."""
    with pytest.raises(TypeError, match=r"sweep.rewind\(\) got an unexpected keyword argument 'per_head'.*its options"):
        sweep.rewind(base="a", model="b", out=tmp_path / "o", eval="true", per_head=True)
    with pytest.raises(TypeError, match=r"interpolate\(\) got an unexpected keyword argument 'per_head'"):
        edit.interpolate("a", "b", omega=0.5, out=tmp_path / "o", per_head=True)


# Issue 50: the defaults agree too. (command or "*", CLI option) whose default the two front ends spell
# differently on purpose, and why.
DEFAULT_SPELLINGS = {
    ("edit merge", "--normalize"): "normalize=None is the method's default (the CLI: neither flag)",
    ("edit merge", "--no-normalize"): "normalize=None is the method's default (the CLI: neither flag)",
    ("report", "--evolution"): "evolution=None: drawn when the inputs have steps (the CLI: neither flag)",
    ("report", "--no-evolution"): "evolution=None: drawn when the inputs have steps (the CLI: neither flag)",
    **{("generate", o): "None: the preset's shape (the CLI shows the tiny preset's)" for o in
       ("--layers", "--hidden", "--heads", "--kv-heads", "--intermediate", "--vocab")},
}


def cli_defaults(cmd):
    """{option: default text} of `diffract CMD --help` (CLI11 prints `--top-k INT=10`), and the flags
    (no value: their default is off)."""
    text = run([*cmd.split(), "--help"]).stdout
    defaults, flags = {}, set()
    for m in re.finditer(r"^\s+(?:-\w,)?(--[\w-]+)(?:\s+([A-Z:]+)(?:=(\S+))?)?(?=\s{2}|\s*$)", text, re.M):
        option, kind, default = m.groups()
        if kind is None:
            flags.add(option)
        elif default is not None:
            defaults[option] = default
    return defaults, flags


def same_default(python_value, cli_text):
    """The CLI's text of a default against Python's value: numbers as numbers (1 and 1.0 agree)."""
    if isinstance(python_value, bool):
        return str(python_value).lower() == cli_text
    if isinstance(python_value, (int, float)):
        try:
            return float(cli_text) == python_value
        except ValueError:
            return False
    return str(python_value) == cli_text


@pytest.mark.parametrize("cmd", sorted(FUNCTIONS))
def test_defaults_match(cmd):
    """Every CLI default (--top-k INT=10) is the Python keyword's default, and a CLI flag (off unless
    given) is False in Python, or True for its --no-X form: two defaults swapped on one side fail."""
    params = inspect.signature(FUNCTIONS[cmd]).parameters
    defaults, flags = cli_defaults(cmd)
    wrong = []
    for option, text in defaults.items():
        name = python_name(option)
        if name not in params or allowed(DEFAULT_SPELLINGS, cmd, option):
            continue
        if not same_default(params[name].default, text):
            wrong.append((option, text, params[name].default))
    for option in flags:
        name = python_name(option)
        if name.startswith("no_") and name[3:] in params:
            name, expected = name[3:], True
        else:
            expected = False
        if name in params and params[name].default is not inspect.Parameter.empty and \
                not allowed(DEFAULT_SPELLINGS, cmd, option) and params[name].default != expected:
            wrong.append((option, expected, params[name].default))
    assert not wrong, f"{cmd}: (option, CLI default, Python default) that differ: {wrong}"


def test_compare_defaults_come_from_the_library():
    """compare's defaults are written once (run::CompareOptionText): Python's signature reads them."""
    from diffract_spectral import _core
    text = _core.CompareOptionText()
    params = inspect.signature(diffract.compare).parameters
    for name in ("top_k", "scale_scope", "order", "seed", "precision", "svd_route", "heads", "allow_partial",
                 "delta_only"):
        assert params[name].default == getattr(text, name), name
