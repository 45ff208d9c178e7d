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

The modules: :mod:`~ckptgeo.training.config` (:class:`TrainConfig`, each setting declared once),
:mod:`~ckptgeo.training.schedule` (checkpoint and learning-rate schedules, optimiser, recipe),
:mod:`~ckptgeo.training.batches` (training items and their encoding), :mod:`~ckptgeo.training.runfolder`
(the files above, resume checks, checkpoint listing, history) and this one (the loop and the evaluator).

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
nothing else. A ``step{N}`` folder without its weights file was not written by ckptgeo: the run refuses to
start (:class:`~ckptgeo.errors.RunMismatchError`) rather than count it as a checkpoint or remove it.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import os
import time
from pathlib import Path
from typing import Sequence

from ckptgeo._threads import thread_record, torch_threads
from ckptgeo.errors import CorruptCheckpointError, InvalidParameterError, NonFiniteActivationsError
from ckptgeo.suites.items import Item, write_jsonl
from ckptgeo.suites.tasks import heldout_items, suite_header, suite_name
from ckptgeo.training.batches import Batcher, answer_loss
from ckptgeo.training.config import TrainConfig, settings_record, validate_config
from ckptgeo.training.runfolder import (FORMAT, FORMAT_VERSION, MANIFEST_NAME, RUN_MARKER, STATE_ADVICE, STATE_NAME,
                                        BackgroundWriter, check_disk, check_out, check_step_folders, has_weights, is_run_folder,
                                        load_state, remove_stale, run_name, save_checkpoint, save_state,
                                        training_history, versions, write_manifest, write_marker)
from ckptgeo.training.schedule import (build_optimizer, checkpoint_steps, lr_factor, recipe_record,
                                       tokens_per_step)
from ckptgeo.training.sizes import get_size

# TrainConfig, checkpoint_steps, run_name, lr_factor, tokens_per_step, training_history, MANIFEST_NAME,
# RUN_MARKER, is_run_folder: defined in the modules above, importable from here as before
__all__ = ["TrainConfig", "train", "checkpoint_steps", "evaluate", "exact_match", "training_history", "run_name",
           "lr_factor", "tokens_per_step", "MANIFEST_NAME", "RUN_MARKER", "is_run_folder", "progress_line",
           "TrainingRun"]

logger = logging.getLogger(__name__)


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
    DatasetLayoutError
        ``forecast_from`` is not a dataset a forecast can learn from (refused before any step is trained).
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
    validate_config(config)
    if config.forecast_from is not None:   # before any step is trained or written: a dataset to learn from
        from ckptgeo.forecasting.live import usable_runs

        usable_runs(config.forecast_from)
    with torch_threads(get_size(config.size).n_parameters(), config.threads):
        return TrainingRun(config).run()


class TrainingRun:
    """One training run into its folder: :meth:`prepare` makes or resumes it (folder checks, held-out suites,
    model, optimiser, manifest), :meth:`run` trains it to the end, and each scheduled step's checkpoint is
    written off the steps' path (:meth:`checkpoint`: a copy of the model, evaluated and saved in one background
    thread, in the order checkpoint -> evaluation -> state -> manifest).

    Parameters
    ----------
    config : TrainConfig
        The run's settings (checked by :func:`train`).
    """

    def __init__(self, config: TrainConfig):
        self.config = config
        self.out = Path(config.out)

    def prepare(self) -> bool:
        """Check, make or resume the run folder and build everything the loop needs; False when the run is
        complete already (nothing to do).

        Raises
        ------
        RunMismatchError, DiskSpaceError, CorruptCheckpointError
            As :func:`train`.
        """
        import torch
        from transformers import GPTNeoXForCausalLM

        from ckptgeo.engine.forward import prepare_suite
        from ckptgeo.suites.items import Suite
        from ckptgeo.suites.vocab import build_tokenizer
        from ckptgeo.training.sizes import build_config

        config, out = self.config, self.out
        manifest = check_out(out, config)
        check_step_folders(out)  # a step folder without weights is not a checkpoint ckptgeo wrote
        if manifest is not None and manifest.get("complete"):
            logger.info("%s is complete; nothing to do", out)
            return False
        write_marker(out)
        remove_stale(out)
        self.device = device = _resolve_device(config.device)
        size = get_size(config.size)
        self.schedule = schedule = checkpoint_steps(config.n_steps, config.n_checkpoints)
        check_disk(out, size.n_parameters(), len(schedule))

        self.tokenizer = tokenizer = build_tokenizer()
        heldout: dict[str, tuple[Item, ...]] = {}
        self.suites = suites = {}
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
        self.state_path = state_path = out / STATE_NAME
        if manifest is not None and state_path.is_file():
            state = load_state(state_path)
            if has_weights(out / f"step{state['step']}"):
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
        optimizer, scheduler = build_optimizer(model, config, torch)
        if state is not None:
            try:
                optimizer.load_state_dict(state["optimizer"])
                scheduler.load_state_dict(state["scheduler"])
            except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as err:
                raise CorruptCheckpointError(f"{state_path} does not fit this run's optimiser ({type(err).__name__}: "
                                             f"{err}); {STATE_ADVICE}", path=str(state_path)) from None
        self.model, self.optimizer, self.scheduler, self.history, self.start = model, optimizer, scheduler, history, start

        self.record = {
            "format": FORMAT, "format_version": FORMAT_VERSION, "complete": False, "config": settings_record(config),
            "tasks": list(config.tasks), "levels": list(config.levels), "size": config.size, "seed": config.seed,
            "steps": config.n_steps, "schedule": list(schedule),
            "model": {"architecture": "GPTNeoXForCausalLM", "n_layers": size.n_layers, "d_model": size.d_model,
                      "n_heads": size.n_heads, "n_parameters": sum(p.numel() for p in model.parameters()),
                      "vocab_size": len(tokenizer)},
            "suites": suites, "chance": {n: suite_header(t, l)["chance"] for n, (t, l) in
                                         zip(suites, zip(config.tasks, config.levels))},
            "versions": versions(), "device": str(device), "history": history,
            "runtime": [*(manifest or {}).get("runtime", []),
                        {**thread_record("threads" if config.threads else "default rule"), "from_step": start}],
            "recipe": recipe_record(config, tokens_per_step(config, heldout), torch),
            "tokens_per_step": tokens_per_step(config, heldout),
        }
        write_manifest(out, self.record)

        vocab = tokenizer.get_vocab()
        self.batcher = Batcher(config, vocab, tokenizer.pad_token_id,
                               {n: frozenset(it.prompt for it in items) for n, items in heldout.items()})
        self.autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda"
                         else contextlib.nullcontext())
        self.clock = time.perf_counter()
        self.loss_sum = torch.zeros((), device=device)
        self.n_since = 0
        self.last_line = [self.clock, start]   # time and step of the last INFO progress line
        # checkpoint writes and the held-out evaluation run off the steps' path: on a copy of the model, in one
        # background thread (runfolder.BackgroundWriter)
        self.writer, self.frozen, self.threads = BackgroundWriter(), [], torch.get_num_threads()
        # the held-out items tokenized once for the run's evaluations (a quarter of an evaluation's CPU time on tiny)
        self.prepared = {n: prepare_suite(Suite("exact_match", items), tokenizer, n_samples=None)
                         for n, items in heldout.items()}
        return True

    def snapshot(self):
        """The model's weights now, in a second model the writer evaluates and saves (made once, then
        overwritten once the writer is done with the previous checkpoint)."""
        import torch

        self.writer.wait()
        if not self.frozen:
            self.frozen.append(copy.deepcopy(self.model).eval())
        else:
            with torch.no_grad():
                for mine, theirs in zip(self.frozen[0].state_dict().values(), self.model.state_dict().values()):
                    mine.copy_(theirs)
        return self.frozen[0]

    def _write(self, step: int, copy_, entry: dict, state) -> None:
        """In the writer's thread: save the checkpoint, evaluate it, save the optimiser state and the manifest."""
        import torch

        config, out = self.config, self.out
        torch.set_num_threads(self.threads)  # a new thread starts at OpenMP's default; the evaluation uses the run's
        save_checkpoint(copy_, self.tokenizer, out, step)
        entry["accuracy"] = acc = {n: evaluate(copy_, self.tokenizer, items) for n, items in self.prepared.items()}
        self.history.append(entry)
        if state is not None:
            save_state(self.state_path, step, *state, torch)
        write_manifest(out, self.record)
        now = time.perf_counter()
        due = (step in (self.start, config.n_steps) or now - self.last_line[0] >= PROGRESS_SECONDS
               or step - self.last_line[1] >= config.n_steps / PROGRESS_LINES)
        if due:
            self.last_line[:] = [now, step]
        logger.log(logging.INFO if due else logging.DEBUG, "%s", progress_line(
            out.name, step, config.n_steps, entry["loss"], acc, now - self.clock,
            (step - self.start) / max(now - self.clock, 1e-9)))

    def checkpoint(self, step: int) -> None:
        """Hand the checkpoint of ``step`` (weights, the mean loss since the last one, the optimiser state) to the
        writer."""
        import torch

        mean_loss = float(self.loss_sum) / self.n_since if self.n_since else None
        entry = {"step": step, "loss": mean_loss, "lr": self.scheduler.get_last_lr()[0], "accuracy": None,
                 "seconds": round(time.perf_counter() - self.clock, 3), "tokens": step * self.record["tokens_per_step"]}
        state = ((copy.deepcopy(self.optimizer.state_dict()), copy.deepcopy(self.scheduler.state_dict()))
                 if step < self.config.n_steps else None)
        self.writer.submit(self._write, step, self.snapshot(), entry, state)
        self.loss_sum, self.n_since = torch.zeros((), device=self.device), 0

    def run(self) -> Path:
        """Train to ``config.n_steps`` (after :meth:`prepare`, which this calls) and mark the run complete."""
        if not self.prepare():
            return self.out
        import torch
        from tqdm.auto import tqdm
        from tqdm.contrib.logging import logging_redirect_tqdm

        from ckptgeo.constants import NO_PROGRESS

        config, out, model, start = self.config, self.out, self.model, self.start
        todo = set(self.schedule)
        bar = tqdm(range(start + 1, config.n_steps + 1), desc=f"train {out.name}", unit="step", initial=start,
                   total=config.n_steps, disable=NO_PROGRESS or None, dynamic_ncols=True)
        try:
            if start == 0 and 0 in todo and not any(h["step"] == 0 for h in self.history):
                self.checkpoint(0)
            monitor = _monitor(config, out, self.suites, self.tokenizer)
            # the monitor's event lines go above the bar, not through it
            with logging_redirect_tqdm() if monitor is not None else contextlib.nullcontext():
                if monitor is not None and monitor.step(model, start) is not None:
                    bar.set_postfix_str(monitor.status())
                for step in bar:
                    ids, attn, target = (t.to(self.device) for t in self.batcher.batch(step))
                    with self.autocast:
                        logits = model(input_ids=ids, attention_mask=attn).logits
                    loss = answer_loss(logits, ids, target, torch)
                    self.optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    if config.grad_clip:
                        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
                    self.optimizer.step()
                    self.scheduler.step()
                    self.loss_sum += loss.detach()
                    self.n_since += 1
                    if step in todo:
                        if not math.isfinite(float(self.loss_sum)):
                            raise NonFiniteActivationsError(f"Training loss is not finite at step {step} of {out}; "
                                                            f"lower --lr or raise --warmup.", revision=f"step{step}")
                        self.checkpoint(step)
                        if monitor is None and self.history:  # the newest checkpoint the writer has evaluated
                            shown = self.history[-1]["accuracy"].values()
                            bar.set_postfix_str("accuracy " + ", ".join(f"{v:.2f}" for v in shown))
                    if monitor is not None and monitor.step(model, step) is not None:
                        bar.set_postfix_str(monitor.status())
        finally:
            bar.close()
            self.writer.close()  # what was submitted is written, also when a step failed
        self.record["complete"] = True
        self.record["seconds"] = round(time.perf_counter() - self.clock, 3)
        write_manifest(out, self.record)
        if self.state_path.exists():
            self.state_path.unlink()
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
                   model_name=out.name, forecast_from=config.forecast_from, planned_steps=config.n_steps)


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
    items : sequence of Item, or PreparedSuite
        Generation items (``prompt``, ``target``), or a :class:`~ckptgeo.engine.forward.PreparedSuite` of them
        (tokenized once by :func:`~ckptgeo.engine.forward.prepare_suite`, for a caller that evaluates often).
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

    from ckptgeo.engine.forward import PreparedSuite, prepare_suite, run_suite
    from ckptgeo.suites.items import Suite

    for it in (p.item for p in items.items) if isinstance(items, PreparedSuite) else items:
        if it.kind != "generation":
            raise InvalidParameterError(f"exact_match scores generation items; item {it.id!r} is {it.kind}.",
                                        name="items", value=it.id)
    if not (items.items if isinstance(items, PreparedSuite) else items):
        return np.zeros(0)
    was_training = model.training
    model.eval()
    try:
        # the scan's own scoring (ckptgeo.engine.forward), so training and scans count exact match alike
        prepared = items if isinstance(items, PreparedSuite) else prepare_suite(
            Suite("exact_match", tuple(items)), tokenizer, n_samples=None)
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
