"""All five geometry measures on one pythia-14m-shaped revision: wall time, peak memory, finite values.

Builds a local folder with one ``step1000`` checkpoint of a GPT-NeoX shaped like pythia-14m (6 layers,
d_model 128, 4 heads, vocabulary 50,304; random weights) and the BIG-bench three-object items, runs

    ckptgeo scan DIR --suite three_objects.json --metrics rankme,grad_rank,grad_cov_rank,hessian,llc
        --n-samples 32

in a child process under ``/usr/bin/time -v`` and prints its wall time, peak RSS and every value. In
this process it also times one loss and backward on the measures' fixed batch the old way (logits at
every position and the full vocabulary) against the task loss (logits at the answer positions only),
and prints the ratio: the baseline measured in the same run.

    python scripts/bench_lm_metrics.py                      # ~5 minutes on 2 cores
    python scripts/bench_lm_metrics.py --threads 2 --keep /tmp/p14m
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIGBENCH = ROOT.parent / "shared" / "data" / "bigbench_logical_deduction" / "three_objects.json"
METRICS = "rankme,grad_rank,grad_cov_rank,hessian,llc"
SHAPE = dict(vocab_size=50304, hidden_size=128, num_hidden_layers=6, num_attention_heads=4, intermediate_size=512,
             max_position_embeddings=2048, rotary_pct=0.25, bos_token_id=0, eos_token_id=0,
             tie_word_embeddings=False)


def build(folder: Path) -> int:
    """The checkpoint folder (tokenizer trained on the BIG-bench text, as the tests do); returns P."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    sys.path.insert(0, str(ROOT))
    from tests._checkpoints import train_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    train_tokenizer().save_pretrained(folder)
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(GPTNeoXConfig(**SHAPE))
    model.save_pretrained(folder / "step1000")
    return sum(p.numel() for p in model.parameters())


def loss_ratio(folder: Path, suite: Path, n_items: int, repeats: int = 3) -> tuple[float, float, float]:
    """Seconds of one loss + backward with logits everywhere, at the last positions holding every answer
    (the per-item loss of the gradient ranks), and at the rows predicting an answer token only (the
    batch loss of Hessian and LLC, ``ModelContext.loss``)."""
    import torch
    from transformers import AutoTokenizer, GPTNeoXForCausalLM

    from ckptgeo.engine.forward import model_batch, prepare_suite
    from ckptgeo.metrics.registry import ModelContext
    from ckptgeo.suites.items import load_suite

    model = GPTNeoXForCausalLM.from_pretrained(folder / "step1000").eval()
    ps = prepare_suite(load_suite(suite), AutoTokenizer.from_pretrained(folder), n_samples=n_items)
    batch = model_batch(ps, n_items)
    ctx = ModelContext(model=model, batch=batch, device=torch.device("cpu"))
    full = batch["labels"].shape[1]

    from ckptgeo.metrics._autodiff import task_token_losses

    def tail_loss(keep):
        tok, mask = task_token_losses(model, batch, keep)
        return tok.sum() / mask.sum()

    def timed(loss):
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            loss().backward()
            best = min(best, time.perf_counter() - t)
            model.zero_grad(set_to_none=True)
        return best

    return timed(lambda: tail_loss(full)), timed(lambda: tail_loss(ctx.logits_to_keep())), timed(ctx.loss)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", default=None, help="build the checkpoint folder here and keep it")
    ap.add_argument("--threads", type=int, default=None, help="passed to the scan (default: ckptgeo's rule)")
    ap.add_argument("--n-samples", type=int, default=32)
    ap.add_argument("--metrics", default=METRICS)
    ap.add_argument("--timeout", type=int, default=1800, help="seconds before the scan is stopped")
    ap.add_argument("--metric-option", action="append", default=[], metavar="METRIC.OPTION=VALUE",
                    help="passed to the scan (for profiling; the benchmark's figure is without any)")
    args = ap.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="ckptgeo-bench-lm-")
    folder = Path(args.keep) if args.keep else Path(tmp.name) / "p14m"
    n_params = build(folder) if not (folder / "step1000").is_dir() else None
    full_s, tail_s, rows_s = loss_ratio(folder, BIGBENCH, args.n_samples)
    print(f"pythia-14m shape, {n_params or '(existing folder)'} parameters; one loss + backward on "
          f"{args.n_samples} items (best of 3): all positions {full_s:.3f} s (baseline), last positions holding "
          f"the answers {tail_s:.3f} s ({full_s / tail_s:.1f}x), answer-predicting rows only {rows_s:.3f} s "
          f"({full_s / rows_s:.1f}x)", flush=True)

    out = Path(tmp.name) / "out"
    cmd = [sys.executable, "-m", "ckptgeo", "scan", str(folder), "--suite", str(BIGBENCH), "--metrics", args.metrics,
           "--n-samples", str(args.n_samples), "--out", str(out)]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    for opt in args.metric_option:
        cmd += ["--metric-option", opt]
    print("$ " + " ".join(cmd[1:] if cmd[0] == sys.executable else cmd).replace(str(out), "OUT"), flush=True)
    timer = ["/usr/bin/time", "-v"] if Path("/usr/bin/time").exists() else []
    t = time.perf_counter()
    try:
        proc = subprocess.run(timer + ["timeout", str(args.timeout)] + cmd, capture_output=True, text=True,
                              cwd=ROOT, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    finally:
        wall = time.perf_counter() - t
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    cpu = sum(float(m) for m in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", proc.stderr))
    print(f"scan exit {proc.returncode}; wall {wall:.0f} s; CPU (user + system) {cpu:.0f} s; peak RSS "
          + (f"{int(rss.group(1)) / 2**20:.2f} GiB" if rss else "unknown"))
    if proc.returncode != 0:
        print(proc.stderr[-3000:])
        return 1
    import pandas as pd

    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["?"] * 3
    print(f"load average after the scan (1, 5, 15 min): {' '.join(load)} on {__import__('os').cpu_count()} CPUs "
          f"(other processes' load inflates the wall time)")

    g = pd.read_parquet(out / "geometry")
    for (metric, layer), rows in g.groupby(["metric", "layer"], sort=False):
        vals = ", ".join(f"{v:.4g}" for v in rows.sort_values("index").value)
        extra = json.loads(rows.settings.iloc[0])
        keys = {k: extra[k] for k in ("n_hvp", "converged", "stopped_by", "n_params", "n_sgld_steps",
                                      "n_steps_per_chain") if k in extra}
        print(f"  {metric:14s} layer {layer:2d}  {rows.seconds.max():7.1f} s  [{vals}] {keys}")
    finite = bool(g.value.notna().all())
    print(f"every value finite: {finite}")
    return 0 if finite else 1


if __name__ == "__main__":
    sys.exit(main())
