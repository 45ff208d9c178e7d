"""The thread rule: one helper chooses torch's CPU threads; scans and training runs record them."""

import json

import pytest
import torch

from ckptgeo._threads import SMALL_MODEL_PARAMETERS, default_threads, physical_cores, thread_record, torch_threads
from ckptgeo.errors import InvalidParameterError
from tests._checkpoints import SUITE, make_checkpoints


def test_rule_one_thread_below_the_threshold_else_the_physical_cores(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert default_threads(434_176) == 1
    assert default_threads(SMALL_MODEL_PARAMETERS - 1) == 1
    assert default_threads(SMALL_MODEL_PARAMETERS) == physical_cores()
    assert default_threads(None) == physical_cores()
    assert 1 <= physical_cores() <= (torch.get_num_threads() + 256)


def test_rule_divides_the_cores_among_the_processes_a_launcher_started_on_the_node(monkeypatch):
    # torchrun --nproc_per_node N sets LOCAL_WORLD_SIZE=N: each process gets its share of the cores
    monkeypatch.setattr("ckptgeo._threads.physical_cores", lambda: 8)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert default_threads(SMALL_MODEL_PARAMETERS) == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "16")
    assert default_threads(SMALL_MODEL_PARAMETERS) == 1
    assert default_threads(434_176) == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "junk")
    assert default_threads(SMALL_MODEL_PARAMETERS) == 8


def test_torch_threads_sets_then_restores_and_override_wins():
    before = torch.get_num_threads()
    with torch_threads(100) as n:
        assert n == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with torch_threads(100, threads=2) as n:
        assert n == 2 and torch.get_num_threads() == 2
    assert torch.get_num_threads() == before
    with pytest.raises(InvalidParameterError, match="'threads'.*Got 0"):
        with torch_threads(100, threads=0):
            pass


def test_record_names_threads_and_deterministic_settings():
    with torch_threads(100):
        rec = thread_record("default rule")
    assert rec["threads"] == 1 and rec["threads_from"] == "default rule"
    assert rec["deterministic_algorithms"] is torch.are_deterministic_algorithms_enabled()
    assert {"interop_threads", "cudnn_deterministic", "cudnn_benchmark", "physical_cores"} <= set(rec)


def test_scan_runs_record_their_threads(tmp_path):
    from ckptgeo.engine.scan import scan

    ck = make_checkpoints(tmp_path / "ck", steps=(0, 1))
    before = torch.get_num_threads()
    res = scan(ck, out=tmp_path / "a", suites=(SUITE,), n_samples=8)
    run = json.loads((tmp_path / "a" / "runs" / f"{res.config_hash}.json").read_text())
    assert run["runtime"]["threads"] == 1 and run["runtime"]["threads_from"] == "default rule"
    assert "deterministic_algorithms" in run["runtime"]
    assert torch.get_num_threads() == before
    res2 = scan(ck, out=tmp_path / "b", suites=(SUITE,), n_samples=8, threads=2)
    assert res2.config_hash == res.config_hash  # threads do not key resume
    run2 = json.loads((tmp_path / "b" / "runs" / f"{res2.config_hash}.json").read_text())
    assert run2["runtime"]["threads"] == 2 and run2["runtime"]["threads_from"] == "threads"


def test_training_manifest_records_threads_per_start(tmp_path):
    from ckptgeo.training.trainer import TrainConfig, train

    cfg = TrainConfig(tasks=("copy",), levels=(1,), out=str(tmp_path / "run"), n_steps=2, batch_size=4,
                      warmup_steps=1, n_checkpoints=2, n_heldout=8, device="cpu")
    train(cfg)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert [r["threads"] for r in manifest["runtime"]] == [1]
    assert manifest["runtime"][0]["from_step"] == 0 and "deterministic_algorithms" in manifest["runtime"][0]
    with pytest.raises(InvalidParameterError, match="threads"):
        train(TrainConfig(tasks=("copy",), levels=(1,), out=str(tmp_path / "r2"), n_steps=2, warmup_steps=1,
                          threads=-1))


def test_reproduce_threads_reach_the_training_runs():
    # `reproduce --threads N` is every run's and scan's count, not torch's count at the start (a 10.8M model
    # under the rule would otherwise take its own share of the cores)
    from ckptgeo.studies.plan import StudyRun, train_template
    from ckptgeo.studies.presets import get_preset

    run = StudyRun("copy", 1, "small", 0, 10, None, ())
    assert train_template(run, get_preset("cpu"), "cpu", threads=1).threads == 1
    assert train_template(run, get_preset("cpu"), "cpu").threads is None


_FORWARDS = """
import resource, sys, torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
from ckptgeo._threads import tune_allocator
assert sys.argv[1] == "plain" or tune_allocator() is True
torch.manual_seed(0)
torch.set_num_threads(1)
cfg = GPTNeoXConfig(vocab_size=50304, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=256)
model = GPTNeoXForCausalLM(cfg).eval()
x = torch.randint(0, 50000, (16, 64))
with torch.no_grad():
    model(x, output_hidden_states=True)
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(4):
        model(x, output_hidden_states=True)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


def test_memory_forwards_free_is_reused_without_page_faults():
    """Four forward passes after a first (a 50k-vocabulary GPT-NeoX, batch 16 x 64 tokens: 206 MB of logits a
    pass): with tune_allocator the memory a pass frees is reused by the next; without it glibc unmaps every large
    block at free and the kernel faults fresh pages in again (201,349 page faults against 50,305 here). Each in
    its own process, since mallopt lasts for the process. A single block freed and allocated again is no test:
    a small allocation between the two can split the hole, and the next block then comes from fresh memory."""
    import platform
    import subprocess
    import sys

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt is glibc's")
    faults = {how: int(subprocess.run([sys.executable, "-c", _FORWARDS, how], capture_output=True, text=True,
                                      check=True).stdout.split()[-1]) for how in ("plain", "tuned")}
    assert faults["tuned"] < faults["plain"] / 2, faults


def test_import_ckptgeo_lets_idle_openmp_threads_sleep_unless_the_user_chose():
    """libgomp reads OMP_WAIT_POLICY once, when torch loads it: ``import ckptgeo`` sets PASSIVE first, and keeps
    a value the user set."""
    import os
    import subprocess
    import sys

    code = "import os, ckptgeo, torch; print(os.environ['OMP_WAIT_POLICY'])"
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "PASSIVE"
    out = subprocess.run([sys.executable, "-c", code], env=dict(env, OMP_WAIT_POLICY="ACTIVE"), capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "ACTIVE"
