"""The cost of a study before it runs (``ckptgeo reproduce --dry-run``): one benchmark per model size
(seconds of a training step and of one checkpoint's measurement, measured here), scaled to the plan."""

from __future__ import annotations

import time
import warnings
from typing import Mapping

from ckptgeo.studies.plan import plan_study
from ckptgeo.studies.presets import RECIPE, Preset, get_preset

__all__ = ["estimate", "estimate_text"]


def _bench_size(size: str, device: str, n_samples: int, *, steps: int = 3, threads: int | None = None) -> dict:
    """Measured seconds of one training step (batch 128 of modular-L1 items) and of one checkpoint's
    measurement (a forward pass over ``n_samples`` items, RankMe and probes per layer) for ``size``.

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
        return _bench_model(model, size, dev, n_samples, steps, tok)


def _bench_model(model, size, dev, n_samples, steps, tok) -> dict:
    import random

    import numpy as np
    import torch

    from ckptgeo.metrics.probe import probe
    from ckptgeo.metrics.rankme import rankme
    from ckptgeo.suites.tasks import sample
    from ckptgeo.training.batches import answer_loss, encode

    clock = time.perf_counter if dev.type == "cuda" else time.process_time
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rng = random.Random(0)
    items = [sample("modular", 1, rng) for _ in range(RECIPE["batch_size"])]
    ids, attn, target = (t.to(dev) for t in encode(items, tok.get_vocab(), tok.pad_token_id, torch))

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
    step_s = (clock() - t0) / steps
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
    return {"size": size, "device": str(dev), "step_s": step_s, "forward_s": forward_s,
            "rankme_probe_per_layer_s": per_layer, "n_layers": n_layers, "steps_per_s": 1.0 / step_s}


def estimate(preset: str | Preset, *, device: str = "cpu", bench: Mapping[str, dict] | None = None,
             threads: int | None = None) -> dict:
    """Device-hours the preset needs, from steps per second measured here (one benchmark per size).

    Training: steps / measured steps per second. Measurement: per checkpoint, a forward pass for
    training's own evaluation (over ``n_heldout`` items) and one for the scan (``n_samples``); per probed
    checkpoint, RankMe and a probe per layer (scaled to ``n_heldout`` items). Whole-model measures, from their
    work budgets: a Hessian-vector product counted as two training steps, an SGLD step (batch 32) as a
    quarter of one; measures without a work budget in ``metric_options`` are left out.

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
        ``device``.
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
    train_s = sum(r.steps * bench[r.size]["step_s"] for r in runs)
    held = max(preset.n_heldout, preset.n_samples)
    scan_s = sum(preset.n_checkpoints * bench[r.size]["forward_s"] * (1 + held / preset.n_samples)
                 + preset.probe_checkpoints * bench[r.size]["n_layers"] * bench[r.size]["rankme_probe_per_layer_s"]
                 * max(held / 128, 1.0) for r in runs)
    hessian = preset.metric_options.get("hessian", {}).get("max_hvp") or 0
    llc = preset.metric_options.get("llc", {})
    sgld = (llc.get("num_chains") or 0) * (llc.get("num_draws") or 0)
    model_s = sum(preset.model_checkpoints * bench[r.size]["step_s"]
                  * (2 * hessian * ("hessian" in r.model_metrics) + sgld / 4 * ("llc" in r.model_metrics))
                  for r in runs if r.model_metrics)
    return {"bench": bench, "train_hours": train_s / 3600, "scan_hours": scan_s / 3600, "model_hours": model_s / 3600,
            "total_hours": (train_s + scan_s + model_s) / 3600, "runs": len(runs), "device": device}


def estimate_text(preset: str | Preset, est: dict) -> str:
    """An :func:`estimate` as text for ``--dry-run``."""
    preset = get_preset(preset)
    lines = [f"estimate on {est['device']} (measured steps/s, one benchmark per size"
             + ("; CPU seconds of one thread, i.e. an idle core):" if est["device"] == "cpu" else "):")]
    for s, b in est["bench"].items():
        lines.append(f"  {s:>7}: {b['steps_per_s']:8.1f} steps/s; forward of {preset.n_samples} items "
                     f"{b['forward_s']:.3f} s")
    lines.append(f"  training {est['train_hours']:.2f} h + measuring {est['scan_hours']:.2f} h + whole-model measures "
                 f"{est.get('model_hours', 0.0):.2f} h (from their work budgets) = {est['total_hours']:.2f} "
                 f"device-hours for {est['runs']} runs")
    if est["device"] == "cpu":
        wall_h = est["total_hours"] / 2
        lines.append("  on 2 idle cores (torchrun --nproc_per_node 2 ... --threads 1): about "
                     + (f"{wall_h:.1f} h" if wall_h >= 1 else f"{wall_h * 60:.0f} min") + " of wall time")
    if est["device"] == "cpu":
        lines.append("  (measured on this CPU; on a GPU machine run `ckptgeo reproduce --preset paper --dry-run "
                     "--device cuda` for GPU-hours)")
    return "\n".join(lines)
