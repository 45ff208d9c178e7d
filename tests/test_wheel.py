"""ckptgeo installed from its wheel behaves as the clone: the bundled suites are found, a scan runs.

The wheel is built offline from this checkout (``pip wheel --no-deps --no-build-isolation``) and installed,
without its dependencies, into a fresh venv that sees the test venv's packages (torch, transformers ...)
through a ``.pth`` line naming their folder. That line adds the folder only: the editable install of the
clone there is not activated, so ``ckptgeo`` is the wheel's copy, run from a folder outside the clone.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    """A fresh venv with ckptgeo installed from its wheel; yields its ``bin`` folder."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"      # a copy, so the build's egg-info and build/ stay out of the checkout
    for name in ("ckptgeo", "diagnostics", "docs"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    build = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                  "-w", str(root / "dist"), str(src)], env=_env())
    assert build.returncode == 0, build.stderr
    (whl,) = (root / "dist").glob("ckptgeo-*.whl")
    venv = root / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(venv)]).returncode == 0
    new_python = venv / "bin" / "python"
    purelib = _run([str(new_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    inst = _run([sys.executable, "-m", "pip", "--python", str(new_python), "install", "--no-deps", "--no-index",
                 "-q", str(whl)], env=_env())   # before the .pth line: the clone's editable install must not look installed
    assert inst.returncode == 0, inst.stderr
    deps = [p for p in {sysconfig.get_paths()["purelib"], *site.getsitepackages()} if Path(p).is_dir()]
    Path(purelib, "zz_test_deps.pth").write_text("".join(p + "\n" for p in deps))
    return venv / "bin"


def _env():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["CKPTGEO_NO_PROGRESS"] = "1"
    return env


@pytest.mark.slow
def test_wheel_finds_bundled_suites_and_scans_from_another_folder(wheel_venv, local_hub, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = _run([str(wheel_venv / "python"), "-c",
                  "import ckptgeo; from ckptgeo.suites.items import available_suites; "
                  "print(ckptgeo.__file__); print(','.join(available_suites()))"], cwd=elsewhere, env=_env())
    assert where.returncode == 0, where.stderr
    module_file, suites = where.stdout.rstrip("\n").split("\n")
    assert Path(module_file).is_relative_to(wheel_venv.parent), "the wheel's copy is imported, not the clone"
    assert suites.split(",") == sorted(p.stem for p in (ROOT / "diagnostics").glob("*.jsonl"))
    docs = _run([str(wheel_venv / "python"), "-c", "import importlib.resources as r; "
                 "print(r.files('ckptgeo.docs').joinpath('definitions.md').read_text())"], cwd=elsewhere, env=_env())
    assert docs.returncode == 0 and docs.stdout.strip() == (ROOT / "docs" / "definitions.md").read_text().strip()
    pages = _run([str(wheel_venv / "python"), "-c", "import importlib.resources as r; "
                  "print(sorted(p.name for p in r.files('ckptgeo.docs').iterdir() if p.name.endswith('.md')))"],
                 cwd=elsewhere, env=_env())
    assert pages.stdout.strip() == str(sorted(p.name for p in (ROOT / "docs").glob("*.md"))), pages.stderr

    dry = _run([str(wheel_venv / "ckptgeo"), "scan", local_hub.repo_id, "--suite", "logic", "--revisions",
                "step0,step1", "--dry-run"], cwd=elsewhere, env=_env())
    assert dry.returncode == 0, dry.stderr
    assert "Bundled: (none)" not in dry.stdout + dry.stderr

    real = _run([str(wheel_venv / "ckptgeo"), "scan", local_hub.repo_id, "--revisions", "step0,step1",
                 "--n-samples", "8", "--out", "ds"], cwd=elsewhere, env=_env())   # no --suite: every bundled one
    assert real.returncode == 0, real.stderr
    g = pd.read_parquet(elsewhere / "ds" / "geometry")
    assert sorted(g.suite.unique()) == suites.split(",")
    assert sorted(g.revision.unique()) == ["step0", "step1"]
    # the analysis runs from the wheel too (its forecast step imports ckptgeo.forecasting, which the wheel once
    # left out: `ckptgeo analyze` then ended in ModuleNotFoundError for every pip user)
    an = _run([str(wheel_venv / "ckptgeo"), "analyze", "ds"], cwd=elsewhere, env=_env())
    assert an.returncode == 0, an.stderr[-2000:]
    assert (elsewhere / "ds" / "report.md").is_file()
