"""Tiny GPT-NeoX models and ModelContexts for metric tests (random weights, no downloads)."""

from __future__ import annotations

import pytest
import torch

from ckptgeo.metrics.registry import ModelContext

__all__ = ["tiny_gpt_neox", "tiny_batch", "tiny_context", "single_thread"]


def tiny_gpt_neox(*, hidden: int = 8, layers: int = 1, heads: int = 2, vocab: int = 16, seed: int = 0,
                  attn_implementation: str | None = None) -> torch.nn.Module:
    """A GPT-NeoX causal LM with random weights, in eval mode, float32, on CPU."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(seed)
    cfg = GPTNeoXConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=4 * hidden, max_position_embeddings=64, rotary_pct=0.25)
    if attn_implementation is not None:
        cfg._attn_implementation = attn_implementation
    model = GPTNeoXForCausalLM(cfg).eval()
    return model


def tiny_batch(*, n_items: int = 6, seq_len: int = 7, vocab: int = 16, n_scored: int = 2, n_pad: int = 1,
               seed: int = 0) -> dict:
    """``input_ids``/``attention_mask``/``labels`` of shape (n_items, seq_len); the last ``n_scored``
    tokens of each item are scored; every other item has ``n_pad`` left-padding tokens."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, vocab, (n_items, seq_len), generator=g)
    mask = torch.ones_like(ids)
    for i in range(0, n_items, 2):
        mask[i, :n_pad] = 0
        ids[i, :n_pad] = 0
    labels = torch.full_like(ids, -100)
    labels[:, -n_scored:] = ids[:, -n_scored:]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def tiny_context(*, seed: int = 0, n_items: int = 6, seq_len: int = 7, **model_kw) -> ModelContext:
    """A ModelContext over :func:`tiny_gpt_neox` and :func:`tiny_batch`."""
    vocab = model_kw.get("vocab", 16)
    model = tiny_gpt_neox(**model_kw)
    batch = tiny_batch(n_items=n_items, seq_len=seq_len, vocab=vocab, seed=seed)
    return ModelContext(model=model, batch=batch, device=torch.device("cpu"), seed=seed, revision="step0",
                        suite="tiny")


@pytest.fixture(autouse=False)
def single_thread():
    """Run a test on one intra-op thread (the test machine's cores are shared; two threads contend)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
