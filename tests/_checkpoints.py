"""Tiny GPT-NeoX checkpoint folders for tests (real weights, real tokenizer, no network)."""

from __future__ import annotations

import json
from pathlib import Path

BIGBENCH = Path(__file__).resolve().parents[2] / "shared" / "data" / "bigbench_logical_deduction"
BLIMP = Path(__file__).resolve().parents[2] / "shared" / "data" / "blimp"


def train_tokenizer(vocab_size: int = 512):
    """A byte-level BPE tokenizer trained on the BIG-bench logical-deduction text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = []
    for f in ("three_objects.json", "five_objects.json"):
        for ex in json.loads((BIGBENCH / f).read_text())["examples"]:
            texts.append(ex["input"])
            texts.extend(ex["target_scores"])
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|padding|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token="<|endoftext|>")


def tiny_config(**overrides):
    from transformers import GPTNeoXConfig

    kw = dict(vocab_size=512, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
              max_position_embeddings=512, rotary_pct=0.25, bos_token_id=0, eos_token_id=0,
              tie_word_embeddings=False)
    kw.update(overrides)
    return GPTNeoXConfig(**kw)


def make_checkpoints(root: Path, steps=(0, 1, 2, 4, 100, 200), *, duplicate: dict | None = None) -> Path:
    """``root/step{N}`` folders of seeded random tiny GPT-NeoX weights plus the tokenizer at ``root``.
    ``duplicate={"step200": "step100"}`` makes step200 a byte copy of step100."""
    import shutil

    import torch
    from transformers import GPTNeoXForCausalLM

    root.mkdir(parents=True, exist_ok=True)
    train_tokenizer().save_pretrained(root)
    cfg = tiny_config()
    for step in steps:
        torch.manual_seed(step + 1)
        GPTNeoXForCausalLM(cfg).save_pretrained(root / f"step{step}")
    for copy, orig in (duplicate or {}).items():
        shutil.rmtree(root / copy, ignore_errors=True)
        shutil.copytree(root / orig, root / copy)
    return root
