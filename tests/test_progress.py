"""A scan's progress in a batch log: ``ckptgeo scan`` / ``ckptgeo probe`` with stdout and stderr in a file (no
terminal, default verbosity) log a start line with the cost and one line per revision with an ETA."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests._checkpoints import SUITE, make_checkpoints

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"scan tiny: (step\d+) finished \((\d)/\d, \d+%\) in [\d.]+ (s|min).*; .* elapsed, ETA ")


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    return make_checkpoints(tmp_path_factory.mktemp("pg") / "tiny", steps=(0, 1, 2))


@pytest.mark.parametrize("command", ["scan", "probe"])
def test_a_batch_log_gets_a_line_per_revision_with_an_eta(ckpts, tmp_path, command):
    log = tmp_path / "log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CKPTGEO_NO_PROGRESS", None)
    with log.open("w") as f:   # like `ckptgeo scan ... > log 2>&1`: no terminal
        code = subprocess.run([sys.executable, "-m", "ckptgeo", command, str(ckpts), "--out", str(tmp_path / "ds"),
                               "--suite", SUITE, "--n-samples", "8"], stdout=f, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, env=env, cwd=tmp_path, timeout=600).returncode
    text = log.read_text()
    assert code == 0, text
    found = [m.groups()[:2] for m in map(LINE.search, text.splitlines()) if m]
    assert found == [("step0", "1"), ("step1", "2"), ("step2", "3")], text
    assert re.search(r"scan tiny: 3 revisions to measure; 1 suite x 8 items \(8 prompts per revision\), measures "
                     r".*rough estimate", text), text


def test_the_eta_is_the_mean_time_per_revision_times_those_left():
    from ckptgeo.engine.progress import progress_line

    assert progress_line("scan m", "step9", 1, 4, 30.0, 30.0).endswith("30 s elapsed, ETA 90 s")
    assert progress_line("scan m", "step9", 4, 4, 1.0, 130.0).endswith("ETA 0 s")


def test_setting_up_is_not_in_the_eta():
    """A fake clock: 100 s of setting up (tokenizer, architecture), then 10 s per revision: ETA 20 s, not 73 s."""
    from ckptgeo.engine.progress import LOGGER, RevisionProgress

    now = [0.0]
    lines = []

    bar = RevisionProgress(3, "scan m", disable=True, clock=lambda: now[0])
    LOGGER.addHandler(handler := __import__("logging").Handler())
    handler.emit = lambda record: lines.append(record.getMessage())
    old = LOGGER.level
    LOGGER.setLevel("INFO")
    try:
        now[0] = 100.0
        bar.set_postfix_str("step0")
        now[0] = 110.0
        bar.update(1)
    finally:
        LOGGER.removeHandler(handler)
        LOGGER.setLevel(old)
    assert lines == ["scan m: step0 finished (1/3, 33%) in 10 s; 110 s elapsed, ETA 20 s"]


def test_a_revision_another_process_has_is_said_skipped_not_finished():
    from ckptgeo.engine.progress import progress_line

    line = progress_line("scan m", "step4000", 1, 1, 0.0, 19.0, note="skipped: another process has it, or finished it")
    assert line == "scan m: step4000 skipped: another process has it, or finished it (1/1, 100%); 19 s elapsed, ETA 0 s"


def test_a_batch_log_of_a_hub_scan_has_no_download_bars(local_hub, tmp_path):
    """huggingface_hub's 'Fetching N files' bars stay out of a batch log, like ckptgeo's own bar."""
    log = tmp_path / "log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    env.pop("CKPTGEO_NO_PROGRESS", None)
    with log.open("w") as f:
        code = subprocess.run([sys.executable, "-m", "ckptgeo", "scan", local_hub.repo_id, "--revisions", "step0,step1",
                               "--out", str(tmp_path / "ds"), "--suite", SUITE, "--n-samples", "8"], stdout=f,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=tmp_path,
                              timeout=600).returncode
    text = log.read_text()
    assert code == 0, text
    assert "finished (2/2, 100%)" in text and "Fetching" not in text, text


def test_duplicates_by_metadata_are_said_so_and_left_out_of_the_eta():
    """`scan EleutherAI/pythia-2.8b --revisions every-1000` on a pythia#205-shaped loopback repo: step0 took 11 min 47 s,
    then step1000 and step2000 (step0's weights, not fetched) were logged "finished ... in 0 s" and the ETA fell from
    47 min to 7 min 51 s with two 12-minute revisions left. A fake clock: 600 s per measured revision."""
    import logging

    from ckptgeo.engine.progress import LOGGER, RevisionProgress

    now, lines = [0.0], []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    LOGGER.addHandler(handler)
    old = LOGGER.level
    LOGGER.setLevel("INFO")
    try:
        bar = RevisionProgress(5, "scan m", disable=True, clock=lambda: now[0], free=2)
        for name, took, dup in (("step0", 600, None), ("step1000", 0, "step0"), ("step2000", 0, "step0"),
                                ("step3000", 600, None)):
            bar.set_postfix_str(name)
            now[0] += took
            bar.finish(duplicate_of=dup)
    finally:
        LOGGER.removeHandler(handler)
        LOGGER.setLevel(old)
    assert lines == [
        "scan m: 5 revisions to measure (2 of them duplicates by metadata: recorded, not fetched)",
        "scan m: step0 finished (1/5, 20%) in 10 min 00 s; 10 min 00 s elapsed, ETA 20 min 00 s",
        "scan m: step1000 duplicate of step0: recorded, not fetched (2/5, 40%); 10 min 00 s elapsed, ETA 20 min 00 s",
        "scan m: step2000 duplicate of step0: recorded, not fetched (3/5, 60%); 10 min 00 s elapsed, ETA 20 min 00 s",
        "scan m: step3000 finished (4/5, 80%) in 10 min 00 s; 20 min 00 s elapsed, ETA 10 min 00 s"]


def test_a_revision_stopped_by_ctrl_c_is_not_logged_as_finished(ckpts, tmp_path, monkeypatch, caplog):
    """Ctrl-C inside step1's measures: step0's line says finished, step1 gets none (nothing of it was saved; the
    line once said 'step1 finished' and the batch log then claimed work that was not there)."""
    import logging

    from ckptgeo import scan
    from ckptgeo.engine import scan as engine_scan
    from ckptgeo.store.dataset import Dataset

    real = engine_scan._Run.measure

    def measure(self, model, rev, *args, **kw):
        if rev.name == "step1":
            raise KeyboardInterrupt
        return real(self, model, rev, *args, **kw)

    monkeypatch.setattr(engine_scan._Run, "measure", measure)
    monkeypatch.delenv("CKPTGEO_NO_PROGRESS", raising=False)
    caplog.set_level(logging.INFO, logger="ckptgeo.progress")
    with pytest.raises(KeyboardInterrupt):
        scan(ckpts, out=tmp_path / "ds", suites=(SUITE,), n_samples=8, batch_size=8)
    lines = [r.getMessage() for r in caplog.records if " finished " in r.getMessage()]
    assert [m.group(1) for m in map(LINE.search, lines) if m] == ["step0"], lines
    assert sorted(Dataset(tmp_path / "ds").read("revisions")["revision"]) == ["step0"]


def _seconds(text: str) -> float:
    """``"63 s"``, ``"2 min 06 s"``, ``"3 min"``, ``"1.8 h"`` (the start line's and the progress lines' durations)."""
    total = 0.0
    for value, unit in re.findall(r"([\d.]+) (h|min|s)\b", text):
        total += float(value) * {"h": 3600, "min": 60, "s": 1}[unit]
    return total


def test_the_docs_sample_batch_log_is_what_a_run_prints_today():
    """The sample batch log of `ckptgeo probe --suite logic` (README's, now docs/scan.md's) said a 160m revision
    finished 'in 10 min 11 s ... ETA 20 min 21 s' where a run took 63 s and --dry-run said 58 s: the sample's start
    line and revision line are in today's format (progress_line), and the revision's time agrees with the start
    line's estimate per revision within 2x."""
    from ckptgeo.engine.progress import progress_line

    text = (ROOT / "docs" / "scan.md").read_text()
    lines = [line.split("INFO ckptgeo.progress: ", 1)[1] for line in text.splitlines()
             if line.startswith("INFO ckptgeo.progress: ")]
    start = next((m for m in map(re.compile(r"^(scan \S+): (\d+) revisions to measure; .*rough estimate (.+)$").match,
                                 lines) if m), None)
    assert start is not None, lines
    desc, total, estimate = start.group(1), int(start.group(2)), _seconds(start.group(3))
    revision = next(m for m in map(re.compile(r"^(scan \S+): (step\d+) finished \((\d+)/(\d+), \d+%\) in (.+); "
                                              r"(.+) elapsed, ETA (.+)$").match, lines) if m)
    took, elapsed = _seconds(revision.group(5)), _seconds(revision.group(6))
    done = int(revision.group(3))
    assert revision.group(1) == desc and int(revision.group(4)) == total
    assert lines[lines.index(revision.group(0))] == progress_line(desc, revision.group(2), done, total, took, elapsed,
                                                                  took * done)
    assert 0.5 < took / (estimate / total) < 2, (took, estimate)


_FACADE_SCRIPT = """
import logging, sys
import ckptgeo
if sys.argv[3] == "configured":
    logging.basicConfig(level=logging.INFO, format="USER %(name)s: %(message)s")
ckptgeo.scan(sys.argv[1], out=sys.argv[2], suites=("{suite}",), n_samples=8, revisions="step0,step1")
logging.getLogger("ckptgeo.progress").info("after the call")   # shown only where the user configured logging
print("handlers", len(logging.getLogger("ckptgeo.progress").handlers), logging.getLogger("ckptgeo.progress").level)
"""


@pytest.mark.parametrize("setting", ["plain", "configured", "quiet"])
def test_the_facade_shows_its_progress_lines_on_stderr(ckpts, tmp_path, setting):
    """``ckptgeo.scan(...)`` in a batch script with no logging configured printed no progress line (only the CLI
    showed them): now one line per revision on stderr for the duration of the call, the handler removed after; a
    user's own logging configuration alone shows them (once); CKPTGEO_NO_PROGRESS=1 silences them."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CKPTGEO_NO_PROGRESS", None)
    if setting == "quiet":
        env["CKPTGEO_NO_PROGRESS"] = "1"
    err = tmp_path / "stderr"
    with err.open("w") as f:   # a batch script: stderr in a file, no terminal
        proc = subprocess.run([sys.executable, "-c", _FACADE_SCRIPT.format(suite=SUITE), str(ckpts),
                               str(tmp_path / "ds"), "configured" if setting == "configured" else "-"],
                              stdout=subprocess.PIPE, stderr=f, stdin=subprocess.DEVNULL, env=env, cwd=tmp_path,
                              text=True, timeout=600)
    text = err.read_text()
    assert proc.returncode == 0, text
    progress = [line for line in text.splitlines() if "ckptgeo.progress: " in line]
    prefix = {"plain": "INFO ckptgeo.progress: ", "configured": "USER ckptgeo.progress: ", "quiet": None}[setting]
    if prefix is None:
        assert progress == [], text
    else:
        assert all(line.startswith(prefix) for line in progress), text
        finished = [m.group(1) for m in map(LINE.search, progress) if m]
        assert len(progress) == 3 + (setting == "configured") and finished == ["step0", "step1"], text
        assert progress[0].startswith(prefix + "scan tiny: 2 revisions to measure; 1 suite x 8 items"), text
        assert ("after the call" in progress[-1]) == (setting == "configured"), text
    assert proc.stdout.strip().endswith("handlers 0 0"), proc.stdout
