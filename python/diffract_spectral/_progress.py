"""progress=True: the engine's progress reports — (done, total, label), sent from its threads under the
GIL — shown as tqdm bars (tqdm.auto: a widget in a notebook, a text bar in a terminal), one bar per
stage (its label: rewind with a fraction compares, then edits; a new stage ends the previous bar).
Without tqdm, one line on stderr per tenth of each stage's work."""
from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator, Optional


def _tqdm_class():
    """tqdm.auto.tqdm, or None when tqdm is not importable."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm


class _Display:
    """Receives the engine's reports and draws them; close() ends the bar."""

    def __init__(self, tqdm):
        self._tqdm = tqdm
        self._label = None  # the stage being shown
        self._bar = None  # its tqdm bar
        self._printed = -1  # without tqdm: the tenths of the stage's work already reported

    def __call__(self, done: int, total: int, label: str) -> None:
        if label != self._label:
            self.close()
            self._label, self._printed = label, -1
        if self._tqdm is not None:
            if self._bar is None:
                self._bar = self._tqdm(total=total, desc=f"diffract {label}", unit="item")
            self._bar.update(done - self._bar.n)
            return
        tenths = 10 * done // total if total else 10
        if tenths > self._printed:
            self._printed = tenths
            print(f"diffract {label}: {done}/{total}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


@contextlib.contextmanager
def display(progress: bool) -> Iterator[Optional[Callable[[int, int, str], None]]]:
    """The callback to give the engine (None when progress is off); the bars close on the way out,
    including when the run raises."""
    if not progress:
        yield None
        return
    d = _Display(_tqdm_class())
    try:
        yield d
    finally:
        d.close()
