"""Logical deduction: N objects in a fixed order, stated by pairwise constraints; which one is at position k.

A puzzle hides a total order of ``n_objects`` objects (position 0 is the leftmost book, the first
finisher, the oldest sibling, the most expensive fruit). Its statements are pairwise order
constraints ``a before b`` (``a`` at a smaller position than ``b``), each rendered in one of two
directions ("The red book is to the left of the blue book." / "The blue book is to the right of the
red book."). The question asks which object is at position ``k``.

:func:`solve` enumerates every order (``n!``: 6, 120 and 5040 for 3, 5 and 7 objects) and returns the
objects that some order consistent with the constraints places at ``k``. :func:`generate_puzzle` adds
true constraints in random order until that set has one member, then drops every constraint not
needed for it, so each puzzle is minimal and its answer is proven unique by the solver.

The items follow BIG-bench's ``logical_deduction`` task in spirit (scenes of books, runners, siblings
and fruit) in the project's own wording, with the question in the prompt so a probe reading the
prompt's last token knows what is asked.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ckptgeo.errors import InvalidParameterError

__all__ = ["Puzzle", "Scene", "SCENES", "solve", "generate_puzzle", "puzzle_to_item", "generate_deduction_items",
           "DEDUCTION_PREFIX"]

_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh")
_NUMBER_WORDS = {3: "three", 5: "five", 7: "seven"}
DEDUCTION_PREFIX = ("Each paragraph below describes objects arranged in a fixed order. The statements in "
                    "a paragraph are consistent with each other.\n\n")


@dataclass(frozen=True)
class Scene:
    """How a puzzle is worded: the objects' pool, the intro, the two phrasings of "a before b", and
    the name of each position."""

    name: str
    pool: tuple[str, ...]
    intro: str  # format fields: n (number word), plural, listing
    plural: str
    before: str  # format fields: a, b ("a" at the smaller position)
    after: str  # "b" phrased as after "a"
    question: str  # format field: position
    first: str
    last: str
    middle: str  # format field: ordinal
    article: bool  # objects take "the"

    def position(self, k: int, n: int) -> str:
        """The phrase for position ``k`` (0-based) of ``n``."""
        if k == 0:
            return self.first
        if k == n - 1:
            return self.last
        return self.middle.format(ordinal=_ORDINALS[k])

    def ref(self, obj: str, *, capital: bool = False) -> str:
        """The object as the subject or object of a sentence."""
        if not self.article:
            return obj
        return ("The " if capital else "the ") + obj


SCENES: tuple[Scene, ...] = (
    Scene("shelf", tuple(f"{c} book" for c in ("red", "blue", "green", "yellow", "black", "white", "brown",
                                                  "purple", "orange", "gray")),
          "On a shelf stand {n} {plural}: {listing}.", "books",
          "{a} is to the left of {b}.", "{b} is to the right of {a}.",
          "Which book is {position}?", "the leftmost", "the rightmost", "the {ordinal} from the left", True),
    Scene("race", ("Ana", "Bruno", "Chen", "Dara", "Emil", "Farah", "Goran", "Hana", "Ivo", "Jules"),
          "{n} {plural} ran a race: {listing}.", "runners",
          "{a} finished before {b}.", "{b} finished after {a}.",
          "Who finished {position}?", "first", "last", "{ordinal}", False),
    Scene("siblings", ("Kofi", "Lena", "Mira", "Nils", "Omar", "Pia", "Quinn", "Rosa", "Sami", "Tess"),
          "A family has {n} {plural}: {listing}.", "children",
          "{a} is older than {b}.", "{b} is younger than {a}.",
          "Who is {position}?", "the oldest", "the youngest", "the {ordinal} oldest", False),
    Scene("market", ("apples", "pears", "plums", "mangoes", "peaches", "kiwis", "grapes", "lemons", "figs",
                     "cherries"),
          "A stall sells {n} kinds of {plural}: {listing}.", "fruit",
          "{a} cost more than {b}.", "{b} cost less than {a}.",
          "Which fruit is {position}?", "the most expensive", "the cheapest",
          "the {ordinal} most expensive", True),
)


@dataclass(frozen=True)
class Puzzle:
    """One deduction puzzle.

    ``objects`` in the order the intro lists them (and the choices follow); ``constraints`` as pairs
    of indices into ``objects``, ``(a, b)`` meaning ``a`` is at a smaller position than ``b``;
    ``flipped`` whether each is worded from ``b``'s side; ``position`` the asked position (0-based);
    ``answer`` the index into ``objects`` of the object there.
    """

    scene: str
    objects: tuple[str, ...]
    constraints: tuple[tuple[int, int], ...]
    flipped: tuple[bool, ...]
    position: int
    answer: int

    @property
    def n_objects(self) -> int:
        return len(self.objects)


@lru_cache(maxsize=8)
def _positions(n: int) -> np.ndarray:
    """All orders of ``n`` objects as positions: array of shape ``(n!, n)``, ``[p, obj]`` = position."""
    perms = np.array(list(itertools.permutations(range(n))), dtype=np.int8)  # [p, pos] = obj
    pos = np.empty_like(perms)
    rows = np.arange(len(perms))[:, None]
    pos[rows, perms] = np.arange(n, dtype=np.int8)[None, :]
    return pos


def _consistent(n: int, constraints) -> np.ndarray:
    pos = _positions(n)
    mask = np.ones(len(pos), dtype=bool)
    for a, b in constraints:
        mask &= pos[:, a] < pos[:, b]
    return mask


def solve(n_objects: int, constraints, position: int) -> set[int]:
    """The objects that some order satisfying every constraint places at ``position``.

    Brute force over all ``n_objects!`` orders (5040 for seven objects).

    Parameters
    ----------
    n_objects : int
        Number of objects, 2..8.
    constraints : iterable of (int, int)
        Pairs ``(a, b)``: object ``a`` is at a smaller position than object ``b``.
    position : int
        The asked position, 0-based.

    Returns
    -------
    set of int
        One member when the puzzle has exactly one answer; empty when the constraints contradict.

    Raises
    ------
    InvalidParameterError
        ``n_objects`` outside 2..8 or ``position`` outside ``0..n_objects-1``.

    Examples
    --------
    >>> solve(3, [(0, 1), (1, 2)], 1)
    {1}
    >>> sorted(solve(3, [(0, 1)], 2))
    [1, 2]
    """
    if not 2 <= n_objects <= 8:
        raise InvalidParameterError(f"n_objects must be in [2, 8]; got {n_objects}", name="n_objects",
                                    value=n_objects)
    if not 0 <= position < n_objects:
        raise InvalidParameterError(f"position must be in [0, {n_objects - 1}]; got {position}", name="position",
                                    value=position)
    pos = _positions(n_objects)
    mask = _consistent(n_objects, constraints)
    return {int(o) for o in np.nonzero(pos[mask] == position)[1]}


def generate_puzzle(n_objects: int, rng: random.Random, *, scene: Scene | None = None,
                    position: int | None = None) -> Puzzle:
    """A puzzle with a unique answer and a minimal set of pairwise constraints.

    Parameters
    ----------
    n_objects : {3, 5, 7}
        Number of objects (any of 2..7 works; the word lists hold 10 objects per scene).
    rng : random.Random
        Source of all randomness; the same seed gives the same puzzle.
    scene : Scene, optional
        Wording; drawn from :data:`SCENES` when omitted.
    position : int, optional
        Asked position (0-based); drawn uniformly when omitted.

    Returns
    -------
    Puzzle

    Raises
    ------
    InvalidParameterError
        ``n_objects`` outside 2..7.
    """
    if not 2 <= n_objects <= 7:
        raise InvalidParameterError(f"n_objects must be in [2, 7]; got {n_objects}", name="n_objects",
                                    value=n_objects)
    scene = scene or rng.choice(SCENES)
    objects = tuple(rng.sample(scene.pool, n_objects))  # listing order
    order = list(range(n_objects))
    rng.shuffle(order)  # order[pos] = object index
    pos_of = {obj: p for p, obj in enumerate(order)}
    k = rng.randrange(n_objects) if position is None else position
    true_pairs = [(a, b) for a in range(n_objects) for b in range(n_objects) if pos_of[a] < pos_of[b]]
    rng.shuffle(true_pairs)
    chosen: list[tuple[int, int]] = []
    for pair in true_pairs:
        chosen.append(pair)
        if len(solve(n_objects, chosen, k)) == 1:
            break
    for pair in list(chosen):  # drop what the answer does not need
        rest = [c for c in chosen if c != pair]
        if len(solve(n_objects, rest, k)) == 1:
            chosen = rest
    rng.shuffle(chosen)
    answers = solve(n_objects, chosen, k)
    if answers != {order[k]}:  # cannot happen: every constraint is true of `order`
        raise RuntimeError(f"solver disagrees with the hidden order: {answers} vs {order[k]}")
    flipped = tuple(rng.random() < 0.5 for _ in chosen)
    return Puzzle(scene=scene.name, objects=objects, constraints=tuple(chosen), flipped=flipped, position=k,
                  answer=order[k])


def _scene(name: str) -> Scene:
    return next(s for s in SCENES if s.name == name)


def _listing(scene: Scene, objects) -> str:
    words = [("an " if o[0] in "aeiou" else "a ") + o if scene.name == "shelf" else o for o in objects]
    return ", ".join(words[:-1]) + ", and " + words[-1]


def puzzle_to_item(puzzle: Puzzle, *, suite: str = "logical_deduction", item_id: str | None = None) -> dict:
    """A multiple-choice item (the item schema, docs/definitions.md#items) for ``puzzle``.

    The prompt is :data:`DEDUCTION_PREFIX`, the paragraph and the question, ending in ``"Answer:"``;
    the choices are the objects in listing order, each a continuation with a leading space; ``label``
    is the answer's index (which listed object is at the asked position).
    """
    scene = _scene(puzzle.scene)
    n = puzzle.n_objects
    sentences = [scene.intro.format(n=_NUMBER_WORDS.get(n, str(n)).capitalize() if scene.intro.startswith("{n}")
                                    else _NUMBER_WORDS.get(n, str(n)), plural=scene.plural,
                                    listing=_listing(scene, puzzle.objects))]
    for (a, b), flip in zip(puzzle.constraints, puzzle.flipped):
        template = scene.after if flip else scene.before
        if flip:
            text = template.format(b=scene.ref(puzzle.objects[b], capital=True), a=scene.ref(puzzle.objects[a]))
        else:
            text = template.format(a=scene.ref(puzzle.objects[a], capital=True), b=scene.ref(puzzle.objects[b]))
        sentences.append(text)
    question = scene.question.format(position=scene.position(puzzle.position, n))
    prompt = DEDUCTION_PREFIX + " ".join(sentences) + f"\nQuestion: {question}\nAnswer:"
    choices = [" " + scene.ref(o) for o in puzzle.objects]
    return {"id": item_id or f"{suite}-{n}-{puzzle.scene}", "suite": suite, "prompt": prompt, "choices": choices,
            "answer": puzzle.answer, "label": puzzle.answer, "n_objects": n, "position": puzzle.position,
            "scene": puzzle.scene, "constraints": [list(c) for c in puzzle.constraints]}


def generate_deduction_items(n_per_size: int = 80, *, sizes=(3, 5, 7), seed: int = 0,
                             suite: str = "logical_deduction") -> list[dict]:
    """``n_per_size`` puzzles for each size in ``sizes``, as item dicts with unique prompts.

    The answer's listing index is balanced within each size (cycled through ``0..n-1``), so the
    label classes are as even as the sizes allow.

    Examples
    --------
    >>> items = generate_deduction_items(4, sizes=(3,), seed=1)
    >>> len(items), items[0]["choices"][0].startswith(" ")
    (4, True)
    """
    rng = random.Random(seed)
    items: list[dict] = []
    seen: set[str] = set()
    for n in sizes:
        made = 0
        while made < n_per_size:
            puzzle = generate_puzzle(n, rng)
            want = made % n  # balance the answer's listing index
            if puzzle.answer != want:  # relabel: swap listing slots so the answer sits at `want`
                perm = list(range(n))
                perm[puzzle.answer], perm[want] = perm[want], perm[puzzle.answer]
                objects = tuple(puzzle.objects[perm[i]] for i in range(n))
                constraints = tuple((perm[a], perm[b]) for a, b in puzzle.constraints)
                puzzle = Puzzle(puzzle.scene, objects, constraints, puzzle.flipped, puzzle.position, want)
            item = puzzle_to_item(puzzle, suite=suite, item_id=f"{suite}-{n}obj-{made:04d}")
            if item["prompt"] in seen:
                continue
            seen.add(item["prompt"])
            items.append(item)
            made += 1
    return items
