"""On a real Slurm (``scripts/slurm_local.sh`` starts one on this machine; ``.ci/run`` does so before the tests):
a plain ``sbatch --array`` of scans, ``ckptgeo submit --stage`` with a task cancelled mid-revision then
``ckptgeo status`` and ``--resubmit``, and a two-run ``reproduce`` grid through ``ckptgeo submit``.

Where Slurm cannot be reached these tests skip with one line saying why; with ``CKPTGEO_REQUIRE_SLURM=1``
(set by ``.ci/run``) they fail instead. Jobs run on this machine, so they reach the loopback Hub; the test's
environment (HF_ENDPOINT, HF_HOME, PYTHONPATH) goes to them through sbatch's default ``--export=ALL``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from ckptgeo.cli import main
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow

REVS = "step0,step1,step2,step4,step8,step16,step32,step64"
KEYS = {"geometry": ["revision", "suite", "layer", "metric", "index"], "behavior": ["revision", "suite", "metric"],
        "revisions": ["revision"]}


def _slurm_missing() -> str | None:
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return "Slurm is not installed here (no sbatch/sinfo); scripts/slurm_local.sh starts one (root, apt-get)"
    try:
        got = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"sinfo does not answer ({err}); start Slurm with scripts/slurm_local.sh"
    if got.returncode or not any(s.strip().rstrip("*") in ("idle", "mix", "alloc") for s in got.stdout.split()):
        return f"no Slurm node is up (sinfo: {got.stdout.strip() or got.stderr.strip()}); run scripts/slurm_local.sh"
    return None


@pytest.fixture(autouse=True)
def slurm(monkeypatch):
    why = _slurm_missing()
    if why and os.environ.get("CKPTGEO_REQUIRE_SLURM") == "1":
        pytest.fail(f"{why} (CKPTGEO_REQUIRE_SLURM=1: this run must not skip it)", pytrace=False)
    if why:
        pytest.skip(why)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("CKPTGEO_NO_PROGRESS", "1")
    monkeypatch.chdir(REPO_ROOT)


_ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
          "DEADLINE"}


def _wait(job: str, timeout: float = 900) -> None:
    """Until every task of array ``job`` has ended (``scontrol show job``: squeue may not list a job submitted
    a moment ago), or ``timeout`` s."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        q = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True)
        states = [w.split("=", 1)[1] for line in q.stdout.splitlines() for w in line.split()
                  if w.startswith("JobState=")]
        if q.returncode == 0 and states and all(s in _ENDED for s in states):
            print(f"job {job} ended: {' '.join(w for w in q.stdout.split() if w.startswith(('JobId=', 'ArrayTaskId=', 'JobState=')))}")
            return
        time.sleep(1)
    raise TimeoutError(f"job {job} has not ended after {timeout} s")


def _canon(out: Path, table: str) -> pd.DataFrame:
    df = pd.read_parquet(out / table)
    from ckptgeo.store.schemas import TIMING_COLUMNS

    drop = [c for c in df.columns if c in TIMING_COLUMNS]   # timings differ from run to run
    return df.drop(columns=drop).sort_values(KEYS[table]).reset_index(drop=True)


def _scan_cli(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "ckptgeo", "-v", "scan", "testorg/pythia-tiny", "--revisions", REVS, "--out", str(out),
            "--n-samples", "16", "--threads", "1", *extra]


def _job_of(text: str) -> str:
    """The job id of the last "submitted job N: ..." line (the test's own prints land in capsys too)."""
    return [line.split()[2].rstrip(":") for line in text.splitlines() if line.startswith("submitted job")][-1]


def test_a_plain_sbatch_array_of_scans_equals_one_process(local_hub, tmp_path):
    out, ref = tmp_path / "array", tmp_path / "one"
    t0 = time.perf_counter()
    subprocess.run(_scan_cli(ref), check=True, capture_output=True, text=True)
    one = time.perf_counter() - t0
    script = tmp_path / "scan.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --array=0-3\n#SBATCH --ntasks=1\n"
                      f"#SBATCH --output={tmp_path}/%A_%a.out\n"
                      f"exec {' '.join(_scan_cli(out))}\n")
    t0 = time.perf_counter()
    sub = subprocess.run(["sbatch", "--wait", "--parsable", str(script)], capture_output=True, text=True)
    array = time.perf_counter() - t0
    assert sub.returncode == 0, sub.stderr
    job = sub.stdout.strip().split(";")[0]
    for i in range(4):
        log = (tmp_path / f"{job}_{i}.out").read_text()
        mine = [l.split()[3] for l in log.splitlines() if "ckptgeo.engine.scan: measured" in l]
        print(f"job {job} task {i}: measured {mine}; " + next((l for l in log.splitlines()
                                                                if l.startswith("measured")), log[-300:]))
    revs = pd.read_parquet(out / "revisions")
    assert sorted(revs.revision) == sorted(REVS.split(",")) and (revs.status == "ok").all()  # each once
    for table in KEYS:
        pd.testing.assert_frame_equal(_canon(out, table), _canon(ref, table))
    print(f"wall time: array of 4 tasks {array:.1f} s (submit to end) vs one process {one:.1f} s; "
          f"load {os.getloadavg()}")


def _claims_of_task(out: Path, task: str) -> list[str]:
    import json

    found = []
    for p in (out / ".locks").glob("*--*.claim"):   # revisions' claims (not the dataset-wide resolve.claim)
        try:
            info = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if info.get("slurm", {}).get("SLURM_ARRAY_TASK_ID") == task:
            found.append(p.name.split("--")[1])
    return found


def test_submit_stage_cancel_status_resubmit(local_hub, tmp_path, monkeypatch, capsys):
    from scripts.olah_local import free_port, launch, stop, wait_ready

    out = tmp_path / "staged"
    # revisions of some seconds (64 items a suite, one at a time) so that a task is cancelled in the middle of one
    args = ["scan", "testorg/pythia-tiny", "--revisions", REVS, "--out", str(out), "--n-samples", "64",
            "--batch-size", "1", "--threads", "1"]
    # a Hub of this test's own, stopped once submit has staged: the workers find nothing listening there,
    # so a single Hub request of theirs would fail its revision
    port = free_port()
    hub = launch(local_hub.mirrors, port, tmp_path / "olah", tmp_path / "olah.log")
    try:
        wait_ready(f"http://127.0.0.1:{port}/api/models/{local_hub.repo_id}/refs", hub, tmp_path / "olah.log")
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
        assert main(["submit", *args, "--workers", "3", "--stage"]) == 0
    finally:
        stop(hub)
    said = capsys.readouterr().out
    print(said)
    job = _job_of(said)
    end = time.monotonic() + 600
    while not (held := _claims_of_task(out, "1")):
        assert time.monotonic() < end, "task 1 never claimed a revision"
        time.sleep(0.05)
    subprocess.run(["scancel", f"{job}_1"], check=True)
    print(f"cancelled task {job}_1 while it measured {held}")
    _wait(job)
    assert _claims_of_task(out, "1") == held   # killed mid-revision: its claim is left behind
    code = main(["status", str(out)])
    before = capsys.readouterr().out
    print(before)
    assert code == 1
    table = {l.split()[0]: l for l in before.splitlines()[1:] if l.startswith("step")}
    assert "not started" in table[held[0]] and "stale claim" in table[held[0]]
    assert "8 revisions: " in before and "0 in progress" in before
    assert main(["submit", "--resubmit", str(out)]) == 0
    said = capsys.readouterr().out
    print(said)
    _wait(_job_of(said))
    code = main(["status", str(out)])
    after = capsys.readouterr().out
    print(after)
    assert code == 0 and "8 revisions: 8 done, 0 failed, 0 in progress, 0 not started" in after
    revs = pd.read_parquet(out / "revisions")
    assert sorted(revs.revision) == sorted(REVS.split(",")) and (revs.status == "ok").all()
    geo = pd.read_parquet(out / "geometry")
    assert not geo.duplicated(KEYS["geometry"]).any()
    assert set(geo.revision) == set(REVS.split(","))
    for log in sorted((out / "slurm" / "logs").glob("*_log.err")):
        mine = [l.split()[3] for l in log.read_text().splitlines() if "ckptgeo.engine.scan: measured" in l]
        took = [l.split(" claim ")[1].split("--")[1] for l in log.read_text().splitlines() if "taking over" in l]
        print(f"{log.name[:-8]}: measured {mine}" + (f", took over the stale claim of {took}" if took else ""))


def test_a_small_reproduce_grid_through_submit(tmp_path, capsys):
    import json

    preset = tmp_path / "grid.json"
    preset.write_text(json.dumps({"name": "t", "tasks": ["copy", "sort"], "levels": [1], "sizes": ["tiny"],
                                  "seeds": [0], "steps": {"copy": {"1": 200}, "sort": {"1": 200}},
                                  "n_checkpoints": 16, "n_samples": 60, "probe_checkpoints": 4}))
    out = tmp_path / "study"
    t0 = time.perf_counter()
    assert main(["submit", "reproduce", "--preset", str(preset), "--out", str(out), "--threads", "1",
                 "--no-plots", "--workers", "2"]) == 0
    said = capsys.readouterr().out
    print(said)
    assert main(["status", str(out)]) == 1
    print(capsys.readouterr().out)
    job = _job_of(said)
    _wait(job)
    wall = time.perf_counter() - t0
    code = main(["status", str(out)])
    text = capsys.readouterr().out
    print(text)
    assert code == 0 and "2 runs: 2 done, 0 failed, 0 in progress, 0 not started" in text
    logs = {p.name: p.read_text() for p in (out / "slurm" / "logs").glob(f"{job}_*_log.out")}
    for name, log in sorted(logs.items()):
        print(name, [l for l in log.splitlines() if "share is done" in l or "study finished" in l])
    # the two runs were split between the two tasks: one analysed, the other left it to the last one
    assert sum("share is done" in log for log in logs.values()) == 1
    assert sum("study finished" in log for log in logs.values()) == 1
    assert (out / "reproduction.md").is_file()
    revs = pd.read_parquet(out / "dataset" / "revisions")
    assert set(revs.model) == {"copy-L1-tiny-s0", "sort-L1-tiny-s0"} and (revs.status == "ok").all()
    print(f"reproduce grid of 2 runs over 2 array tasks: {wall:.0f} s from submit to end; load {os.getloadavg()}")
