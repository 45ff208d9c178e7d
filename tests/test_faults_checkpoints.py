"""Bad checkpoints: each gives a clear error naming the revision (and file); with on_error="skip" the
other revisions complete and the bad one is recorded in ``revisions/``; a rerun retries it; with
``--on-error raise`` the CLI exits non-zero with a one-line message."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file, save_file

from ckptgeo.cli import main
from ckptgeo.errors import (ArchitectureMismatchError, CorruptCheckpointError, NonFiniteActivationsError)
from tests._checkpoints import SUITE, make_checkpoints, tiny_config
from tests._faults import quiet_scan


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return make_checkpoints(tmp_path_factory.mktemp("ck") / "tiny", steps=(0, 1, 2))


def _weights(folder: Path) -> Path:
    return folder / "model.safetensors"


def _edit_tensors(folder: Path, fn) -> None:
    state = load_file(str(_weights(folder)))
    fn(state)
    save_file(state, str(_weights(folder)), metadata={"format": "pt"})


def _other_arch(folder: Path, **overrides) -> None:
    from transformers import GPTNeoXForCausalLM

    shutil.rmtree(folder)
    torch.manual_seed(7)
    GPTNeoXForCausalLM(tiny_config(**overrides)).save_pretrained(folder)


def _truncate(f):
    data = _weights(f).read_bytes()
    _weights(f).write_bytes(data[: len(data) // 2])


def _garble(f):  # same length, header overwritten
    data = bytearray(_weights(f).read_bytes())
    data[:64] = b"\xff" * 64
    _weights(f).write_bytes(bytes(data))


def _sharded_missing(f):
    from transformers import GPTNeoXForCausalLM

    model = GPTNeoXForCausalLM.from_pretrained(f)
    shutil.rmtree(f)
    model.save_pretrained(f, max_shard_size="60KB")
    shards = sorted(f.glob("model-*.safetensors"))
    assert len(shards) >= 2
    shards[-1].unlink()


def _big_mlp(state):  # finite weights whose activations overflow to inf
    for key in state:
        if key.startswith("gpt_neox.layers.0.mlp.dense_") and key.endswith("weight"):
            state[key] = torch.full_like(state[key], 1e30)


def _set_first(value):
    def fn(state):
        key = "gpt_neox.layers.1.attention.dense.weight"
        state[key] = state[key].clone()
        state[key][0, 0] = value
    return fn


# name -> (damage(folder of step1), error class, words the message must hold besides "step1")
CASES = {
    "truncated": (_truncate, CorruptCheckpointError, ["model.safetensors", "truncated"]),
    "corrupt": (_garble, CorruptCheckpointError, ["model.safetensors"]),
    "missing-file": (lambda f: _weights(f).unlink(), CorruptCheckpointError, ["no weight file"]),
    "missing-shard": (_sharded_missing, CorruptCheckpointError, ["model-0000", "missing"]),
    "bad-config": (lambda f: (f / "config.json").write_text("{not json"), CorruptCheckpointError, ["config.json"]),
    "other-hidden-size": (lambda f: _other_arch(f, hidden_size=64, intermediate_size=128),
                          ArchitectureMismatchError, ["hidden_size", "64", "32"]),
    "other-layer-count": (lambda f: _other_arch(f, num_hidden_layers=3), ArchitectureMismatchError,
                          ["num_hidden_layers", "3", "2"]),
    "nan-weight": (lambda f: _edit_tensors(f, _set_first(float("nan"))), CorruptCheckpointError,
                   ["gpt_neox.layers.1.attention.dense.weight", "NaN"]),
    "inf-weight": (lambda f: _edit_tensors(f, _set_first(float("inf"))), CorruptCheckpointError,
                   ["gpt_neox.layers.1.attention.dense.weight", "inf"]),
    "nan-activations": (lambda f: _edit_tensors(f, _big_mlp), NonFiniteActivationsError,
                        ["layer 1", "logical_deduction"]),
}


def _damaged(good: Path, tmp_path: Path, case: str, rev: str = "step1") -> Path:
    ck = tmp_path / "ck"
    shutil.copytree(good, ck)
    CASES[case][0](ck / rev)
    return ck


@pytest.mark.parametrize("case", list(CASES))
def test_bad_revision_is_skipped_recorded_and_named(case, good, tmp_path):
    ck = _damaged(good, tmp_path, case)
    out = tmp_path / "ds"
    res = quiet_scan(ck, out)
    assert res.measured == ["step0", "step2"]
    assert list(res.failed) == ["step1"]
    err_cls, words = CASES[case][1], CASES[case][2]
    msg = res.failed["step1"]
    assert msg.startswith(err_cls.__name__ + ": ") and "step1" in msg, msg
    for w in words:
        assert w in msg, (w, msg)
    rv = pd.read_parquet(out / "revisions").set_index("revision")
    assert rv.loc["step1", "status"] == "failed" and rv.loc["step1", "error"] == msg
    assert set(rv.status) == {"ok", "failed"}
    g = pd.read_parquet(out / "geometry")
    assert set(g.revision) == {"step0", "step2"} and len(g) == 2 * 3


@pytest.mark.parametrize("case", ["truncated", "other-layer-count", "nan-activations"])
def test_rerun_retries_the_failed_revision(case, good, tmp_path):
    ck = _damaged(good, tmp_path, case)
    out = tmp_path / "ds"
    quiet_scan(ck, out)
    again = quiet_scan(ck, out)  # still broken: retried, fails again, nothing else redone
    assert again.measured == [] and list(again.failed) == ["step1"] and again.skipped == ["step0", "step2"]
    shutil.rmtree(ck / "step1")
    shutil.copytree(good / "step1", ck / "step1")
    fixed = quiet_scan(ck, out)
    assert fixed.measured == ["step1"] and fixed.failed == {}
    rv = pd.read_parquet(out / "revisions")
    assert len(rv) == 3 and set(rv.status) == {"ok"}
    g = pd.read_parquet(out / "geometry")
    assert len(g) == 9 and not g.duplicated(["revision", "layer", "metric"]).any()


def test_bad_first_revision_does_not_poison_the_rest(good, tmp_path):
    ck = _damaged(good, tmp_path, "truncated", rev="step0")
    res = quiet_scan(ck, tmp_path / "ds")
    assert res.measured == ["step1", "step2"] and list(res.failed) == ["step0"]


@pytest.mark.parametrize("case", ["truncated", "missing-file", "other-hidden-size", "nan-weight",
                                  "nan-activations"])
def test_cli_on_error_raise_exits_with_one_line(case, good, tmp_path, capsys):
    ck = _damaged(good, tmp_path, case)
    out = tmp_path / "ds"
    code = main(["scan", str(ck), "--out", str(out), "--suite", SUITE, "--n-samples", "8",
                 "--revisions", "step0,step1,step2", "--on-error", "raise"])
    err_cls = CASES[case][1]
    assert code == err_cls.exit_code == 4
    lines = capsys.readouterr().err.strip().splitlines()
    error_lines = [ln for ln in lines if ln.startswith("ckptgeo: error:")]
    assert len(error_lines) == 1 and "step1" in error_lines[0]
    assert lines[-1] == "(set CKPTGEO_DEBUG=1 for the traceback)"
    assert not any("Traceback" in ln for ln in lines)
    rv = pd.read_parquet(out / "revisions").set_index("revision")
    assert rv.loc["step0", "status"] == "ok" and rv.loc["step1", "status"] == "failed"
    assert "step2" not in rv.index  # stopped at the first failure


def test_cli_on_error_skip_exits_1_and_lists_failures(good, tmp_path, capsys):
    ck = _damaged(good, tmp_path, "corrupt")
    code = main(["scan", str(ck), "--out", str(tmp_path / "ds"), "--suite", SUITE, "--n-samples", "8"])
    assert code == 1
    captured = capsys.readouterr()
    assert "measured 2, already done 0, failed 1" in captured.out
    assert (f"failed step1: CorruptCheckpointError: step1: weight file {ck / 'step1' / 'model.safetensors'} is damaged"
            in captured.err)


def test_shard_checks_architecture_against_the_first_selected_revision(good, tmp_path, monkeypatch):
    """Process 1 of 2 measures only step1; its architecture is still compared with step0's."""
    ck = _damaged(good, tmp_path, "other-hidden-size")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    res = quiet_scan(ck, tmp_path / "ds")
    assert res.measured == [] and list(res.failed) == ["step1"]
    assert "ArchitectureMismatchError" in res.failed["step1"] and "hidden_size" in res.failed["step1"]
