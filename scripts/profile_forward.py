#!/usr/bin/env python
"""Where a scan's forward pass spends its time on the CPU, and why it runs below the matmul peak.

A scan's forward over a batch of prompts (``output_hidden_states=True``, float32, no cache) on a GPT-NeoX of a
Pythia shape with random weights, timed op by op with ``torch.profiler`` (wall time of each op on the calling
thread, its intra-op threads included). Ops are put in groups:

* ``matmul``: ``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``linear``'s products;
* ``attention``: ``scaled_dot_product_attention`` and its kernels;
* ``element-wise``: layer norm, GELU, softmax, add, mul, rotary embedding's slices and concatenations;
* ``copies``: ``copy_``, ``contiguous``, ``clone``, ``to``, ``cat``, ``index``/``embedding`` gathers;
* ``other``: the rest (Python-side dispatch included).

Printed, in the same run: the fp32 matmul peak at the run's thread count (``scripts/roofline.py``), the
forward's FLOPs (``FlopCounterMode``: matmuls and attention) and its FLOP/s as a share of that peak, each
group's share of the forward's wall time, and the matmuls' own FLOP/s while they run. The forward's share of
the peak is the matmuls' own share times their share of the time (plus attention's FLOPs): a forward can
reach half the peak only where its products run near the peak and take most of its time.

``--variants`` instead times ways of running the same forward against the scan's own (SDPA attention, eager
float32), in one process, in rounds that run every variant once each in a rotated order (so a load change on a
shared machine falls on every variant alike): ``eager`` (transformers' eager attention), ``compile``
(``torch.compile`` of the trunk, inductor), ``bf16`` (``torch.autocast`` to bfloat16, the scan's
``--precision bf16``), ``compile+bf16``. Printed per variant: the median over rounds of its time / the baseline's
time in the same round and the range of that ratio (how noisy the machine was), its share of the matmul peak,
and its agreement with the baseline: RankMe of the last token's states per layer (largest relative difference;
float64 SVD as the scan) and the last position's greedy token (the share of rows where it differs).

Usage::

    python scripts/profile_forward.py                           # 14m and 160m shapes, batch 16 x 192 tokens
    python scripts/profile_forward.py --shape 160m --batch 32 --tokens 256 --threads 2
    python scripts/profile_forward.py --variants --shape 14m --batch 55 --rounds 7
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ckptgeo  # noqa: E402,F401  (first: OpenMP's wait policy as users get it)

#: Pythia shapes (hidden size, layers, heads, MLP width), vocabulary 50304
SHAPES = {"14m": (128, 6, 4, 512), "70m": (512, 6, 8, 2048), "160m": (768, 12, 12, 3072)}
GROUPS = {
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear"),
    "attention": ("aten::scaled_dot_product_attention", "aten::_scaled_dot_product",
                  "aten::_scaled_dot_product_flash_attention_for_cpu"),
    "element-wise": ("aten::layer_norm", "aten::native_layer_norm", "aten::gelu", "aten::softmax",
                     "aten::_softmax", "aten::add", "aten::mul", "aten::neg", "aten::add_", "aten::mul_",
                     "aten::cos", "aten::sin", "aten::slice", "aten::chunk", "aten::split", "aten::tanh",
                     "aten::pow", "aten::div"),
    "copies": ("aten::copy_", "aten::contiguous", "aten::clone", "aten::to", "aten::_to_copy", "aten::cat",
               "aten::index", "aten::embedding", "aten::index_select", "aten::stack", "aten::empty_like"),
}


def group_of(name: str) -> str:
    """The group of a profiler op name (see the module docstring); ``other`` when none matches."""
    for group, names in GROUPS.items():
        if name in names or (group == "attention" and "scaled_dot_product" in name):
            return group
    return "other"


def profile(shape: str, batch: int, tokens: int, threads: int, repeats: int) -> list[str]:
    import torch
    from torch.profiler import ProfilerActivity, profile as torch_profile
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from scripts.roofline import forward_flops, matmul_peak, uptime

    torch.set_num_threads(threads)
    hidden, layers, heads, mlp = SHAPES[shape]
    cfg = GPTNeoXConfig(vocab_size=50304, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=mlp, rotary_pct=0.25, use_parallel_residual=True, tie_word_embeddings=False)
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(cfg).eval()
    ids = torch.randint(0, 50304, (batch, tokens))
    mask = torch.ones_like(ids)

    def forward():
        with torch.inference_mode():
            # the trunk, as a scan runs it: hidden states of every layer, logits only where scored (none here)
            return model.gpt_neox(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)

    forward()   # warm-up
    flops = forward_flops(forward)
    peak = matmul_peak(threads)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        forward()
        best = min(best, time.perf_counter() - t)
    with torch_profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
        forward()
    # self time per op: each microsecond counted once, in the op that spent it
    totals: dict[str, float] = {}
    events = sorted(prof.key_averages(), key=lambda ev: -ev.self_cpu_time_total)
    for ev in events:
        totals[group_of(ev.key)] = totals.get(group_of(ev.key), 0.0) + ev.self_cpu_time_total / 1e6
    whole = sum(totals.values())
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter:
        forward()
    per_op = counter.get_flop_counts().get("Global", {})
    mm_flops = sum(v for k, v in per_op.items() if "scaled_dot_product" not in str(k))
    mm_share = mm_flops / totals.get("matmul", float("nan")) / peak.wall if totals.get("matmul") else float("nan")
    lines = [f"{shape}: batch {batch} x {tokens} tokens, {threads} thread(s), {uptime()}",
             f"  fp32 matmul peak {peak.wall / 1e9:.1f} GFLOP/s; forward {flops / 1e9:.2f} GFLOP in {best:.3f} s "
             f"(best of {repeats}) = {flops / best / 1e9:.1f} GFLOP/s = {flops / best / peak.wall:.1%} of the peak",
             f"  profiled forward {whole:.3f} s of op self time:"]
    for group in ("matmul", "attention", "element-wise", "copies", "other"):
        t = totals.get(group, 0.0)
        lines.append(f"    {group:<13} {t:7.3f} s  {t / whole:6.1%}")
    lines.append("  largest ops: " + ", ".join(f"{ev.key} {ev.self_cpu_time_total / 1e6 / whole:.0%}"
                                               for ev in events[:6]))
    lines.append(f"  matmuls alone: {mm_flops / 1e9:.2f} GFLOP in {totals.get('matmul', 0):.3f} s = "
                 f"{mm_share:.1%} of the peak while they run")
    return lines


def _model(shape: str, attn: str = "sdpa"):
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    hidden, layers, heads, mlp = SHAPES[shape]
    cfg = GPTNeoXConfig(vocab_size=50304, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=mlp, rotary_pct=0.25, use_parallel_residual=True, tie_word_embeddings=False,
                        attn_implementation=attn)
    torch.manual_seed(0)
    return GPTNeoXForCausalLM(cfg).eval()


#: the variants ``--variants`` tries, against ``sdpa`` (the scan's forward today)
VARIANTS = ("sdpa", "eager", "bf16", "compile", "compile+bf16")


def variants(shape: str, batch: int, tokens: int, threads: int, rounds: int, which=VARIANTS) -> list[str]:
    """Each variant's time against the baseline in the same round, and its agreement (see the module docstring)."""
    import contextlib
    import statistics

    import torch

    from ckptgeo.metrics.rankme import rankme
    from scripts.roofline import forward_flops, matmul_peak, uptime

    torch.set_num_threads(threads)
    base_model = _model(shape)
    eager_model = _model(shape, "eager")
    eager_model.load_state_dict(base_model.state_dict())
    ids = torch.randint(0, 50304, (batch, tokens), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    compiled = {}

    def runner(name: str):
        model = eager_model if name == "eager" else base_model
        trunk = model.gpt_neox
        if name.startswith("compile"):
            trunk = compiled.setdefault("trunk", torch.compile(base_model.gpt_neox, dynamic=False))
        amp = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if name.endswith("bf16") else contextlib.nullcontext

        def forward():
            with torch.inference_mode(), amp():
                out = trunk(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False)
                states = torch.stack([h[:, -1].float() for h in out.hidden_states])
                greedy = model.get_output_embeddings()(out.last_hidden_state[:, -1]).argmax(-1)
            return states, greedy
        return forward

    fns = {n: runner(n) for n in which}
    outs, warm = {}, {}
    for n, fn in fns.items():   # warm-up (and compilation) untimed
        t = time.perf_counter()
        outs[n] = fn()
        warm[n] = time.perf_counter() - t
    flops = forward_flops(fns["sdpa"])
    peak = matmul_peak(threads)
    times = {n: [] for n in fns}
    for r in range(rounds):
        order = list(fns)[r % len(fns):] + list(fns)[: r % len(fns)]
        for n in order:
            t = time.perf_counter()
            fns[n]()
            times[n].append(time.perf_counter() - t)
    base_states, base_greedy = outs["sdpa"]
    base_rank = [rankme(s) for s in base_states]
    lines = [f"{shape}: forward variants, batch {batch} x {tokens} tokens, {threads} thread(s), {rounds} rounds; "
             f"{uptime()}; fp32 matmul peak {peak.wall / 1e9:.1f} GFLOP/s (this run)"]
    for n in fns:
        ratios = [t / b for t, b in zip(times[n], times["sdpa"])]
        med = statistics.median(times[n])
        states, greedy = outs[n]
        rel = max(abs(rankme(s) - r0) / r0 for s, r0 in zip(states, base_rank))
        flips = float((greedy != base_greedy).float().mean())
        lines.append(f"  {n:<13} median {med:.3f} s = {flops / med / peak.wall:5.1%} of the peak; time / sdpa's "
                     f"median {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}); "
                     f"first call {warm[n]:.1f} s; RankMe max rel diff {rel:.1e}; greedy token differs in "
                     f"{flips:.1%} of rows")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", action="append", choices=sorted(SHAPES), help="default: 14m and 160m")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--tokens", type=int, default=192, help="tokens per prompt (logical deduction's are 150-250)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--variants", action="store_true", help="time the forward's variants against the scan's")
    p.add_argument("--only", action="append", choices=VARIANTS, help="with --variants: these (sdpa always)")
    p.add_argument("--rounds", type=int, default=7, help="with --variants: rounds of every variant")
    a = p.parse_args(argv)
    for shape in a.shape or ["14m", "160m"]:
        if a.variants:
            which = ("sdpa",) + tuple(v for v in (a.only or VARIANTS) if v != "sdpa")
            print("\n".join(variants(shape, a.batch, a.tokens, a.threads, a.rounds, which)), flush=True)
            continue
        print("\n".join(profile(shape, a.batch, a.tokens, a.threads, a.repeats)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
