"""`ckptgeo train` without a terminal: progress lines in the log at intervals, then one summary line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from ckptgeo.cli.train import summary_line
from ckptgeo.training.trainer import checkpoint_steps
from tests._checkpoints import REPO_ROOT


def _train(out, *extra):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("CKPTGEO_NO_PROGRESS", None)
    return subprocess.run([sys.executable, "-m", "ckptgeo", "train", "--task", "copy", "--steps", "20",
                           "--checkpoints", "11", "--heldout", "8", "--batch-size", "4", "--warmup", "2",
                           "--device", "cpu", "--threads", "1", "--out", str(out), *extra],
                          env=env, capture_output=True, text=True, timeout=600)   # stderr is a pipe, no terminal


def test_no_terminal_logs_progress_lines_then_a_summary(tmp_path):
    run = _train(tmp_path / "copy")
    assert run.returncode == 0, run.stderr
    lines = [ln for ln in run.stderr.splitlines() if "train copy: step " in ln]
    steps = [int(re.search(r"step (\d+)/20", ln).group(1)) for ln in lines]
    # a line at the first and last checkpoint and at each one >= 1/10 of the run (2 steps) after the last line
    # (the 60 s rule never fires in so short a run)
    expected = []
    for s in checkpoint_steps(20, 11):
        if s in (0, 20) or s - expected[-1] >= 2:
            expected.append(s)
    assert steps == expected and len(expected) >= 6, run.stderr
    assert re.search(r"step 20/20 \(100%\), loss \d+\.\d{4}, held-out accuracy copy-L1 \d\.\d{3}, "
                     r"\d+ s elapsed, ETA 0 s$", lines[-1]), lines[-1]
    assert "\r" not in run.stderr                      # no progress-bar redraws in a log file
    summary, hint = run.stdout.strip().splitlines()[-2:]
    assert hint == f"next: ckptgeo scan {tmp_path / 'copy'}   (then ckptgeo analyze results/copy)"
    assert summary.startswith(f"{tmp_path / 'copy'}: 20 steps, {len(checkpoint_steps(20, 11))} checkpoints")
    assert re.search(r"final held-out accuracy copy-L1 \d\.\d\d \((acquired at step \d+|not acquired: .+), "
                     r"threshold 0\.5\)$", summary), summary
    again = _train(tmp_path / "copy")                  # complete already: still ends with the summary
    assert again.returncode == 0 and again.stdout.strip().splitlines()[-2:] == [summary, hint]


def test_summary_says_whether_and_when_each_suite_acquired(tmp_path):
    history = [{"step": s, "loss": 1.0, "lr": 1e-3, "seconds": s / 10,
                "accuracy": {"copy-L1": a, "sort-L2": 0.1}}
               for s, a in zip((0, 10, 20, 30, 40, 50), (0.0, 0.2, 0.6, 0.7, 0.9, 0.95))]
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"steps": 50, "seconds": 5.0, "chance": {"copy-L1": 0.0, "sort-L2": 0.05}, "history": history}))
    assert summary_line(tmp_path) == (
        f"{tmp_path}: 50 steps, 6 checkpoints, 5 s; final held-out accuracy copy-L1 0.95 (acquired at step 20 on the checkpoints' grid, "
        f"threshold 0.5), sort-L2 0.10 (not acquired: accuracy never stays above 0.5 for 3 consecutive checkpoints "
        f"(max 0.1), threshold 0.5)")
