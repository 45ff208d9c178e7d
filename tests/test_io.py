"""Result files are written atomically with the user's umask (ckptgeo._io), and the locks between processes."""

import os
import stat
from pathlib import Path

import pytest

from ckptgeo._io import FileLock, atomic_dir, atomic_path, atomic_write_bytes


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_write_follows_the_umask_and_leaves_no_temp(tmp_path, umask_022):
    from safetensors.torch import save_file
    import torch

    with atomic_path(tmp_path / "t.safetensors") as tmp:
        save_file({"x": torch.zeros(2)}, str(tmp))  # safetensors alone makes 0600 files
    assert _mode(tmp_path / "t.safetensors") == 0o644, oct(_mode(tmp_path / "t.safetensors"))
    path = atomic_write_bytes(tmp_path / "sub" / "a.bin", b"abc")
    assert path.read_bytes() == b"abc" and _mode(path) == 0o644, oct(_mode(path))
    os.umask(0o077)
    assert _mode(atomic_write_bytes(tmp_path / "private.bin", b"x")) == 0o600
    with pytest.raises(RuntimeError, match="writer died"):
        with atomic_path(tmp_path / "sub" / "a.bin") as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("writer died")
    assert (tmp_path / "sub" / "a.bin").read_bytes() == b"abc"  # the old file stays whole
    assert sorted(p.name for p in (tmp_path / "sub").iterdir()) == ["a.bin"]


def test_atomic_dir_is_renamed_whole(tmp_path, umask_022):
    tmp_path = tmp_path / "run"
    with atomic_dir(tmp_path / "step3") as tmp:
        (tmp / "w.bin").write_bytes(b"w")
        assert not (tmp_path / "step3").exists()
    assert _mode(tmp_path / "step3") == 0o755 and _mode(tmp_path / "step3" / "w.bin") == 0o644
    with pytest.raises(KeyboardInterrupt):
        with atomic_dir(tmp_path / "step4") as tmp:
            (tmp / "w.bin").write_bytes(b"w")
            raise KeyboardInterrupt
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step3"]


def test_a_lock_is_exclusive_between_open_files(tmp_path):
    with FileLock(tmp_path / ".locks" / "x.lock"):
        with pytest.raises(BlockingIOError):
            FileLock(tmp_path / ".locks" / "x.lock", blocking=False)
    FileLock(tmp_path / ".locks" / "x.lock", blocking=False).close()


def test_result_files_are_created_0644_under_umask_022(tmp_path, umask_022):
    """Checkpoints, manifest, training state, Parquet parts, saved states, run records, events, summaries,
    figures and report.md of a real train -> scan -> report."""
    import torch

    from ckptgeo.analysis.report import write_report
    from ckptgeo.engine.scan import scan
    from ckptgeo.training.runfolder import save_state
    from ckptgeo.training.trainer import TrainConfig, train

    run = train(TrainConfig(tasks=("copy",), levels=(1,), out=str(tmp_path / "run"), n_steps=6, batch_size=8,
                            warmup_steps=2, n_checkpoints=4, n_heldout=16, device="cpu"))
    param = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.SGD([param], lr=0.1)
    save_state(run / "state_probe.pt", 1, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0), torch)
    out = tmp_path / "ds"
    scan(run, out=out, n_samples=16, save_states=True)
    report = write_report(out)
    files = [p for root in (run, out) for p in root.rglob("*") if p.is_file() and ".locks" not in p.parts]
    kinds = {p.suffix for p in files}
    assert {".safetensors", ".json", ".jsonl", ".pt", ".parquet", ".png", ".md"} <= kinds, kinds
    assert report in files and (run / "manifest.json") in files and any(p.parent.name == "figures" for p in files)
    wrong = {str(p.relative_to(tmp_path)): oct(_mode(p)) for p in files if _mode(p) != 0o644}
    assert not wrong, wrong
    folders = [p for root in (run, out) for p in root.rglob("*") if p.is_dir() and ".locks" not in p.parts]
    assert all(_mode(p) == 0o755 for p in folders), {str(p): oct(_mode(p)) for p in folders if _mode(p) != 0o755}
    assert not [p for p in files if ".tmp-" in p.name]
