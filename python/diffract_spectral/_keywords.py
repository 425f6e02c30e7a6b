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


def python_names(message: str) -> str:
    """An engine message as Python words: the CLI's option names (`--metrics:`, `--no-heads`) become the
    Python arguments (`metrics=:`, `heads=False`)."""
    import re

    def name(m: "re.Match") -> str:
        option = m.group(2)
        if option == "no-heads":
            return m.group(1) + "heads=False"
        if option.startswith("no-"):
            return m.group(1) + option[3:].replace("-", "_") + "=False"
        arg = option.replace("-", "_")
        return m.group(1) + {"lambda": "lambda_"}.get(arg, arg) + "="

    return re.sub(r"(^|[\s('\"`,;])--([a-z][a-z0-9-]*)(?![\w-])", name, message)


def python_errors(fn: Callable) -> Callable:
    """Decorator: an InputError from the engine is raised again with its CLI option names as Python
    arguments (python_names); the traceback stays the engine call's."""
    import functools

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except _core.InputError as e:
            text = str(e)
            renamed = python_names(text)
            if renamed == text:
                raise
            raise _core.InputError(renamed) from None

    return call
