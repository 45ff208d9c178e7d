"""Tests that need the public BIG-bench / BLiMP files skip, naming what is missing, where those are absent;
``CKPTGEO_REQUIRE_PUBLIC_DATA=1`` (CI) makes that a failure."""

from __future__ import annotations

import os
import subprocess
import sys

from tests._checkpoints import REPO_ROOT, missing_public_data


def test_missing_files_are_named_with_where_to_get_them(tmp_path):
    why = missing_public_data("bigbench", tmp_path)
    assert why.startswith("needs public data 'bigbench': 2 of 2 files missing from ")
    assert str(tmp_path / "bigbench_logical_deduction") in why and "three_objects.json" in why
    assert "bigbench==1.0.0" in why and "CKPTGEO_PUBLIC_DATA" in why
    (tmp_path / "blimp").mkdir()
    for name in ("anaphor_gender_agreement", "determiner_noun_agreement_1", "existential_there_quantifiers_1",
                 "irregular_past_participle_verbs", "npi_present_1"):
        (tmp_path / "blimp" / f"{name}.jsonl").write_text("{}\n")
    why = missing_public_data("blimp", tmp_path)
    assert "1 of 6 files missing" in why and "regular_plural_subject_verb_agreement_1.jsonl" in why
    (tmp_path / "blimp" / "regular_plural_subject_verb_agreement_1.jsonl").write_text("{}\n")
    assert missing_public_data("blimp", tmp_path) is None


def _pytest(tmp_path, **env):
    env = {**os.environ, "CKPTGEO_PUBLIC_DATA": str(tmp_path), "PYTHONPATH": str(REPO_ROOT), **env}

    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "tests/test_items_loaders.py", "-k", "spot_check"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_absent_data_skips_with_one_line_and_ci_fails(tmp_path):
    run = _pytest(tmp_path, CKPTGEO_REQUIRE_PUBLIC_DATA="0")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 skipped" in run.stdout
    assert "needs public data 'bigbench'" in run.stdout and "needs public data 'blimp'" in run.stdout
    run = _pytest(tmp_path, CKPTGEO_REQUIRE_PUBLIC_DATA="1")
    assert run.returncode == 1 and "2 errors" in run.stdout, run.stdout   # failed at setup
    assert "CKPTGEO_REQUIRE_PUBLIC_DATA=1: this run must not skip it" in run.stdout
