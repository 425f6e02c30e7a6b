"""One refusal for a keyword a function does not take: its own TypeError names the function the user
called (not a private helper it passes **options to) and lists what it does take."""
from __future__ import annotations

from typing import Callable, Iterable, Optional, Sequence


def refuse_unknown(function: str, given: Iterable[str], allowed: Sequence[str],
                   why: Optional[Callable[[str], str]] = None) -> None:
    """Raises TypeError for the first name of `given` not in `allowed`; `why(name)` may add a reason."""
    for name in given:
        if name not in allowed:
            reason = why(name) if why else ""
            raise TypeError(f"{function}() got an unexpected keyword argument '{name}'{reason}; "
                            f"its options: {', '.join(allowed)}")
