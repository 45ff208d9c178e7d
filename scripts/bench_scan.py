#!/usr/bin/env python
"""Benchmark: ``ckptgeo.engine.scan`` against the plain way of measuring checkpoints, over loopback HTTP.

Both runs measure, for every revision of the same served repository, per-layer RankMe of the last
prompt token and multiple-choice accuracy on BIG-bench logical deduction (three objects):

A. ``ckptgeo.engine.scan.scan(repo, revisions="all", metrics=("rankme", "behavior"), prefetch=K)``: one
   model whose weights are swapped, the prompt's pass shared by hidden states and every choice (key/
   value cache), logits only where scored, length-sorted batches, the next K revisions downloading
   while the current one is measured, finished revisions evicted from the cache.
B. What a researcher writes today: ``AutoModelForCausalLM.from_pretrained(repo, revision=...)`` per
   revision (into its own, fresh cache, never evicted), one batched ``output_hidden_states=True`` pass
   over the prompts (right-padded, last non-pad token, all layers) for RankMe, and accuracy the
   lm-evaluation-harness way: batches of (prompt, choice) pairs, one full sequence per pair, full
   logits, ``log_softmax`` and the summed log-probability of the choice tokens; pick the best choice.

Same items (``ckptgeo.suites.items.select_items``, seed 0), same batch size, float32 in both, one process;
A runs first. The served repository is built by ``scripts/make_test_repo.py`` (seeded random
weights, so accuracy is near chance; what matters here is time, memory, disk and agreement) and
served by ``scripts/olah_local.py`` on a free loopback port.

Printed per run: wall seconds, seconds per revision, peak RSS of this process (kernel high-water
mark reset before each run, and the 0.2 s sampled maximum), RSS after revision 2 and after the last,
peak Hub-cache bytes (sampled every 0.2 s, and exactly before each eviction for A), then the ratios
B/A (time), RSS(last)/RSS(2), peak cache / one revision, and the agreement of the two runs
(accuracy per revision, RankMe per layer). Targets (issue 2): A at least 3x faster than B; RSS flat
(after the last revision within 10% of after revision 2); A's cache never above (K+1) revisions.

Also printed for A: each revision's seconds per stage (``ScanResult.seconds``: waiting for its files, the
download and the sha256 check in the prefetch thread, load, forward, measures, write), its pace against the
slowest stage and the pipeline's floor (``scripts/roofline.py: pace_lines``), and the load in seconds per GB beside plain reads of the same
files in the same run, just before eviction: from the page cache, after ``posix_fadvise(DONTNEED)``,
and main's whole-state-dict read (``load_file`` then a cast per tensor). ``--compare-downloads`` serves
two shards per revision, the last revision's first shard byte for byte step0's, and runs A a second
time with shared blobs evicted as main did: the bytes the loopback server sent, before and after.

Cost: on 2 shared CPU cores (load ~6), A takes ~70 s per pythia-70m revision at 200 items and B about
five times that, so the default size runs about an hour there; ``--plain-revisions 2`` times B on two
revisions only (~25 min in all), ``--n-items 40`` cuts both five-fold. A GPU (``--device cuda``) is
far faster.

Usage::

    python scripts/bench_scan.py                       # pythia-70m shape, 10 revisions, 200 items
    python scripts/bench_scan.py --plain-revisions 2         # B on two revisions only
    python scripts/bench_scan.py --shape tiny --revisions 4 --n-items 40   # a quick check (~20 s)
    python scripts/bench_scan.py --compare-prefix --revisions 3 --plain-revisions 1   # prefix sharing on/off
    python scripts/bench_scan.py --device cuda --revisions 3 --plain-revisions 1  # GPU: pythia-2.8b shape
    python scripts/bench_scan.py --shape pythia-160m --revisions 4 --n-items 20 --plain-revisions 1 --compare-downloads
    python scripts/bench_scan.py --shape pythia-14m --revisions 4 --n-items 100 --plain-revisions 0 --compare-precision bf16

``--compare-precision bf16`` runs A again under ``precision="bf16"`` and prints its forward's and its revisions'
seconds as ratios of fp32's and its agreement (RankMe's relative difference per layer, correct answers).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ckptgeo  # noqa: E402,F401  (first: it sets OMP_WAIT_POLICY before torch loads libgomp, as for a user)
from scripts.roofline import Sampler, dir_bytes, hwm, is_cuda, reset_hwm, rss, sync  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SUITE = REPO_ROOT / ".." / "shared" / "data" / "bigbench_logical_deduction" / "three_objects.json"
ORG, NAME = "benchorg", "pythia-bench"


@dataclass
class RunStats:
    """What one run measured: timings (s), memory and cache (bytes), and its results."""

    name: str
    wall: float = 0.0
    n_revisions: int = 0
    peak_rss_sampled: int = 0
    peak_rss_hwm: int | None = None
    rss_after: list[int] = field(default_factory=list)           # after revision 1, 2, ...
    released_at: list[float] = field(default_factory=list)       # perf_counter after revision 1, 2, ... (A)
    per_revision: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # (whole, forward, measures)
    peak_cache: int = 0
    seconds: dict[str, dict[str, float]] = field(default_factory=dict)   # ScanResult.seconds (A)
    loads: dict[str, "LoadRow"] = field(default_factory=dict)            # revision -> read rates (A)
    accuracy: dict[str, tuple[int, int]] = field(default_factory=dict)   # revision -> (correct, n)
    rankme: dict[str, list[float]] = field(default_factory=dict)          # revision -> per layer
    stages: object = None          # scripts.roofline.Stages of A: load / verify / forward, whole process clocks
    cpu: tuple[float, float] = (0.0, 0.0)   # (user, system) seconds of the whole run
    sweep_flops: int = 0           # FLOPs of every forward sweep, the batch-size trial's included (FlopCounterMode)
    threads: int = 0               # torch intra-op (CPU) threads during the forward
    gpu_peak: int | None = None    # torch.cuda.max_memory_allocated over the run (None on the CPU)
    batch_sizes: list = field(default_factory=list)  # A: the run record's batch-size choices (runs/<hash>.json)


# --------------------------------------------------------------------------------------------------
# the served repository
# --------------------------------------------------------------------------------------------------
# --------------------------------------------------------------------------------------------------
# run A: ckptgeo.engine.scan
# --------------------------------------------------------------------------------------------------
def _read_seconds(path: Path, *, cold: bool) -> float:
    """Seconds to read ``path`` whole with plain 8 MiB reads (:func:`scripts.roofline.read_rate`)."""
    from scripts.roofline import read_rate

    return path.stat().st_size / read_rate([path], cold=cold)


def _whole_copy_seconds(paths: list[Path], dtype) -> float:
    """Seconds main's loader spent on the same files before its final copy into the model (so a lower
    bound of main's load): the whole state dict first (``safetensors.torch.load_file``), ``isfinite`` on
    every tensor, then each tensor cast to the model's dtype."""
    import torch
    from safetensors.torch import load_file

    t0 = time.perf_counter()
    for path in paths:
        state = load_file(str(path))
        for tensor in state.values():
            if tensor.is_floating_point() and not torch.isfinite(tensor).all():
                raise ValueError(f"{path}: NaN or inf")
        for tensor in state.values():
            tensor.to(dtype)
        del state
    return time.perf_counter() - t0


@dataclass
class LoadRow:
    """One revision's weight files read four ways in the same run (seconds; ``bytes`` read)."""

    bytes: int
    load: float = 0.0          # the scan's streamed load into the resident model
    whole_copy: float = 0.0    # main's way: whole state dict, then cast (no copy into a model)
    warm: float = 0.0          # plain read from the page cache
    cold: float = 0.0          # plain read after DONTNEED


def run_scan(repo_id: str, suite: Path, args, out: Path, cache: Path, sampler: Sampler, *,
             share_prefix: bool = True, keep_shared: bool = True, name: str = "", precision: str = "fp32") -> RunStats:
    import pandas as pd
    import torch

    from ckptgeo.engine.scan import scan
    from ckptgeo.sources.hub import HubSource
    from ckptgeo.sources.weights import weight_shards

    stats = RunStats(name or ("A ckptgeo.engine.scan" + ("" if share_prefix else ", prefixes not shared")))

    class InstrumentedHub(HubSource):
        """HubSource that records the cache size just before each eviction and RSS just after it, and reads
        the revision's weight files the plain ways before they are evicted."""

        def expect(self, revisions):
            if keep_shared:
                super().expect(revisions)

        def release(self, revision):
            folder = self.cached_folder(revision)
            if args.read_rates and folder is not None and revision.name not in stats.loads:
                files = weight_shards(folder)
                row = LoadRow(sum(f.stat().st_size for f in files))
                row.warm = sum(_read_seconds(f, cold=False) for f in files)
                row.whole_copy = _whole_copy_seconds(files, torch.float32)
                row.cold = sum(_read_seconds(f, cold=True) for f in files)
                stats.loads[revision.name] = row
            sampler.note_cache(dir_bytes(cache))
            super().release(revision)
            stats.rss_after.append(rss())
            stats.released_at.append(time.perf_counter())

    import ckptgeo.engine.forward as forward_module
    import ckptgeo.engine.model as model_module
    from scripts.roofline import Stages, forward_flops

    stats.stages = stages = Stages(device=str(args.device))   # a GPU is synchronized before each clock read
    originals = [(forward_module, "run_suite", forward_module.run_suite),
                 (model_module, "sha256_file", model_module.sha256_file),
                 (model_module.ModelHolder, "load", model_module.ModelHolder.load)]
    stages.wrap(model_module, "sha256_file", "verify")
    stages.wrap(model_module.ModelHolder, "load", "load")
    stages.wrap(forward_module, "run_suite", "forward")
    timed_sweep = forward_module.run_suite

    flops_by_items: dict[int, int] = {}

    def sweep(*a, **kw):   # the first sweep of each item count is counted once more, untimed, for its FLOPs
        n = len(a[1].items)   # the batch-size trial of the first revision runs fewer items than the sweeps
        if n not in flops_by_items:
            flops_by_items[n] = forward_flops(lambda: originals[0][2](*a, **kw))
            stats.threads = torch.get_num_threads()
        stats.sweep_flops += flops_by_items[n]
        return timed_sweep(*a, **kw)

    forward_module.run_suite = sweep
    sampler.watch(cache)
    reset_hwm()
    if is_cuda(args.device):
        torch.cuda.reset_peak_memory_stats(args.device)
    t0, c0 = time.perf_counter(), os.times()
    source = InstrumentedHub(repo_id)
    try:
        result = scan(source, revisions="all", suites=(str(suite),), metrics=("rankme", "behavior"),
                      n_samples=args.n_items, prefetch=args.prefetch, batch_size=args.batch_size,
                      device=args.device, out=out, on_error="raise", share_prefix=share_prefix, precision=precision)
    finally:
        for owner, attribute, fn in originals:
            setattr(owner, attribute, fn)
    stats.wall, c1 = time.perf_counter() - t0, os.times()
    stats.batch_sizes = json.loads((Path(out) / "runs" / f"{result.config_hash}.json").read_text()).get(
        "runtime", {}).get("batch_sizes", [])
    stats.cpu = (c1.user - c0.user, c1.system - c0.system)
    stats.peak_rss_hwm, stats.peak_rss_sampled, stats.peak_cache = hwm(), sampler.peak_rss, sampler.peak_cache
    if is_cuda(args.device):
        stats.gpu_peak = torch.cuda.max_memory_allocated(args.device)
    stats.n_revisions = len(result.measured)
    stats.seconds = result.seconds
    for rev, row in stats.loads.items():
        row.load = result.seconds.get(rev, {}).get("load", float("nan"))

    geo = pd.read_parquet(out / "geometry")
    geo = geo[geo.metric == "rankme"]
    for rev, g in geo.groupby("revision"):
        stats.rankme[rev] = g.sort_values("layer").value.tolist()
    beh = pd.read_parquet(out / "behavior")
    for row in beh[beh.metric == "accuracy"].itertuples():
        stats.accuracy[row.revision] = (int(round(row.value * row.n_items)), int(row.n_items))
    # per revision: the whole revision (fetch, verify, load, forward, measures, write), the forward sweep
    # (the behaviour rows' seconds) and the measures on its outputs (the geometry rows' seconds)
    revs = pd.read_parquet(out / "revisions")
    total = revs[revs.status == "ok"].groupby("revision").seconds.max()
    forward = beh.groupby("revision").seconds.max()
    measures = pd.read_parquet(out / "geometry").groupby("revision").seconds.sum()
    stats.per_revision = {r: (float(total[r]), float(forward.get(r, 0.0)), float(measures.get(r, 0.0)))
                          for r in total.index}
    return stats


# --------------------------------------------------------------------------------------------------
# run B: the plain way
# --------------------------------------------------------------------------------------------------
def _lm_eval_loglik(model, requests, pad_id: int, batch_size: int, device) -> list[float]:
    """Summed log-probability of each continuation given its context, as lm-evaluation-harness's
    ``HFLM.loglikelihood`` computes it: requests sorted by total length (longest first), one
    right-padded sequence ``(context + continuation)[:-1]`` per request, full logits, log_softmax."""
    import torch

    order = sorted(range(len(requests)), key=lambda i: -len(requests[i][0] + requests[i][1]))
    out = [0.0] * len(requests)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        seqs = [(requests[i][0] + requests[i][1])[:-1] for i in idx]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
        for r, s in enumerate(seqs):
            ids[r, : len(s)] = torch.tensor(s)
        with torch.no_grad():
            logprobs = torch.log_softmax(model(ids.to(device)).logits.float(), dim=-1).cpu()
        for r, i in enumerate(idx):
            cont = requests[i][1]
            n = len(seqs[r])
            lp = logprobs[r, n - len(cont): n]                        # positions predicting the continuation
            target = torch.tensor(cont)
            _greedy = bool((lp.argmax(-1) == target).all())           # lm-eval also reports is_greedy
            out[i] = float(lp.gather(-1, target[:, None]).sum())
    return out


def run_plain(repo_id: str, branches: list[str], items, args, cache: Path, sampler: Sampler) -> RunStats:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ckptgeo.metrics.rankme import effective_rank

    stats = RunStats("B plain from_pretrained")
    batch_size = args.batch_size or 16
    device = torch.device(args.device)
    sampler.watch(cache)
    reset_hwm()
    if is_cuda(device):
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(repo_id, revision=branches[-1], cache_dir=cache)
    tok.padding_side = "right"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token

    def encode(text: str) -> list[int]:
        return tok(text, add_special_tokens=False)["input_ids"]

    # lm-eval's request split: the continuation is what the whole string adds after the context's tokens
    requests, owner = [], []
    for k, it in enumerate(items):
        ctx = encode(it.prompt)
        for c in it.choices:
            whole = encode(it.prompt + c)
            requests.append((ctx, whole[len(ctx):]))
            owner.append(k)
    prompts = [it.prompt for it in items]

    for branch in branches:
        model = AutoModelForCausalLM.from_pretrained(repo_id, revision=branch, cache_dir=cache,
                                                     dtype=torch.float32).to(device).eval()
        # RankMe: one batched pass with hidden states, last non-pad token, every layer
        per_layer: list[list[torch.Tensor]] = []
        for start in range(0, len(prompts), batch_size):
            enc = tok(prompts[start:start + batch_size], padding=True, add_special_tokens=False,
                      return_tensors="pt").to(device)
            with torch.no_grad():
                hidden = model(**enc, output_hidden_states=True).hidden_states
            last = enc["attention_mask"].sum(1) - 1
            rows = torch.arange(last.shape[0], device=device)
            if not per_layer:
                per_layer = [[] for _ in hidden]
            for layer, h in enumerate(hidden):
                per_layer[layer].append(h[rows, last].float().cpu())
        stats.rankme[branch] = [effective_rank(torch.cat(chunks)) for chunks in per_layer]
        # accuracy: one sequence per (prompt, choice)
        scores = _lm_eval_loglik(model, requests, tok.pad_token_id, batch_size, device)
        correct, r = 0, 0
        for it in items:
            n = len(it.choices)
            s = scores[r:r + n]
            correct += int(max(range(n), key=s.__getitem__) == it.answer)
            r += n
        stats.accuracy[branch] = (correct, len(items))
        stats.rss_after.append(rss())
        sampler.note_cache(dir_bytes(cache))
    del model
    sync(device)
    stats.wall = time.perf_counter() - t0
    stats.peak_rss_hwm, stats.peak_rss_sampled, stats.peak_cache = hwm(), sampler.peak_rss, sampler.peak_cache
    if is_cuda(device):
        stats.gpu_peak = torch.cuda.max_memory_allocated(device)
    stats.n_revisions = len(branches)
    return stats


# --------------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------------
def _mb(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 1e6:,.1f} MB"


def _run_block(s: RunStats, *, rev_weights: int, rev_all: int) -> str:
    """The figures of one run, as printed."""
    rss2 = s.rss_after[1] if len(s.rss_after) > 1 else None
    rssn = s.rss_after[-1] if s.rss_after else None
    flat = f"{rssn / rss2:.3f}" if rss2 and rssn else "n/a"
    return "\n".join([
        f"{s.name}:",
        f"  wall {s.wall:8.1f} s   per revision {s.wall / max(s.n_revisions, 1):7.2f} s   ({s.n_revisions} revisions)",
        f"  peak RSS {_mb(s.peak_rss_hwm)} (kernel VmHWM since the run began), {_mb(s.peak_rss_sampled)} (sampled)"
        + (f"; peak GPU memory {_mb(s.gpu_peak)} (torch.cuda.max_memory_allocated)" if s.gpu_peak is not None else ""),
        f"  RSS after revision 2 {_mb(rss2)}, after revision {len(s.rss_after)} {_mb(rssn)}: ratio {flat}",
        "  RSS after each revision (MB): " + " ".join(f"{x / 1e6:.0f}" for x in s.rss_after),
        f"  peak cache {_mb(s.peak_cache)} = {s.peak_cache / rev_all:.2f} revisions "
        f"({s.peak_cache / rev_weights:.2f} x the weights file)"])


def _breakdown(a: RunStats) -> str:
    """A's seconds per revision by step (ScanResult.seconds), then its load against plain reads."""
    lines = ["A per revision (s): waited for files (0 when fetched and hashed in time) / download and sha256 (in "
             "the prefetch thread) / load / forward / measure (forward + measures) / write"]
    for rev, t in a.seconds.items():
        lines.append(f"  {rev:>10}: {t['wait']:7.2f} / {t['download']:7.2f} / {t['verify']:6.2f} / {t['load']:6.2f} / "
                     f"{t['forward']:7.2f} / {t['measure']:7.2f} / {t['write']:5.2f}")
    if a.loads:
        lines.append("load vs the raw read of the same files, same run (s per GB; GB = 1e9 bytes):")
        lines.append("  revision      GB   scan load   main's read+check+cast   read (page cache)   read (after DONTNEED)")
        for rev, r in a.loads.items():
            gb = r.bytes / 1e9
            lines.append(f"  {rev:>8} {gb:7.3f} {r.load / gb:10.2f} {r.whole_copy / gb:23.2f} {r.warm / gb:19.2f} "
                         f"{r.cold / gb:22.2f}")
        tot = {k: sum(getattr(r, k) for r in a.loads.values()) for k in ("bytes", "load", "whole_copy", "warm", "cold")}
        gb = tot["bytes"] / 1e9
        lines.append(f"  all: scan load {tot['load'] / gb:.2f} s/GB = {tot['load'] / tot['warm']:.2f}x the page-cache "
                     f"read, {tot['load'] / tot['cold']:.2f}x the read after DONTNEED; main's read+check+cast "
                     f"{tot['whole_copy'] / gb:.2f} s/GB ({tot['whole_copy'] / tot['load']:.2f}x the scan's load)")
    return "\n".join(lines)


def _roofline(a: RunStats, device: str = "cpu") -> str:
    """A's roofline: its forward FLOP/s against the matmul peak of the device it ran on (the CPU at its thread
    count; a GPU's float32 rate with TF32 off, as the scan runs, and its bf16 rate for reference), its load against
    the plain read of the same files (and, on a GPU, the pinned host-to-device copy rate), and the system time's
    share of the CPU time per stage (all measured in this run)."""
    import torch

    from scripts.roofline import copy_rate, matmul_peak, roofline_lines, uptime

    forward = a.stages.times.get("forward")
    if is_cuda(device):
        peak = matmul_peak(0, device=device)
        also = (matmul_peak(0, device=device, dtype=torch.bfloat16),)
        where = f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    else:
        peak, also, where = matmul_peak(a.threads or 1), (), f"{a.threads} torch thread(s)"
    work = {"forward (all revisions)": (a.sweep_flops, forward)} if forward else {}
    reads = {}
    if a.loads:
        nbytes, warm = sum(r.bytes for r in a.loads.values()), sum(r.warm for r in a.loads.values())
        reads = {"read rate": (nbytes / warm, 1.0),
                 **({"copy rate": (copy_rate(device), 1.0)} if is_cuda(device) else {}),
                 "load (revisions read)": (nbytes, sum(r.load for r in a.loads.values()))}
    user, system = a.cpu
    chosen = [f"{c['suite']}: {c['batch_size']} ({c['chosen_by']}"
              + (f"; CPU s per item {', '.join(f'{b}: {v:.4f}' for b, v in c['cpu_seconds_per_item'].items())}"
                 if c.get("cpu_seconds_per_item") else "") + ")" for c in a.batch_sizes]
    lines = [f"{a.name}: roofline on {device} ({where}; {uptime()})",
             *([f"  forward batch size chosen: {'; '.join(chosen)}"] if chosen else []),
             *roofline_lines(peak=peak, work=work, reads=reads, also=also),
             "  CPU time per stage (whole process, all threads):", *a.stages.lines("    "),
             f"  whole run: user {user:.2f} s, system {system:.2f} s: system {system / max(user + system, 1e-9):.1%} "
             f"of the CPU time"]
    return "\n".join(lines)


def _precision_lines(a: RunStats, ap: RunStats, precision: str) -> str:
    """The reduced-precision run against fp32: forward seconds and pace ratios, RankMe's relative difference per
    layer (largest over revisions) and the correct answers per revision, against
    :data:`scripts.roofline.PRECISION_TOLERANCE`."""
    from scripts.roofline import PRECISION_TOLERANCE

    fwd = lambda s: sum(t["forward"] for t in list(s.seconds.values())[1:] or s.seconds.values())   # noqa: E731
    per = lambda s: (s.released_at[-1] - s.released_at[0]) / max(len(s.released_at) - 1, 1)   # noqa: E731
    layers = max(len(v) for v in a.rankme.values())
    worst = [max(abs(ap.rankme[r][i] - a.rankme[r][i]) / abs(a.rankme[r][i]) for r in a.rankme) for i in range(layers)]
    same = {r: (a.accuracy[r], ap.accuracy.get(r)) for r in a.accuracy}
    return "\n".join([
        f"precision {precision} against fp32 (same run, same items): forward {fwd(ap) / fwd(a):.3f}x fp32's seconds, "
        f"{per(ap) / per(a):.3f}x its seconds a revision",
        "  RankMe largest relative difference per layer: " + " ".join(f"{x:.1e}" for x in worst),
        f"  correct answers (fp32, {precision}) of n: " + ", ".join(f"{r} {x[0]}, {y[0] if y else '?'} of {x[1]}"
                                                                    for r, (x, y) in same.items()),
        f"  agreement: RankMe within {PRECISION_TOLERANCE:g} {'yes' if max(worst) <= PRECISION_TOLERANCE else 'NO'}; "
        f"correct answers identical "
        f"{'yes' if all(x == y for x, y in same.values()) else 'NO'}"])


def _report(a: RunStats, b: RunStats, *, rev_all: int, prefetch: int) -> bool:
    """Print the ratios against the targets and the agreement of the two runs; True if they agree."""
    per_a, per_b = a.wall / max(a.n_revisions, 1), b.wall / max(b.n_revisions, 1)
    speed = per_b / per_a
    a2, an = (a.rss_after[1], a.rss_after[-1]) if len(a.rss_after) > 1 else (None, None)
    flat = an / a2 if a2 else float("nan")
    cache_ok = a.peak_cache <= (prefetch + 1) * rev_all
    same_n = ("" if a.n_revisions == b.n_revisions
              else f" (per revision: A over {a.n_revisions}, B over {b.n_revisions})")
    lines = ["ratios:",
             f"  speed B/A {speed:.2f}x{same_n}   target >= 3x: {'MET' if speed >= 3 else 'NOT MET'}",
             f"  A RSS(rev {len(a.rss_after)}) / RSS(rev 2) {flat:.3f}   target within 10%: "
             f"{'MET' if abs(flat - 1) <= 0.10 else 'NOT MET'}",
             f"  A peak cache / one revision {a.peak_cache / rev_all:.2f} (K+1 = {prefetch + 1})   "
             f"target <= K+1: {'MET' if cache_ok else 'NOT MET'}",
             f"  B peak cache / one revision {b.peak_cache / rev_all:.2f} (never evicted)"]

    ok = True
    lines.append("agreement (accuracy as correct/n; RankMe max relative difference over layers):")
    for rev in sorted(b.accuracy, key=lambda r: int(r[4:]) if r[4:].isdigit() else r):
        ca, n = a.accuracy.get(rev, (None, None))
        cb, _ = b.accuracy[rev]
        ra, rb = a.rankme.get(rev), b.rankme[rev]
        rel = (max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(ra, rb))
               if ra is not None and len(ra) == len(rb) else float("inf"))
        acc_ok = ca is not None and abs(ca - cb) <= 1
        ok = ok and acc_ok and rel <= 1e-3
        lines.append(f"  {rev:>10}: accuracy A {ca}/{n} B {cb}/{n} {'ok' if acc_ok else 'DIFFERENT'}   "
                     f"RankMe (A) {' '.join(f'{x:.2f}' for x in ra or [])}; "
                     f"max rel diff {rel:.1e} {'ok' if rel <= 1e-3 else 'DIFFERENT'}")
    lines.append(f"agreement: {'all compared revisions agree' if ok else 'DISAGREEMENT (see above)'}")
    print("\n".join(lines), flush=True)
    return ok


def _parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Time ckptgeo.engine.scan against from_pretrained + lm-eval-style scoring on a loopback Hub.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  python scripts/bench_scan.py                      # pythia-70m shape, 10 revisions, 200 items\n"
               "  python scripts/bench_scan.py --shape tiny --revisions 4 --n-items 40   # quick check\n"
               "  python scripts/bench_scan.py --prefetch 2 --keep  # keep the work folder\n")
    parser.add_argument("--revisions", type=int, default=10, help="step branches served (default: %(default)s)")
    parser.add_argument("--shape", default=None, choices=["pythia-2.8b", "pythia-160m", "pythia-70m", "pythia-14m", "tiny"],
                        help="model shape of the served repo (default: pythia-2.8b with --device cuda on a GPU "
                             "machine, else pythia-70m)")
    parser.add_argument("--n-items", type=int, default=200, help="items of the suite (default: %(default)s)")
    parser.add_argument("--prefetch", type=int, default=1, help="K: revisions downloaded ahead (default: %(default)s)")
    parser.add_argument("--plain-revisions", type=int, default=None, metavar="M",
                        help="run B on the first M revisions only (it is the slow one); the speed ratio then "
                             "compares seconds per revision; 0 skips B (default: all)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="both runs (default: A chooses, from the GPU's free memory or 16 on a CPU; B 16)")
    parser.add_argument("--compare-prefix", action="store_true",
                        help="also run A with prefix sharing off (scan(..., share_prefix=False)) and print the ratios "
                             "with and without it")
    parser.add_argument("--compare-downloads", action="store_true",
                        help="serve two shards per revision, the last revision's first shard byte for byte "
                             "step0's, and run A again with shared blobs evicted as main did: bytes served "
                             "over loopback, before and after")
    parser.add_argument("--compare-precision", choices=["bf16", "tf32"], default=None,
                        help="also run A with scan(..., precision=...) and print its speed and its agreement with "
                             "fp32 (RankMe relative difference per layer, accuracy)")
    parser.add_argument("--no-read-rates", dest="read_rates", action="store_false",
                        help="skip the plain reads of each revision's files (load vs raw read rate)")
    parser.add_argument("--device", default="cpu", help="torch device for both runs (default: %(default)s)")
    parser.add_argument("--suite", type=Path, default=DEFAULT_SUITE,
                        help="BIG-bench task JSON (default: ../shared/data/bigbench_logical_deduction/"
                             "three_objects.json from the repo root)")
    parser.add_argument("--workdir", type=Path, default=None, help="work folder (default: a new temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (repo, caches, dataset)")
    args = parser.parse_args(argv)
    if args.revisions < 3:
        parser.error("--revisions must be at least 3 (RSS is compared after revision 2 and the last)")
    if args.plain_revisions is not None and not 0 <= args.plain_revisions <= args.revisions:
        parser.error("--plain-revisions must be between 0 (B skipped) and --revisions")
    if not args.suite.is_file():
        parser.error(f"--suite {args.suite} is not a file")
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        args.device, args.shape = "cpu", args.shape or "pythia-70m"
        print(f"no GPU here (--device cuda asked): running on the CPU with the {args.shape} shape instead of "
              f"pythia-2.8b; the <= 10 s per revision target is for one H200", flush=True)
    args.shape = args.shape or ("pythia-2.8b" if args.device.startswith("cuda") else "pythia-70m")
    if is_cuda(args.device):   # IEEE float32 as on the CPU (torch's default, stated: TF32 would differ ~1e-3)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    return args


def main(argv=None) -> int:
    args = _parse_args(argv)
    import shutil

    work = Path(args.workdir or tempfile.mkdtemp(prefix="ckptgeo-bench-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(REPO_ROOT))
    from scripts.olah_local import free_port, launch, stop, wait_ready

    port = free_port()
    cache_a, cache_b = work / "hf_a" / "hub", work / "hf_b" / "hub"
    cache_a.mkdir(parents=True, exist_ok=True)
    cache_b.mkdir(parents=True, exist_ok=True)
    # the client reads its environment once, at import: set it before anything imports huggingface_hub
    if "huggingface_hub" in sys.modules:
        raise RuntimeError("huggingface_hub was imported before the benchmark set HF_ENDPOINT")
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_CACHE",
                "HUGGINGFACE_HUB_CACHE", "HF_XET_CACHE"):
        os.environ.pop(var, None)
    os.environ.update({"HF_ENDPOINT": f"http://127.0.0.1:{port}", "HF_HOME": str(work / "hf_a"),
                       "HF_HUB_DISABLE_TELEMETRY": "1", "CKPTGEO_NO_PROGRESS": "1",
                       "CKPTGEO_CACHE": str(work / "ckptgeo_cache"), "TOKENIZERS_PARALLELISM": "false"})
    from scripts.make_test_repo import ModelShape, make_test_repo

    # EleutherAI/pythia-14m's config (14.1M parameters, 6 layers of width 128), float16 files
    PYTHIA_14M = ModelShape(vocab_size=50304, hidden_size=128, num_hidden_layers=6, num_attention_heads=4,
                            intermediate_size=512, dtype="float16")

    mirrors, log = work / "mirrors", work / "olah.log"
    mirrors.mkdir(exist_ok=True)
    proc = launch(mirrors, port, work / "olah", log)
    sampler = Sampler()
    try:
        t0 = time.perf_counter()
        steps = [1000 * i for i in range(args.revisions)]
        shared = {f"step{steps[-1]}": "step0"} if args.compare_downloads else None
        shape = PYTHIA_14M if args.shape == "pythia-14m" else args.shape
        repo = make_test_repo(mirrors / "models" / ORG / NAME, steps=steps, shape=shape,
                              shards=2 if shared else 1, share_shard=shared)
        wait_ready(f"http://127.0.0.1:{port}/api/models/{repo.repo_id}/refs", proc, log, timeout=120)
        branches = [f"step{s}" for s in steps]
        print(f"served {repo.repo_id}: {args.shape} shape, {len(branches)} revisions "
              f"(step0..step{steps[-1]}), built in {time.perf_counter() - t0:.1f} s; work folder {work}", flush=True)

        from huggingface_hub import HfApi

        tree = [e for e in HfApi().list_repo_tree(repo.repo_id, revision=branches[0]) if hasattr(e, "size")]
        rev_all = sum(e.size for e in tree)
        rev_weights = max(repo.weight_bytes[b] for b in branches)

        from ckptgeo.suites.items import load_suite, select_items

        items = select_items(load_suite(args.suite), args.n_items, 0)
        import torch

        print(f"suite {args.suite.name}: {len(items)} items; batch size {args.batch_size or 'auto (A), 16 (B)'}; "
              f"device {args.device}; "
              f"prefetch K={args.prefetch}; B on {args.plain_revisions or args.revisions} revisions; "
              f"torch CPU threads {torch.get_num_threads()}"
              + (f"; {torch.cuda.get_device_name(args.device)}, TF32 "
                 f"{'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}" if is_cuda(args.device) else ""),
              flush=True)
        print(f"one revision: {_mb(rev_all)} on the branch ({_mb(rev_weights)} weights)", flush=True)

        sampler.start()
        a = run_scan(repo.repo_id, args.suite, args, work / "out", cache_a, sampler)
        print(_run_block(a, rev_weights=rev_weights, rev_all=rev_all), flush=True)
        print(f"A per revision on {args.device} (s): whole revision / forward sweep / measures / the rest "
              f"(fetch over loopback, verify, load, write)", flush=True)
        for rev, (whole, fwd, meas) in a.per_revision.items():
            print(f"  {rev:>10}: {whole:7.2f} / {fwd:7.2f} / {meas:6.2f} / {whole - fwd - meas:7.2f}", flush=True)
        if len(a.released_at) > 1:   # the first revision holds the model's build and the batch-size trial
            later = (a.released_at[-1] - a.released_at[0]) / (len(a.released_at) - 1)
            print(f"A after its first revision: {later:.2f} s a revision = {1 / later:.3f} revisions per second "
                  f"on {args.device}", flush=True)
        print(_breakdown(a), flush=True)
        from scripts.roofline import pace_lines

        measured = ((a.released_at[-1] - a.released_at[0]) / (len(a.released_at) - 1)
                    if len(a.released_at) > 1 else None)
        warm = (sum(r.bytes for r in a.loads.values()) / sum(r.warm for r in a.loads.values())
                if a.loads else float("nan"))
        print("\n".join(pace_lines(a.seconds, prefetch=args.prefetch, per_revision=measured, nbytes=rev_weights,
                                   limits={"file read (page cache)": warm})), flush=True)
        print(_roofline(a, args.device), flush=True)
        if args.compare_precision:
            ap = run_scan(repo.repo_id, args.suite, args, work / f"out_{args.compare_precision}", cache_a, sampler,
                          precision=args.compare_precision, name=f"A ckptgeo.engine.scan --precision "
                                                                  f"{args.compare_precision}")
            print(_precision_lines(a, ap, args.compare_precision), flush=True)
        from scripts.olah_local import served_bytes

        served_a = sum(served_bytes(work / "olah", repo.repo_id).values())
        print(f"A: {served_a / 1e6:,.1f} MB served over loopback for the scan (tokenizer and configs included); "
              f"every revision's files: {len(branches) * rev_all / 1e6:,.1f} MB",
              flush=True)
        if args.compare_downloads:
            a1 = run_scan(repo.repo_id, args.suite, args, work / "out_evict", cache_a, sampler, keep_shared=False,
                          name="A' ckptgeo.engine.scan, shared blobs evicted as on main")
            served_a1 = sum(served_bytes(work / "olah", repo.repo_id).values()) - served_a
            print(_run_block(a1, rev_weights=rev_weights, rev_all=rev_all), flush=True)
            print(f"downloads: {served_a1 / 1e6:,.1f} MB served with shared blobs evicted (main), "
                  f"{served_a / 1e6:,.1f} MB with them kept for the later revision: ratio {served_a1 / served_a:.3f}",
                  flush=True)
        if args.compare_prefix:
            a0 = run_scan(repo.repo_id, args.suite, args, work / "out_unshared", cache_a, sampler, share_prefix=False)
            print(_run_block(a0, rev_weights=rev_weights, rev_all=rev_all), flush=True)
        if args.plain_revisions == 0:
            print("B skipped (--plain-revisions 0)", flush=True)
            return 0
        b = run_plain(repo.repo_id, branches[: args.plain_revisions or None], items, args, cache_b, sampler)
        print(_run_block(b, rev_weights=rev_weights, rev_all=rev_all), flush=True)
        if args.compare_prefix:
            # A and its unshared twin after their first revision (set-up, first loads and warm-up excluded)
            per_a, per_a0 = ((x.released_at[-1] - x.released_at[0]) / (len(x.released_at) - 1) for x in (a, a0))
            per_b = b.wall / max(b.n_revisions, 1)
            diff = max((abs(x - y) / max(abs(y), 1e-12) for rev in a.rankme for x, y in
                        zip(a.rankme[rev], a0.rankme.get(rev, []))), default=float("nan"))
            print(f"prefix sharing (A after its first revision): {per_a0:.2f} s/revision without, {per_a:.2f} s with: ratio {per_a0 / per_a:.2f}x; "
                  f"plain way / scan: {per_b / per_a:.2f}x with sharing, {per_b / per_a0:.2f}x without; "
                  f"RankMe max relative difference shared vs unshared {diff:.1e}; accuracy equal: "
                  f"{a.accuracy == a0.accuracy}", flush=True)
        ok = _report(a, b, rev_all=rev_all, prefetch=args.prefetch)
    finally:
        sampler.stop()
        stop(proc)
        if not args.keep and args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
