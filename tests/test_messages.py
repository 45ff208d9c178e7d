"""Error messages that fit the situation a new user is in (issue 14, item 3)."""

from __future__ import annotations

import shutil

import pytest

from ckptgeo.cli import main
from ckptgeo.engine.scan import scan
from ckptgeo.errors import CorruptCheckpointError, RevisionNotFoundError
from ckptgeo.sources.revisions import Revision, select_revisions
from tests._checkpoints import SUITE, make_checkpoints
from tests._faults import quiet_scan


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return make_checkpoints(tmp_path_factory.mktemp("ck") / "tiny", steps=(0, 1))


def _copy(good, tmp_path):
    ck = tmp_path / "ck"
    shutil.copytree(good, ck)
    return ck


def test_truncated_local_weight_file_is_named_and_not_to_be_deleted(good, tmp_path):
    ck = _copy(good, tmp_path)
    weights = ck / "step1" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    res = quiet_scan(ck, tmp_path / "ds")
    msg = str(res.failed["step1"])
    assert f"weight file {weights} is damaged (truncated or corrupt" in msg
    assert "it is your checkpoint, not a cached copy: restore or re-save it" in msg
    assert "delete" not in msg.replace("never deletes", "")
    assert weights.stat().st_size == 1000          # left as it was


def _faults(local_hub):
    return local_hub.add_repo("pythia-faults", steps=(0, 1000, 2000), duplicate={"step3000": "step2000"},
                              corrupt=("step4000",), arch_changed=("step5000",), config_tweak=("step6000",))


def test_a_file_the_hub_serves_truncated_is_a_permanent_named_failure(local_hub, tmp_path, capsys):
    """Issue 45 item 2: step4000's model.safetensors is truncated on the Hub itself (its sha256 is the listing's).
    The scan said "delete it from the Hub cache and rerun", status "rerun the same scan command" (exit 1), and
    --integrity, --dry-run and genuine did not flag it: a resubmit-on-exit-1 job never ended. Now the listing and
    the file's header (one range request) flag it, the scan records it `damaged` without downloading it, a rerun
    does not retry it, status exits 0 without asking for a rerun, and genuine leaves it out."""
    import pandas as pd

    repo = _faults(local_hub)
    out = tmp_path / "ds"
    assert main(["revisions", repo.repo_id, "--integrity"]) == 0
    text = capsys.readouterr().out
    assert "damaged on the source (permanent; left out of genuine): step4000: model.safetensors is 0.1 MB" in text
    assert "header declares 0.2 MB: truncated as the source serves it" in text
    genuine = text.split("selector: --revisions genuine  (= ")[1]
    assert "step4000" not in genuine and "step5000" in genuine, genuine   # a bigger architecture is not damaged
    sel = ["--revisions", "step0,step4000", "--suite", SUITE, "--n-samples", "8", "--out", str(out)]
    assert main(["scan", repo.repo_id, *sel, "--dry-run"]) == 0
    assert "damaged: step4000: the source serves its weights damaged (model.safetensors" in capsys.readouterr().out
    key = (repo.commits["step4000"], "model.safetensors")
    for measured in ("measured 1, already done 0", "measured 0, already done 1"):   # a rerun does not retry it
        before = local_hub.served_bytes(repo.repo_id).get(key, 0)
        assert main(["scan", repo.repo_id, *sel]) == 0
        done = capsys.readouterr()
        assert measured in done.out and "failed 0, damaged on the source 1" in done.out
        assert "damaged step4000: DamagedSourceError: step4000: the source serves its weights damaged" in done.err
        assert "delete it from the Hub cache" not in done.err
        got = local_hub.served_bytes(repo.repo_id).get(key, 0) - before   # its header (a range request), not all
        assert got < repo.weight_bytes["step4000"], (got, repo.weight_bytes["step4000"])
    rv = pd.read_parquet(out / "revisions").set_index("revision")
    assert rv.loc["step4000", "status"] == "damaged" and rv.loc["step0", "status"] == "ok"
    assert main(["status", str(out)]) == 0
    said = capsys.readouterr().out
    assert "step4000" in said and "damaged" in said and "1 revision damaged on the source (step4000): permanent" in said
    assert "so nothing is left to rerun for them" in said and "next:" not in said
    assert "1 done, 0 failed, 0 in progress, 0 not started, 1 damaged" in said


def test_a_file_the_hub_serves_damaged_found_only_at_load_is_permanent_too(local_hub, tmp_path, monkeypatch):
    """Where the listing cannot tell (no header read), the load finds the file damaged although its bytes match the
    listed sha256: that is the Hub's copy, so the same permanent failure, not "delete it from the cache"."""
    from ckptgeo.sources.hub import HubSource

    repo = _faults(local_hub)
    monkeypatch.setattr(HubSource, "declared_size", lambda self, revision, name: None)
    res = quiet_scan(repo.repo_id, tmp_path / "ds", revisions="step4000")
    assert not res.failed and list(res.damaged) == ["step4000"]
    msg = res.damaged["step4000"]
    assert "the source serves its weights damaged (weight file" in msg and "is damaged (truncated or corrupt" in msg
    assert "although its bytes match the sha256 the source lists" in msg and "delete" not in msg
    key = (repo.commits["step4000"], "model.safetensors")
    before = local_hub.served_bytes(repo.repo_id).get(key, 0)
    again = quiet_scan(repo.repo_id, tmp_path / "ds", revisions="step4000")   # recorded at this commit: not retried
    assert list(again.damaged) == ["step4000"] and not again.failed and not again.measured
    assert local_hub.served_bytes(repo.repo_id).get(key, 0) == before, "its weights were not downloaded again"


def test_missing_config_json_says_missing(good, tmp_path):
    ck = _copy(good, tmp_path)
    (ck / "step1" / "config.json").unlink()
    res = quiet_scan(ck, tmp_path / "ds")
    msg = str(res.failed["step1"])
    assert msg.endswith(f"step1: config.json is missing from {ck / 'step1'} (every checkpoint folder needs the "
                        f"model's config.json)")
    (ck / "step1" / "config.json").write_text("{not json")
    assert "unreadable config.json" in str(quiet_scan(ck, tmp_path / "ds").failed["step1"])


def test_unreadable_config_json_beside_the_tokenizer_is_one_clear_error(good, tmp_path, capsys):
    """transformers reads the tokenizer folder's config.json too: damaged there, the scan stops with one line
    naming it, before anything is measured (not a traceback)."""
    from ckptgeo.sources.registry import open_source

    ck = _copy(good, tmp_path)
    folder = open_source(str(ck)).tokenizer_path()
    (folder / "config.json").write_text("{bad")
    assert main(["scan", str(ck), "--out", str(tmp_path / "ds"), "--suite", SUITE]) == CorruptCheckpointError.exit_code
    err = capsys.readouterr().err
    assert err.startswith(f"ckptgeo: error: cannot load the tokenizer from {folder}: ") and "Traceback" not in err
    assert "nothing was measured" in err


def test_a_cuda_device_that_is_not_here_is_one_clear_error(good, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    assert main(["scan", str(good), "--out", str(tmp_path / "ds"), "--suite", SUITE, "--device", "cuda"]) == 2
    assert "CUDA is not available here" in capsys.readouterr().err
    # a dry run still prints the plan, and says that GPU-hours need a GPU (exit 0)
    assert main(["reproduce", "--preset", "paper", "--dry-run", "--device", "cuda", "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "preset paper" in out and "GPU-hours need a GPU: CUDA is not available here" in out
    assert "measuring steps per second" not in out


@pytest.mark.parametrize("argv,flag", [(["--n-samples", "1"], "--n-samples 1 is not valid: "),
                                       (["--batch-size", "0"], "--batch-size 0 is not valid: "),
                                       (["--prefetch", "-1"], "--prefetch -1 is not valid: "),
                                       (["--revisions", "every-0"], "--revisions every-0 is not valid: ")])
def test_scan_errors_name_the_flag(good, tmp_path, capsys, argv, flag):
    assert main(["scan", str(good), "--out", str(tmp_path / "ds"), "--suite", SUITE, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ckptgeo: error: {flag}")
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("typo,form", [("evry-10", "every-10"), ("every10", "every-10"), ("last", "final"),
                                       ("latest", "final"), ("al", "all"), ("lgo", "log")])
def test_selector_typos_suggest_the_form(typo, form):
    revs = [Revision(s, f"step{s}") for s in (0, 10, 20)]
    with pytest.raises(RevisionNotFoundError) as info:
        select_revisions(revs, typo, source="ck")
    msg = str(info.value)
    assert f"Did you mean the selector {form!r}?" in msg
    assert "(selectors: all, every-N, log, A:B, A:B:N, main, final, genuine, STAGE:SEL, or names/steps" in msg
    assert select_revisions(revs, form)   # the suggested form itself is a valid selector


def test_a_step_typo_gets_the_closest_steps_not_a_form():
    revs = [Revision(s, f"step{s}") for s in (0, 10, 20)]
    with pytest.raises(RevisionNotFoundError) as info:
        select_revisions(revs, "step11", source="ck")
    assert "closest existing: step10, step20, step0." in str(info.value) and "Did you mean" not in str(info.value)


def test_submit_refuses_an_out_path_with_blanks_before_anything_is_submitted(good, tmp_path, capsys):
    """Slurm splits #SBATCH lines at blanks; a path with one would send the logs somewhere else."""
    out = tmp_path / "my results"
    assert main(["submit", "--dry-run", "scan", str(good), "--suite", str(SUITE), "--out", str(out)]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and "cannot hold a path with blanks or quotes" in cap.err and repr(str(out)) in cap.err
    assert not out.exists()
    ok = tmp_path / "results"
    assert main(["submit", "--dry-run", "scan", str(good), "--suite", str(SUITE), "--out", str(ok)]) == 0
    assert f"#SBATCH --output={tmp_path / 'results'}/slurm/logs/%A_%a.out" in capsys.readouterr().out


def test_a_misspelled_suite_is_answered_before_the_hub_and_before_torch(tmp_path):
    """``scan REPO --suite logik --dry-run``: the did-you-mean comes before any request (HF_ENDPOINT points at a
    closed port: a request would show as a retry warning) and without importing torch or transformers."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; from ckptgeo.cli import main; "
            "rc = main(['scan', 'EleutherAI/pythia-160m', '--suite', 'logik', '--dry-run']); "
            "print('heavy:', sorted(m for m in ('torch', 'transformers') if m in sys.modules), 'rc:', rc)")
    env = {**os.environ, "HF_ENDPOINT": "http://127.0.0.1:9", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("HF_HUB_OFFLINE", None)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)
    assert "heavy: [] rc: 2" in done.stdout, done.stdout + done.stderr
    assert "Did you mean: logic?" in done.stderr and "listing branches" not in done.stderr, done.stderr


def test_a_misspelled_repo_is_answered_before_torch(local_hub, tmp_path):
    """A repo the (loopback) Hub does not have is refused after one listing, before the measures import torch."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys; from ckptgeo.cli import main; "
            f"rc = main(['scan', '{local_hub.repo_id}-typo', '--suite', 'logic', '--dry-run']); "
            "print('heavy:', sorted(m for m in ('torch', 'transformers') if m in sys.modules), 'rc:', rc)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)
    assert "heavy: [] rc: 3" in done.stdout, done.stdout + done.stderr
    assert f"Repository '{local_hub.repo_id}-typo' does not exist" in done.stderr, done.stderr


def test_a_mistyped_run_folder_is_said_not_to_exist(tmp_path, capsys):
    from ckptgeo.cli import main

    (tmp_path / "runs").mkdir()
    assert main(["scan", str(tmp_path / "runs" / "addition-L1"), "--dry-run"]) == 3   # SourceNotFoundError
    err = capsys.readouterr().err
    assert f"{tmp_path / 'runs' / 'addition-L1'} does not exist (a mistyped folder?)" in err, err


def test_refusals_come_before_any_work(good, tmp_path, capsys):
    """Issue 45 item 10: each of these ran (or trained, or planned) before refusing, or answered the wrong error."""
    import torch

    # claims --calibrate -1 ran the whole table and exited 0
    assert main(["claims", str(tmp_path / "nodata"), "--calibrate", "-1"]) == 2
    assert "The 'calibrate' parameter of claims must be an int in [0, inf). Got -1." in capsys.readouterr().err
    # a garbled every-N is not "not found ... closest existing: (none)"
    assert main(["scan", str(good), "--out", str(tmp_path / "ds"), "--suite", SUITE, "--revisions",
                 "every-1000x", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "'every-1000x' is not a valid selector" in err and "did you mean 'every-1000'" in err
    assert "closest existing" not in err
    # train --forecast-from MISSING trained and wrote step0 before refusing
    out = tmp_path / "run"
    code = main(["train", "--task", "copy", "--level", "1", "--size", "tiny", "--steps", "4", "--warmup", "1",
                 "--checkpoints", "2", "--heldout", "8", "--monitor", "2", "--forecast-from", str(tmp_path / "MISSING"),
                 "--out", str(out), "--device", "cpu"])
    assert code != 0 and "MISSING holds no behavior/ table" in capsys.readouterr().err
    assert not out.exists()
    if not torch.cuda.is_available():   # scan --device cuda --dry-run planned a GPU scan on a CPU-only machine
        assert main(["scan", str(good), "--out", str(tmp_path / "ds"), "--suite", SUITE, "--device", "cuda",
                     "--dry-run"]) == 2
        assert "CUDA is not available here" in capsys.readouterr().err
    assert not (tmp_path / "ds").exists()
