"""OpenMP's wait policy: a 2-thread forward pass with idle threads spinning, sleeping at once, or spinning briefly.

``import ckptgeo`` sets ``OMP_WAIT_POLICY=PASSIVE`` unless the user set it; this script measures why. Three
settings, each in its own process (libgomp reads the variables once, when torch
loads it), alternating round by round, each a scan's forward (hidden states of every layer, no logits; the
allocator tuned as a scan tunes it, :func:`ckptgeo._threads.tune_allocator`):

* ``active``: ``OMP_WAIT_POLICY=ACTIVE``, idle threads spin (they take CPU time other processes need);
* ``passive`` (ckptgeo's): ``OMP_WAIT_POLICY=PASSIVE``, idle threads sleep at once (a futex wait and a wake-up in
  the kernel between two of the forward's thousands of short parallel regions);
* ``brief``: ``PASSIVE`` with ``GOMP_SPINCOUNT=10000``, a brief spin (about 0.1 ms) before sleeping.

Printed: each run's wall, user and system seconds, and the median ratios to ``passive`` from the same sitting.

    python scripts/bench_wait_policy.py                   # 14m-shaped GPT-NeoX, batch 16 x 192 tokens, 3 rounds
    python scripts/bench_wait_policy.py --rounds 5 --threads 2 --tokens 64
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_CHILD = """
import json, os, sys, time
from ckptgeo._threads import tune_allocator
import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM
tune_allocator()
torch.manual_seed(0)
torch.set_num_threads({threads})
cfg = GPTNeoXConfig(vocab_size=50304, hidden_size=128, num_hidden_layers=6, num_attention_heads=4,
                    intermediate_size=512)
model = GPTNeoXForCausalLM(cfg).eval()
x = torch.randint(0, 50000, (16, {tokens}))
with torch.no_grad():
    model.gpt_neox(x)
    t, c = time.perf_counter(), os.times()
    for _ in range({passes}):
        model.gpt_neox(x, output_hidden_states=True)
    d = os.times()
    print(json.dumps({{"wall": time.perf_counter() - t, "user": d.user - c.user, "sys": d.system - c.system}}))
"""

#: the environment of each setting (``passive``: what ``import ckptgeo`` sets)
SETTINGS = {"active": {"OMP_WAIT_POLICY": "ACTIVE"}, "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
            "brief": {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "10000"}}


def _run(setting: str, threads: int, passes: int, tokens: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    out = subprocess.run([sys.executable, "-c", _CHILD.format(threads=threads, passes=passes, tokens=tokens)],
                         env={**env, **SETTINGS[setting]}, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=192, help="tokens per item (logical deduction's are 150-250)")
    ap.add_argument("--passes", type=int, default=20, help="forward passes timed per run")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    res: dict[str, list[dict]] = {s: [] for s in SETTINGS}
    for i in range(args.rounds):
        for setting in res:
            r = _run(setting, args.threads, args.passes, args.tokens)
            res[setting].append(r)
            print(f"round {i + 1} {setting:8s}: wall {r['wall']:.2f} s, user {r['user']:.2f} s, sys {r['sys']:.2f} s "
                  f"(sys {r['sys'] / max(r['user'] + r['sys'], 1e-9):.0%} of CPU)")
    for setting in ("active", "brief"):
        for key in ("wall", "cpu"):
            val = (lambda r: r["wall"]) if key == "wall" else (lambda r: r["user"] + r["sys"])
            ratio = statistics.median(val(a) / val(b) for a, b in zip(res[setting], res["passive"]))
            print(f"{setting} / passive {key}: {ratio:.2f}x")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
