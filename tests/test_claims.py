"""Claims that hold where flock does not (NFS, Lustre) and survive dead workers; array sharding; the
submit/status commands without a cluster (their Slurm runs are in tests/test_slurm.py)."""

from __future__ import annotations

import json
import os
import re
import warnings

import pandas as pd
import pytest

from ckptgeo._io import Claim, claim_is_stale, read_claim
from ckptgeo.cli import main
from ckptgeo.engine.plan import shard
from ckptgeo.engine.scan import scan
from ckptgeo.errors import InvalidParameterError, OutputLockedError
from ckptgeo.store.dataset import Dataset, part_name
from ckptgeo.store.schemas import TIMING_COLUMNS
from tests._checkpoints import SUITE, make_checkpoints
from tests._faults import killed_scan

KW = dict(suites=(SUITE,), n_samples=8)


class FakeClock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    return make_checkpoints(tmp_path_factory.mktemp("ck") / "tiny", steps=(0, 1, 2, 4, 8))


def test_a_claim_is_one_file_naming_its_holder_and_exclusive(tmp_path):
    path = tmp_path / ".locks" / "x.claim"
    with Claim(path, heartbeat=0) as first:
        info = read_claim(path)
        assert (info["pid"], info["token"]) == (os.getpid(), first.holder["token"])
        with pytest.raises(BlockingIOError) as err:
            Claim(path, heartbeat=0)
        assert err.value.holder["pid"] == os.getpid()
        with pytest.raises(OutputLockedError, match=f"pid {os.getpid()}"):
            Dataset(tmp_path / "ds").lock("x") and Dataset(tmp_path / "ds").lock("x")
    assert not path.exists() and list(path.parent.iterdir()) == []   # released: nothing left


def test_another_hosts_claim_is_taken_over_only_after_its_heartbeat_stops(tmp_path):
    clock = FakeClock()
    path = tmp_path / "r.claim"
    path.write_text(json.dumps({"host": "node-that-died", "pid": 12345, "started": clock.t, "token": "theirs"}))
    os.utime(path, (clock.t, clock.t))
    clock.t += 599.0
    with pytest.raises(BlockingIOError):
        Claim(path, stale_after=600, heartbeat=0, clock=clock)
    assert json.loads(path.read_text())["token"] == "theirs"
    clock.t += 2.0   # 601 s without a heartbeat
    with Claim(path, stale_after=600, heartbeat=0, clock=clock) as mine:
        assert read_claim(path)["token"] == mine.holder["token"] != "theirs"
        # its own heartbeat keeps it: 500 s later it is touched, and 500 s after that it is not stale
        clock.t += 500
        mine.touch()
        clock.t += 500
        assert not claim_is_stale(read_claim(path), now=clock.t, stale_after=600, host="elsewhere")
        with pytest.raises(BlockingIOError):
            Claim(path, stale_after=600, heartbeat=0, clock=clock)
    assert not path.exists()


def test_a_dead_pid_on_this_host_is_stale_at_once(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(proc.stdout)
    info = {"host": __import__("socket").gethostname(), "pid": dead, "heartbeat": 100.0}
    assert claim_is_stale(info, now=100.0, stale_after=600)
    assert not claim_is_stale({**info, "pid": os.getpid()}, now=100.0, stale_after=600)
    assert not claim_is_stale({**info, "host": "other"}, now=100.0, stale_after=600)


def test_a_worker_killed_mid_revision_leaves_a_claim_the_next_worker_takes_over(ckpts, tmp_path):
    out = tmp_path / "ds"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = killed_scan("forward", 3, ckpts, out, **KW)   # SIGKILL inside a forward pass of step1
        assert code == -9
        left = {p.name: read_claim(p) for p in (out / ".locks").glob("*.claim")}
        assert len(left) == 1, left     # the dead worker's claim is still there
        (name, info), = left.items()
        assert info["pid"] != os.getpid()
        res = scan(ckpts, out=out, **KW)
    revision = name.split("--")[1]
    assert revision in res.measured and res.locked == []
    assert list((out / ".locks").glob("*.claim")) == []
    revs = pd.read_parquet(out / "revisions")
    assert sorted(revs.revision) == ["step0", "step1", "step2", "step4", "step8"] and (revs.status == "ok").all()


@pytest.mark.parametrize("env, expected", [
    ({}, (0, 1)),
    ({"SLURM_PROCID": "0"}, (0, 1)),   # inside sbatch --array: no SLURM_NTASKS
    ({"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "0",
      "SLURM_ARRAY_TASK_MAX": "3", "SLURM_PROCID": "0"}, (2, 4)),
    ({"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "5"}, (2, 3)),
    ({"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_PROCID": "1", "SLURM_NTASKS": "2"}, (3, 4)),
    ({"RANK": "3", "WORLD_SIZE": "4"}, (3, 4)),
])
def test_shard_reads_array_and_launcher_ranks(env, expected):
    assert shard(env) == expected


def test_a_sparse_array_is_refused():
    with pytest.raises(InvalidParameterError, match="consecutive"):
        shard({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "2", "SLURM_ARRAY_TASK_MIN": "0",
               "SLURM_ARRAY_TASK_MAX": "5"})


def test_array_shares_union_equals_one_process(ckpts, tmp_path, monkeypatch):
    ref, out = tmp_path / "one", tmp_path / "array"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scan(ckpts, out=ref, **KW)
        measured = []
        for task in (1, 0, 2):   # tasks start in any order
            for k, v in {"SLURM_ARRAY_TASK_ID": task, "SLURM_ARRAY_TASK_COUNT": 3, "SLURM_ARRAY_TASK_MIN": 0,
                         "SLURM_ARRAY_TASK_MAX": 2}.items():
                monkeypatch.setenv(k, str(v))
            measured.append(scan(ckpts, out=out, **KW).measured)
    assert measured == [["step1", "step8"], ["step0", "step4"], ["step2"]]
    for table, keys in {"geometry": ["revision", "layer", "metric", "index"], "revisions": ["revision"]}.items():
        a, b = (pd.read_parquet(d / table).pipe(lambda df: df.drop(columns=[c for c in df if c in TIMING_COLUMNS]))
                .sort_values(keys, ignore_index=True) for d in (out, ref))
        pd.testing.assert_frame_equal(a, b)


def test_status_of_a_scan_folder_without_a_submission(ckpts, tmp_path, capsys):
    out = tmp_path / "ds"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = scan(ckpts, out=out, revisions="step0,step1", **KW)
    name = part_name("tiny", "step2", res.config_hash)[: -len(".parquet")]
    with Dataset(out).lock(name, heartbeat=0):
        assert main(["status", str(out)]) == 1
        text = capsys.readouterr().out
    lines = text.splitlines()
    run = f"{res.config_hash[:8]} (behavior, rankme)"
    assert lines[0].split() == ["revision", "run", "status", "detail"]
    assert lines[1].startswith(f"step0     {run}  done") and lines[2].startswith(f"step1     {run}  done")
    assert lines[3].startswith(f"step2     {run}  in progress") and f"pid {os.getpid()}" in lines[3]
    assert "3 revisions: 2 done, 0 failed, 1 in progress, 0 not started" in text
    # beside a live process (its heartbeat), no advice to rerun the same scan next to it
    assert "next: 1 revision in progress" in text and "wait for it" in text and "rerun the same scan" not in text
    assert main(["status", str(out)]) == 0
    assert "2 revisions: 2 done" in capsys.readouterr().out


def _status(out, capsys) -> tuple[int, dict, str]:
    """``ckptgeo status out``: exit code, {(revision, run's short hash): (status, run label)}, the text."""
    code = main(["status", str(out)])
    text = capsys.readouterr().out
    rows = {}
    for line in text.splitlines()[1:]:
        m = re.match(r"(step\d+) +(\w{8}) (\([^)]*\)) +(done|failed|in progress|not started)", line)
        if m:
            rows[m.group(1), m.group(2)] = (m.group(4), f"{m.group(2)} {m.group(3)}")
        elif line.startswith("step"):   # a row without a run
            rows[line.split()[0], None] = (line.split(maxsplit=1)[1], None)
    return code, rows, text


def test_status_of_a_scan_and_a_probe_of_the_same_revisions_is_per_run(ckpts, tmp_path, capsys):
    """Two configs over the same revisions (a scan, a probe) are two runs: one row per run and revision, a run
    column naming each by hash and measures, totals per run; a rerun on more revisions adds to its run's
    planned revisions; a run record without them (an older ckptgeo) falls back to what the tables name."""
    out = tmp_path / "ds"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = scan(ckpts, out=out, revisions="step0,step1", **KW).config_hash
        b = scan(ckpts, out=out, revisions="step0,step1", metrics=["behavior", "probe"], **KW).config_hash
    code, rows, text = _status(out, capsys)
    assert code == 0, text
    assert rows == {("step0", a[:8]): ("done", f"{a[:8]} (behavior, rankme)"),
                    ("step1", a[:8]): ("done", f"{a[:8]} (behavior, rankme)"),
                    ("step0", b[:8]): ("done", f"{b[:8]} (behavior, probe)"),
                    ("step1", b[:8]): ("done", f"{b[:8]} (behavior, probe)")}, text
    assert f"{a[:8]} (behavior, rankme): 2 revisions: 2 done, 0 failed, 0 in progress, 0 not started" in text
    assert "4 revisions of 2 runs: 4 done, 0 failed, 0 in progress, 0 not started" in text
    assert "no planned revisions" not in text

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scan(ckpts, out=out, revisions="step2,step1", **KW)   # the same config on one more revision
    record = json.loads((out / "runs" / f"{a}.json").read_text())
    assert record["planned"] == {"tiny": ["step0", "step1", "step2"]}
    assert record["metrics"]["rankme"] and record["source"] == "tiny" and "runtime" in record   # the rest kept
    code, rows, text = _status(out, capsys)
    assert code == 0 and rows["step2", a[:8]][0] == "done" and ("step2", b[:8]) not in rows, text
    assert "5 revisions of 2 runs: 5 done" in text

    del record["planned"]   # a record an older ckptgeo wrote: what the tables name, and a note saying so
    (out / "runs" / f"{a}.json").write_text(json.dumps(record))
    code, rows, text = _status(out, capsys)
    assert code == 0 and sorted(rows) == sorted([(r, h[:8]) for r in ("step0", "step1", "step2") for h in (a, b)
                                                  if (r, h) != ("step2", b)]), text
    assert f"(runs/{a}.json: no planned revisions recorded" in text


def test_status_of_an_interrupted_run_lists_its_planned_revisions_as_not_started(ckpts, tmp_path, capsys,
                                                                                  monkeypatch):
    """Ctrl-C inside the first measure of a probe beside a finished scan: none of the probe's revisions is
    saved, yet status lists them, not started, and exits 1 (it once said "2 revisions: 2 done" and 0)."""
    from ckptgeo.engine import scan as engine_scan

    out = tmp_path / "ds"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = scan(ckpts, out=out, revisions="step0,step1", **KW).config_hash

        def measure(self, model, rev, *args, **kw):
            raise KeyboardInterrupt

        monkeypatch.setattr(engine_scan._Run, "measure", measure)
        with pytest.raises(KeyboardInterrupt):
            scan(ckpts, out=out, revisions="step0,step1", metrics=["behavior", "probe"], **KW)
    monkeypatch.undo()
    (b,) = {p.stem for p in (out / "runs").glob("*.json")} - {a}
    assert sorted(pd.read_parquet(out / "revisions").config_hash.unique()) == [a]   # nothing of the probe saved
    code, rows, text = _status(out, capsys)
    assert code == 1, text
    assert {k: v[0] for k, v in rows.items()} == {("step0", a[:8]): "done", ("step1", a[:8]): "done",
                                                  ("step0", b[:8]): "not started", ("step1", b[:8]): "not started"}
    assert f"{b[:8]} (behavior, probe): 2 revisions: 0 done, 0 failed, 0 in progress, 2 not started" in text
    assert "4 revisions of 2 runs: 2 done, 0 failed, 0 in progress, 2 not started" in text
    assert f"next: rerun the same scan (or probe) command of {b[:8]} (behavior, probe)" in text


def test_status_of_a_reproduce_folder_and_of_a_dataset_of_several_models(ckpts, tmp_path, capsys):
    """A reproduce --out (runs/ and dataset/, not submitted): one row per run; its dataset/ (several models):
    one row per model, each with its revisions' counts."""
    import shutil

    out = tmp_path / "study"
    for run in ("copy-L1-tiny-s0", "copy-L1-tiny-s1"):
        folder = out / "runs" / run
        shutil.copytree(ckpts, folder)
        (folder / "manifest.json").write_text(json.dumps({"complete": True}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scan(out / "runs" / "copy-L1-tiny-s0", out=out / "dataset", revisions="step0,step1", **KW)
        scan(out / "runs" / "copy-L1-tiny-s1", out=out / "dataset", revisions="step0", **KW)
    assert main(["status", str(out)]) == 1
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0].split() == ["run", "status", "detail"]
    assert lines[1].split()[:2] == ["copy-L1-tiny-s0", "done"] and "2 revisions scanned" in lines[1]
    assert lines[2].split()[:2] == ["copy-L1-tiny-s1", "done"]
    assert "3 runs: 2 done, 0 failed, 0 in progress, 1 not started" in text and "(analysis)" in text and "rerun the same reproduce command" in text

    assert main(["status", str(out / "dataset")]) == 0
    text = capsys.readouterr().out
    assert "3 revisions of 2 models; one row per model" in text
    rows = [line.split()[:2] for line in text.splitlines() if line.startswith("copy-L1")]
    assert rows == [["copy-L1-tiny-s0", "done"], ["copy-L1-tiny-s1", "done"]]
    assert "2 models: 2 done" in text


def test_submit_dry_run_prints_an_sbatch_script_and_status_reads_the_record(ckpts, tmp_path, capsys):
    out = tmp_path / "ds"
    code = main(["submit", "--dry-run", "--stage", "scan", str(ckpts), "--out", str(out), "--revisions", "all",
                 "--suite", SUITE, "--workers", "3", "--partition", "gpu", "--account", "lab", "--time", "30", "--gpus-per-task", "1",
                 "--mem", "16G", "--array-parallelism", "2"])
    script = capsys.readouterr().out
    assert code == 0
    for line in ("#SBATCH --array=0-2%2", "#SBATCH --partition=gpu", "#SBATCH --account=lab", "#SBATCH --time=30",
                 "#SBATCH --gpus-per-task=1", "#SBATCH --mem=16G", "export HF_HUB_OFFLINE=1"):
        assert line in script.splitlines(), line
    assert script.splitlines()[-1].endswith(f"-m ckptgeo -v scan {ckpts} --out {out} --revisions all --suite {SUITE}")
    assert not out.exists()   # a dry run writes nothing


def test_submit_refuses_what_no_worker_could_run(ckpts, tmp_path, capsys):
    assert main(["submit", "scan", str(ckpts), "--workers", "2"]) != 0
    assert "needs --out" in capsys.readouterr().err
    assert main(["submit", "scan", str(ckpts), "--out", str(tmp_path / "o"), "--time", "soon"]) != 0
    assert "--time 'soon'" in capsys.readouterr().err
    assert main(["submit", "--resubmit", str(tmp_path)]) != 0
    assert "was not submitted with ckptgeo submit" in capsys.readouterr().err


def test_submit_reproduce_dry_run_splits_runs_over_the_array(tmp_path, capsys):
    assert main(["submit", "--dry-run", "reproduce", "--preset", "cpu", "--out", str(tmp_path / "r"),
                 "--workers", "6", "--time", "2:00:00", "--array-parallelism", "2"]) == 0
    script = capsys.readouterr().out
    assert "#SBATCH --array=0-5%2" in script and "#SBATCH --time=2:00:00" in script
    assert script.rstrip().endswith(f"-m ckptgeo -v reproduce --preset cpu --out {tmp_path / 'r'}")
    assert not (tmp_path / "r").exists()


def test_a_preset_file_is_checked_before_anything_runs(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "tasks": ["copy"], "colour": 3}')
    assert main(["submit", "--dry-run", "reproduce", "--preset", str(bad), "--out", str(tmp_path / "r")]) != 0
    assert "unknown fields ['colour']" in capsys.readouterr().err


def test_the_submitit_folder_is_private_to_the_user(tmp_path):
    """submitit's folder holds the pickle every worker unpickles: created 0700, an existing 0755 one made 0700."""
    import stat

    from ckptgeo.cli.submit import private_log_folder

    new = private_log_folder(tmp_path / "a" / "slurm" / "logs")
    assert stat.S_IMODE(new.stat().st_mode) == 0o700
    old = tmp_path / "b" / "slurm" / "logs"
    old.mkdir(parents=True, mode=0o755)
    old.chmod(0o755)
    assert stat.S_IMODE(private_log_folder(old).stat().st_mode) == 0o700
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "logs").symlink_to(old)
    with pytest.raises(InvalidParameterError, match="must be a folder of your own"):
        private_log_folder(tmp_path / "c" / "logs")
