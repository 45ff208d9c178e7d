"""Untrusted inputs: no pickle code runs, no name from an input becomes a path outside ``--out``, nothing
ckptgeo did not write is deleted or adopted, and every bad input gets one line of error."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from ckptgeo.errors import CorruptCheckpointError, UnsafeFileError
from ckptgeo.training.trainer import TrainConfig, train


@pytest.fixture(autouse=True)
def one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _config(out, **kw) -> TrainConfig:
    base = dict(tasks=("copy",), levels=(1,), out=str(out), n_steps=2, batch_size=4, warmup_steps=1,
                n_checkpoints=3, n_heldout=8, device="cpu")
    base.update(kw)
    return TrainConfig(**base)


class _MakesFolder:
    """A pickle that, when loaded unsafely, runs ``os.mkdir(path)``."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return os.mkdir, (self.path,)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    return train(_config(tmp_path_factory.mktemp("run") / "run"))


def _unfinished_copy(run: Path, dest: Path) -> Path:
    """A copy of a finished run marked unfinished, as a run killed after step 1 looks (minus its state)."""
    import shutil

    shutil.copytree(run, dest)
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["complete"] = False
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


# ---------------------------------------------------------------------------------- 1. train_state.pt

def test_resuming_never_runs_the_pickle_in_train_state(finished_run, tmp_path, capsys):
    import torch

    from ckptgeo.cli import main

    out = _unfinished_copy(finished_run, tmp_path / "run")
    sentinel = tmp_path / "code-ran"
    torch.save({"step": 1, "optimizer": {}, "scheduler": {}, "x": _MakesFolder(sentinel)}, out / "train_state.pt")
    with pytest.raises(UnsafeFileError, match="cannot be loaded safely") as err:
        train(_config(out))
    assert not sentinel.exists() and err.value.path == str(out / "train_state.pt")
    assert "posix.mkdir" in str(err.value)
    rc = main(["train", "--task", "copy", "--steps", "2", "--batch-size", "4", "--warmup", "1",
               "--checkpoints", "3", "--heldout", "8", "--device", "cpu", "--out", str(out)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 4 and not sentinel.exists()
    assert lines[0].startswith(f"ckptgeo: error: {out / 'train_state.pt'} cannot be loaded safely"), lines
    assert "Traceback" not in "\n".join(lines) and len(lines) == 2, lines  # the error, then the debug hint


@pytest.mark.parametrize("content,match", [
    ({"step": 1, "optimizer": {}, "scheduler": {}}, "does not fit this run's optimiser"),  # was KeyError 'param_groups'
    ({"optimizer": {}}, "does not hold a step, an optimiser and a scheduler state"),
    ([1, 2, 3], "does not hold a step"),
    (b"not a torch file", "cannot be loaded safely"),  # the safe loader refuses it: say so
    ("truncated", "is damaged \\(truncated or corrupt"),
])
def test_a_foreign_train_state_is_a_one_line_error_naming_it(finished_run, tmp_path, content, match):
    import torch

    out = _unfinished_copy(finished_run, tmp_path / "run")
    if isinstance(content, bytes):
        (out / "train_state.pt").write_bytes(content)
    elif content == "truncated":
        torch.save({"step": 1, "t": torch.zeros(100)}, out / "train_state.pt")
        data = (out / "train_state.pt").read_bytes()
        (out / "train_state.pt").write_bytes(data[:len(data) // 2])
    else:
        torch.save(content, out / "train_state.pt")
    with pytest.raises(CorruptCheckpointError, match=match) as err:
        train(_config(out))
    assert err.value.path == str(out / "train_state.pt") and str(out / "train_state.pt") in str(err.value)
    assert "\n" not in str(err.value) and "new --out folder" in str(err.value)


def test_a_real_train_state_loads_under_the_safe_loader(tmp_path):
    """What ckptgeo writes (a step, AdamW's and LambdaLR's state) passes the weights-only loader."""
    import torch

    from ckptgeo._io import load_torch_safely
    from ckptgeo.training.trainer import _optimizer, _save_state

    model = torch.nn.Linear(3, 2)
    opt, sched = _optimizer(model, _config(tmp_path), torch)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    sched.step()
    _save_state(tmp_path / "train_state.pt", 1, opt, sched, torch)
    state = load_torch_safely(tmp_path / "train_state.pt")
    assert state["step"] == 1 and len(state["optimizer"]["param_groups"]) == 2
    assert state["scheduler"]["last_epoch"] == 1 and state["optimizer"]["state"][0]["exp_avg"].shape == (2, 3)
