"""The cost of a study before it runs (``ckptgeo reproduce --dry-run``): one benchmark per model size
(seconds of a training step, of a real scan per checkpoint and of a probe, measured here), scaled to the plan."""

from __future__ import annotations

import time
import warnings
from typing import Mapping

from ckptgeo.studies.plan import plan_study
from ckptgeo.studies.presets import RECIPE, Preset, get_preset

__all__ = ["estimate", "estimate_text", "sequence_tokens", "whole_model_steps"]


def _bench_size(size: str, device: str, n_samples: int, *, steps: int = 3, threads: int | None = None) -> dict:
    """Measured seconds of one training step (batch 128 of modular-L1 items, 6 tokens a sequence, and the
    seconds each further token adds, from a step on copy-L2's 22), of a real scan per checkpoint and of one
    checkpoint's probes (RankMe and a probe per layer) for ``size``.

    On a CPU the seconds are this process's CPU time (``time.process_time``), which is what the work takes
    on an idle core whatever else the machine runs, under the thread count the runs use (the rule of
    :mod:`ckptgeo._threads`, or ``threads`` as ``--threads`` sets it); on a GPU, wall time after
    ``cuda.synchronize``."""
    import torch
    from transformers import GPTNeoXForCausalLM

    from ckptgeo._threads import torch_threads
    from ckptgeo.suites.vocab import build_tokenizer
    from ckptgeo.training.sizes import build_config, count_parameters, get_size

    tok = build_tokenizer()
    dev = torch.device(device)
    model = GPTNeoXForCausalLM(build_config(get_size(size), vocab_size=len(tok))).to(dev)
    # the thread count the study's runs use: process time over more threads than the work can fill (spinning
    # while the machine is busy) would count far more CPU seconds than the work needs
    with torch_threads(count_parameters(model), threads=threads):
        bench = _bench_model(model, size, dev, n_samples, steps, tok)
    return bench | _bench_scan(size, device, n_samples, threads=threads)


def _bench_scan(size: str, device: str, n_samples: int, *, threads: int | None = None) -> dict:
    """Seconds of the study's first scan (RankMe and behaviour over ``n_samples`` held-out items) of a real
    run folder of ``size``: ``scan_checkpoint_s`` per checkpoint (loading its weights, the forward pass, the
    greedy answers, RankMe per layer, the rows written) and ``scan_fixed_s`` per scan (tokenizer, suite,
    plan). Measured as the difference between scans of one and of two checkpoints, after a warm-up scan,
    in this process's CPU time on a CPU (wall time on a GPU)."""
    import logging
    import tempfile

    from ckptgeo.engine.scan import scan
    from ckptgeo.training.config import TrainConfig
    from ckptgeo.training.trainer import train

    clock = time.perf_counter if device.startswith("cuda") else time.process_time
    quiet = [logging.getLogger(name) for name in ("ckptgeo", "transformers")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.WARNING)
    try:
        with tempfile.TemporaryDirectory(prefix="ckptgeo-bench-") as tmp:
            run = train(TrainConfig(tasks=("modular",), levels=(1,), size=size, out=f"{tmp}/run", n_steps=2,
                                    batch_size=8, warmup_steps=1, n_checkpoints=3, n_heldout=n_samples,
                                    device=device, threads=threads))
            seconds = []
            for name, revisions in (("warm-up", "step2"), ("one", "step0"), ("two", "step1,step2")):
                t0 = clock()
                scan(run, out=f"{tmp}/{name}", metrics=("rankme", "behavior"), n_samples=n_samples,
                     device=device, threads=threads, revisions=revisions)
                seconds.append(clock() - t0)
    finally:
        for q, level in zip(quiet, levels):
            q.setLevel(level)
    per_checkpoint = max(seconds[2] - seconds[1], 0.0)
    return {"scan_checkpoint_s": per_checkpoint, "scan_fixed_s": max(seconds[1] - per_checkpoint, 0.0)}


def _batch(task: str, level: int, tok, dev, n: int):
    """A training batch of ``n`` items of (``task``, ``level``): (input_ids, attention_mask, target_mask)."""
    import random

    import torch

    from ckptgeo.suites.tasks import sample
    from ckptgeo.training.batches import encode

    rng = random.Random(0)
    items = [sample(task, level, rng) for _ in range(n)]
    return tuple(t.to(dev) for t in encode(items, tok.get_vocab(), tok.pad_token_id, torch))


def sequence_tokens(task: str, level: int, tok=None) -> int:
    """Tokens per training sequence of (``task``, ``level``): the padded length of a batch of the recipe's size,
    which a training step's cost grows with (modular-L1 6, copy-L1 12, copy-L2 22). ``tok``: the word tokenizer
    (default: built here; pass one to count many settings).

    >>> sequence_tokens("modular", 1), sequence_tokens("copy", 2)
    (6, 22)
    """
    import torch

    from ckptgeo.suites.vocab import build_tokenizer

    tok = tok if tok is not None else build_tokenizer()
    return int(_batch(task, level, tok, torch.device("cpu"), RECIPE["batch_size"])[0].shape[1])


#: the two batches whose steps are timed: a training step's seconds are fitted as a + b x tokens per sequence
_SHORT, _LONG = ("modular", 1), ("copy", 2)


def _bench_model(model, size, dev, n_samples, steps, tok) -> dict:
    import numpy as np
    import torch

    from ckptgeo.metrics.probe import probe
    from ckptgeo.metrics.rankme import rankme
    from ckptgeo.training.batches import answer_loss

    clock = time.perf_counter if dev.type == "cuda" else time.process_time
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def timed_step(batch) -> float:
        ids, attn, target = batch

        def step():
            loss = answer_loss(model(input_ids=ids, attention_mask=attn).logits, ids, target, torch)
            opt.zero_grad()
            loss.backward()
            opt.step()

        step()  # warm-up (allocations, kernels)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = clock()
        for _ in range(steps):
            step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return (clock() - t0) / steps

    long_batch = _batch(*_LONG, tok, dev, RECIPE["batch_size"])
    long_s = timed_step(long_batch)
    ids, attn, target = _batch(*_SHORT, tok, dev, RECIPE["batch_size"])
    step_s = timed_step((ids, attn, target))
    per_token = max(long_s - step_s, 0.0) / (long_batch[0].shape[1] - ids.shape[1])
    model.eval()
    t0 = clock()
    with torch.no_grad():
        hs = model(input_ids=ids[: min(n_samples, len(ids))], output_hidden_states=True).hidden_states
    n_layers = len(hs)
    forward_s = (clock() - t0) * max(n_samples / len(ids), 1.0)
    states = hs[-1][:, -1].float().cpu()
    labels = np.arange(len(states)) % 10
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probe(states.numpy()[:40], labels[:40])  # warm-up: the first fit pays scikit-learn's imports
    t0 = clock()
    rankme(states)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an untrained model's states: the solver may stop at max_iter
        probe(states.numpy(), labels)
    per_layer = clock() - t0
    return {"size": size, "device": str(dev), "step_s": step_s, "step_token_s": per_token,
            "step_tokens": int(ids.shape[1]), "forward_s": forward_s,
            "rankme_probe_per_layer_s": per_layer, "n_layers": n_layers, "steps_per_s": 1.0 / step_s}


def estimate(preset: str | Preset, *, device: str = "cpu", bench: Mapping[str, dict] | None = None,
             threads: int | None = None) -> dict:
    """Device-hours the preset needs, from steps per second measured here (one benchmark per size).

    Training: steps x the measured seconds of a step at the run's tokens per sequence
    (:func:`sequence_tokens`; benches without ``step_token_s`` count modular-L1's step). Measurement: per
    checkpoint, a forward pass for training's own evaluation (over ``n_heldout`` items) and a real scan's cost
    per checkpoint (``scan_checkpoint_s``; benches without it count a forward pass over ``n_samples``), plus
    each scan's fixed cost; per probed checkpoint, RankMe and a probe per layer (scaled to ``n_heldout``
    items). Whole-model measures at ``model_checkpoints`` checkpoints: the work a scan's ``--dry-run`` counts
    (each measure's ``item_passes`` on the scan's ``model_items`` items of the run's held-out suite), in
    training steps of the recipe's batch; measures without a work model (``grad_rank``) are left out.

    Parameters
    ----------
    threads : int, optional
        CPU threads per process (``--threads``); default on CPU: 1, the setting the estimate is stated for
        (CPU seconds of one thread; one process per core), since several threads' spinning on a busy machine
        counts as CPU time and inflated the estimate about 5x for ``small``.

    Returns
    -------
    dict
        ``bench`` (per size), ``train_hours``, ``scan_hours``, ``model_hours``, ``total_hours``, ``runs``,
        ``device``, and ``by_size``: the runs and the same hours for each size (they sum to the totals).
    """
    preset = get_preset(preset)
    if threads is None and device == "cpu":
        threads = 1
    if not bench:
        from ckptgeo.engine.plan import rank_device

        rank_device(device)  # a CUDA device that is not here: a clear error before any benchmark
    bench = dict(bench) if bench else {s: _bench_size(s, device, preset.n_samples, threads=threads)
                                       for s in preset.sizes}
    runs = plan_study(preset, "-")
    from ckptgeo.suites.vocab import build_tokenizer

    tok = build_tokenizer()
    tokens = {key: sequence_tokens(*key, tok) for key in {(r.task, r.level) for r in runs}}

    def step_cost(r) -> float:
        b = bench[r.size]
        return b["step_s"] + b.get("step_token_s", 0.0) * (tokens[r.task, r.level] - b.get("step_tokens", 0))

    held = max(preset.n_heldout, preset.n_samples)

    def scan_cost(b: Mapping) -> float:
        """One run's measurement: training's evaluation and the first scan at every checkpoint, two scans'
        fixed costs, and RankMe plus a probe per layer at the probed checkpoints."""
        per_checkpoint = b.get("scan_checkpoint_s", b["forward_s"]) + b["forward_s"] * held / preset.n_samples
        probes = preset.probe_checkpoints * b["n_layers"] * b["rankme_probe_per_layer_s"] * max(held / 128, 1.0)
        return preset.n_checkpoints * per_checkpoint + 2 * b.get("scan_fixed_s", 0.0) + probes

    model_steps = whole_model_steps(preset)
    by_size = {s: {"runs": 0, "train_hours": 0.0, "scan_hours": 0.0, "model_hours": 0.0} for s in preset.sizes}
    for r in runs:
        cost = by_size[r.size]
        cost["runs"] += 1
        cost["train_hours"] += r.steps * step_cost(r) / 3600
        cost["scan_hours"] += scan_cost(bench[r.size]) / 3600
        work = sum(model_steps.get(m, 0.0) for m in r.model_metrics)
        cost["model_hours"] += preset.model_checkpoints * bench[r.size]["step_s"] * work / 3600
    for cost in by_size.values():
        cost["total_hours"] = cost["train_hours"] + cost["scan_hours"] + cost["model_hours"]
    total = {k: sum(c[k] for c in by_size.values())
             for k in ("train_hours", "scan_hours", "model_hours", "total_hours")}
    return {"bench": bench, **total, "runs": len(runs), "device": device, "by_size": by_size}


def whole_model_steps(preset: str | Preset) -> dict[str, float]:
    """Per whole-model measure of ``preset``, its work at one checkpoint in training steps: its
    ``item_passes`` (the count a scan's ``--dry-run`` uses) on the scan's ``model_items`` items of a run's
    held-out suite, over the recipe's batch of items; a measure without a work model is not named.

    Examples
    --------
    >>> {m: round(s, 2) for m, s in whole_model_steps("cpu").items()}   # 60 products, 2 x 150 SGLD steps
    {'hessian': 52.75, 'llc': 75.0}
    """
    from ckptgeo.engine.config import ScanConfig
    from ckptgeo.engine.measure import configure_metrics

    preset = get_preset(preset)
    config = ScanConfig(metrics=tuple(preset.model_metrics),
                        metric_options={m: dict(o) for m, o in preset.metric_options.items()
                                        if m in preset.model_metrics})
    items = min(config.model_items, preset.n_heldout)
    return {name: m.config.item_passes(items) / RECIPE["batch_size"] for name, m in configure_metrics(config).items()
            if hasattr(getattr(m, "config", None), "item_passes")}


def estimate_text(preset: str | Preset, est: dict) -> str:
    """An :func:`estimate` as text for ``--dry-run``."""
    preset = get_preset(preset)
    lines = [f"estimate on {est['device']} (measured steps/s, one benchmark per size"
             + ("; CPU seconds of one thread, i.e. an idle core):" if est["device"] == "cpu" else "):")]
    for s, b in est["bench"].items():
        per_token = f" (+{b['step_token_s'] * 1e3:.0f} ms a step per token over {b['step_tokens']})" \
            if "step_token_s" in b else ""
        lines.append(f"  {s:>7}: {b['steps_per_s']:8.1f} steps/s{per_token}; forward of {preset.n_samples} items "
                     f"{b['forward_s']:.3f} s" + (f"; scan {b['scan_checkpoint_s']:.2f} s a checkpoint + "
                                                  f"{b['scan_fixed_s']:.1f} s a scan" if "scan_checkpoint_s" in b
                                                  else ""))
    lines.append(f"  training {est['train_hours']:.2f} h + measuring {est['scan_hours']:.2f} h + whole-model measures "
                 f"{est.get('model_hours', 0.0):.2f} h (from their work budgets) = {est['total_hours']:.2f} "
                 f"device-hours for {est['runs']} runs")
    for s, c in est.get("by_size", {}).items():
        lines.append(f"    {s:>7}: {c['runs']} runs, training {c['train_hours']:.2f} h + measuring "
                     f"{c['scan_hours']:.2f} h + whole-model {c['model_hours']:.2f} h = {c['total_hours']:.2f} h")
    if est["device"] == "cpu":
        wall_h = est["total_hours"] / 2
        lines.append("  on 2 idle cores (torchrun --nproc_per_node 2 ... --threads 1): about "
                     + (f"{wall_h:.1f} h" if wall_h >= 1 else f"{wall_h * 60:.0f} min") + " of wall time")
    if est["device"] == "cpu":
        lines.append("  (measured on this CPU; on a GPU machine run `ckptgeo reproduce --preset paper --dry-run "
                     "--device cuda` for GPU-hours)")
    return "\n".join(lines)
