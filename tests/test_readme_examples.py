"""The docs match the code: the hand-written monitor example (docs/monitor.md) runs as written, and the modules and
scripts the README, CONTRIBUTING and docs/ pages name exist (issue 25, item 7)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pandas as pd

from tests._models import single_thread  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "CONTRIBUTING.md", "diagnostics/README.md",
        *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_hand_written_monitor_example_runs_as_written(tmp_path, monkeypatch, single_thread, capsys):
    block = next(b for b in _python_blocks((ROOT / "docs" / "monitor.md").read_text())
                 if "monitor.step(model, step)" in b and "Trainer" not in b)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "docs/monitor.md (monitor example)", "exec"), {"__name__": "readme"})
    g = pd.read_parquet(tmp_path / "runs" / "live" / "geometry")
    assert set(g.model) == {"tiny-modular"} and set(g.suite) == {"modular-L1", "copy-L1"}
    assert sorted(set(g.step)) == [0, 1, 2, 4, 8, 16, 32, 50, 100]
    b = pd.read_parquet(tmp_path / "runs" / "live" / "behavior")
    assert b["n_items"].min() == 200, "every item tokenized with known tokens (none dropped)"
    assert "acc" in capsys.readouterr().out      # monitor.status()


def test_modules_and_scripts_the_docs_name_exist():
    missing = []
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        for path in set(re.findall(r"`((?:ckptgeo|scripts|tests)/[A-Za-z0-9_/.-]+\.(?:py|sh))`", text)):
            if not (ROOT / path).is_file():
                missing.append(f"{doc}: {path}")
    assert not missing, missing


#: placeholders the recipes use in dotted names (a measure or source of your own), not objects of the package
_PLACEHOLDERS = {"my_measure", "name"}


def _resolves(dotted: str) -> bool:
    """Whether ``ckptgeo.a.b.c`` names a module, or an attribute of the longest module prefix that imports."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ModuleNotFoundError as err:
            if err.name is not None and not ".".join(parts[:k]).startswith(err.name):
                raise   # the module exists but one of its imports is missing: not this test's question
            continue
        for attr in parts[k:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_the_dotted_names_the_docs_give_exist():
    """`ckptgeo.analysis.stats`, `ckptgeo.engine.forward.CPU_LOGITS_BYTES` ...: a module moved or an object renamed
    leaves no dangling name in the docs (two dots or more: `ckptgeo.scan` is the facade, `ckptgeo.progress` a
    logger, `ckptgeo.metrics` an entry-point group as well)."""
    missing = []
    for doc in DOCS:
        for code in re.findall(r"`([^`\n]+)`", (ROOT / doc).read_text()):
            for dotted in re.findall(r"\bckptgeo(?:\.[A-Za-z_]\w*){2,}", code):
                if not _PLACEHOLDERS & set(dotted.split(".")) and not _resolves(dotted):
                    missing.append(f"{doc}: {dotted}")
    assert missing == []


def test_the_output_tree_shows_what_analyze_writes():
    """The output tree is drawn once, in docs/output.md (it was drawn in four places and they drifted)."""
    text = (ROOT / "docs" / "output.md").read_text()
    trees = "".join(re.findall(r"```\n(.*?)```", text, flags=re.S))
    for name in ("ckptgeo.json", "sources.json", "revisions/", "compare/", "events/", "summary/", "runs.csv",
                 "figures/", "report.md", "forecast/", "claims.md", "reproduction.md", "manifest.json"):
        assert name in trees, name
    others = [p.relative_to(ROOT) for p in (ROOT / "docs").glob("*.md") if p.name != "output.md"]
    for doc in ("README.md", *others):
        assert "ckptgeo.json   " not in (ROOT / doc).read_text(), f"{doc} draws the output tree again"
