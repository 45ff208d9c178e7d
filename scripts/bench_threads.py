"""Torch thread counts against torch's default, per model size, on an idle and a busy machine.

For each model size (``ckptgeo.training.SIZES``) it times the two kinds of work the toolkit does on a
CPU: a scan batch (forward pass with every layer's hidden states, no gradient) and a training step
(forward, backward, AdamW), first as the machine is, then with one extra CPU-bound process running
(started by this script). Each thread count is printed as a speed ratio against torch's default
(``torch.get_num_threads()`` at start), measured in the same run. The rule in ``ckptgeo/_threads.py``
(1 thread below ``SMALL_MODEL_PARAMETERS``, else the physical cores, divided among the processes a
launcher started on the node) is chosen from this table.

    python scripts/bench_threads.py                       # tiny, mini, small, medium; ~3 minutes on 2 cores
    python scripts/bench_threads.py --sizes tiny,mini --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import torch


def _time(fn, repeats: int, min_seconds: float) -> float:
    """Median seconds per call of ``fn`` (calls grouped so that each timing lasts ``min_seconds``)."""
    fn()  # warm-up
    t = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t, 1e-4)
    inner = max(1, int(min_seconds / one))
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        out.append((time.perf_counter() - t) / inner)
    return statistics.median(out)


def _work(size: str, batch: int, seq_len: int):
    from transformers import GPTNeoXForCausalLM

    from ckptgeo.training.sizes import build_config, get_size

    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(build_config(get_size(size)))
    n = sum(p.numel() for p in model.parameters())
    ids = torch.randint(1, model.config.vocab_size, (batch, seq_len))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def scan():
        with torch.no_grad():
            model.eval()
            model(input_ids=ids[:16], output_hidden_states=True)

    def train():
        model.train()
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return n, {"scan": scan, "train": train}


def main() -> int:
    from ckptgeo._threads import SMALL_MODEL_PARAMETERS, default_threads, physical_cores

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="tiny,mini,small,medium")
    ap.add_argument("--batch", type=int, default=64, help="training items per step (scan batches use 16)")
    ap.add_argument("--seq-len", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-seconds", type=float, default=0.5, help="each timing lasts at least this long")
    args = ap.parse_args()

    default = torch.get_num_threads()
    counts = sorted({1, physical_cores(), default})
    print(f"torch default {default} threads, {physical_cores()} physical cores; rule: 1 thread below "
          f"{SMALL_MODEL_PARAMETERS:,} parameters, else the physical cores")
    print("ratio = seconds at torch's default / seconds at N threads (above 1: N is faster)")
    header = f"{'size':>7} {'params':>11} {'machine':>7} {'work':>5} {'default s':>9} " + \
             " ".join(f"{f'{c} thr':>7}" for c in counts) + "  rule"
    print(header)
    for size in args.sizes.split(","):
        n, works = _work(size, args.batch, args.seq_len)
        for machine in ("as is", "busy"):
            hog = None
            if machine == "busy":
                hog = subprocess.Popen([sys.executable, "-c", "while 1: pass"])
                time.sleep(0.5)
            try:
                for wname, fn in works.items():
                    secs = {}
                    for c in counts:
                        torch.set_num_threads(c)
                        secs[c] = _time(fn, args.repeats, args.min_seconds)
                    torch.set_num_threads(default)
                    base = secs[default]
                    cells = " ".join(f"{base / secs[c]:7.2f}" for c in counts)
                    print(f"{size:>7} {n:>11,} {machine:>7} {wname:>5} {base:9.4f} {cells}  {default_threads(n)}",
                          flush=True)
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
