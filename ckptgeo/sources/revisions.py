"""Revisions (one checkpoint each) and the selectors that choose among them.

A :class:`Revision` keeps the user-facing name (``"step3000"``), the training step, and the resolved
commit (a Hub sha, or ``None`` for a local folder). Selectors (:func:`select_revisions`):

====================  =========================================================
``all``               every step revision (not ``main``)
``every-N``           steps divisible by N (step 0 included)
``log``               step 0 and the powers of two present
``A:B`` / ``A:B:N``   steps in [A, B] (inclusive), optionally divisible by N
``a,b,...``           a list of names (``step1000``) or steps (``1000``)
``main`` / ``final``  the last step
====================  =========================================================

Pythia's grid (:func:`pythia_steps`): step 0, log-spaced 1 ... 512, then every 1000 to 143000.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from ckptgeo.errors import EmptySelectionError, InvalidParameterError, RevisionNotFoundError

__all__ = ["Revision", "select_revisions", "parse_step", "pythia_steps", "closest_revisions"]


@dataclass(frozen=True, order=True)
class Revision:
    """One checkpoint: ``step`` (training steps), ``name`` (branch or folder name), ``commit`` (sha or None),
    ``size`` (bytes of its weight files where known, else None)."""

    step: int
    name: str
    commit: str | None = None
    size: int | None = None


def parse_step(name: str, pattern: str = r"^step(\d+)$") -> int | None:
    """The step encoded in a branch/folder ``name`` by ``pattern`` (first group), or None.

    >>> parse_step("step3000"), parse_step("main")
    (3000, None)
    """
    m = re.match(pattern, name)
    return int(m.group(1)) if m else None


def pythia_steps() -> list[int]:
    """The 154 Pythia checkpoint steps.

    >>> s = pythia_steps(); len(s), s[:3], s[-1]
    (154, [0, 1, 2], 143000)
    """
    return [0] + [2**i for i in range(10)] + list(range(1000, 143001, 1000))


def closest_revisions(wanted: str, revisions: list[Revision], n: int = 3) -> tuple[str, ...]:
    """Names of the ``n`` existing revisions nearest to ``wanted`` (by step when it has one)."""
    step = parse_step(wanted) if not wanted.isdigit() else int(wanted)
    if step is None:
        import difflib

        return tuple(difflib.get_close_matches(wanted, [r.name for r in revisions], n=n))
    return tuple(r.name for r in sorted(revisions, key=lambda r: (abs(r.step - step), r.step))[:n])


def _missing(wanted: str, revisions: list[Revision], source: str) -> RevisionNotFoundError:
    close = closest_revisions(wanted, revisions)
    return RevisionNotFoundError(
        f"Revision {wanted!r} not found in {source}; closest existing: {', '.join(close) or '(none)'}. "
        f"Run `ckptgeo revisions {source}` to list them (selectors: all, every-N, log, A:B, A:B:N, main, "
        f"or names/steps separated by commas).", repo_id=source, revision=wanted, closest=close)


def select_revisions(revisions: list[Revision], selector: str, *, source: str = "source") -> list[Revision]:
    """Apply ``selector`` (see module docstring) to ``revisions``; returns them sorted by step.

    Raises
    ------
    RevisionNotFoundError
        A listed name or step does not exist (the message names the closest existing ones).
    EmptySelectionError
        The selector is valid but matches nothing.
    InvalidParameterError
        The selector cannot be parsed.

    Examples
    --------
    >>> revs = [Revision(s, f"step{s}") for s in (0, 1, 2, 4, 1000, 2000, 3000)]
    >>> [r.step for r in select_revisions(revs, "every-2000")]
    [0, 2000]
    >>> [r.step for r in select_revisions(revs, "1:1000")]
    [1, 2, 4, 1000]
    """
    revs = sorted(revisions)
    if not revs:
        raise EmptySelectionError(f"{source} has no step revisions")
    sel = selector.strip()
    by_name = {r.name: r for r in revs}
    by_step = {r.step: r for r in revs}
    if sel == "all":
        out = revs
    elif sel in ("main", "final"):
        out = [revs[-1]]
    elif sel == "log":
        out = [r for r in revs if r.step == 0 or (r.step & (r.step - 1)) == 0]
    elif m := re.fullmatch(r"every-(\d+)", sel):
        n = int(m.group(1))
        if n < 1:
            raise InvalidParameterError(f"every-N needs N >= 1; got {sel!r}", name="revisions", value=sel)
        out = [r for r in revs if r.step % n == 0]
    elif m := re.fullmatch(r"(\d*):(\d*)(?::(\d+))?", sel):
        lo = int(m.group(1)) if m.group(1) else revs[0].step
        hi = int(m.group(2)) if m.group(2) else revs[-1].step
        n = int(m.group(3)) if m.group(3) else 1
        if n < 1 or lo > hi:
            raise InvalidParameterError(f"step range {sel!r} needs A <= B and N >= 1", name="revisions", value=sel)
        lo_i = bisect.bisect_left([r.step for r in revs], lo)
        out = [r for r in revs[lo_i:] if r.step <= hi and r.step % n == 0]
    elif re.fullmatch(r"[\w.\-]+(,[\w.\-]+)*", sel):
        out = []
        for part in sel.split(","):
            if part in by_name:
                out.append(by_name[part])
            elif part in ("main", "final"):
                out.append(revs[-1])
            elif part.isdigit() and int(part) in by_step:
                out.append(by_step[int(part)])
            else:
                raise _missing(part, revs, source)
        out = sorted(set(out))
    else:
        raise InvalidParameterError(
            f"Cannot parse revision selector {selector!r}; use all, every-N, log, A:B, A:B:N, main, "
            f"or a comma list of names/steps", name="revisions", value=selector)
    if not out:
        raise EmptySelectionError(f"Selector {selector!r} matched no revision of {source} "
                                  f"(steps {revs[0].step}..{revs[-1].step}, {len(revs)} revisions)")
    return out
