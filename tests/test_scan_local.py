"""Scans of a local folder of step{N} checkpoints: rows, resume, settings, sharding, duplicates, failures."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ckptgeo.errors import DatasetLayoutError, DuplicateWeightsWarning
from ckptgeo.engine.scan import plan_scan, scan
from ckptgeo.store.dataset import read_table
from ckptgeo.store.schemas import TIMING_COLUMNS
from tests._checkpoints import SUITE, make_checkpoints

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    return make_checkpoints(tmp_path_factory.mktemp("ck") / "tiny", duplicate={"step200": "step100"})


def run(ckpts, out, **kw):
    kw.setdefault("suites", (SUITE,))
    kw.setdefault("n_samples", 24)
    return scan(ckpts, out=out, **kw)


def test_rows_for_every_layer_and_revision_then_resume(ckpts, tmp_path):
    out = tmp_path / "ds"
    with pytest.warns(DuplicateWeightsWarning, match="step200 = step100"):
        res = run(ckpts, out)
    assert res.measured == ["step0", "step1", "step2", "step4", "step100", "step200"]
    g = pd.read_parquet(out / "geometry")
    assert len(g) == 6 * 3 and set(g.layer) == {0, 1, 2} and set(g.metric) == {"rankme"}
    assert g.groupby("revision").size().eq(3).all()
    assert (g.n_samples == 24).all() and (g.position == "last").all() and (~g.centered).all()
    assert (g.epsilon == 1e-7).all() and g.ckptgeo_version.notna().all()
    # layer 0 at the last prompt token: every prompt ends with "." -> one embedding row repeated
    assert g[g.layer == 0].value.max() == pytest.approx(1.0, abs=1e-3)
    b = pd.read_parquet(out / "behavior")
    assert set(b.metric) == {"accuracy", "accuracy_norm", "loss"} and (b.n_items == 24).all()
    assert b[b.metric == "accuracy"].chance.iloc[0] == pytest.approx(0.225397)   # logical_deduction header: 3, 5 or 7 choices
    rv = pd.read_parquet(out / "revisions").set_index("revision")
    assert rv.loc["step200", "duplicate_of"] == "step100" and pd.isna(rv.loc["step100", "duplicate_of"])
    assert len(rv.loc["step0", "sha256"][0]) == 64
    # rerun with the same settings: nothing measured, nothing added
    res2 = run(ckpts, out)
    assert res2.measured == [] and len(res2.skipped) == 6
    assert len(pd.read_parquet(out / "geometry")) == 18
    # other settings: new rows beside the old ones
    run(ckpts, out, revisions="step0,step1", centered=True)
    g2 = pd.read_parquet(out / "geometry")
    assert len(g2) == 18 + 6 and g2.config_hash.nunique() == 2
    assert not any(p.name.startswith(".") for p in (out / "geometry").iterdir())


@pytest.mark.slow
def test_two_processes_equal_one(ckpts, tmp_path):
    one = tmp_path / "one"
    run(ckpts, one, revisions="step0,step1,step2,step4,step100")
    two = tmp_path / "two"
    code = ("import sys; from ckptgeo.engine.scan import scan; "
            f"scan({str(ckpts)!r}, out={str(two)!r}, suites=({SUITE!r},), n_samples=24, "
            "revisions='step0,step1,step2,step4,step100')")
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT,
                              env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2", "CKPTGEO_NO_PROGRESS": "1"})
             for r in range(2)]
    assert [p.wait(300) for p in procs] == [0, 0]
    keys = {"geometry": ["revision", "layer"], "behavior": ["revision", "metric"], "revisions": ["revision"]}
    for table, key in keys.items():
        a, b = (pd.read_parquet(d / table).drop(columns=list(TIMING_COLUMNS), errors="ignore").sort_values(key)
                .reset_index(drop=True) for d in (one, two))
        pd.testing.assert_frame_equal(a, b)
    assert len(list((two / "revisions").glob("*.parquet"))) == 5


def test_failed_revision_is_recorded_and_retried(ckpts, tmp_path):
    import shutil

    bad = tmp_path / "ck"
    shutil.copytree(ckpts, bad)
    w = bad / "step2" / "model.safetensors"
    data = w.read_bytes()
    w.write_bytes(data[: len(data) // 2])
    out = tmp_path / "ds"
    res = run(bad, out, revisions="step1,step2,step4")
    assert res.measured == ["step1", "step4"] and "step2" in res.failed
    assert "model.safetensors" in res.failed["step2"] and "step2" in res.failed["step2"]
    rv = pd.read_parquet(out / "revisions").set_index("revision")
    assert rv.loc["step2", "status"] == "failed" and "CorruptCheckpointError" in rv.loc["step2", "error"]
    w.write_bytes(data)
    res = run(bad, out, revisions="step1,step2,step4")
    assert res.measured == ["step2"]
    rv = pd.read_parquet(out / "revisions")
    assert len(rv) == 3 and set(rv.status) == {"ok"}
    assert len(pd.read_parquet(out / "geometry")) == 9


def test_refuses_a_folder_that_is_not_a_dataset(ckpts, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(DatasetLayoutError, match="not a ckptgeo dataset"):
        run(ckpts, mine)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


def test_dry_run_plans_without_writing(ckpts, tmp_path):
    plan = plan_scan(ckpts, suites=(SUITE,), revisions="log", out=tmp_path / "x")
    assert [r.name for r in plan.todo] == ["step0", "step1", "step2", "step4"]
    assert "4 to measure" in plan.summary()
    assert not (tmp_path / "x").exists()


def test_max_disk_does_not_count_local_checkpoints(ckpts, tmp_path):
    # a local folder downloads nothing, so any budget suffices (the Hub case is in test_scan_hub)
    res = run(ckpts, tmp_path / "ds", revisions="step0", max_disk=1)
    assert res.measured == ["step0"]


def test_save_states(ckpts, tmp_path):
    from safetensors.torch import load_file

    run(ckpts, tmp_path / "ds", revisions="step4", save_states=True)
    files = list((tmp_path / "ds" / "states").rglob("*.safetensors"))
    assert len(files) == 1
    assert load_file(str(files[0]))["states"].shape == (3, 24, 32)


def test_weights_that_differ_from_the_announced_sha256_are_refused(ckpts, tmp_path):
    from ckptgeo.sources.protocol import WeightFile
    from ckptgeo.sources.local import LocalSource

    class Announcing(LocalSource):
        def weight_files(self, revision):
            return [WeightFile(f.name, f.size, "0" * 64) for f in super().weight_files(revision)]

    res = scan(Announcing(ckpts), out=tmp_path / "ds", revisions="step1", suites=(SUITE,), n_samples=8)
    assert res.measured == [] and "does not match the source's metadata" in res.failed["step1"]
    assert "CorruptCheckpointError" in res.failed["step1"]


def test_suite_the_tokenizer_cannot_read_is_refused_before_measuring(tmp_path):
    import torch
    from transformers import GPTNeoXForCausalLM

    from ckptgeo.errors import InvalidParameterError
    from ckptgeo.suites.vocab import build_tokenizer, vocab_size
    from tests._checkpoints import tiny_config

    root = tmp_path / "taskmodel"
    build_tokenizer().save_pretrained(root)
    torch.manual_seed(0)
    GPTNeoXForCausalLM(tiny_config(vocab_size=vocab_size())).save_pretrained(root / "step0")
    with pytest.raises(InvalidParameterError, match=r"logic.*% of its tokens are unknown"):
        scan(root, out=tmp_path / "ds", suites=("logic",), n_samples=20)
    assert not (tmp_path / "ds" / "revisions").exists()


def test_dry_run_without_out_sees_the_default_dataset_and_counts_only_the_selection(ckpts, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run(ckpts, None, revisions="step0,step1,step2")
    assert (tmp_path / "results" / "tiny" / "geometry").is_dir()
    plan = plan_scan(ckpts, suites=(SUITE,), n_samples=24, revisions="step1,step4")
    assert plan.done == ["step1"] and [r.name for r in plan.todo] == ["step4"]


@pytest.mark.parametrize("pattern,match", [("(", "not a valid regular expression"), (r"step\d+", "needs a group")])
def test_bad_step_pattern_is_a_clear_error(ckpts, tmp_path, pattern, match):
    from ckptgeo.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match=match):
        run(ckpts, tmp_path / "ds", step_pattern=pattern)


def test_mistyped_local_folder_is_not_sent_to_the_hub(tmp_path, monkeypatch):
    from ckptgeo.errors import SourceNotFoundError
    from ckptgeo.sources.registry import open_source

    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SourceNotFoundError, match="runs/nosuch does not exist \\(a mistyped folder\\?\\)"):
        open_source("runs/nosuch")


@pytest.mark.slow
def test_torchrun_splits_revisions_across_processes(ckpts, tmp_path):
    import shutil

    out = tmp_path / "ds"
    torchrun = shutil.which("torchrun") or pytest.skip("torchrun is not on PATH")
    proc = subprocess.run([torchrun, "--nproc_per_node", "2", "-m", "ckptgeo", "scan", str(ckpts), "--suite", SUITE,
                           "--n-samples", "16", "--out", str(out), "--threads", "1"], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "CKPTGEO_NO_PROGRESS": "1"}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("measured 3,") == 2, proc.stdout  # 6 revisions, 3 per process
    rv = pd.read_parquet(out / "revisions")
    assert sorted(rv.revision) == sorted(["step0", "step1", "step2", "step4", "step100", "step200"])
    assert rv.set_index("revision").loc["step200", "duplicate_of"] == "step100"


def test_trainer_output_dir_of_checkpoint_folders(ckpts, tmp_path):
    """A Trainer's output_dir (checkpoint-{N}/ folders) is walked with no --step-pattern."""
    import shutil

    root = tmp_path / "trainer-out"
    root.mkdir()
    for step in (0, 100):
        shutil.copytree(ckpts / f"step{step}", root / f"checkpoint-{step}")
    for f in ckpts.iterdir():  # the tokenizer files beside them
        if f.is_file():
            shutil.copy(f, root / f.name)
    (root / "runs").mkdir()  # TensorBoard logs: not a checkpoint
    res = run(root, tmp_path / "ds", n_samples=8)
    assert res.measured == ["checkpoint-0", "checkpoint-100"]
    g = pd.read_parquet(tmp_path / "ds" / "geometry")
    assert sorted(set(g.step)) == [0, 100]


def test_a_copied_study_folder_keeps_its_model_names_and_resumes(ckpts, tmp_path):
    """A study's runs/ beside its dataset/: sources.json stores them relative to the dataset, so a copy of the
    whole folder resumes under the same names instead of measuring every run again under new ones."""
    import json
    import shutil

    study = tmp_path / "study"
    shutil.copytree(ckpts, study / "runs" / "tiny")
    res = run(study / "runs" / "tiny", study / "dataset", revisions="step0,step1")
    assert res.model == "tiny" and res.measured == ["step0", "step1"]
    assert json.loads((study / "dataset" / "sources.json").read_text()) == {"tiny": "folder:../runs/tiny"}
    copy = tmp_path / "copy"
    shutil.copytree(study, copy)
    res2 = run(copy / "runs" / "tiny", copy / "dataset", revisions="step0,step1,step2")
    assert res2.model == "tiny" and res2.measured == ["step2"] and res2.skipped == ["step0", "step1"]
    # a folder outside the study is kept absolute (a dataset moved alone still names the same folder)
    outside = run(ckpts, copy / "dataset", revisions="step0")
    assert outside.model != "tiny" and outside.model.endswith("/tiny"), outside.model
    stored = json.loads((copy / "dataset" / "sources.json").read_text())
    assert stored["tiny"] == "folder:../runs/tiny" and stored[outside.model] == f"folder:{Path(ckpts).resolve()}"


def test_a_scan_resolves_its_own_trajectory_without_reading_other_models_parts(ckpts, tmp_path):
    # a study writes 81 runs into one dataset: each scan's finish must read its own model's parts only
    out = tmp_path / "ds"
    run(ckpts, out, revisions="step0")
    (out / "revisions" / "zz-other--step0--0123456789ab.parquet").write_bytes(b"not parquet")
    with pytest.warns(DuplicateWeightsWarning, match="step200 = step100"):
        res = run(ckpts, out, revisions="step100,step200")
    assert res.measured == ["step100", "step200"]
    with pytest.raises(DatasetLayoutError, match="zz-other--step0"):  # the whole table still names the file
        read_table(out, "revisions")
    rv = read_table(out, "revisions", model=ckpts.name).set_index("revision")
    assert rv.loc["step200", "duplicate_of"] == "step100" and len(rv) == 3


def test_a_trained_runs_seed_is_the_rows_run_seed(tmp_path):
    """A folder ``ckptgeo train`` wrote records its seed in manifest.json: every row's run_seed (was null,
    also for the demo's ``...-s0`` runs)."""
    import json

    from tests._checkpoints import make_checkpoints

    run = make_checkpoints(tmp_path / "copy-L1-tiny-s0", steps=(0, 1))
    (run / "manifest.json").write_text(json.dumps({"seed": 0, "tokens_per_step": 64}))
    scan(run, out=tmp_path / "ds", suites=(SUITE,), n_samples=8)
    for table in ("geometry", "behavior", "revisions"):
        assert read_table(tmp_path / "ds", table).run_seed.tolist() and \
            set(read_table(tmp_path / "ds", table).run_seed) == {0}, table


def test_the_hash_of_the_next_revision_runs_while_this_one_is_measured(ckpts, tmp_path, monkeypatch):
    """The sha256 check is off the critical path: revision i+1's files are hashed in the prefetch thread while
    revision i is measured. Ordering by events, not time: each measure waits (at most 20 s) for the next
    revision's hash to start; on the old code the hash of i+1 ran on the main thread after measure i returned, so
    every wait timed out. The check itself still runs on every file (byte-identical step200 is still a duplicate
    of step100 by its hash) and still refuses a wrong digest (test above)."""
    import threading

    import ckptgeo.engine.model as model_module
    import ckptgeo.engine.scan as scan_module

    order = ["step0", "step1", "step2"]
    started = {r: threading.Event() for r in order}
    hashed, seen = [], []
    real_hash, real_measure = model_module.sha256_file, scan_module.measure_revision

    def hashing(path, *a, **kw):
        rev = Path(path).parent.name
        hashed.append((rev, threading.current_thread() is threading.main_thread()))
        started[rev].set()
        return real_hash(path, *a, **kw)

    def measuring(*a, revision, **kw):
        nxt = order.index(revision) + 1
        if nxt < len(order):
            seen.append((revision, started[order[nxt]].wait(timeout=20)))
        return real_measure(*a, revision=revision, **kw)

    monkeypatch.setattr(model_module, "sha256_file", hashing)
    monkeypatch.setattr(scan_module, "measure_revision", measuring)
    res = run(ckpts, tmp_path / "ds", revisions="step0,step1,step2", prefetch=1)
    assert res.measured == order and not res.failed
    assert seen == [("step0", True), ("step1", True)], seen     # the next hash had started during each measure
    assert sorted(r for r, _ in hashed) == order and not any(main for _, main in hashed), hashed
    rv = pd.read_parquet(tmp_path / "ds" / "revisions").set_index("revision")
    for col in ("seconds_wait", "seconds_download", "seconds_verify", "seconds_load", "seconds_forward",
                "seconds_measure", "seconds_write"):
        assert (rv[col] >= 0).all(), (col, rv[col].tolist())
    assert (rv.seconds_forward <= rv.seconds_measure).all()
    assert set(res.seconds["step1"]) == set(scan_module.STAGES) | {"load_bytes"}
    assert rv.loc["step1", "sha256"][0] == real_hash(ckpts / "step1" / "model.safetensors")


def test_precision_bf16_is_opt_in_agrees_with_fp32_and_tf32_needs_cuda(ckpts, tmp_path):
    """``precision="bf16"`` runs the forward under bfloat16 autocast: other values than fp32's (so it ran), within
    2% relative on RankMe per layer (bfloat16's 8-bit mantissa; the 14m shape measured up to 2.2e-2, above the 1e-3
    docs/speed.md asks, which is why fp32 stays the default), accuracy within one item, a run of its own (config
    hash); fp32's hash is unchanged; tf32 off CUDA and bf16 over half-precision weights are refused."""
    from ckptgeo.errors import InvalidParameterError

    a = run(ckpts, tmp_path / "a", revisions="step4")
    b = run(ckpts, tmp_path / "b", revisions="step4", precision="bf16")
    assert a.config_hash != b.config_hash
    assert run(ckpts, tmp_path / "c", revisions="step4", precision="fp32").config_hash == a.config_hash
    ga, gb = (pd.read_parquet(o / "geometry").sort_values("layer").value.to_numpy() for o in (a.out, b.out))
    rel = abs(gb - ga) / ga
    assert 0 < rel.max() < 0.02, rel
    ba, bb = (pd.read_parquet(o / "behavior").set_index("metric") for o in (a.out, b.out))
    assert abs(ba.loc["accuracy", "value"] - bb.loc["accuracy", "value"]) * ba.loc["accuracy", "n_items"] <= 1
    with pytest.raises(InvalidParameterError, match="tf32 runs float32 products on a CUDA"):
        run(ckpts, tmp_path / "d", revisions="step4", precision="tf32")
    with pytest.raises(InvalidParameterError, match="precision"):
        run(ckpts, tmp_path / "e", revisions="step4", precision="bf16", dtype="float64")
