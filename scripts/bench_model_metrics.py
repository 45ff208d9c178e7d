"""Seconds per call of the whole-model metrics (grad_rank, grad_cov_rank, hessian, llc) at their
default settings, on a GPT-NeoX with random weights.

    python scripts/bench_model_metrics.py --threads 1           # 2 layers x 128, vocab 100, 32 items x 20 tokens
    python scripts/bench_model_metrics.py --preset pythia-2.8b --device cuda --dtype float32

Also prints one forward+backward and one Hessian-vector product, the units the costs scale with.
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch

PRESETS = {
    "small": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512, vocab_size=100),
    "pythia-2.8b": dict(hidden_size=2560, num_hidden_layers=32, num_attention_heads=32, intermediate_size=10240,
                        vocab_size=50304),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="small")
    ap.add_argument("--items", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=20)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--metrics", default="grad_rank,grad_cov_rank,hessian,llc")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch intra-op threads (on a shared 2-core machine 1 is 10-30x faster than 2)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from ckptgeo.metrics.registry import ModelContext, get_metric

    torch.manual_seed(0)
    cfg = GPTNeoXConfig(max_position_embeddings=2048, rotary_pct=0.25, **PRESETS[args.preset])
    device = torch.device(args.device)
    model = GPTNeoXForCausalLM(cfg).to(device=device, dtype=getattr(torch, args.dtype)).eval()
    n_params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(1, cfg.vocab_size, (args.items, args.seq_len), device=device)
    labels = torch.full_like(ids, -100)
    labels[:, -3:] = ids[:, -3:]
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    ctx = ModelContext(model=model, batch=batch, device=device, seed=0, revision="bench", suite="bench")
    print(f"preset={args.preset} params={n_params:,} items={args.items} seq_len={args.seq_len} device={device} "
          f"threads={torch.get_num_threads()}")

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    with torch.enable_grad():
        for _ in range(2):
            sync(); t = time.perf_counter()
            ctx.loss().backward()
            sync(); fb = time.perf_counter() - t
        model.zero_grad(set_to_none=True)
        from ckptgeo.metrics._autodiff import eager_attention
        from ckptgeo.metrics.hessian import HessianVectorProduct
        with eager_attention(model):
            params = list(model.parameters())
            op = HessianVectorProduct(lambda: ctx.loss(), params)
            v = torch.randn(op.n_params, dtype=torch.float64).numpy()
            op(v)
            sync(); t = time.perf_counter()
            op(v)
            sync(); hvp = time.perf_counter() - t
        del op
    print(f"forward+backward (batch) {fb:.3f} s; one HVP {hvp:.3f} s")

    for name in args.metrics.split(","):
        spec = get_metric(name)
        if hasattr(ctx, "_ckptgeo_gradients"):
            del ctx._ckptgeo_gradients  # time each gradient metric cold
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sync(); t = time.perf_counter()
            out = spec.fn(ctx, spec.default_config())
            sync(); dt = time.perf_counter() - t
        peak = f" peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB" if device.type == "cuda" else ""
        vals = ", ".join(f"{v.value:.4g}" for v in out)
        keys = {k: out[0].extra[k] for k in ("n_hvp", "method", "dim", "nbeta_used", "llc_std") if k in out[0].extra}
        print(f"{name:14s} {dt:8.2f} s{peak}  values [{vals}]  {keys}")


if __name__ == "__main__":
    main()
