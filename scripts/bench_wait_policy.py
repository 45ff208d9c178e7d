"""OpenMP's wait policy: a 2-thread forward pass with idle threads spinning (ACTIVE) against sleeping (PASSIVE).

``import ckptgeo`` sets ``OMP_WAIT_POLICY=PASSIVE`` unless the user set it; this script measures why. Each policy
runs in its own process (libgomp reads the variable once, when torch loads it), the two alternating, and the
script prints each run's wall and CPU seconds and the median ACTIVE / PASSIVE ratios from the same sitting.

    python scripts/bench_wait_policy.py                   # 14m-shaped GPT-NeoX, batch 16 x 64 tokens, 3 rounds
    python scripts/bench_wait_policy.py --rounds 5 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_CHILD = """
import json, sys, time, torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
torch.manual_seed(0)
torch.set_num_threads({threads})
cfg = GPTNeoXConfig(vocab_size=50304, hidden_size=128, num_hidden_layers=6, num_attention_heads=4,
                    intermediate_size=512)
model = GPTNeoXForCausalLM(cfg).eval()
x = torch.randint(0, 50000, (16, 64))
with torch.no_grad():
    model(x)
    t, c = time.perf_counter(), time.process_time()
    for _ in range({passes}):
        model(x, output_hidden_states=True)
    print(json.dumps({{"wall": time.perf_counter() - t, "cpu": time.process_time() - c}}))
"""


def _run(policy: str, threads: int, passes: int) -> dict:
    env = dict(os.environ, OMP_WAIT_POLICY=policy)
    out = subprocess.run([sys.executable, "-c", _CHILD.format(threads=threads, passes=passes)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--passes", type=int, default=30, help="forward passes timed per run")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    res: dict[str, list[dict]] = {"ACTIVE": [], "PASSIVE": []}
    for i in range(args.rounds):
        for policy in res:
            r = _run(policy, args.threads, args.passes)
            res[policy].append(r)
            print(f"round {i + 1} {policy:7s}: wall {r['wall']:.2f} s, cpu {r['cpu']:.2f} s")
    for key in ("wall", "cpu"):
        ratio = statistics.median(a[key] / p[key] for a, p in zip(res["ACTIVE"], res["PASSIVE"]))
        print(f"ACTIVE / PASSIVE {key}: {ratio:.2f}x")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
