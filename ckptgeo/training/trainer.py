"""Train small GPT-NeoX decoders on the algorithmic tasks, writing a dense checkpoint suite.

A run folder, as :func:`train` writes it::

    OUT/
    ├── ckptgeo-run.json         written first, into a new or empty folder: marks the folder as ckptgeo's
    ├── manifest.json            tasks, levels, size, seed, schedule, recipe (lr, horizon, steps, threads,
    │                            tokens_per_step), versions, accuracy history;
    │                            "complete": true once the last checkpoint is written
    ├── suites/
    │   └── modular-L1.jsonl     held-out items: a suite_header line, then 200 generation items
    ├── step0/                   the initial weights (before any update)
    │   ├── config.json
    │   ├── model.safetensors
    │   ├── tokenizer.json
    │   └── tokenizer_config.json
    ├── step1/ ... step{N}/      one folder per step of the schedule, written atomically
    ├── train_state.pt           optimiser + scheduler at the newest checkpoint (removed when complete)
    └── monitor/                 with ``monitor=N``: a ckptgeo dataset of the live model's per-layer RankMe
                                 and accuracy every N steps (powers of two below N), as a scan writes it

``step{N}`` holds the weights after ``N`` optimiser updates. A grid folder
(:func:`ckptgeo.training.grid.train_grid`) holds one run folder per task, level, size and seed:
``OUT/<task>-L<level>-<size>-s<seed>/``.

Training items are drawn fresh for every batch from a generator seeded by ``(seed, step)``, never
repeating a held-out prompt; held-out items are drawn from their own seed. So a step's batch does not
depend on what ran before it, which makes resuming exact up to floating-point non-determinism.

Resuming: rerunning :func:`train` with the same settings (``out`` and ``device`` may differ) on a
folder it wrote returns at once if the run is complete; otherwise it reloads the newest checkpoint and
``train_state.pt`` (tensors and numbers only: no pickle code runs) and continues, skipping checkpoints
that exist. Other settings raise :class:`~ckptgeo.errors.RunMismatchError`; so does a non-empty folder
without ``ckptgeo-run.json`` (or, from before the marker existed, a ckptgeo manifest): ckptgeo never
trains into, resumes or cleans up a folder it did not make. A run killed mid-write leaves only hidden
``.<name>.tmp-<pid>-<8 hex>`` files or folders (:mod:`ckptgeo._io`); the next start removes those whose
``<name>`` is its own (``step{N}``, ``manifest.json``, ``train_state.pt``, ``ckptgeo-run.json``) and
nothing else.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import random
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ckptgeo._io import atomic_dir, atomic_path, atomic_write_text, load_torch_safely, temp_target
from ckptgeo._params import Interval, validate_params
from ckptgeo._threads import thread_record, torch_threads
from ckptgeo.errors import (CorruptCheckpointError, DiskSpaceError, InvalidParameterError, NonFiniteActivationsError,
                            RunMismatchError, UnsafeFileError)
from ckptgeo.suites.items import Item, write_jsonl
from ckptgeo.suites.tasks import get_level, heldout_items, sample, suite_header, suite_name
from ckptgeo.training.sizes import get_size

__all__ = ["TrainConfig", "train", "checkpoint_steps", "evaluate", "exact_match", "training_history", "run_name",
           "lr_factor", "tokens_per_step", "MANIFEST_NAME", "RUN_MARKER", "is_run_folder"]

logger = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
#: written first into the folder a run creates; only a folder holding it is resumed or cleaned up
RUN_MARKER = "ckptgeo-run.json"
_STATE_NAME = "train_state.pt"
_FORMAT = "ckptgeo-train"
_FORMAT_VERSION = 1
#: settings that may change between a run and its resumption (they do not change the weights).
_RESUME_FREE = frozenset({"out", "device", "monitor", "threads"})


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one training run.

    Attributes
    ----------
    tasks : tuple of str
        Tasks from :data:`ckptgeo.training.TASKS`; more than one trains a mixture (each item's task drawn
        uniformly).
    levels : tuple of int
        The level of each task (same length as ``tasks``).
    out : str
        The run folder.
    size : str, default="tiny"
        A name from :data:`ckptgeo.training.SIZES`.
    n_steps : int, default=1000
        Optimiser updates.
    seed : int, default=0
        Seeds the initial weights, the training items and the held-out items.
    batch_size : int, default=128
        Items per update.
    lr : float, default=1e-3
        Peak learning rate of AdamW.
    weight_decay : float, default=0.1
        AdamW's decoupled weight decay, on weight matrices and embeddings only (not biases or norms).
    warmup_steps : int, default=100
        Linear warm-up from 0 to ``lr``, then a cosine decay to ``min_lr_ratio * lr`` at the schedule's
        horizon.
    min_lr_ratio : float, default=0.1
        Learning rate at the horizon as a fraction of ``lr``.
    schedule_steps : int or None, default=None
        The cosine's horizon: the step at which the learning rate reaches ``min_lr_ratio * lr``. None:
        ``n_steps`` (the whole decay inside the run). A horizon past ``n_steps`` holds the learning rate
        near its peak through the run (the recipe of :data:`RECIPE`): at ``n_steps = horizon / 4`` it is
        still 0.87 of ``lr`` with ``min_lr_ratio=0.1``.
    grad_clip : float, default=1.0
        Maximum global gradient norm; 0 turns clipping off.
    n_checkpoints : int, default=100
        At most this many checkpoints, step 0 and ``n_steps`` included (see :func:`checkpoint_steps`).
    n_heldout : int, default=200
        Held-out evaluation items per task.
    device : str, default="auto"
        ``"auto"`` (``cuda:$LOCAL_RANK`` when CUDA is present, else ``cpu``), ``"cpu"``, ``"cuda"``,
        ``"cuda:1"`` ... On CUDA the forward pass runs under bf16 autocast; weights stay float32.
    monitor : int, default=0
        Measure the live model every ``monitor`` steps (step 0 and the powers of two below it too) with
        :class:`ckptgeo.monitor.Monitor`: per-layer RankMe and accuracy on the held-out items into
        ``OUT/monitor/`` (the rows ``ckptgeo scan OUT`` would write, no checkpoint needed), live events
        in the log and a live status in the progress bar. 0 turns it off. Free to change on resume.
    threads : int or None, default=None
        torch CPU threads; None = :func:`ckptgeo._threads.default_threads` of the model's size (1 below
        10M parameters). Results can differ in the last bits between thread counts, so the count and
        torch's deterministic settings are recorded in the manifest (``runtime``, one entry per start).
    """

    tasks: tuple[str, ...]
    levels: tuple[int, ...]
    out: str
    size: str = "tiny"
    n_steps: int = 1000
    seed: int = 0
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.1
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1
    grad_clip: float = 1.0
    n_checkpoints: int = 100
    n_heldout: int = 200
    device: str = "auto"
    monitor: int = 0
    threads: int | None = None
    schedule_steps: int | None = None

    @property
    def horizon(self) -> int:
        """The step at which the cosine reaches its floor (``schedule_steps``, or ``n_steps``)."""
        return self.n_steps if self.schedule_steps is None else self.schedule_steps

    _parameter_constraints = {
        "n_steps": [Interval(int, 1, None)],
        "seed": [Interval(int, 0, None)],
        "batch_size": [Interval(int, 1, None)],
        "lr": [Interval(float, 0, None, closed="neither")],
        "weight_decay": [Interval(float, 0, None)],
        "warmup_steps": [Interval(int, 0, None)],
        "min_lr_ratio": [Interval(float, 0, 1)],
        "grad_clip": [Interval(float, 0, None)],
        "n_checkpoints": [Interval(int, 2, None)],
        "n_heldout": [Interval(int, 1, None)],
        "monitor": [Interval(int, 0, None)],
        "threads": [Interval(int, 1, None), None],
    }


def _validate(config: TrainConfig) -> None:
    validate_params(config, owner="TrainConfig")
    if isinstance(config.tasks, str) or not config.tasks:
        raise InvalidParameterError(f"The 'tasks' parameter of TrainConfig must be a non-empty tuple of task "
                                    f"names. Got {config.tasks!r}.", name="tasks", value=config.tasks)
    if isinstance(config.levels, (int, str)) or len(config.levels) != len(config.tasks):
        raise InvalidParameterError(f"The 'levels' parameter of TrainConfig must give one level per task "
                                    f"({len(config.tasks)}). Got {config.levels!r}.", name="levels",
                                    value=config.levels)
    pairs = list(zip(config.tasks, config.levels))
    for task, level in pairs:
        get_level(task, level)
    if len(set(pairs)) != len(pairs):
        raise InvalidParameterError(f"Task levels repeat in {pairs}.", name="tasks", value=config.tasks)
    get_size(config.size)
    if config.schedule_steps is not None and (isinstance(config.schedule_steps, bool)
                                              or not isinstance(config.schedule_steps, int)
                                              or config.schedule_steps < config.warmup_steps):
        raise InvalidParameterError(f"The 'schedule_steps' parameter of TrainConfig must be None or an int >= "
                                    f"warmup_steps ({config.warmup_steps}). Got {config.schedule_steps!r}.",
                                    name="schedule_steps", value=config.schedule_steps)
    if config.warmup_steps > config.n_steps:
        raise InvalidParameterError(f"The 'warmup_steps' parameter ({config.warmup_steps}) exceeds 'n_steps' "
                                    f"({config.n_steps}).", name="warmup_steps", value=config.warmup_steps)


def checkpoint_steps(n_steps: int, n_checkpoints: int) -> tuple[int, ...]:
    """The checkpoint schedule: step 0, powers of two up to the regular interval, then every interval.

    The interval is the smallest one that keeps the count at or below ``n_checkpoints``; step 0 and
    ``n_steps`` are always in. With ``n_checkpoints > n_steps`` every step is a checkpoint.

    Parameters
    ----------
    n_steps : int
        Training steps (>= 1).
    n_checkpoints : int
        Largest number of checkpoints wanted (>= 2).

    Returns
    -------
    tuple of int
        Sorted steps, in optimiser updates.

    Raises
    ------
    InvalidParameterError
        ``n_steps < 1`` or ``n_checkpoints < 2``.

    Examples
    --------
    >>> checkpoint_steps(100, 12)
    (0, 1, 2, 4, 8, 15, 30, 45, 60, 75, 90, 100)
    >>> len(checkpoint_steps(1000, 100))
    96
    """
    if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 1:
        raise InvalidParameterError(f"The 'n_steps' parameter must be an int >= 1. Got {n_steps!r}.",
                                    name="n_steps", value=n_steps)
    if isinstance(n_checkpoints, bool) or not isinstance(n_checkpoints, int) or n_checkpoints < 2:
        raise InvalidParameterError(f"The 'n_checkpoints' parameter must be an int >= 2. Got {n_checkpoints!r}.",
                                    name="n_checkpoints", value=n_checkpoints)
    if n_checkpoints > n_steps:
        return tuple(range(n_steps + 1))
    for interval in range(1, n_steps + 1):
        steps = {0, n_steps, *range(interval, n_steps + 1, interval)}
        p = 1
        while p < interval:
            steps.add(p)
            p *= 2
        if len(steps) <= n_checkpoints:
            return tuple(sorted(steps))
    return (0, n_steps)  # pragma: no cover  (interval = n_steps always fits)


def run_name(task: str, level: int, size: str, seed: int) -> str:
    """The folder name of one grid run: ``"modular-L1-tiny-s0"``."""
    return f"{task}-L{level}-{size}-s{seed}"


# ----------------------------------------------------------------------------------------------- batches

class _Batcher:
    """Training batches: fresh items per step, seeded by (seed, step), held-out prompts excluded."""

    def __init__(self, config: TrainConfig, vocab: dict[str, int], pad_id: int, exclude: dict[str, frozenset]):
        self.config, self.vocab, self.pad_id, self.exclude = config, vocab, pad_id, exclude

    def items(self, step: int) -> list[Item]:
        rng = random.Random(f"{self.config.seed}:train:{step}")
        pairs = list(zip(self.config.tasks, self.config.levels))
        out = []
        while len(out) < self.config.batch_size:
            task, level = pairs[rng.randrange(len(pairs))]
            it = sample(task, level, rng)
            if it.prompt not in self.exclude[f"{task}-L{level}"]:
                out.append(it)
        return out

    def batch(self, step: int):
        import torch

        return _encode(self.items(step), self.vocab, self.pad_id, torch)


def _encode(items: Sequence[Item], vocab: dict[str, int], pad_id: int, torch):
    """(input_ids, attention_mask, target_mask), each (batch, length); right-padded.

    Word-level ids by whitespace split: the same ids the tokenizer gives (tested)."""
    rows, n_prompt = [], []
    for it in items:
        p = [vocab[t] for t in it.prompt.split()]
        rows.append(p + [vocab[t] for t in it.target.split()])
        n_prompt.append(len(p))
    length = max(len(r) for r in rows)
    ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), length), dtype=torch.long)
    target = torch.zeros((len(rows), length), dtype=torch.bool)
    for i, (r, n) in enumerate(zip(rows, n_prompt)):
        ids[i, :len(r)] = torch.tensor(r)
        attn[i, :len(r)] = 1
        target[i, n:len(r)] = True
    return ids, attn, target


def _answer_loss(logits, ids, target, torch):
    """Mean cross-entropy over answer tokens: the logits at position t predict token t + 1."""
    mask = target[:, 1:]
    return torch.nn.functional.cross_entropy(logits[:, :-1][mask].float(), ids[:, 1:][mask])


# ---------------------------------------------------------------------------------------------- evaluation

def exact_match(model, tokenizer, items: Sequence[Item], *, batch_size: int = 256):
    """Per-item exact match of the greedy answer, by one teacher-forced forward pass
    (:func:`ckptgeo.engine.forward.run_suite`, as ``ckptgeo scan`` scores generation items).

    Greedy decoding reproduces the target exactly iff at every target position the arg-max next
    token, given the prompt and the target's own prefix, is the target token; so one forward pass over
    ``prompt + target`` decides it (ties broken toward the lower id, as ``argmax`` does).

    Parameters
    ----------
    model : transformers causal LM
        Evaluated in ``eval`` mode (its mode is restored afterwards), without gradients.
    tokenizer : transformers tokenizer
        Must satisfy ``tokenize(prompt + target) == tokenize(prompt) + tokenize(target)``.
    items : sequence of Item
        Generation items (``prompt``, ``target``).
    batch_size : int, default=256
        Items per forward pass.

    Returns
    -------
    ndarray of shape (n_items,)
        1.0 where the greedy answer equals the target, else 0.0.

    Raises
    ------
    InvalidParameterError
        An item is not a generation item.
    """
    import numpy as np

    from ckptgeo.engine.forward import prepare_suite, run_suite
    from ckptgeo.suites.items import Suite

    for it in items:
        if it.kind != "generation":
            raise InvalidParameterError(f"exact_match scores generation items; item {it.id!r} is {it.kind}.",
                                        name="items", value=it.id)
    if not items:
        return np.zeros(0)
    was_training = model.training
    model.eval()
    try:
        # the scan's own scoring (ckptgeo.engine.forward), so training and scans count exact match alike
        prepared = prepare_suite(Suite("exact_match", tuple(items)), tokenizer, n_samples=None)
        return run_suite(model, prepared, batch_size=batch_size, device=next(model.parameters()).device,
                         with_probes=False).correct
    finally:
        model.train(was_training)


def evaluate(model, tokenizer, items: Sequence[Item], *, batch_size: int = 256) -> float:
    """Greedy exact-match accuracy of ``model`` on generation ``items`` (see :func:`exact_match`).

    Returns
    -------
    float
        Fraction of items answered exactly, in [0, 1]; NaN for no items.
    """
    scores = exact_match(model, tokenizer, items, batch_size=batch_size)
    return float(scores.mean()) if len(scores) else float("nan")


# ------------------------------------------------------------------------------------------------ files

def _write_manifest(out: Path, record: dict) -> None:
    atomic_write_text(out / MANIFEST_NAME, json.dumps(record, indent=1))


def _save_checkpoint(model, tokenizer, out: Path, step: int) -> Path:
    """Write ``out/step{step}`` via a hidden temporary folder and ``os.replace``; skip if it exists."""
    final = out / f"step{step}"
    if final.is_dir():
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


_STATE_ADVICE = "it is not a training state ckptgeo wrote for this run; train into a new --out folder"


def _load_state(path: Path) -> dict:
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
                                     f"{_STATE_ADVICE}", path=str(path)) from None
    step = state.get("step") if isinstance(state, dict) else None
    if (isinstance(step, bool) or not isinstance(step, int) or step < 0
            or not all(isinstance(state.get(k), dict) for k in ("optimizer", "scheduler"))):
        raise CorruptCheckpointError(f"{path} does not hold a step, an optimiser and a scheduler state; "
                                     f"{_STATE_ADVICE}", path=str(path))
    return state


def _save_state(path: Path, step: int, optimizer, scheduler, torch) -> None:
    with atomic_path(path) as tmp:
        torch.save({"step": step, "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, tmp)


def _versions() -> dict:
    import tokenizers
    import torch
    import transformers

    from ckptgeo import __version__

    return {"ckptgeo": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "python": sys.version.split()[0]}


def _settings(config: TrainConfig) -> dict:
    d = dataclasses.asdict(config)
    d["tasks"], d["levels"] = list(config.tasks), list(config.levels)
    return d


def _own_file(name: str | None) -> bool:
    """Whether ``name`` is a file or folder a run writes directly in its folder."""
    return name is not None and (name in (MANIFEST_NAME, _STATE_NAME, RUN_MARKER)
                                 or re.fullmatch(r"step\d+", name) is not None)


def _read_manifest(path: Path) -> dict | None:
    """The JSON object in ``path``, or None when it is missing, unreadable or not an object."""
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def is_run_folder(out: str | Path) -> bool:
    """Whether ``out`` is a run folder ckptgeo made: it holds ``ckptgeo-run.json``, or (a run from before the
    marker existed) a ``manifest.json`` of format ``ckptgeo-train``."""
    out = Path(out)
    if (out / RUN_MARKER).is_file():
        return True
    legacy = _read_manifest(out / MANIFEST_NAME) if (out / MANIFEST_NAME).is_file() else None
    return legacy is not None and legacy.get("format") == _FORMAT


def _check_out(out: Path, config: TrainConfig) -> dict | None:
    """The existing manifest of a resumable run in ``out``, None for a fresh folder; raise on conflict."""
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
    manifest = _read_manifest(manifest_path)
    if manifest is None:
        raise RunMismatchError(f"{manifest_path} is unreadable (not a JSON object); restore it or train into a new "
                               f"--out folder.", path=str(out))
    # a setting an older manifest does not record had its default then (e.g. schedule_steps: None)
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.default is not dataclasses.MISSING}
    recorded, wanted = {**defaults, **manifest.get("config", {})}, _settings(config)
    diffs = tuple((k, recorded.get(k), v) for k, v in wanted.items()
                  if k not in _RESUME_FREE and recorded.get(k) != v)
    if manifest.get("format") != _FORMAT or diffs:
        shown = "; ".join(f"{k}: recorded {a!r}, asked {b!r}" for k, a, b in diffs) or "not a ckptgeo-train manifest"
        raise RunMismatchError(f"{out} holds a training run with other settings ({shown}). Use another --out "
                               f"folder, or rerun with the recorded settings to resume.", path=str(out),
                               differences=diffs)
    return manifest


def _check_disk(out: Path, n_parameters: int, n_checkpoints: int) -> None:
    needed = n_parameters * 4 * (n_checkpoints + 3)  # float32 weights per checkpoint + optimiser state
    free = shutil.disk_usage(out).free
    if needed > free:
        raise DiskSpaceError(f"Training needs about {needed / 1e6:.0f} MB in {out} ({n_checkpoints} checkpoints of "
                             f"{n_parameters * 4 / 1e6:.1f} MB) but {free / 1e6:.0f} MB are free. Lower "
                             f"--checkpoints or free space.", needed=needed, available=free)


def _resolve_device(name: str):
    import torch

    if name == "auto":
        if torch.cuda.is_available():
            return torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0')) % torch.cuda.device_count()}")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError) as err:
        raise InvalidParameterError(f"The 'device' parameter must be 'auto', 'cpu', 'cuda' or 'cuda:N'. Got "
                                    f"{name!r}.", name="device", value=name) from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InvalidParameterError(f"Device {name!r} was asked for but CUDA is not available here; use "
                                    f"--device cpu or auto.", name="device", value=name)
    return device


def _optimizer(model, config: TrainConfig, torch):
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=config.lr)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda step: lr_factor(config, step))


def lr_factor(config: TrainConfig, step: int) -> float:
    """The learning rate at ``step`` as a fraction of ``config.lr``: linear warm-up, then cosine to the horizon.

    Examples
    --------
    >>> c = TrainConfig(tasks=("copy",), levels=(1,), out="", n_steps=1000, warmup_steps=100)
    >>> round(lr_factor(c, 999), 3), round(lr_factor(dataclasses.replace(c, schedule_steps=4000), 999), 3)
    (0.1, 0.887)
    """
    warm, total, floor = config.warmup_steps, config.horizon, config.min_lr_ratio
    if warm and step < warm:
        return (step + 1) / warm
    progress = (step - warm) / max(1, total - warm)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def tokens_per_step(config: TrainConfig, heldout: dict[str, Sequence[Item]]) -> int:
    """Tokens of one optimiser step: ``batch_size`` x the mean sequence length (prompt + answer tokens) of
    the run's tasks, from their held-out items (exact for fixed-length task levels; the mean where the
    length is drawn from a range). Padding is not counted."""
    lengths = [len(it.prompt.split()) + len(it.target.split()) for items in heldout.values() for it in items]
    return int(round(config.batch_size * sum(lengths) / max(len(lengths), 1)))


def _recipe(config: TrainConfig, per_step: int, torch) -> dict:
    """What a reader of the manifest needs to redo the run's optimisation, in one place."""
    return {"optimizer": "AdamW", "lr": config.lr, "weight_decay": config.weight_decay,
            "batch_size": config.batch_size, "warmup_steps": config.warmup_steps,
            "schedule": "linear warm-up, then cosine to min_lr_ratio * lr at schedule_horizon",
            "schedule_horizon": config.horizon, "min_lr_ratio": config.min_lr_ratio, "n_steps": config.n_steps,
            "lr_at_last_step": config.lr * lr_factor(config, config.n_steps - 1), "grad_clip": config.grad_clip,
            "items": "fresh every batch, seeded by (seed, step); held-out prompts excluded",
            "tokens_per_step": per_step, "threads": torch.get_num_threads()}


# -------------------------------------------------------------------------------------------------- train

def train(config: TrainConfig) -> Path:
    """Train one model and write its checkpoint suite (layout in the module docstring).

    Parameters
    ----------
    config : TrainConfig
        The run's settings.

    Returns
    -------
    Path
        The run folder ``config.out``, with ``manifest.json`` marked ``"complete": true``.

    Raises
    ------
    InvalidParameterError
        A setting is out of range, or an unknown task, level, size or device.
    RunMismatchError
        ``config.out`` holds a run with other settings, or files that are not a run.
    DiskSpaceError
        The checkpoints would not fit on the disk.
    NonFiniteActivationsError
        The training loss became NaN or infinite (the step is named).

    Examples
    --------
    >>> import tempfile
    >>> cfg = TrainConfig(tasks=("copy",), levels=(1,), out=tempfile.mkdtemp(), n_steps=3, batch_size=4,
    ...                   warmup_steps=1, n_checkpoints=2, n_heldout=8, device="cpu")
    >>> sorted(p.name for p in train(cfg).glob("step*"))  # doctest: +SKIP
    ['step0', 'step3']
    """
    _validate(config)
    with torch_threads(get_size(config.size).n_parameters(), config.threads):
        return _train(config)


def _train(config: TrainConfig) -> Path:
    import torch
    from transformers import GPTNeoXForCausalLM

    from ckptgeo.training.sizes import build_config
    from ckptgeo.suites.vocab import build_tokenizer

    out = Path(config.out)
    manifest = _check_out(out, config)
    if manifest is not None and manifest.get("complete"):
        logger.info("%s is complete; nothing to do", out)
        return out
    out.mkdir(parents=True, exist_ok=True)
    if not (out / RUN_MARKER).is_file():
        atomic_write_text(out / RUN_MARKER, json.dumps({"format": _FORMAT, "writer": _versions()["ckptgeo"]}))
    for stale in out.iterdir():  # what a kill mid-write leaves: only the temporary names of ckptgeo's own files
        if _own_file(temp_target(stale.name)):
            shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
    device = _resolve_device(config.device)
    size = get_size(config.size)
    schedule = checkpoint_steps(config.n_steps, config.n_checkpoints)
    _check_disk(out, size.n_parameters(), len(schedule))

    tokenizer = build_tokenizer()
    heldout: dict[str, tuple[Item, ...]] = {}
    suites = {}
    for task, level in zip(config.tasks, config.levels):
        name = suite_name(task, level)
        heldout[name] = heldout_items(task, level, config.n_heldout, seed=config.seed)
        rel = f"suites/{name}.jsonl"
        if not (out / rel).is_file():
            write_jsonl(out / rel, heldout[name], header=suite_header(task, level, n_items=config.n_heldout))
        suites[name] = rel

    torch.manual_seed(config.seed)
    model = GPTNeoXForCausalLM(build_config(size, vocab_size=len(tokenizer)))
    history: list[dict] = list(manifest.get("history", [])) if manifest else []
    start, state = 0, None
    state_path = out / _STATE_NAME
    if manifest is not None and state_path.is_file():
        state = _load_state(state_path)
        if (out / f"step{state['step']}").is_dir():
            start = state["step"]
            try:
                model = GPTNeoXForCausalLM.from_pretrained(out / f"step{start}", use_safetensors=True)
            except (OSError, ValueError) as err:
                raise CorruptCheckpointError(f"cannot resume from {out / f'step{start}'} ({err}); restore it or "
                                             f"train into a new --out folder", path=str(out / f"step{start}")) from None
            history = [h for h in history if h["step"] <= start]
            logger.info("resuming %s from step %d", out, start)
        else:
            state = None
    model.to(device)
    model.train()
    optimizer, scheduler = _optimizer(model, config, torch)
    if state is not None:
        try:
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
        except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as err:
            raise CorruptCheckpointError(f"{state_path} does not fit this run's optimiser ({type(err).__name__}: "
                                         f"{err}); {_STATE_ADVICE}", path=str(state_path)) from None

    record = {
        "format": _FORMAT, "format_version": _FORMAT_VERSION, "complete": False, "config": _settings(config),
        "tasks": list(config.tasks), "levels": list(config.levels), "size": config.size, "seed": config.seed,
        "steps": config.n_steps, "schedule": list(schedule),
        "model": {"architecture": "GPTNeoXForCausalLM", "n_layers": size.n_layers, "d_model": size.d_model,
                  "n_heads": size.n_heads, "n_parameters": sum(p.numel() for p in model.parameters()),
                  "vocab_size": len(tokenizer)},
        "suites": suites, "chance": {n: suite_header(t, l)["chance"] for n, (t, l) in
                                     zip(suites, zip(config.tasks, config.levels))},
        "versions": _versions(), "device": str(device), "history": history,
        "runtime": [*(manifest or {}).get("runtime", []),
                    {**thread_record("threads" if config.threads else "default rule"), "from_step": start}],
        "recipe": _recipe(config, tokens_per_step(config, heldout), torch),
        "tokens_per_step": tokens_per_step(config, heldout),
    }
    _write_manifest(out, record)

    vocab = tokenizer.get_vocab()
    batcher = _Batcher(config, vocab, tokenizer.pad_token_id,
                       {n: frozenset(it.prompt for it in items) for n, items in heldout.items()})
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
                else contextlib.nullcontext())
    todo = set(schedule)
    clock = time.perf_counter()
    loss_sum = torch.zeros((), device=device)
    n_since = 0
    last_line = [clock, start]   # time and step of the last INFO progress line

    def checkpoint(step: int) -> None:
        nonlocal loss_sum, n_since
        _save_checkpoint(model, tokenizer, out, step)
        acc = {n: evaluate(model, tokenizer, items) for n, items in heldout.items()}
        mean_loss = float(loss_sum) / n_since if n_since else None
        history.append({"step": step, "loss": mean_loss, "lr": scheduler.get_last_lr()[0], "accuracy": acc,
                        "seconds": round(time.perf_counter() - clock, 3), "tokens": step * record["tokens_per_step"]})
        loss_sum, n_since = torch.zeros((), device=device), 0
        if step < config.n_steps:
            _save_state(state_path, step, optimizer, scheduler, torch)
        _write_manifest(out, record)
        now = time.perf_counter()
        due = (step in (start, config.n_steps) or now - last_line[0] >= PROGRESS_SECONDS
               or step - last_line[1] >= config.n_steps / PROGRESS_LINES)
        if due:
            last_line[:] = [now, step]
        logger.log(logging.INFO if due else logging.DEBUG, "%s", progress_line(
            out.name, step, config.n_steps, mean_loss, acc, now - clock, (step - start) / max(now - clock, 1e-9)))

    if start == 0 and 0 in todo and not any(h["step"] == 0 for h in history):
        checkpoint(0)
    from tqdm.auto import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    from ckptgeo.constants import NO_PROGRESS

    monitor = _monitor(config, out, suites, tokenizer)
    bar = tqdm(range(start + 1, config.n_steps + 1), desc=f"train {out.name}", unit="step", initial=start,
               total=config.n_steps, disable=NO_PROGRESS or None, dynamic_ncols=True)
    # the monitor's event lines go above the bar, not through it
    with logging_redirect_tqdm() if monitor is not None else contextlib.nullcontext():
        if monitor is not None and monitor.step(model, start) is not None:
            bar.set_postfix_str(monitor.status())
        for step in bar:
            ids, attn, target = (t.to(device) for t in batcher.batch(step))
            with autocast:
                logits = model(input_ids=ids, attention_mask=attn).logits
            loss = _answer_loss(logits, ids, target, torch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            scheduler.step()
            loss_sum += loss.detach()
            n_since += 1
            if step in todo:
                if not math.isfinite(float(loss_sum)):
                    raise NonFiniteActivationsError(f"Training loss is not finite at step {step} of {out}; lower "
                                                    f"--lr or raise --warmup.", revision=f"step{step}")
                checkpoint(step)
                if monitor is None:
                    bar.set_postfix_str("accuracy " + ", ".join(f"{v:.2f}" for v in history[-1]["accuracy"].values()))
            if monitor is not None and monitor.step(model, step) is not None:
                bar.set_postfix_str(monitor.status())
    bar.close()
    record["complete"] = True
    record["seconds"] = round(time.perf_counter() - clock, 3)
    _write_manifest(out, record)
    if state_path.exists():
        state_path.unlink()
    return out


#: a progress line goes to the log (INFO) at a checkpoint once this many seconds or 1/PROGRESS_LINES of the
#: steps have passed since the last one, and at the first and last step; the others are DEBUG
PROGRESS_SECONDS = 60.0
PROGRESS_LINES = 10


def progress_line(name: str, step: int, n_steps: int, loss: float | None, accuracy: dict[str, float],
                  elapsed: float, steps_per_second: float) -> str:
    """One line of training progress for a log: step, mean loss since the last checkpoint, held-out
    accuracy per suite, elapsed time and the estimated time left (at ``steps_per_second``).

    Examples
    --------
    >>> progress_line("run", 500, 1000, 0.8123, {"copy-L1": 0.25}, 30.0, 16.0)
    'train run: step 500/1000 (50%), loss 0.8123, held-out accuracy copy-L1 0.250, 30 s elapsed, ETA 31 s'
    """
    acc = ", ".join(f"{k} {v:.3f}" for k, v in accuracy.items())
    left = (n_steps - step) / steps_per_second if steps_per_second > 0 else math.inf
    return (f"train {name}: step {step}/{n_steps} ({100 * step / max(n_steps, 1):.0f}%), "
            f"loss {'-' if loss is None else f'{loss:.4f}'}, held-out accuracy {acc}, {_duration(elapsed)} elapsed, "
            f"ETA {_duration(left)}")


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = round(seconds)
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min {seconds % 60:02d} s"


def _monitor(config: TrainConfig, out: Path, suites: dict[str, str], tokenizer):
    """The live monitor of ``config.monitor`` (None when off): the run's held-out suite files, read as
    ``ckptgeo scan OUT`` reads them, so its rows carry the config hash of a default scan of OUT."""
    if not config.monitor:
        return None
    from ckptgeo.monitor.core import Monitor

    return Monitor(tokenizer, [str(out / rel) for rel in suites.values()], out / "monitor", schedule=config.monitor,
                   model_name=out.name)


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
