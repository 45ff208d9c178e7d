"""The bundled suites: present, loadable, checked, and reproducible from the generator."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from ckptgeo.suites.generators import SUITES, check_items, generate_suite
from ckptgeo.suites.items import available_suites, diagnostics_dir, load_suite

NAMES = [s.name for s in SUITES] + ["logical_deduction"]


def test_all_suites_bundled():
    assert set(NAMES) <= set(available_suites())


@pytest.mark.parametrize("name", NAMES)
def test_bundled_suite_passes_checks(name):
    path = diagnostics_dir() / f"{name}.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])["suite_header"]
    assert header["name"] == name and header["generator_version"] and 0 < header["chance"] < 1
    assert header["kind"] in ("multiple_choice", "minimal_pair") and header["description"]
    items = [json.loads(line) for line in lines[1:]]
    report = check_items(items)
    assert report.ok, report.problems
    assert report.n_items >= 200
    suite = load_suite(name)
    assert len(suite) == len(items) and suite.header == header
    if header["kind"] == "multiple_choice":
        assert all(it.label is not None for it in suite.items)
        # the answer index is spread over choice slots, not always the same
        assert len(Counter(it.answer for it in suite.items)) >= 2


@pytest.mark.parametrize("name", NAMES)
def test_bundled_suite_is_reproducible(name):
    header, items = generate_suite(name, seed=0)
    lines = (diagnostics_dir() / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["suite_header"] == header
    assert [json.loads(line) for line in lines[1:]] == items


def test_check_items_finds_problems():
    good = [{"id": f"x{i}", "suite": "x", "prompt": f"p{i}", "choices": [" a", " b"], "answer": i % 2,
             "label": "ab"[i % 2]} for i in range(200)]
    assert check_items(good).ok
    dup = good + [dict(good[0])]
    assert any("occurs 2 times" in p for p in check_items(dup).problems)
    same = [dict(good[0], choices=[" a", " a"])] + good[1:]
    assert any("repeated choices" in p for p in check_items(same).problems)
    skewed = [dict(it, label="a") for it in good[:195]] + good[195:]
    assert any("too few to probe" in p for p in check_items(skewed).problems)
    assert any("at least 200" in p for p in check_items(good[:50]).problems)
    nospace = [dict(good[0], choices=["a", " b"])] + good[1:]
    assert any("leading space" in p for p in check_items(nospace).problems)
