"""scripts/test.sh reports both stages: a fast-stage failure says the slow tests were not run, and exits non-zero.

The script runs, unchanged, in a scratch project beside a no-op ``scripts/setup.sh`` and a ``.venv`` that is
this test run's own environment (real pytest, real tests: one fast and one slow, each made to pass or fail).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _project(tmp_path: Path, *, fast_ok, slow_ok: bool) -> Path:
    proj = tmp_path / "proj"
    (proj / "scripts").mkdir(parents=True)
    (proj / "tests").mkdir()
    shutil.copy(ROOT / "scripts" / "test.sh", proj / "scripts" / "test.sh")
    (proj / "scripts" / "setup.sh").write_text("#!/usr/bin/env bash\ntrue\n")
    (proj / "scripts" / "setup.sh").chmod(0o755)
    (proj / ".venv").symlink_to(sys.prefix)
    (proj / "pyproject.toml").write_text(
        "[tool.pytest.ini_options]\naddopts = \"-m 'not slow' -p no:cacheprovider\"\nmarkers = [\"slow: slow\"]\n")
    (proj / "tests" / "test_x.py").write_text(
        "import pytest\n\n"
        f"def test_fast():\n    assert {fast_ok}\n\n"
        f"@pytest.mark.slow\ndef test_slow():\n    assert {slow_ok}\n")
    return proj


def _run(proj: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(["bash", str(proj / "scripts" / "test.sh"), *args], cwd=proj, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow   # four pytest runs of a scratch project
@pytest.mark.skipif(not (Path(sys.prefix) / "bin" / "activate").is_file(), reason="needs a venv with bin/activate")
def test_both_stages_are_reported_and_a_fast_failure_stops_before_the_slow_ones(tmp_path):
    res = _run(_project(tmp_path / "a", fast_ok=False, slow_ok=True))
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.strip().splitlines()[-1] == (
        "scripts/test.sh: fast tests and doctests FAILED (pytest exit 1); slow tests NOT RUN (fix the fast ones first)")
    assert "test_slow" not in res.stdout
    res = _run(_project(tmp_path / "b", fast_ok=True, slow_ok=False))
    assert res.returncode == 1
    assert res.stdout.strip().splitlines()[-1] == (
        "scripts/test.sh: fast tests and doctests passed; slow tests FAILED (pytest exit 1)")
    res = _run(_project(tmp_path / "c", fast_ok=True, slow_ok=True))
    assert res.returncode == 0
    assert res.stdout.strip().splitlines()[-1] == "scripts/test.sh: fast tests and doctests passed; slow tests passed"
    res = _run(_project(tmp_path / "d", fast_ok=True, slow_ok=False), "--fast")
    assert res.returncode == 0 and res.stdout.strip().splitlines()[-1].endswith("slow tests skipped (--fast)")


@pytest.mark.skipif(not (Path(sys.prefix) / "bin" / "activate").is_file(), reason="needs a venv with bin/activate")
def test_an_interrupted_run_is_reported_as_interrupted_not_failed(tmp_path):
    """Ctrl-C during the fast tests (pytest exits 2): said as such, not as a failure to fix."""
    ctrl_c = "(_ for _ in ()).throw(KeyboardInterrupt())"   # the fast test raises what Ctrl-C raises
    res = _run(_project(tmp_path, fast_ok=ctrl_c, slow_ok=True))
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stdout.strip().splitlines()[-1] == (
        "scripts/test.sh: fast tests and doctests INTERRUPTED (pytest exit 2: Ctrl-C, or an error while collecting "
        "the tests); slow tests NOT RUN (rerun to finish)")
