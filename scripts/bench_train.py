#!/usr/bin/env python
"""Benchmark: ``ckptgeo train`` against a bare PyTorch loop doing the same work, with the machine's roofline.

Both runs train the same GPT-NeoX (one of ``ckptgeo.training.SIZES``) on the same task with the study's recipe,
the same seed, the same batches (:class:`ckptgeo.training.batches.Batcher`), the same optimiser and schedule,
at the same torch thread count (the rule of ``ckptgeo/_threads.py`` unless ``--threads``), in one process:

A. ``ckptgeo.training.trainer.train(TrainConfig(...))``: manifest, held-out suite, checkpoints (weights and
   tokenizer, written atomically), the training state at every checkpoint, held-out exact match at every
   checkpoint, progress.
B. The bare loop: forward, ``answer_loss``, backward, clip, AdamW, scheduler; at the same checkpoint steps
   ``model.save_pretrained`` + ``tokenizer.save_pretrained`` into ``step{N}`` and the same held-out exact
   match by one teacher-forced pass (batched, plain argmax).

Printed: each run's wall seconds and the ratio A/B (target: at most 1.5), A's seconds per stage (steps,
evaluation, checkpoint writes, training state, manifest) with their system-time share of the CPU time
(``os.times``, the whole process), the training FLOP/s (``FlopCounterMode`` on one step) as a share of the
fp32 matmul peak at the run's thread count measured in the same run, whether A's and B's final weights are
equal, and the load average. ``--estimate`` also runs ``reproduce --dry-run``'s benchmark
(:func:`ckptgeo.studies.estimate.estimate`) for this one run and prints its training seconds beside A's.

Cost: the defaults (copy-L1 on tiny, 300 steps, 40 checkpoints, 400 held-out items, as in the cpu preset)
take about a minute a run on 2 shared cores.

Usage::

    python scripts/bench_train.py                                 # copy-L1, tiny, 300 steps
    python scripts/bench_train.py --size small --task modular --steps 100 --estimate
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def _config(args, out: Path):
    from ckptgeo.studies.presets import HORIZON_FACTOR, RECIPE
    from ckptgeo.training.config import TrainConfig

    recipe = RECIPE | {"warmup_steps": min(RECIPE["warmup_steps"], args.steps)}
    return TrainConfig(tasks=(args.task,), levels=(args.level,), size=args.size, out=str(out), n_steps=args.steps,
                       schedule_steps=HORIZON_FACTOR * args.steps, n_checkpoints=args.checkpoints,
                       n_heldout=args.heldout, device="cpu", threads=args.threads, seed=args.seed, **recipe)


def run_ckptgeo(config, stages) -> float:
    """Wall seconds of ``train(config)``, its stages timed into ``stages``."""
    import ckptgeo.training.trainer as trainer

    originals = {n: getattr(trainer, n) for n in ("evaluate", "save_checkpoint", "save_state", "write_manifest")}
    for name, label in (("evaluate", "evaluate"), ("save_checkpoint", "checkpoint"), ("save_state", "state"),
                        ("write_manifest", "manifest")):
        stages.wrap(trainer, name, label, thread=True)   # in the writer thread, beside the steps
    t0 = time.perf_counter()
    try:
        with stages.stage("train (all)"):
            trainer.train(config)
    finally:
        for name, fn in originals.items():
            setattr(trainer, name, fn)
    return time.perf_counter() - t0


def run_bare(config, stages) -> tuple[float, object]:
    """Wall seconds of the bare loop on ``config`` (same init, batches, optimiser, checkpoints, evaluation), and
    its final model."""
    import torch
    from transformers import GPTNeoXForCausalLM

    from ckptgeo._threads import torch_threads
    from ckptgeo.suites.tasks import heldout_items
    from ckptgeo.suites.vocab import build_tokenizer
    from ckptgeo.training.batches import Batcher, answer_loss, encode
    from ckptgeo.training.schedule import build_optimizer, checkpoint_steps
    from ckptgeo.training.sizes import build_config, get_size

    t0 = time.perf_counter()
    out = Path(config.out)
    with torch_threads(get_size(config.size).n_parameters(), config.threads), stages.stage("bare (all)"):
        tok = build_tokenizer()
        vocab = tok.get_vocab()
        task, level = config.tasks[0], config.levels[0]
        heldout = heldout_items(task, level, config.n_heldout, seed=config.seed)
        torch.manual_seed(config.seed)
        model = GPTNeoXForCausalLM(build_config(get_size(config.size), vocab_size=len(tok)))
        model.train()
        opt, sched = build_optimizer(model, config, torch)
        batcher = Batcher(config, vocab, tok.pad_token_id, {f"{task}-L{level}": frozenset(i.prompt for i in heldout)})
        ids_h, attn_h, target_h = encode(heldout, vocab, tok.pad_token_id, torch)
        schedule = set(checkpoint_steps(config.n_steps, config.n_checkpoints))

        def checkpoint(step: int) -> float:
            model.save_pretrained(out / f"step{step}")
            tok.save_pretrained(out / f"step{step}")
            model.eval()
            with torch.no_grad():
                pred = model(input_ids=ids_h, attention_mask=attn_h).logits.argmax(-1)
            model.train()
            # position t predicts token t + 1: an item is right when every target token is
            hit = (pred[:, :-1] == ids_h[:, 1:]) | ~target_h[:, 1:].bool()
            return float(hit.all(1).float().mean())

        if 0 in schedule:
            checkpoint(0)
        for step in range(1, config.n_steps + 1):
            ids, attn, target = batcher.batch(step)
            loss = answer_loss(model(input_ids=ids, attention_mask=attn).logits, ids, target, torch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            opt.step()
            sched.step()
            if step in schedule:
                checkpoint(step)
    return time.perf_counter() - t0, model


def step_flops(config) -> int:
    """FLOPs of one training step (forward and backward) of ``config``'s model on its first batch."""
    import torch
    from transformers import GPTNeoXForCausalLM

    from ckptgeo.suites.vocab import build_tokenizer
    from ckptgeo.training.batches import Batcher, answer_loss
    from ckptgeo.training.sizes import build_config, get_size
    from scripts.roofline import forward_flops

    tok = build_tokenizer()
    model = GPTNeoXForCausalLM(build_config(get_size(config.size), vocab_size=len(tok)))
    ids, attn, target = Batcher(config, tok.get_vocab(), tok.pad_token_id,
                                {f"{config.tasks[0]}-L{config.levels[0]}": frozenset()}).batch(1)

    def step():
        answer_loss(model(input_ids=ids, attention_mask=attn).logits, ids, target, torch).backward()

    return forward_flops(step)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="examples:\n  python scripts/bench_train.py\n"
                                            "  python scripts/bench_train.py --size small --task modular --steps 100 "
                                            "--estimate\n")
    parser.add_argument("--task", default="copy")
    parser.add_argument("--level", type=int, default=1)
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--checkpoints", type=int, default=40)
    parser.add_argument("--heldout", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="default: the rule of ckptgeo/_threads.py")
    parser.add_argument("--estimate", action="store_true", help="also run --dry-run's benchmark for this run")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO_ROOT))
    os.environ.setdefault("CKPTGEO_NO_PROGRESS", "1")
    import logging

    import torch

    from ckptgeo._threads import default_threads
    from ckptgeo.training.sizes import get_size
    from scripts.roofline import Stages, matmul_peak, roofline_lines, uptime

    from transformers.utils import logging as hf_logging

    logging.getLogger("ckptgeo").setLevel(logging.WARNING)
    hf_logging.disable_progress_bar()   # as ckptgeo's save_checkpoint does: one bar per checkpoint
    threads = args.threads or default_threads(get_size(args.size).n_parameters())
    print(f"{args.task}-L{args.level} on {args.size}, {args.steps} steps, {args.checkpoints} checkpoints, "
          f"{args.heldout} held-out items, {threads} torch thread(s); {uptime()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="ckptgeo-bench-train-") as tmp:
        cfg_a, cfg_b = _config(args, Path(tmp) / "a"), _config(args, Path(tmp) / "b")
        stages = Stages()
        wall_b, model_b = run_bare(cfg_b, stages)
        wall_a = run_ckptgeo(cfg_a, stages)
        print(f"after the runs: {uptime()}", flush=True)
        from safetensors.torch import load_file

        final_a = load_file(str(Path(tmp) / "a" / f"step{args.steps}" / "model.safetensors"))
        final_b = load_file(str(Path(tmp) / "b" / f"step{args.steps}" / "model.safetensors"))
        same = final_a.keys() == final_b.keys() and all(torch.equal(final_a[k], final_b[k]) for k in final_a)
        n_steps = args.steps
        flops = step_flops(cfg_a)
        peak = matmul_peak(threads)
        print(f"A ckptgeo train {wall_a:8.2f} s ({1e3 * wall_a / n_steps:.1f} ms a step, everything included)")
        print(f"B bare loop     {wall_b:8.2f} s ({1e3 * wall_b / n_steps:.1f} ms a step)")
        cpu_a, cpu_b = (stages.times[k].user + stages.times[k].system for k in ("train (all)", "bare (all)"))
        print(f"ratio A/B {wall_a / wall_b:.2f}x wall, {cpu_a / cpu_b:.2f}x CPU time ({cpu_a:.1f} / {cpu_b:.1f} s)   "
              f"target <= 1.5x: {'MET' if wall_a / wall_b <= 1.5 else 'NOT MET'}; final weights A == B: {same}")
        print("CPU time per stage ('... (all)': the whole process; A's writes and evaluation: the thread running them, "
              "inside 'train (all)'):")
        print("\n".join(stages.lines("  ")[:-1]))
        print("roofline (same run):")
        work = {"A training (whole run)": (flops * n_steps, stages.times["train (all)"]),
                "B training (whole run)": (flops * n_steps, stages.times["bare (all)"])}
        print("\n".join(roofline_lines(peak=peak, work=work)))
        if args.estimate:
            import dataclasses

            from ckptgeo.studies.estimate import estimate
            from ckptgeo.studies.presets import get_preset
            from ckptgeo.training.schedule import checkpoint_steps

            one = dataclasses.replace(get_preset("cpu"), tasks=(args.task,), levels=(args.level,), sizes=(args.size,),
                                      seeds=(args.seed,), steps={args.task: {args.level: args.steps}},
                                      settings_by_size={}, steps_by_size={}, model_runs=(), model_metrics=(),
                                      n_checkpoints=args.checkpoints, n_heldout=args.heldout)
            est = estimate(one, threads=threads)
            b = est["bench"][args.size]
            # the trainer's part of the estimate: the steps, and training's own evaluation at every checkpoint
            # (scan_cost's forward over the held-out items); the scans of a study are not run here
            held = max(args.heldout, one.n_samples)
            train_s = est["train_hours"] * 3600
            eval_s = len(checkpoint_steps(args.steps, args.checkpoints)) * b["forward_s"] * held / one.n_samples
            a = stages.times["train (all)"]
            cpu = a.user + a.system
            print(f"--dry-run's estimate for this run (CPU seconds of one thread): steps {train_s:.1f} s + evaluation "
                  f"{eval_s:.1f} s = {train_s + eval_s:.1f} s; measured A: {cpu:.1f} CPU s ({a.wall:.1f} s wall); "
                  f"estimate / measured {(train_s + eval_s) / cpu:.2f}; {uptime()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
