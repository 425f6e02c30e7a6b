"""One refusal for a keyword a function does not take: its own TypeError names the function the user
called as the user knows it (`sweep.rewind`, not `rewind`), lists what it does take and may say why."""
from __future__ import annotations

import functools
import inspect
from typing import Callable, Iterable, Optional, Sequence

from . import _core


def refuse_unknown(function: str, given: Iterable[str], allowed: Sequence[str],
                   why: Optional[Callable[[str], str]] = None) -> None:
    """Raises TypeError for the first name of `given` not in `allowed`; `why(name)` may add a reason."""
    for name in given:
        if name not in allowed:
            reason = why(name) if why else ""
            raise TypeError(f"{function}() got an unexpected keyword argument '{name}'{reason}; "
                            f"its options: {', '.join(allowed)}")


def keywords_checked(function: str, why: Optional[Callable[[str], str]] = None) -> Callable:
    """Decorator for a function with explicit keyword parameters (no **options): a keyword it does not
    take is refused by refuse_unknown under the name `function`, and the engine's InputErrors name the
    Python arguments (python_errors). The signature, help() and the
    docstring stay the function's own (functools.wraps)."""

    def decorate(fn: Callable) -> Callable:
        parameters = inspect.signature(fn).parameters
        allowed = [p for p, v in parameters.items() if v.kind is not inspect.Parameter.POSITIONAL_ONLY]

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            refuse_unknown(function, kwargs, allowed, why)
            return fn(*args, **kwargs)

        return python_errors(checked)

    return decorate


def python_names(message: str, names: Optional[Iterable[str]] = None) -> str:
    """An engine message as Python words: the CLI's option names (`--metrics:`, `--no-heads`) become the
    Python arguments (`metrics=:`, `heads=False`). With `names` (the parameters of the function called),
    only options that are among them are renamed: another program's flag in a message (`srun
    --mpi=pmix`) stays as written, as does any `--flag=value`."""
    import re

    allowed = None if names is None else set(names)

    def name(m: "re.Match") -> str:
        option = m.group(2)
        negated = option.startswith("no-")
        arg = (option[3:] if negated else option).replace("-", "_")
        arg = {"lambda": "lambda_"}.get(arg, arg)
        if allowed is not None and arg not in allowed:
            return m.group(0)
        return m.group(1) + arg + ("=False" if negated else "=")

    return re.sub(r"(^|[\s('\"`,;])--([a-z][a-z0-9-]*)(?![\w=-])", name, message)


_PATH_ANNOTATIONS = ("PathArg", "PathLike", "Union[str, os.PathLike]")


def _type_check(annotation: object) -> Optional[Callable[[str, object], None]]:
    """A check of a value against a simple annotation (the package's annotations are strings: `from
    __future__ import annotations`): str, bool, int, float and path-likes, each optional; None for any
    other annotation (those arguments are checked where they are used)."""
    import math
    import operator
    import os

    if not isinstance(annotation, str):
        return None
    optional = annotation.startswith("Optional[") and annotation.endswith("]")
    base = annotation[len("Optional["):-1] if optional else annotation

    def refuse(arg, value, what):
        raise TypeError(f"{arg}=: expected {what}{' or None' if optional else ''}, found {value!r} "
                        f"({type(value).__name__})")

    def check(arg: str, value: object) -> None:
        if value is None and optional:
            return
        if base == "str":
            if not isinstance(value, str):
                refuse(arg, value, "a string")
        elif base == "bool":
            if not (isinstance(value, bool) or type(value).__name__ == "bool_" or
                    (isinstance(value, int) and value in (0, 1))):
                refuse(arg, value, "True or False")
        elif base == "int":
            if isinstance(value, bool):
                refuse(arg, value, "an integer")
            try:
                operator.index(value)
            except TypeError:
                refuse(arg, value, "an integer")
        elif base == "float":
            if isinstance(value, bool) or not hasattr(value, "__float__") or isinstance(value, (str, bytes)):
                refuse(arg, value, "a number")
            if not math.isfinite(float(value)):
                raise _core.InputError(f"{arg}=: expected a finite number, found {value!r}")
        elif base in _PATH_ANNOTATIONS:
            if not isinstance(value, (str, os.PathLike)):
                refuse(arg, value, "a path (str or os.PathLike)")

    return check if base in ("str", "bool", "int", "float", *_PATH_ANNOTATIONS) else None


def python_errors(fn: Callable) -> Callable:
    """Decorator: every argument with a simple annotation (str, bool, int, float, a path; optional or
    not) is checked before the call, a wrong type a TypeError naming the argument (`precision=:
    expected a string, found None`) instead of the engine's signature dump; an InputError from the
    engine is raised again with its CLI option names as Python arguments (python_names); the traceback
    stays the engine call's."""
    import functools
    import inspect

    signature = inspect.signature(fn)
    checks = {name: c for name, p in signature.parameters.items()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and (c := _type_check(p.annotation))}

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            bound = None  # the function's own refusal (a missing argument, an unknown keyword) follows
        if bound is not None:
            for name, value in bound.arguments.items():
                if name in checks:
                    checks[name](name, value)
        try:
            return fn(*args, **kwargs)
        except _core.InputError as e:
            text = str(e)
            renamed = python_names(text, signature.parameters)
            if renamed == text:
                raise
            raise _core.InputError(renamed) from None

    return call
