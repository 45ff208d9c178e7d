"""The public facade: ``ckptgeo.<name>`` is the internal object, and ``import ckptgeo`` imports nothing else."""

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ckptgeo

ROOT = Path(__file__).resolve().parents[1]

#: the facade as documented in docs/python.md, and where each object lives today
PUBLIC = {
    "scan": "ckptgeo.engine.scan", "plan_scan": "ckptgeo.engine.plan", "ScanConfig": "ckptgeo.engine.config",
    "analyze": "ckptgeo.analysis.report", "combine": "ckptgeo.metrics.cross",
    "forecast": "ckptgeo.forecasting.api", "ForecastConfig": "ckptgeo.forecasting.config",
    "claims": "ckptgeo.studies.claims_api",
    "read_table": "ckptgeo.store.dataset", "open_source": "ckptgeo.sources.registry",
    "Monitor": "ckptgeo.monitor.core", "MonitorCallback": "ckptgeo.monitor.callback",
    "task_suite": "ckptgeo.monitor.core", "register_metric": "ckptgeo.metrics.registry",
    "MetricValue": "ckptgeo.metrics.registry", "CompareValue": "ckptgeo.metrics.registry",
    "METRICS": "ckptgeo.metrics.registry", "SOURCES": "ckptgeo.sources.registry", "LOADERS": "ckptgeo.suites.items",
    "STEPS": "ckptgeo.analysis.steps", "register_step": "ckptgeo.analysis.steps",
    "CLAIMS": "ckptgeo.claimtable.registry", "register_claim": "ckptgeo.claimtable.registry",
    "FIGURES": "ckptgeo.analysis.figures", "register_figure": "ckptgeo.analysis.figures",
    "build_config": "ckptgeo.training.sizes", "build_tokenizer": "ckptgeo.suites.vocab", "generate": "ckptgeo.suites.tasks",
}


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_each_public_name_is_the_internal_object(name):
    assert name in ckptgeo.__all__ and name in dir(ckptgeo)
    assert getattr(ckptgeo, name) is getattr(importlib.import_module(PUBLIC[name]), name)


def test_dir_shows_the_public_names_only():
    """Issue 45 item 7: dir(ckptgeo) showed TYPE_CHECKING (a name for static readers) and private helpers."""
    shown = [n for n in dir(ckptgeo) if not n.startswith("__")]
    assert shown == sorted(n for n in ckptgeo.__all__ if not n.startswith("__"))
    assert "TYPE_CHECKING" not in dir(ckptgeo)


def test_scan_in_python_shows_no_hub_download_bars_and_restores_them(local_hub, tmp_path, capsys, monkeypatch):
    """Issue 45 item 7: ckptgeo.scan(...) in a notebook (stderr not a terminal) filled it with huggingface_hub's
    bar per file and revision; the command line hides them. Now the call hides them too, and restores them."""
    from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars

    import ckptgeo.sources.hub as hub

    monkeypatch.setattr(hub, "NO_PROGRESS", False)   # as a user's notebook: CKPTGEO_NO_PROGRESS unset
    enable_progress_bars()
    res = ckptgeo.scan(local_hub.repo_id, out=tmp_path / "ds", revisions="step0,step1", suites=["logic"],
                       n_samples=8, metrics=["rankme"])
    err = capsys.readouterr().err
    assert res.measured == ["step0", "step1"]
    assert "model.safetensors:" not in err and "Fetching" not in err and "config.json:" not in err, err
    assert not are_progress_bars_disabled()


def test_the_facade_has_no_other_names_and_refuses_unknown_ones():
    assert set(ckptgeo.__all__) == set(PUBLIC) | {"__version__"}
    with pytest.raises(AttributeError, match="no attribute 'scna'"):
        ckptgeo.scna  # noqa: B018


def test_importing_ckptgeo_imports_no_submodule():
    """Only the one leaf that holds the version."""
    code = "import sys, ckptgeo; print(sorted(m for m in sys.modules if m.startswith('ckptgeo.')))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['ckptgeo._version']"


def test_the_documented_names_are_the_facade():
    """docs/python.md lists every public name, and only those (the README's list once left out `forecast`)."""
    text = (ROOT / "docs" / "python.md").read_text()
    sentence = text[text.index("The public names are"):].split("(`tests/test_facade.py`")[0]
    documented = set(re.findall(r"`(?:ckptgeo\.)?([A-Za-z_]+)`", sentence))
    assert documented == set(ckptgeo.__all__) - {"__version__"}


def test_the_docs_import_only_the_facade():
    for doc in ("README.md", "CONTRIBUTING.md", *sorted(p.relative_to(ROOT) for p in (ROOT / "docs").glob("*.md"))):
        text = (ROOT / doc).read_text()
        deep = [line.strip() for line in text.splitlines() if line.lstrip().startswith(("from ckptgeo.", "import ckptgeo."))]
        assert not deep, (doc, deep)


def test_read_table_refuses_a_missing_folder_and_a_misspelled_table(tmp_path):
    """Like the command line: a typo is an error naming the closest table, not an empty frame."""
    import pandas as pd
    import pytest

    import ckptgeo
    from ckptgeo.errors import DatasetLayoutError, InvalidParameterError
    from ckptgeo.store.dataset import Dataset

    Dataset(tmp_path / "ds")   # a dataset a scan has not written to yet
    empty = ckptgeo.read_table(tmp_path / "ds", "geometry")
    assert empty.empty and "value" in empty.columns
    with pytest.raises(InvalidParameterError, match="no table 'geometri' .*did you mean 'geometry'"):
        ckptgeo.read_table(tmp_path / "ds", "geometri")
    with pytest.raises(DatasetLayoutError, match="does not exist"):
        ckptgeo.read_table(tmp_path / "no-such-folder", "geometry")
    (tmp_path / "ds" / "events").mkdir()   # an analysis's own table folder is read by its name
    pd.DataFrame({"model": ["m"], "step": [0]}).to_parquet(tmp_path / "ds" / "events" / "events.parquet")
    assert len(ckptgeo.read_table(tmp_path / "ds", "events")) == 1


def _typed_imports() -> dict[str, str]:
    """name -> module of the ``if TYPE_CHECKING:`` imports of ``ckptgeo/__init__.py``."""
    import ast

    tree = ast.parse((ROOT / "ckptgeo" / "__init__.py").read_text())
    blocks = [n for n in tree.body if isinstance(n, ast.If) and isinstance(n.test, ast.Name)
              and n.test.id == "TYPE_CHECKING"]
    assert len(blocks) == 1, "one `if TYPE_CHECKING:` block of typed imports"
    return {a.asname or a.name: node.module for node in blocks[0].body if isinstance(node, ast.ImportFrom)
            for a in node.names}


def test_static_readers_see_every_public_name_with_its_real_object():
    """IDEs and type checkers read the ``TYPE_CHECKING`` imports: they name every public object, from the module
    the lazy loader takes it from, and executing them gives the very objects ``ckptgeo.<name>`` returns."""
    typed = _typed_imports()
    assert typed == PUBLIC
    namespace: dict = {}
    for name, module in typed.items():
        exec(f"from {module} import {name}", namespace)  # what a type checker resolves
        assert namespace[name] is getattr(ckptgeo, name), name
    assert ckptgeo.TYPE_CHECKING is False


def test_the_typed_block_costs_nothing_at_import():
    code = ("import sys, ckptgeo; "
            "print('typing' in sys.modules, sorted(m for m in sys.modules if m.startswith('ckptgeo.')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False ['ckptgeo._version']"
