"""The logical-deduction generator and its brute-force solver."""

from __future__ import annotations

import itertools
import random

import pytest

from ckptgeo.suites.deduction import generate_deduction_items, generate_puzzle, solve
from ckptgeo.errors import InvalidParameterError


def _brute(n, constraints, position):
    """An independent count: orders as object lists, answers at `position`."""
    answers = set()
    for order in itertools.permutations(range(n)):
        where = {o: p for p, o in enumerate(order)}
        if all(where[a] < where[b] for a, b in constraints):
            answers.add(order[position])
    return answers


def test_solver_small_cases():
    assert solve(3, [(0, 1), (1, 2)], 0) == {0}
    assert solve(3, [(0, 1)], 0) == {0, 2}
    assert solve(3, [(0, 1), (1, 0)], 0) == set()  # contradiction
    assert solve(7, [], 3) == set(range(7))


def test_solver_rejects_bad_input():
    with pytest.raises(InvalidParameterError, match="position"):
        solve(3, [], 3)
    with pytest.raises(InvalidParameterError, match="n_objects"):
        solve(9, [], 0)


@pytest.mark.parametrize("n", [3, 5, 7])
def test_generated_puzzles_have_one_answer_and_minimal_constraints(n):
    rng = random.Random(n)
    for _ in range(15):
        p = generate_puzzle(n, rng)
        assert _brute(n, p.constraints, p.position) == {p.answer}
        for drop in range(len(p.constraints)):  # every constraint is needed
            rest = p.constraints[:drop] + p.constraints[drop + 1:]
            assert len(solve(n, rest, p.position)) > 1


def test_every_generated_item_is_unique_and_solved():
    items = generate_deduction_items(80, seed=0)
    assert len(items) == 240 and len({it["prompt"] for it in items}) == 240
    for it in items:
        n = it["n_objects"]
        assert len(it["choices"]) == n
        assert solve(n, [tuple(c) for c in it["constraints"]], it["position"]) == {it["answer"]}
        assert it["label"] == it["answer"]
    assert generate_deduction_items(80, seed=0) == items  # deterministic


def test_bundled_file_matches_solver():
    from ckptgeo.suites.items import load_suite

    suite = load_suite("logical_deduction")
    assert len(suite) >= 200 and {it.extra["n_objects"] for it in suite.items} == {3, 5, 7}
    for it in suite.items:
        n = it.extra["n_objects"]
        assert solve(n, [tuple(c) for c in it.extra["constraints"]], it.extra["position"]) == {it.answer}
