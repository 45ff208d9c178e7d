"""A run folder's files: the marker, the manifest, the ``step{N}`` checkpoints, the training state; the
checks that decide whether a folder is resumed, refused or started afresh; and the recorded history.

Layout: :mod:`ckptgeo.training.trainer`. A ``step{N}`` folder counts as a checkpoint only when it holds
the weights file ckptgeo writes (:data:`WEIGHTS_NAMES`): checkpoints are written into a hidden temporary
folder and renamed, so a folder ckptgeo made always has them, and one without them is not ckptgeo's.
"""

from __future__ import annotations

import json
import queue
import re
import shutil
import sys
import threading
from pathlib import Path

from ckptgeo._io import atomic_dir, atomic_path, atomic_write_text, load_torch_safely, temp_target
from ckptgeo.errors import CorruptCheckpointError, DiskSpaceError, RunMismatchError, UnsafeFileError
from ckptgeo.training.config import TrainConfig, field_defaults, settings_record

__all__ = ["MANIFEST_NAME", "RUN_MARKER", "STATE_NAME", "WEIGHTS_NAMES", "FORMAT", "FORMAT_VERSION", "RESUME_FREE",
           "STATE_ADVICE", "run_name", "is_run_folder", "read_manifest", "write_manifest", "write_marker",
           "remove_stale", "check_out", "check_disk", "has_weights", "checkpoint_folders", "check_step_folders",
           "save_checkpoint", "load_state", "save_state", "versions", "own_file", "training_history",
           "BackgroundWriter"]

MANIFEST_NAME = "manifest.json"
#: written first into the folder a run creates; only a folder holding it is resumed or cleaned up
RUN_MARKER = "ckptgeo-run.json"
STATE_NAME = "train_state.pt"
#: the weights file of a checkpoint as ``save_pretrained`` writes it (one file, or the index of its shards)
WEIGHTS_NAMES = ("model.safetensors", "model.safetensors.index.json")
FORMAT = "ckptgeo-train"
FORMAT_VERSION = 1
#: settings that may change between a run and its resumption (they do not change the weights).
RESUME_FREE = frozenset({"out", "device", "monitor", "threads", "forecast_from"})
STATE_ADVICE = "it is not a training state ckptgeo wrote for this run; train into a new --out folder"
_STEP = re.compile(r"step(\d+)")


def run_name(task: str, level: int, size: str, seed: int) -> str:
    """The folder name of one grid run: ``"modular-L1-tiny-s0"``."""
    return f"{task}-L{level}-{size}-s{seed}"


def read_manifest(path: Path) -> dict | None:
    """The JSON object in ``path``, or None when it is missing, unreadable or not an object."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def write_manifest(out: Path, record: dict) -> None:
    """Write ``out/manifest.json`` atomically."""
    atomic_write_text(out / MANIFEST_NAME, json.dumps(record, indent=1))


def is_run_folder(out: str | Path) -> bool:
    """Whether ``out`` is a run folder ckptgeo made: it holds ``ckptgeo-run.json``, or (a run from before the
    marker existed) a ``manifest.json`` of format ``ckptgeo-train``."""
    out = Path(out)
    if (out / RUN_MARKER).is_file():
        return True
    legacy = read_manifest(out / MANIFEST_NAME) if (out / MANIFEST_NAME).is_file() else None
    return legacy is not None and legacy.get("format") == FORMAT


def own_file(name: str | None) -> bool:
    """Whether ``name`` is a file or folder a run writes directly in its folder."""
    return name is not None and (name in (MANIFEST_NAME, STATE_NAME, RUN_MARKER)
                                 or _STEP.fullmatch(name) is not None)


def write_marker(out: Path) -> None:
    """Create ``out`` and its ``ckptgeo-run.json`` unless it has one."""
    out.mkdir(parents=True, exist_ok=True)
    if not (out / RUN_MARKER).is_file():
        atomic_write_text(out / RUN_MARKER, json.dumps({"format": FORMAT, "writer": versions()["ckptgeo"]}))


def remove_stale(out: Path) -> None:
    """Remove what a kill mid-write leaves: only the temporary names of ckptgeo's own files."""
    for stale in out.iterdir():
        if own_file(temp_target(stale.name)):
            shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)


def check_out(out: Path, config: TrainConfig) -> dict | None:
    """The existing manifest of a resumable run in ``out``, None for a fresh folder.

    Raises
    ------
    RunMismatchError
        ``out`` is a file, a non-empty folder ckptgeo did not make, or a run with other settings, or its
        manifest is unreadable.
    """
    if out.exists() and not out.is_dir():
        raise RunMismatchError(f"{out} is a file, not a folder; choose another --out folder.", path=str(out))
    if not is_run_folder(out):
        if out.is_dir() and any(temp_target(p.name) != RUN_MARKER for p in out.iterdir()):
            raise RunMismatchError(f"{out} is not empty and was not made by ckptgeo train (no {RUN_MARKER}): not a "
                                   f"ckptgeo training run, and ckptgeo neither trains into nor cleans up a folder "
                                   f"it did not make. Choose an empty or new --out folder.", path=str(out))
        return None
    manifest_path = out / MANIFEST_NAME
    if not manifest_path.is_file():
        return None  # made by ckptgeo and stopped before its first manifest: started afresh
    manifest = read_manifest(manifest_path)
    if manifest is None:
        raise RunMismatchError(f"{manifest_path} is unreadable (not a JSON object); restore it or train into a new "
                               f"--out folder.", path=str(out))
    # a setting an older manifest does not record had its default then (e.g. schedule_steps: None)
    recorded, wanted = {**field_defaults(), **manifest.get("config", {})}, settings_record(config)
    diffs = tuple((k, recorded.get(k), v) for k, v in wanted.items()
                  if k not in RESUME_FREE and recorded.get(k) != v)
    if manifest.get("format") != FORMAT or diffs:
        shown = "; ".join(f"{k}: recorded {a!r}, asked {b!r}" for k, a, b in diffs) or "not a ckptgeo-train manifest"
        raise RunMismatchError(f"{out} holds a training run with other settings ({shown}). Use another --out "
                               f"folder, or rerun with the recorded settings to resume.", path=str(out),
                               differences=diffs)
    return manifest


def check_disk(out: Path, n_parameters: int, n_checkpoints: int) -> None:
    """Raise :class:`~ckptgeo.errors.DiskSpaceError` when ``n_checkpoints`` checkpoints of ``n_parameters``
    float32 weights (and the optimiser's state) would not fit in ``out``'s file system."""
    needed = n_parameters * 4 * (n_checkpoints + 3)  # float32 weights per checkpoint + optimiser state
    free = shutil.disk_usage(out).free
    if needed > free:
        raise DiskSpaceError(f"Training needs about {needed / 1e6:.0f} MB in {out} ({n_checkpoints} checkpoints of "
                             f"{n_parameters * 4 / 1e6:.1f} MB) but {free / 1e6:.0f} MB are free. Lower "
                             f"--checkpoints or free space.", needed=needed, available=free)


# ------------------------------------------------------------------------------------------ checkpoints

def has_weights(folder: Path) -> bool:
    """Whether ``folder`` holds a checkpoint's weights file (:data:`WEIGHTS_NAMES`)."""
    return any((folder / name).is_file() for name in WEIGHTS_NAMES)


def checkpoint_folders(out: Path) -> dict[int, Path]:
    """``{step: folder}`` of the ``step{N}`` folders of ``out`` that hold their weights, by step."""
    found = {int(m.group(1)): p for p in out.iterdir() if p.is_dir() and (m := _STEP.fullmatch(p.name))} \
        if out.is_dir() else {}
    return {s: found[s] for s in sorted(found) if has_weights(found[s])}


def check_step_folders(out: Path) -> None:
    """Refuse a run folder holding ``step{N}`` folders without weights: ckptgeo did not write them (it
    renames a checkpoint into place only once its weights are in it), so they are neither counted as
    checkpoints nor removed.

    Raises
    ------
    RunMismatchError
        Such folders exist (named, with what to do).
    """
    if not out.is_dir():
        return
    empty = sorted((p for p in out.iterdir() if p.is_dir() and _STEP.fullmatch(p.name) and not has_weights(p)),
                   key=lambda p: int(p.name[4:]))
    if empty:
        names = ", ".join(p.name for p in empty[:5]) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
        raise RunMismatchError(f"{out} holds step folders without {WEIGHTS_NAMES[0]} ({names}): not checkpoints "
                               f"ckptgeo wrote, so it neither counts nor deletes them. Move them out of the folder, "
                               f"or train into a new --out folder.", path=str(out))


def save_checkpoint(model, tokenizer, out: Path, step: int) -> Path:
    """Write ``out/step{step}`` via a hidden temporary folder and ``os.replace``; skip if it holds weights."""
    final = out / f"step{step}"
    if has_weights(final):
        return final
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # one bar per checkpoint would drown the log
    try:
        with atomic_dir(final) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    return final


class BackgroundWriter:
    """Runs a training run's writes (checkpoints, evaluation of a copy of the model, training state, manifest)
    in one background thread, strictly in the order they were submitted, so the steps go on meanwhile.

    The order keeps a killed run resumable as before: a checkpoint's folder is renamed into place before the
    training state that names it and before the manifest that records it. Each job gets its own snapshot of
    what it writes (the caller copies the weights and optimiser state first), so a later step never changes a
    file being written. The first error stops the jobs after it and is raised by the next :meth:`submit`,
    :meth:`wait` or :meth:`close`.
    """

    def __init__(self) -> None:
        self._jobs: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="ckptgeo-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                if self._error is None:
                    job[0](*job[1])
            except BaseException as err:  # raised in the training thread, not lost in this one
                self._error = err
            finally:
                self._jobs.task_done()

    def _raise(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def submit(self, fn, *args) -> None:
        """Queue ``fn(*args)`` after every job submitted before it."""
        self._raise()
        self._jobs.put((fn, args))

    def wait(self) -> None:
        """Block until every submitted job has run; raise the first error of one."""
        self._jobs.join()
        self._raise()

    def close(self) -> None:
        """Run what is queued, stop the thread, and raise the first error of a job."""
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join()
        self._raise()


def load_state(path: Path) -> dict:
    """The training state of ``path`` (``step``, AdamW's and LambdaLR's state dicts), read without running
    any pickle code (:func:`ckptgeo._io.load_torch_safely`).

    Raises
    ------
    UnsafeFileError
        The file's pickle asks for anything but tensors, numbers and containers.
    CorruptCheckpointError
        The file is truncated or corrupt, or does not hold those three entries.
    """
    try:
        state = load_torch_safely(path)
    except UnsafeFileError as err:
        raise UnsafeFileError(f"{err} It is not a training state ckptgeo wrote; train into a new --out folder.",
                              path=str(path)) from None
    except Exception as err:  # torch raises many types on a truncated or corrupt file
        raise CorruptCheckpointError(f"{path} is damaged (truncated or corrupt; {type(err).__name__}: {err}); "
                                     f"{STATE_ADVICE}", path=str(path)) from None
    step = state.get("step") if isinstance(state, dict) else None
    if (isinstance(step, bool) or not isinstance(step, int) or step < 0
            or not all(isinstance(state.get(k), dict) for k in ("optimizer", "scheduler"))):
        raise CorruptCheckpointError(f"{path} does not hold a step, an optimiser and a scheduler state; "
                                     f"{STATE_ADVICE}", path=str(path))
    return state


def save_state(path: Path, step: int, optimizer, scheduler, torch) -> None:
    """Write the training state (``step``, optimiser, scheduler) atomically to ``path``. ``optimizer`` and
    ``scheduler``: the objects, or snapshots of their ``state_dict()``."""
    state = {k: v.state_dict() if hasattr(v, "state_dict") else v
             for k, v in (("optimizer", optimizer), ("scheduler", scheduler))}
    with atomic_path(path) as tmp:
        torch.save({"step": step, **state}, tmp)


def versions() -> dict:
    """The versions of ckptgeo, torch, transformers, tokenizers and Python, as a manifest records them."""
    import tokenizers
    import torch
    import transformers

    from ckptgeo._version import __version__

    return {"ckptgeo": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "python": sys.version.split()[0]}


def training_history(out: str | Path):
    """The accuracy history a run recorded: one row per checkpoint and suite.

    Returns
    -------
    pandas.DataFrame
        Columns ``step``, ``suite``, ``accuracy``, ``loss`` (mean training loss on answer tokens since
        the previous checkpoint), ``lr``, ``seconds`` (training time so far).

    Raises
    ------
    RunMismatchError
        ``out`` holds no training manifest.
    """
    import pandas as pd

    path = Path(out) / MANIFEST_NAME
    if not path.is_file():
        raise RunMismatchError(f"{out} holds no {MANIFEST_NAME}; not a ckptgeo training run.", path=str(out))
    manifest = json.loads(path.read_text(encoding="utf-8"))
    rows = [{"step": h["step"], "suite": s, "accuracy": a, "loss": h["loss"], "lr": h["lr"], "seconds": h["seconds"]}
            for h in manifest["history"] for s, a in h["accuracy"].items()]
    return pd.DataFrame(rows, columns=["step", "suite", "accuracy", "loss", "lr", "seconds"])
