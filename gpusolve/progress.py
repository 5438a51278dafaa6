"""Progress of long solves and of profiling, on stderr only (stdout stays clean for ``--json``).

On a terminal a tqdm bar; anywhere else (a log file, a pipe, CI, a notebook) one plain line now and
then: the first once the solve has run :data:`PROGRESS_DELAY_S`, then at every tenth of the work (at
most one line per :data:`LINE_EVERY_S`, at least one per :data:`LINE_MAX_GAP_S`), and one when it
is done. A solve shorter than :data:`PROGRESS_DELAY_S` prints nothing either way.

Note [Progress units]
    The backends fill the table diagonal by diagonal and report the (i, j) pairs done. A pair
    (i, i + d) weighs d candidate splits (d - 1 checkpoints and the tape) for each memory column,
    so diagonal d (N + 1 - d pairs) is (N + 1 - d) * d * (M + 1) candidate evaluations and the whole
    table about N^3 / 6 * (M + 1). Counting pairs would put half the pairs behind after the first
    ~30 % of the diagonals, a few percent of the work: the time estimate would run far low.
    :class:`PairsToWork` turns the running pair count into this work, so the fraction shown and the
    time left follow the real work.
"""
from __future__ import annotations

import sys
import time
from contextlib import contextmanager

import numpy as np

# Nothing is printed before a solve has run this long (tqdm's ``delay`` on a terminal).
PROGRESS_DELAY_S = 2.0
# Off a terminal: a line at each tenth of the work, at most one per LINE_EVERY_S, at least one
# per LINE_MAX_GAP_S.
LINE_EVERY_S = 5.0
LINE_MAX_GAP_S = 60.0


def diagonal_work(n: int) -> np.ndarray:
    """Candidate splits of each diagonal d = 1..n of an n-stage table, per memory column (index
    d - 1): (n + 1 - d) pairs of d splits each (Note [Progress units])."""
    d = np.arange(1, n + 1, dtype=np.int64)
    return (n + 1 - d) * d


def table_work(n: int, columns: int = 1) -> int:
    """Candidate evaluations of a whole n-stage table with ``columns`` memory columns."""
    return int(diagonal_work(n).sum()) * int(columns)


class PairsToWork:
    """A backend ``progress(pairs)`` callback that calls ``update(work)`` with the work done since its
    last call, the pairs being taken in diagonal order (Note [Progress units])."""

    def __init__(self, n: int, columns: int, update):
        per_diagonal = diagonal_work(n)
        self._pairs_end = np.cumsum(np.arange(n, 0, -1, dtype=np.int64))  # pairs done after diagonal d
        self._work_end = np.cumsum(per_diagonal) * int(columns)
        self._columns = int(columns)
        self._update = update
        self.pairs = 0
        self.work = 0

    def work_at(self, pairs: int) -> int:
        """Work done once the first ``pairs`` pairs (in diagonal order) are."""
        if len(self._pairs_end) == 0 or pairs <= 0:
            return 0
        full = int(np.searchsorted(self._pairs_end, pairs, side="right"))  # diagonals complete
        if full >= len(self._pairs_end):
            return int(self._work_end[-1])
        before_pairs = int(self._pairs_end[full - 1]) if full else 0
        before_work = int(self._work_end[full - 1]) if full else 0
        return before_work + (pairs - before_pairs) * (full + 1) * self._columns

    def __call__(self, pairs: int) -> None:
        self.pairs += int(pairs)
        done = self.work_at(self.pairs)
        if done > self.work:
            self._update(done - self.work)
            self.work = done


def _seconds(value: float) -> str:
    value = max(0.0, value)
    if value < 90:
        return f"{value:.0f} s"
    if value < 5400:
        return f"{value / 60:.1f} min"
    return f"{value / 3600:.1f} h"


class LineProgress:
    """Progress as plain lines on ``stream`` (off a terminal): ``update(work)`` like tqdm's."""

    def __init__(self, total: int, desc: str, stream=None, clock=time.monotonic):
        self.total, self.desc, self.stream, self.clock = max(1, int(total)), desc, stream or sys.stderr, clock
        self.started = clock()
        self.done = 0
        self.lines = 0
        self._last = self.started
        self._last_tenth = 0

    def update(self, work: int) -> None:
        self.done += int(work)
        now = self.clock()
        if now - self.started < PROGRESS_DELAY_S or self.done >= self.total:
            return
        tenth = 10 * self.done // self.total
        since = now - self._last
        if self.lines == 0 or (tenth > self._last_tenth and since >= LINE_EVERY_S) or since >= LINE_MAX_GAP_S:
            elapsed = now - self.started
            frac = self.done / self.total
            left = f", about {_seconds(elapsed * (1 - frac) / frac)} left" if frac > 0 else ""
            self._print(f"{100 * frac:.0f} % after {_seconds(elapsed)}{left}")
            self._last, self._last_tenth = now, tenth

    def close(self, finished: bool = True) -> None:
        """A last line (``done in ...``) when earlier lines were printed and the solve finished."""
        if self.lines and finished:
            self._print(f"done in {_seconds(self.clock() - self.started)}")

    def _print(self, text: str) -> None:
        self.stream.write(f"gpusolve: {self.desc}: {text}\n")
        self.stream.flush()
        self.lines += 1


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


@contextmanager
def work_progress(total: int, desc: str, show: bool = True, stream=None):
    """Yields ``update(work)`` for a task of ``total`` work units (None when not ``show``): a tqdm bar
    when ``stream`` (default stderr) is a terminal, else :class:`LineProgress`. Nothing is shown for
    a task shorter than :data:`PROGRESS_DELAY_S`."""
    if not show:
        yield None
        return
    stream = stream or sys.stderr
    if _is_terminal(stream):
        from tqdm import tqdm
        bar = tqdm(total=total, desc=desc, file=stream, leave=False, delay=PROGRESS_DELAY_S, smoothing=0,
                   bar_format="{desc}: {percentage:3.0f}%|{bar}| [{elapsed}<{remaining}]")
        with bar:
            yield bar.update
        return
    lines = LineProgress(total, desc, stream)
    finished = False
    try:
        yield lines.update
        finished = True
    finally:
        lines.close(finished)


@contextmanager
def pair_progress(n: int, columns: int, desc: str, show: bool, stream=None):
    """Yields the ``progress(pairs)`` callback for a backend filling an ``n``-stage table with
    ``columns`` memory columns (None when not ``show``), weighted by work (Note [Progress units]):
    :func:`work_progress` of the table's candidate evaluations."""
    with work_progress(table_work(n, columns), desc, show, stream) as update:
        yield None if update is None else PairsToWork(n, columns, update)
