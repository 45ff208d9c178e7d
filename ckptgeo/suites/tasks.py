"""Eight algorithmic tasks at three difficulty levels, as seeded generators of generation items.

Every item is a :class:`ckptgeo.suites.items.Item` of kind ``"generation"``: the prompt is the task's marker
token, the input tokens and the separator ``=``, space-separated; the target is the answer tokens,
each preceded by a space; the label is the answer class (compare, parity) or the first answer
token (modular and sort: a coarser class, below). Numbers are written digit by digit, zero-padded to the level's width, except the operands and
residues of ``modular``, which are single tokens (see :mod:`ckptgeo.suites.vocab`).

====================  ================================  =======================================
task                  example (prompt -> target)         level 1 / level 2 / level 3
====================  ================================  =======================================
copy                  ``copy 3 1 4 =`` -> `` 3 1 4``    5 digits / 10 digits / 10-20 digits
reverse               ``reverse 3 1 4 =`` -> `` 4 1 3`` 4 digits / 8 digits / 8-16 digits
compare               ``compare 3 4 , 3 5 =`` -> `` <`` 2 digits / 4 digits / 8 digits
parity                ``parity 3 8 1 =`` -> `` 0``      3 digits / 6 digits / 10 digits
add                   ``add 4 7 + 0 9 =`` -> `` 4 6 1`` 2+2 digits / 4+4 / 8+8
modular               ``mod 5 + 90 =`` -> `` 95``       2 / 3 / 4 operands, mod 97
sort                  ``sort 3 1 4 =`` -> `` 1 3 4``    4 digits / 8 digits / 8-16 digits
multiplication        ``mul 1 2 0 * 7 =`` -> `` 7 4 1 0``  3x1 digits / 3x2 / 3x3
====================  ================================  =======================================

Details per task:

* **copy**, **reverse**, **sort** (ascending): a digit string of the level's length; where a range is
  given the length is drawn uniformly from it, so the answer's position offsets vary between items.
  Sort's ``label`` is its first answer token (the smallest digit) with 2..9 merged into ``"2+"``: a
  smallest digit of 5 or more is so rare (under 4% of 4 digits, far less of 8) that the exact digit
  leaves classes of one held-out item, which stratified cross-validation cannot split.
* **compare**: two different ``n``-digit numbers sharing a common prefix whose length is uniform in
  ``0 .. n-1``, so the first differing digit is equally likely at every position; answer ``<`` or ``>``.
* **parity**: the parity of the sum of ``n`` decimal digits (``0`` even, ``1`` odd), i.e. the parity
  of the count of odd digits. Parity of ``n`` positions with a space of ``10**n`` inputs (bits would give
  only ``2**n``, too few to hold items out at small ``n``).
* **add**: ``a + b`` with ``n``-digit operands, the sum written with ``n + 1`` digits; operands and sum
  are written **least significant digit first** (``4 7`` is 74), so each answer digit needs only the
  carry from the digits before it. (Most-significant-first 2-digit addition was not learned by ``tiny``
  in 1500 steps; reversed, it was learned in about 525.)
* **modular**: ``(x_1 + ... + x_k) mod 97`` with ``k`` operands in ``0..96`` (single tokens). Its
  ``label`` (what probes predict) is the answer's tens digit, ``"0x"`` .. ``"9x"``: ten classes of
  about 20 of the 200 held-out items each (``"9x"``, 90-96, about 14). The answer itself has 97 classes,
  about two items each, which stratified k-fold cross-validation cannot split, so every probe of the
  exact answer would be undefined.
* **multiplication** (``mul``): ``a * b`` with the level's operand widths, the product written with
  as many digits as both operands together; all numbers least significant digit first, as in ``add``
  (``1 2 0 * 7`` is 21 x 7 = 147, answer ``7 4 1 0``). Level 1 has 10,000 prompts: with 2x1 digits
  (1,000 prompts) ``tiny`` memorised its 800 training prompts and stayed at 30% held-out accuracy.

``chance`` is the accuracy of a uniform guess among the task's possible answers (0.5 for compare and
parity, 1/97 for modular, tiny elsewhere).

Measured on ``tiny`` (batch 128, lr 1e-3, 2 shared CPU cores; acquisition = held-out exact match
> 0.5, or > 0.75 for compare and parity, at 3 evaluations in a row). With the whole cosine inside
1000-1500 steps: copy-L1 at step 75, sort-L1 50, compare-L1 75, reverse-L1 100, parity-L1 175,
addition-L1 525-555; modular-L1 not (0.46-0.52 at 1500), multiplication-L1 not (0.41 at 1000, rising).
With the learning rate held near its peak modular-L1 hovered around 0.5: 0.52-0.55 by step 3000 with a
cosine horizon 4x a 3000-step budget (never three checkpoints above 0.5); at a constant rate without
clipping 0.53-0.57 at steps 2603-2877, then 0.475 at 3000.
Under ``ckptgeo reproduce``'s recipe (cosine horizon twice the budget, so the rate decays through the
run; 4000 steps): modular-L1 at 1456 (seed 0) and 2548 (seed 1), multiplication-L1 at
910 (seed 0). With the horizon equal to the 4000 steps, modular-L1 acquired at 2002 (seed 0) and 2184
(seed 1): its acquisition varies with the seed and schedule by several hundred steps. Levels 2 and 3
multiply the input space (see :func:`space_size`) and were not all measured.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from ckptgeo.errors import InvalidParameterError
from ckptgeo.suites.items import Item, Suite, available_suites, load_suite
from ckptgeo.suites.vocab import SEPARATOR

__all__ = ["TASKS", "LEVELS", "LevelSpec", "get_level", "suite_name", "chance", "space_size", "sample",
           "generate", "heldout_items", "suite_header", "MODULUS", "parse_task_level", "task_suite",
           "load_suite_or_task", "check_suite_spec", "PILOT_HARD", "is_hard"]

#: (task, level 1) pairs that are hard: acquired at or after step 150 (or not within 1000-1500 steps) on
#: ``tiny`` at seed 0 in the pilot recorded above (parity 175, addition 525-555, modular and multiplication
#: later); copy 75, compare 75, reverse 100, sort 50 are easy. Every level >= 2 is hard. Fixed before the
#: studies' runs; the presets leave seed 0 out.
PILOT_HARD = frozenset({("parity", 1), ("addition", 1), ("modular", 1), ("multiplication", 1)})


def is_hard(task: str, level: int) -> bool:
    """The studies' difficulty rule, fixed before the outcome: level >= 2, or a level-1 task of
    :data:`PILOT_HARD` (used by the claim table, the demo, ``analyze`` and the forecast's classes).

    Examples
    --------
    >>> is_hard("copy", 1), is_hard("copy", 2), is_hard("modular", 1)
    (False, True, True)
    """
    return int(level) >= 2 or (task, int(level)) in PILOT_HARD

TASKS = ("copy", "reverse", "compare", "parity", "addition", "modular", "sort", "multiplication")
#: the prime of the modular task.
MODULUS = 97
_MARKER = {"copy": "copy", "reverse": "reverse", "compare": "compare", "parity": "parity", "addition": "add",
           "modular": "mod", "sort": "sort", "multiplication": "mul"}


@dataclass(frozen=True)
class LevelSpec:
    """The parameters of one task at one difficulty level.

    Attributes
    ----------
    task : str
        One of :data:`TASKS`.
    level : int
        1, 2 or 3.
    min_length, max_length : int
        Input length in digits (copy, reverse, sort, parity, compare; drawn uniformly when they
        differ), operand width (addition: both operands; multiplication: the first), or the number of
        operands (modular).
    width_b : int
        Width of multiplication's second operand; 0 elsewhere.
    modulus : int
        The prime of modular arithmetic; 0 elsewhere.
    description : str
        One line a human reads.
    """

    task: str
    level: int
    min_length: int
    max_length: int
    width_b: int = 0
    modulus: int = 0
    description: str = ""


def _spec(task, level, lo, hi=None, width_b=0, modulus=0, what=""):
    return LevelSpec(task, level, lo, lo if hi is None else hi, width_b, modulus, what)


LEVELS: dict[str, dict[int, LevelSpec]] = {
    "copy": {1: _spec("copy", 1, 5, what="copy 5 digits"), 2: _spec("copy", 2, 10, what="copy 10 digits"),
             3: _spec("copy", 3, 10, 20, what="copy 10-20 digits")},
    "reverse": {1: _spec("reverse", 1, 4, what="reverse 4 digits"),
                2: _spec("reverse", 2, 8, what="reverse 8 digits"),
                3: _spec("reverse", 3, 8, 16, what="reverse 8-16 digits")},
    "compare": {1: _spec("compare", 1, 2, what="compare two 2-digit numbers"),
                2: _spec("compare", 2, 4, what="compare two 4-digit numbers"),
                3: _spec("compare", 3, 8, what="compare two 8-digit numbers")},
    "parity": {1: _spec("parity", 1, 3, what="parity of the sum of 3 digits"),
               2: _spec("parity", 2, 6, what="parity of the sum of 6 digits"),
               3: _spec("parity", 3, 10, what="parity of the sum of 10 digits")},
    "addition": {1: _spec("addition", 1, 2, what="2-digit + 2-digit"),
                 2: _spec("addition", 2, 4, what="4-digit + 4-digit"),
                 3: _spec("addition", 3, 8, what="8-digit + 8-digit")},
    "modular": {1: _spec("modular", 1, 2, modulus=MODULUS, what="(a + b) mod 97"),
                2: _spec("modular", 2, 3, modulus=MODULUS, what="(a + b + c) mod 97"),
                3: _spec("modular", 3, 4, modulus=MODULUS, what="(a + b + c + d) mod 97")},
    "sort": {1: _spec("sort", 1, 4, what="sort 4 digits"), 2: _spec("sort", 2, 8, what="sort 8 digits"),
             3: _spec("sort", 3, 8, 16, what="sort 8-16 digits")},
    "multiplication": {1: _spec("multiplication", 1, 3, width_b=1, what="3-digit x 1-digit"),
                       2: _spec("multiplication", 2, 3, width_b=2, what="3-digit x 2-digit"),
                       3: _spec("multiplication", 3, 3, width_b=3, what="3-digit x 3-digit")},
}


def get_level(task: str, level: int) -> LevelSpec:
    """The :class:`LevelSpec` of ``task`` at ``level``.

    Raises
    ------
    InvalidParameterError
        Unknown task, or a level other than 1, 2, 3.

    Examples
    --------
    >>> get_level("modular", 2).description
    '(a + b + c) mod 97'
    """
    if task not in LEVELS:
        import difflib

        close = difflib.get_close_matches(str(task), TASKS, n=1)
        hint = f" Did you mean: {close[0]}?" if close else ""
        raise InvalidParameterError(f"Unknown task {task!r}.{hint} Available: {', '.join(TASKS)}.",
                                    name="task", value=task)
    if isinstance(level, bool) or level not in LEVELS[task]:
        raise InvalidParameterError(f"The 'level' of task {task!r} must be 1, 2 or 3. Got {level!r}.",
                                    name="level", value=level)
    return LEVELS[task][level]


def suite_name(task: str, level: int) -> str:
    """The suite name of a task level, as it appears in output tables: ``"modular-L1"``."""
    get_level(task, level)
    return f"{task}-L{level}"


def _digits(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(10) for _ in range(n)]


def _length(rng: random.Random, spec: LevelSpec) -> int:
    return spec.min_length if spec.min_length == spec.max_length else rng.randint(spec.min_length, spec.max_length)


def _as_digits(value: int, width: int) -> list[str]:
    return list(str(value).zfill(width))


# Each sampler returns (input tokens, answer tokens, label); the prompt adds marker and separator.
def _copy(rng, spec):
    x = [str(d) for d in _digits(rng, _length(rng, spec))]
    return x, list(x), x[0]


def _reverse(rng, spec):
    x = [str(d) for d in _digits(rng, _length(rng, spec))]
    y = x[::-1]
    return x, y, y[0]


def _sort(rng, spec):
    x = [str(d) for d in _digits(rng, _length(rng, spec))]
    y = sorted(x)
    return x, y, y[0] if y[0] in "01" else "2+"  # the probe's coarse label (see above)


def _compare(rng, spec):
    n = spec.min_length
    k = rng.randrange(n)  # length of the shared prefix
    a = _digits(rng, n)
    b = a[:k] + [0] * (n - k)
    b[k] = rng.choice([d for d in range(10) if d != a[k]])
    b[k + 1:] = _digits(rng, n - k - 1)
    answer = "<" if a < b else ">"
    return [str(d) for d in a] + [","] + [str(d) for d in b], [answer], answer


def _parity(rng, spec):
    x = _digits(rng, spec.min_length)
    answer = str(sum(x) % 2)
    return [str(d) for d in x], [answer], answer


def _addition(rng, spec):
    n = spec.min_length
    a, b = rng.randrange(10 ** n), rng.randrange(10 ** n)
    y = _as_digits(a + b, n + 1)[::-1]  # least significant digit first, operands too
    return _as_digits(a, n)[::-1] + ["+"] + _as_digits(b, n)[::-1], y, y[0]


def _modular(rng, spec):
    xs = [rng.randrange(spec.modulus) for _ in range(spec.min_length)]
    total = sum(xs) % spec.modulus
    tokens: list[str] = []
    for i, x in enumerate(xs):
        tokens += (["+"] if i else []) + [str(x)]
    return tokens, [str(total)], f"{total // 10}x"  # the probe's coarse label: the tens digit (see above)


def _multiplication(rng, spec):
    wa, wb = spec.min_length, spec.width_b
    a, b = rng.randrange(10 ** wa), rng.randrange(10 ** wb)
    y = _as_digits(a * b, wa + wb)[::-1]  # least significant digit first, operands too
    return _as_digits(a, wa)[::-1] + ["*"] + _as_digits(b, wb)[::-1], y, y[0]


_SAMPLERS: dict[str, Callable] = {"copy": _copy, "reverse": _reverse, "compare": _compare, "parity": _parity,
                                  "addition": _addition, "modular": _modular, "sort": _sort,
                                  "multiplication": _multiplication}


def space_size(task: str, level: int) -> int:
    """Number of distinct prompts the task level can produce.

    Examples
    --------
    >>> space_size("modular", 1)
    9409
    """
    s = get_level(task, level)
    lengths = range(s.min_length, s.max_length + 1)
    if task in ("copy", "reverse", "sort"):
        return sum(10 ** n for n in lengths)
    if task == "parity":
        return 10 ** s.min_length
    if task == "compare":
        return 10 ** s.min_length * (10 ** s.min_length - 1)
    if task == "addition":
        return 10 ** (2 * s.min_length)
    if task == "modular":
        return s.modulus ** s.min_length
    return 10 ** (s.min_length + s.width_b)  # multiplication


@lru_cache(maxsize=None)
def _n_products(wa: int, wb: int) -> int:
    return len({a * b for a in range(10 ** wa) for b in range(10 ** wb)}) if wa + wb <= 5 else 0


def chance(task: str, level: int) -> float:
    """Accuracy of a uniform guess among the task level's possible answers.

    For lengths drawn from a range, the mean over lengths. Multiplication beyond five digits in all
    uses ``10 ** -(answer digits)`` (a lower bound) instead of enumerating the products.

    Examples
    --------
    >>> chance("parity", 3), chance("compare", 1)
    (0.5, 0.5)
    >>> round(chance("modular", 1), 5)
    0.01031
    """
    s = get_level(task, level)
    lengths = range(s.min_length, s.max_length + 1)
    if task in ("copy", "reverse"):
        return sum(10.0 ** -n for n in lengths) / len(lengths)
    if task == "sort":
        return sum(1.0 / math.comb(n + 9, 9) for n in lengths) / len(lengths)
    if task in ("compare", "parity"):
        return 0.5
    if task == "addition":
        return 1.0 / (2 * 10 ** s.min_length - 1)
    if task == "modular":
        return 1.0 / s.modulus
    n = _n_products(s.min_length, s.width_b)
    return 1.0 / n if n else 10.0 ** -(s.min_length + s.width_b)


def sample(task: str, level: int, rng: random.Random, *, item_id: str = "") -> Item:
    """Draw one item of ``task`` at ``level`` with the caller's random generator.

    Parameters
    ----------
    task : str
        One of :data:`TASKS`.
    level : int
        1, 2 or 3.
    rng : random.Random
        The source of randomness; the same state gives the same item.
    item_id : str, default=""
        The item's ``id``.

    Returns
    -------
    Item
        ``kind="generation"``, ``suite="<task>-L<level>"``; the target starts with a space.

    Raises
    ------
    InvalidParameterError
        Unknown task or level.

    Examples
    --------
    >>> it = sample("addition", 1, random.Random(0))
    >>> it.prompt, it.target, it.label
    ('add 9 4 + 7 9 =', ' 6 4 1', '6')
    """
    spec = get_level(task, level)
    inputs, answer, label = _SAMPLERS[task](rng, spec)
    prompt = " ".join([_MARKER[task], *inputs, SEPARATOR])
    return Item(id=item_id, suite=f"{task}-L{level}", kind="generation", prompt=prompt,
                target="".join(" " + a for a in answer), label=label)


def generate(task: str, level: int, n: int, *, seed: int | str = 0, exclude: frozenset[str] = frozenset(),
             unique: bool = False) -> tuple[Item, ...]:
    """Generate ``n`` items of a task level, reproducibly from ``seed``.

    Parameters
    ----------
    task : str
        One of :data:`TASKS`.
    level : int
        1, 2 or 3.
    n : int
        Number of items (>= 0).
    seed : int or str, default=0
        Seed of the generator (``random.Random`` hashes strings with SHA-512, so a seed gives the same
        items in every process).
    exclude : frozenset of str, default=frozenset()
        Prompts not to produce (the held-out items, when drawing training items).
    unique : bool, default=False
        Produce distinct prompts.

    Returns
    -------
    tuple of Item
        Ids ``"<task>-L<level>-<i>"``.

    Raises
    ------
    InvalidParameterError
        Unknown task or level, negative ``n``, or more unique items than the level has prompts
        outside ``exclude``.
    """
    get_level(task, level)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidParameterError(f"The 'n' parameter of generate must be an int >= 0. Got {n!r}.", name="n",
                                    value=n)
    if unique and n > space_size(task, level) - len(exclude):
        raise InvalidParameterError(
            f"{task}-L{level} has {space_size(task, level)} distinct prompts ({len(exclude)} excluded); "
            f"cannot draw {n} unique items.", name="n", value=n)
    rng = random.Random(f"{seed}:{task}:{level}")
    seen: set[str] = set()
    items: list[Item] = []
    while len(items) < n:
        it = sample(task, level, rng, item_id=f"{task}-L{level}-{len(items)}")
        if it.prompt in exclude or (unique and it.prompt in seen):
            continue
        seen.add(it.prompt)
        items.append(it)
    return tuple(items)


def heldout_items(task: str, level: int, n: int = 200, *, seed: int = 0) -> tuple[Item, ...]:
    """The held-out evaluation items of a run: ``n`` distinct prompts, never trained on.

    Raises
    ------
    InvalidParameterError
        ``n`` is more than half of the level's distinct prompts (too little would be left to train on).
    """
    if isinstance(n, int) and not isinstance(n, bool) and 2 * n > space_size(task, level):
        raise InvalidParameterError(
            f"Holding out {n} items of {task}-L{level} would leave too little to train on "
            f"({space_size(task, level)} distinct prompts); hold out at most half.", name="n_heldout", value=n)
    return generate(task, level, n, seed=f"heldout:{seed}", unique=True)


def suite_header(task: str, level: int, *, n_items: int | None = None) -> dict:
    """The ``suite_header`` line of a task level's JSON-lines suite file (written by the trainer).

    Keys: ``name``, ``task``, ``level``, ``difficulty`` (= level), ``chance``, ``description``, and
    ``n_items`` when given.
    """
    spec = get_level(task, level)
    header = {"name": suite_name(task, level), "task": task, "level": level, "difficulty": level,
              "chance": chance(task, level), "description": spec.description, "kind": "generation"}
    if n_items is not None:
        header["n_items"] = n_items
    return header


def parse_task_level(spec) -> tuple[str, int] | None:
    """``"copy-L1"`` -> ``("copy", 1)``: a task of :data:`TASKS` and a level; None for any other text.

    Examples
    --------
    >>> parse_task_level("modular-L2"), parse_task_level("logic"), parse_task_level("nope-L1")
    (('modular', 2), None, None)
    """
    import re

    m = re.fullmatch(r"([a-z]+)-L(\d+)", str(spec))
    if not m or m.group(1) not in TASKS or int(m.group(2)) not in LEVELS[m.group(1)]:
        return None
    return m.group(1), int(m.group(2))


def task_suite(task: str, level: int, *, n_items: int = 200, seed: int = 0) -> Suite:
    """The held-out items of an algorithmic task level as a suite: the ones ``ckptgeo train`` (same seed and
    ``n_heldout``) writes to ``suites/<task>-L<level>.jsonl`` and never trains on. ``--suite copy-L1`` in
    ``scan`` and ``probe`` reads this (200 items, seed 0: the trainer's defaults).

    Raises
    ------
    InvalidParameterError
        Unknown task or level, or more items than half the level's prompts.
    """
    items = heldout_items(task, level, n_items, seed=seed)
    return Suite(suite_name(task, level), items, source=f"ckptgeo.suites.tasks:{task}-L{level}",
                 header=suite_header(task, level, n_items=n_items))


def check_suite_spec(spec) -> None:
    """Refuse a ``--suite`` that names nothing (the error :func:`load_suite_or_task` gives, with its
    did-you-mean) without reading any suite, so a typo is answered before a source is opened.

    Raises
    ------
    InvalidParameterError
        Neither a file, a bundled suite, a task level nor a registered loader prefix.
    """
    from pathlib import Path

    from ckptgeo.suites.items import LOADERS

    text = str(spec)
    prefix, sep, _ = text.partition(":")
    if parse_task_level(text) is not None or Path(text).is_file() or text in available_suites() or (
            sep and prefix in LOADERS.names()):
        return
    load_suite(text)   # raises the unknown-suite error


def load_suite_or_task(spec) -> Suite:
    """:func:`ckptgeo.suites.items.load_suite`, and an algorithmic task level (``"copy-L1"``: its 200 held-out
    items, seed 0, as ``ckptgeo train`` draws them, :func:`task_suite`) where no file or bundled suite has
    that name. What ``--suite`` of ``scan`` and ``probe`` reads.

    Raises
    ------
    InvalidParameterError, SuiteFormatError
        As for ``load_suite``.
    """
    from pathlib import Path

    task_level = parse_task_level(spec)
    if task_level is not None and not Path(str(spec)).is_file() and str(spec) not in available_suites():
        return task_suite(*task_level)
    return load_suite(spec)
