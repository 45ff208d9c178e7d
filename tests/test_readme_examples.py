"""The docs match the code: the README's hand-written monitor example runs as written, and the modules and
scripts the READMEs name exist (issue 25, item 7)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from tests._models import single_thread  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "CONTRIBUTING.md", "diagnostics/README.md")


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_the_hand_written_monitor_example_runs_as_written(tmp_path, monkeypatch, single_thread, capsys):
    block = next(b for b in _python_blocks((ROOT / "README.md").read_text()) if "monitor.step(model, step)" in b
                 and "Trainer" not in b)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md (monitor example)", "exec"), {"__name__": "readme"})
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


def test_the_output_tree_shows_what_analyze_writes():
    text = (ROOT / "README.md").read_text()
    tree = text[text.index("results/<name>/"):].split("```")[0]
    for name in ("summary/", "figures/", "report.md", "events/", "runs.csv", "sources.json"):
        assert name in tree, name
