"""The curve-reading contract (ckptgeo.events.curves): its answers, and that no other module spells one out again."""

import re
from pathlib import Path

import pandas as pd
import pytest

from ckptgeo.events import curves as cv

ROOT = Path(__file__).resolve().parents[1]

#: each question the contract answers, and the ways a module answered it on its own before (issue 31)
REDERIVED = {
    "preferred variant": [r'\[\s*"centered"\s*\]\s*\.eq\(', r'"centered"\s*\]\s*==\s*False'],
    "summary layer": [r'\[\s*"layer"\s*\]\s*\.transform\(\s*"max"\s*\)', r'\[\s*"layer"\s*\](\.astype\(int\))?\.idxmax\(',
                      r'groupby\([^)]*"metric"[^)]*\)\s*\[\s*"layer"\s*\]\s*\.max\(',
                      r'(\w+)\[\s*\1\[\s*"layer"\s*\]\s*==\s*\1\[\s*"layer"\s*\]\s*\.max\(\)\s*\]'],
    "counted runs": [r'NOT_COUNTED\s*=', r'[(\[{]\s*"never_acquired",\s*"no_data"'],
    "run identity": [r'\(\?P<seed>', r'def (parse_run|grid_run|split_seed)\('],
}


def rederivations(text: str) -> list[str]:
    """The contract questions ``text`` answers on its own."""
    return [what for what, patterns in REDERIVED.items() if any(re.search(p, text) for p in patterns)]


@pytest.mark.parametrize("snippet, what", [
    ('e = e[e["centered"].eq(False).fillna(False).astype(bool)]', "preferred variant"),
    ('e = e[e["layer"] == e.groupby(["model", "suite", "metric"])["layer"].transform("max")]', "summary layer"),
    ('return e.loc[e["layer"].astype(int).idxmax()]', "summary layer"),
    ('deepest = curves.groupby(KEYS + ["metric"])["layer"].max().to_dict()', "summary layer"),
    ('deepest = sub[sub["layer"] == sub["layer"].max()]', "summary layer"),
    ('_NOT_COUNTED = ("never_acquired", "no_data", "acquired_at_start", "censored")', "counted runs"),
    ('_RUN = re.compile(r"^(?P<task>.+)-L(?P<level>\\d+)-(?P<size>[a-z]+)-s(?P<seed>\\d+)$")', "run identity"),
])
def test_the_scan_finds_each_old_rederivation(snippet, what):
    assert rederivations(snippet) == [what]


def test_no_module_rederives_how_a_curve_is_read():
    files = [p for p in sorted((ROOT / "ckptgeo").rglob("*.py")) + sorted((ROOT / "tests" / "plugin_example").rglob("*.py"))
             if p != ROOT / "ckptgeo" / "events" / "curves.py"]
    found = {str(p.relative_to(ROOT)): what for p in files if (what := rederivations(p.read_text()))}
    assert not found, f"read it through ckptgeo.events.curves instead: {found}"


def test_every_runs_table_is_built_from_run_rows():
    tables = [p for p in (ROOT / "ckptgeo").rglob("*.py") if "def runs_table(" in p.read_text()]
    assert tables and all("run_rows(" in p.read_text() for p in tables), tables


def _events():
    rows = []
    for model, suite, layers in (("copy-L1-tiny-s0", "copy-L1", 3), ("modular-L2-mini-s1", "modular-L2", 2)):
        for centered in (True, False):
            for layer in range(layers):
                rows.append({"model": model, "suite": suite, "config_hash": "h", "metric": "rankme", "layer": layer,
                             "centered": centered, "status": "precursor" if centered is False else "lagging"})
        rows.append({"model": model, "suite": suite, "config_hash": "h", "metric": "llc", "layer": -1,
                     "centered": None, "status": "censored"})
    return pd.DataFrame(rows)


def test_preferred_variant_is_the_measures_declared_one_and_keeps_a_measure_without_one():
    e = _events()
    p = cv.preferred_variant(e)
    assert set(p.loc[p.metric == "rankme", "centered"]) == {False}
    assert (p.metric == "llc").sum() == 2                              # llc declares none: all its rows stay
    only_centred = e[(e.metric != "rankme") | e.centered.eq(True)]
    assert len(cv.preferred_variant(only_centred)) == len(only_centred)  # none preferred present: all kept
    assert cv.reading("rankme") == cv.Reading((("centered", False),), True, "falls")
    assert cv.reading("no-such-measure") == cv.Reading()


def test_summary_rows_counted_and_run_rows():
    e = _events()
    s = cv.summary_rows(e)
    assert sorted(zip(s.model, s.metric, s.layer, s.centered.fillna("-").astype(str))) == [
        ("copy-L1-tiny-s0", "llc", -1, "-"), ("copy-L1-tiny-s0", "rankme", 2, "False"),
        ("copy-L1-tiny-s0", "rankme", 2, "True"), ("modular-L2-mini-s1", "llc", -1, "-"),
        ("modular-L2-mini-s1", "rankme", 1, "False"), ("modular-L2-mini-s1", "rankme", 1, "True")]
    assert cv.counted(s).tolist() == [s.status.iloc[i] != "censored" for i in range(len(s))]
    r = cv.run_rows(e)
    assert list(zip(r.model, r.layer, r.centered)) == [("copy-L1-tiny-s0", 2, False), ("modular-L2-mini-s1", 1, False)]
    assert [cv.run_identity(m, s) for m, s in zip(r.model, r.suite)] == [
        {"task": "copy", "level": 1, "size": "tiny", "seed": 0}, {"task": "modular", "level": 2, "size": "mini", "seed": 1}]
    assert cv.run_identity("EleutherAI/pythia-160m", "blimp-anaphor", "blimp") == \
        {"task": "blimp", "level": None, "size": None, "seed": None}
