"""Progress of a scan for a batch log: one line when it starts and one per revision, with an ETA.

The lines go to the ``ckptgeo.progress`` logger at INFO; ``ckptgeo scan`` and ``ckptgeo probe`` show that
logger at their default verbosity, with or without a terminal (a batch job's log gets them; a terminal gets
them above the progress bar). In Python, ``ckptgeo.scan`` writes them to stderr for the duration of the call
when no logging is configured (:func:`lines_on_stderr`); where it is, that configuration alone shows them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time

import ckptgeo.constants as constants

__all__ = ["LOGGER", "RevisionProgress", "progress_line", "duration", "lines_on_stderr", "hub_bars_hidden"]

#: the logger of the progress lines
LOGGER = logging.getLogger("ckptgeo.progress")


def duration(seconds: float) -> str:
    """``"42 s"``, ``"3 min 05 s"``, ``"2 h 07 min"``; ``"?"`` when unknown.

    >>> duration(42.4), duration(185), duration(7620), duration(math.inf)
    ('42 s', '3 min 05 s', '2 h 07 min', '?')
    """
    if not math.isfinite(seconds):
        return "?"
    s = round(seconds)
    if s < 120:
        return f"{s} s"
    return f"{s // 60} min {s % 60:02d} s" if s < 7200 else f"{s // 3600} h {s % 3600 // 60:02d} min"


def progress_line(desc: str, name: str, done: int, total: int, took: float, elapsed: float,
                  measuring: float | None = None, note: str = "", work: tuple[int, int] | None = None) -> str:
    """One revision's line: which, how many of how many, its own wall time, the elapsed time and the ETA (the
    mean time per revision so far, over ``measuring`` seconds since the first revision began, default
    ``elapsed``, times the revisions left). ``work`` = (revisions done, revisions left) that take time, where
    some take none (a duplicate recorded without a download); default (``done``, ``total - done``).

    >>> progress_line("scan EleutherAI/pythia-160m", "step3000", 3, 12, 41.0, 120.0)
    'scan EleutherAI/pythia-160m: step3000 finished (3/12, 25%) in 41 s; 2 min 00 s elapsed, ETA 6 min 00 s'
    >>> progress_line("scan m", "step2000", 3, 5, 0.0, 600.0, note="duplicate of step0", work=(1, 2))
    'scan m: step2000 duplicate of step0 (3/5, 60%); 10 min 00 s elapsed, ETA 20 min 00 s'
    """
    measuring = elapsed if measuring is None else measuring
    worked, work_left = work if work is not None else (done, total - done)
    left = measuring / worked * work_left if worked else (0.0 if not work_left else math.inf)
    what = f"{note}" if note else f"finished ({done}/{total}, {100 * done / max(total, 1):.0f}%) in {duration(took)}"
    if note:
        what += f" ({done}/{total}, {100 * done / max(total, 1):.0f}%)"
    return f"{desc}: {name} {what}; {duration(elapsed)} elapsed, ETA {duration(left)}"


class RevisionProgress:
    """A tqdm bar (hidden without a terminal) that also logs a line per finished revision.

    ``set_postfix_str(name)`` names the revision in progress, ``update(1)`` finishes it; ``clock`` is the
    time source (seconds), for tests.
    """

    def __init__(self, total: int, desc: str, *, disable=None, clock=time.perf_counter, start_note: str = "",
                 free: int = 0):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc=desc, unit="rev", disable=disable, dynamic_ncols=True)
        self.total, self.desc, self.clock = total, desc, clock
        self.done, self.current = 0, ""
        self.t0 = self.t_rev = clock()
        self.t_first: float | None = None   # when the first revision began (setting up is not in the ETA)
        self.free, self.free_done = free, 0   # revisions known to take no time (duplicates by metadata), done
        if total:
            dup = f" ({free} of them duplicates by metadata: recorded, not fetched)" if free else ""
            LOGGER.info("%s: %d revision%s to measure%s%s", desc, total, "" if total == 1 else "s", dup,
                        f"; {start_note}" if start_note else "")

    def set_postfix_str(self, name: str) -> None:
        self.current, self.t_rev = name, self.clock()
        if self.t_first is None:
            self.t_first = self.t_rev
        self.bar.set_postfix_str(name)

    def update(self, n: int = 1, *, note: str = "", free: bool = False) -> None:
        """``n`` revisions finished (``note``: what happened instead of measuring, e.g. skipped; ``free``: they
        took no work, as a duplicate or a skipped revision, and are not in the ETA's time per revision)."""
        self.bar.update(n)
        self.done += n
        self.free_done += n if free else 0
        worked = self.done - self.free_done
        work_left = max(self.total - self.done - max(self.free - self.free_done, 0), 0)
        now = self.clock()
        LOGGER.info("%s", progress_line(self.desc, self.current or "revision", self.done, self.total,
                                        now - self.t_rev, now - self.t0,
                                        now - (self.t0 if self.t_first is None else self.t_first), note,
                                        (worked, work_left)))

    def finish(self, *, failed: bool = False, duplicate_of: str | None = None) -> None:
        """The revision in progress is done: measured, ``failed``, or recorded as a duplicate of ``duplicate_of``
        (no download, no work: left out of the ETA's time per revision)."""
        if failed:
            self.update(1, note="failed (the warning above says why)")
        elif duplicate_of is not None:
            self.update(1, note=f"duplicate of {duplicate_of}: recorded, not fetched", free=True)
        else:
            self.update(1)

    def close(self) -> None:
        self.bar.close()


@contextlib.contextmanager
def lines_on_stderr():
    """Within the body, the progress lines go to stderr (``INFO ckptgeo.progress: ...``, as the command line
    prints them) when nothing else would show them: no handler on ``ckptgeo.progress``, its parents or the root
    logger. The handler and the level it needs are removed after the body. A configured logging setup (any
    handler there) decides alone, so no line is ever shown twice; ``CKPTGEO_NO_PROGRESS=1`` shows none. On a
    terminal the lines go above the progress bar."""
    if constants.NO_PROGRESS or LOGGER.hasHandlers():
        yield
        return
    from tqdm.contrib.logging import logging_redirect_tqdm

    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    level = LOGGER.level
    LOGGER.addHandler(handler)
    if LOGGER.getEffectiveLevel() > logging.INFO:
        LOGGER.setLevel(logging.INFO)
    try:
        with logging_redirect_tqdm(loggers=[LOGGER]):
            yield
    finally:
        LOGGER.removeHandler(handler)
        LOGGER.setLevel(level)


@contextlib.contextmanager
def hub_bars_hidden():
    """Within the body, huggingface_hub's own download bars (one per file and revision) are hidden where stderr is
    not a terminal (a notebook, a batch log), as ``ckptgeo`` on the command line hides them; the scan's one line
    per revision says what is fetched. Their state is restored after; a terminal keeps them, and so does
    ``HF_HUB_DISABLE_PROGRESS_BARS=0`` (the user asked for them)."""
    import sys

    from huggingface_hub import constants as hub_constants
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    isatty = getattr(sys.stderr, "isatty", None)
    hide = not (callable(isatty) and isatty()) and hub_constants.HF_HUB_DISABLE_PROGRESS_BARS is not False \
        and not are_progress_bars_disabled()
    if hide:
        disable_progress_bars()
    try:
        yield
    finally:
        if hide:
            enable_progress_bars()
