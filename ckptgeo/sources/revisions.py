"""Revisions (one checkpoint each) and the selectors that choose among them.

A :class:`Revision` keeps the user-facing name (``"step3000"``, ``"stage2-ingredient1-step500-tokens3B"``),
the training step, the optional ``stage`` and ``tokens`` its name encodes (see
:mod:`ckptgeo.sources.naming`), and the resolved commit (a Hub sha, or ``None`` for a local folder).
Revisions sort by (stage order, step): steps restart in each OLMo-2 stage-2 ingredient, so two
revisions with the same step in different stages are different revisions.

Selectors (:func:`select_revisions`):

=======================  =========================================================
``all`` / ``*``          every step revision (not ``main``)
``every-N``              steps divisible by N (step 0 included)
``log``                  step 0 and the powers of two present
``A:B`` / ``A:B:N``      steps in [A, B] (inclusive), optionally divisible by N
``a,b,...``              a list of names (``step1000``) or steps (``1000``: every revision at that step); in
                         a family (``member@branch`` names) a plain branch name selects it in every member
``main`` / ``final``     the last revision
``genuine``              the revisions whose weights no other revision serves (checked from the source's
                         metadata, :mod:`ckptgeo.sources.integrity`; ``ckptgeo revisions SOURCE --integrity``)
``STAGE:SEL``            SEL within the stages matching STAGE (a glob): ``stage2-ingredient1:*``,
                         ``stage1:every-1000``, ``stage2-*:final``; ``-`` names revisions without a stage
=======================  =========================================================

Pythia's grid (:func:`pythia_steps`): step 0, log-spaced 1 ... 512, then every 1000 to 143000.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass

from ckptgeo.errors import CkptgeoError, EmptySelectionError, InvalidParameterError, RevisionNotFoundError
from ckptgeo.sources.naming import ParsedName, parse_name, stage_order

__all__ = ["Revision", "revision_from_name", "select_revisions", "parse_step", "pythia_steps", "closest_revisions"]


@functools.total_ordering
@dataclass(frozen=True)
class Revision:
    """One checkpoint.

    Attributes
    ----------
    step : int
        Training steps (counted from the start of its stage where a suite restarts them).
    name : str
        Branch, folder or family-member name; unique within a source.
    commit : str or None
        Hub commit sha (None for a local folder).
    size : int or None
        Bytes of its weight files where known.
    stage : str or None
        Training stage (OLMo-2 ``stage1``, ``stage2-ingredient2``); None where the suite has one.
    tokens : int or None
        Training tokens seen, from the name (``tokens4B``) or step x tokens per step where known.
    seed : int or None
        The training run's seed, for a family of repos (PolyPythia ``-seed{k}``, MultiBERTs ``seed_{s}``).
    repo_id : str or None
        The Hub repo holding it when not the source's own (a family member).
    subfolder : str or None
        Folder inside the commit holding it (a Trainer's ``checkpoint-{N}/``); None: the top level.
    model : str or None
        Model name written in its rows when not the source's (a family member's).

    Revisions sort by (stage order, step, seed, name).
    """

    step: int
    name: str
    commit: str | None = None
    size: int | None = None
    stage: str | None = None
    tokens: int | None = None
    seed: int | None = None
    repo_id: str | None = None
    subfolder: str | None = None
    model: str | None = None

    @property
    def sort_key(self) -> tuple:
        return (stage_order(self.stage), self.step, -1 if self.seed is None else self.seed, self.name)

    def __lt__(self, other: "Revision") -> bool:
        if not isinstance(other, Revision):
            return NotImplemented
        return self.sort_key < other.sort_key

    @property
    def label(self) -> str:
        """``stage/step`` (or the step) for messages: ``stage2-ingredient1 step 500``."""
        return f"{self.stage} step {self.step}" if self.stage else f"step {self.step}"


def revision_from_name(name: str, *, pattern: str | None = None, tokens_per_step: int | None = None,
                       parsed: ParsedName | None = None, **fields) -> Revision | None:
    """The :class:`Revision` a branch/folder ``name`` encodes (see :mod:`ckptgeo.sources.naming`), or None.

    ``tokens`` comes from the name, else ``step * tokens_per_step`` where that is known (a Hub source passes
    the naming scheme's known global batch, :attr:`~ckptgeo.sources.naming.NamingScheme.tokens_per_step`).
    ``parsed``: the name already read by :func:`~ckptgeo.sources.naming.parse_names` (which fills in stages
    from the other names of a listing).

    >>> r = revision_from_name("stage1-step1000-tokens5B", commit="ab")
    >>> r.step, r.stage, r.tokens, r.commit
    (1000, 'stage1', 5000000000, 'ab')
    """
    parsed = parsed or parse_name(name, pattern)
    if parsed is None:
        return None
    tokens = parsed.tokens
    if tokens is None and tokens_per_step:
        tokens = parsed.step * tokens_per_step
    return Revision(step=parsed.step, name=name, stage=parsed.stage, tokens=tokens, **fields)


def parse_step(name: str, pattern: str | None = None) -> int | None:
    """The step encoded in a branch/folder ``name`` (built-in naming schemes, or ``pattern``), or None.

    >>> parse_step("step3000"), parse_step("step-3000"), parse_step("main")
    (3000, 3000, None)
    """
    parsed = parse_name(name, pattern)
    return None if parsed is None else parsed.step


def pythia_steps() -> list[int]:
    """The 154 Pythia checkpoint steps.

    >>> s = pythia_steps(); len(s), s[:3], s[-1]
    (154, [0, 1, 2], 143000)
    """
    return [0] + [2**i for i in range(10)] + list(range(1000, 143001, 1000))


def closest_revisions(wanted: str, revisions: list[Revision], n: int = 3) -> tuple[str, ...]:
    """Names of the ``n`` existing revisions nearest to ``wanted`` (by stage and step when it names one)."""
    parsed = parse_name(wanted) if not wanted.isdigit() else None
    step = int(wanted) if wanted.isdigit() else (parsed.step if parsed else None)
    if step is None:
        import difflib

        return tuple(difflib.get_close_matches(wanted, [r.name for r in revisions], n=n))
    stage = parsed.stage if parsed else None
    near = sorted(revisions, key=lambda r: (r.stage != stage, abs(r.step - step), r.sort_key))
    return tuple(r.name for r in near[:n])


#: the selector forms, as messages list them
SELECTOR_FORMS = ("all, every-N, log, A:B, A:B:N, main, final, genuine, STAGE:SEL, or names/steps separated by "
                  "commas")
_SYNONYMS_OF_FINAL = ("last", "latest", "newest", "end")


def suggest_selector(wanted: str) -> str | None:
    """The selector form ``wanted`` was probably meant as (``evry-10`` -> ``every-10``, ``last`` -> ``final``),
    or None.

    Examples
    --------
    >>> suggest_selector("evry-10"), suggest_selector("last"), suggest_selector("step100")
    ('every-10', 'final', None)
    """
    import difflib

    m = re.fullmatch(r"([A-Za-z]+)[-_ ]?(\d*)", wanted.strip())
    if m is None:
        return None
    word, digits = m.group(1).lower(), m.group(2)
    if word in _SYNONYMS_OF_FINAL and not digits:
        return "final"
    if digits and difflib.get_close_matches(word, ["every"], n=1, cutoff=0.6):
        return f"every-{digits}"
    if not digits:
        close = difflib.get_close_matches(word, ["all", "log", "main", "final", "every", "genuine"], n=1, cutoff=0.6)
        if close:
            return "every-N" if close[0] == "every" else close[0]
    return None


def _malformed_selector(wanted: str) -> str | None:
    """The selector form ``wanted`` garbles, when it is one (``every-1000x``, ``every-10.5``, ``evry-10k``:
    a word close to ``every`` with a number that is not a whole one), else None: such a part names no revision,
    and "not found" would mislead.

    >>> _malformed_selector("every-1000x"), _malformed_selector("step1000")
    ('every-1000', None)
    """
    import difflib

    m = re.fullmatch(r"([A-Za-z]+)[-_ ]?(\d+)[^\d,]+\d*", wanted.strip())
    if m and difflib.get_close_matches(m.group(1).lower(), ["every"], n=1, cutoff=0.6):
        return f"every-{m.group(2)}"
    return None


def _missing(wanted: str, revisions: list[Revision], source: str, note: str | None) -> CkptgeoError:
    if wanted not in {r.name for r in revisions} and (form := _malformed_selector(wanted)) is not None:
        return InvalidParameterError(f"{wanted!r} is not a valid selector: every-N takes a whole number of steps "
                                     f"(did you mean {form!r}?); selectors: {SELECTOR_FORMS}.", name="revisions",
                                     value=wanted)
    close = closest_revisions(wanted, revisions)
    where = f"{source} ({note})" if note else source
    form = suggest_selector(wanted)
    hint = f" Did you mean the selector {form!r}?" if form else ""
    return RevisionNotFoundError(
        f"Revision {wanted!r} not found in {where}; closest existing: {', '.join(close) or '(none)'}.{hint} "
        f"Run `ckptgeo revisions {source}` to list them (selectors: {SELECTOR_FORMS}).", repo_id=source,
        revision=wanted, closest=close)


def stages(revisions: list[Revision]) -> list[str | None]:
    """The distinct stages of ``revisions`` in training order."""
    return sorted({r.stage for r in revisions}, key=stage_order)


def select_revisions(revisions: list[Revision], selector: str, *, source: str = "source",
                     note: str | None = None, genuine: "set[str] | None" = None) -> list[Revision]:
    """Apply ``selector`` (see module docstring) to ``revisions``; returns them sorted by (stage, step).

    ``note`` is added to the error naming a missing revision (e.g. that only the local cache was read).
    ``genuine``: the names the ``genuine`` selector picks (:attr:`~ckptgeo.sources.integrity.IntegrityReport.genuine`).

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
    >>> olmo = [revision_from_name(n) for n in ("stage1-step0-tokens0B", "stage1-step10-tokens1B",
    ...         "stage2-ingredient1-step0-tokens1B", "stage2-ingredient1-step10-tokens2B")]
    >>> [r.name for r in select_revisions(olmo, "stage2-ingredient1:*")]
    ['stage2-ingredient1-step0-tokens1B', 'stage2-ingredient1-step10-tokens2B']
    """
    revs = sorted(revisions)
    if not revs:
        raise EmptySelectionError(f"{source} has no step revisions")
    sel = ",".join(part.strip() for part in selector.strip().split(","))  # "step0, step1" as typed in a shell
    if not sel.strip(","):
        raise InvalidParameterError(f"the revision selector {selector!r} is empty; give 'all' for every revision of "
                                    f"{source}, or names, steps, a range or every-N", name="revisions", value=selector)
    m = re.fullmatch(r"([A-Za-z*?\[\-][\w*?\[\]\-]*):(.*)", sel)
    if m and m.group(1) not in ("every",):
        pattern, rest = m.group(1), m.group(2) or "all"
        known = stages(revs)
        picked = [r for r in revs if (r.stage is None and pattern == "-")
                  or (r.stage is not None and fnmatch.fnmatchcase(r.stage, pattern))]
        if not picked:
            names = ", ".join("-" if s is None else s for s in known)
            raise EmptySelectionError(f"No stage of {source} matches {pattern!r} (stages: {names})")
        return select_revisions(picked, rest, source=source, note=note, genuine=genuine)
    by_name = {r.name: r for r in revs}
    by_step: dict[int, list[Revision]] = {}
    for r in revs:
        by_step.setdefault(r.step, []).append(r)
    if sel in ("all", "*"):
        out = revs
    elif sel in ("main", "final"):
        out = [revs[-1]]
    elif sel == "genuine":
        if genuine is None:
            raise InvalidParameterError("the 'genuine' selector needs the source's weight metadata "
                                        "(ckptgeo.sources.integrity.check_source)", name="revisions", value=sel)
        out = [r for r in revs if r.name in genuine]
    elif sel == "log":
        out = [r for r in revs if r.step == 0 or (r.step & (r.step - 1)) == 0]
    elif m := re.fullmatch(r"every-(\d+)", sel):
        n = int(m.group(1))
        if n < 1:
            raise InvalidParameterError(f"every-N needs N >= 1; got {sel!r}", name="revisions", value=sel)
        out = [r for r in revs if r.step % n == 0]
    elif m := re.fullmatch(r"(\d*):(\d*)(?::(\d+))?", sel):
        lo = int(m.group(1)) if m.group(1) else min(r.step for r in revs)
        hi = int(m.group(2)) if m.group(2) else max(r.step for r in revs)
        n = int(m.group(3)) if m.group(3) else 1
        if n < 1 or lo > hi:
            raise InvalidParameterError(f"step range {sel!r} needs A <= B and N >= 1", name="revisions", value=sel)
        out = [r for r in revs if lo <= r.step <= hi and r.step % n == 0]
    elif re.fullmatch(r"[\w.@\-]+(,[\w.@\-]+)*", sel):
        out = []
        for part in sel.split(","):
            if part in by_name:
                out.append(by_name[part])
            elif part in ("main", "final"):
                out.append(revs[-1])
            elif part.isdigit() and int(part) in by_step:
                out.extend(by_step[int(part)])
            elif in_members := [r for r in revs if r.name.partition("@")[2] == part]:  # a family: every member's
                out.extend(in_members)
            else:
                raise _missing(part, revs, source, note)
        out = sorted(set(out))
    else:
        raise InvalidParameterError(
            f"Cannot parse revision selector {selector!r}; use {SELECTOR_FORMS}", name="revisions", value=selector)
    if not out:
        steps = f"steps {min(r.step for r in revs)}..{max(r.step for r in revs)}"
        raise EmptySelectionError(f"Selector {selector!r} matched no revision of {source} "
                                  f"({steps}, {len(revs)} revisions)")
    return out
