"""Training batches: fresh items every step, seeded by ``(seed, step)``, never a held-out prompt; their
encoding into padded id tensors, and the loss on answer tokens."""

from __future__ import annotations

import random
from typing import Sequence

from ckptgeo.suites.items import Item
from ckptgeo.suites.tasks import sample
from ckptgeo.training.config import TrainConfig

__all__ = ["Batcher", "encode", "answer_loss"]


class Batcher:
    """Training batches: fresh items per step, seeded by (seed, step), held-out prompts excluded.

    Parameters
    ----------
    config : TrainConfig
        ``tasks``, ``levels``, ``seed``, ``batch_size``.
    vocab : dict of str -> int
        The tokenizer's vocabulary.
    pad_id : int
    exclude : dict of suite name -> frozenset of str
        Held-out prompts per ``"<task>-L<level>"``, never trained on.
    """

    def __init__(self, config: TrainConfig, vocab: dict[str, int], pad_id: int, exclude: dict[str, frozenset]):
        self.config, self.vocab, self.pad_id, self.exclude = config, vocab, pad_id, exclude

    def items(self, step: int) -> list[Item]:
        """The ``batch_size`` items of ``step`` (the same at every call)."""
        rng = random.Random(f"{self.config.seed}:train:{step}")
        pairs = list(zip(self.config.tasks, self.config.levels))
        out = []
        while len(out) < self.config.batch_size:
            task, level = pairs[rng.randrange(len(pairs))]
            it = sample(task, level, rng)
            if it.prompt not in self.exclude[f"{task}-L{level}"]:
                out.append(it)
        return out

    def batch(self, step: int):
        """:func:`encode` of :meth:`items`."""
        import torch

        return encode(self.items(step), self.vocab, self.pad_id, torch)


def encode(items: Sequence[Item], vocab: dict[str, int], pad_id: int, torch):
    """(input_ids, attention_mask, target_mask), each (batch, length); right-padded.

    Word-level ids by whitespace split: the same ids the tokenizer gives (tested)."""
    rows, n_prompt = [], []
    for it in items:
        p = [vocab[t] for t in it.prompt.split()]
        rows.append(p + [vocab[t] for t in it.target.split()])
        n_prompt.append(len(p))
    length = max(len(r) for r in rows)
    ids = torch.full((len(rows), length), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), length), dtype=torch.long)
    target = torch.zeros((len(rows), length), dtype=torch.bool)
    for i, (r, n) in enumerate(zip(rows, n_prompt)):
        ids[i, :len(r)] = torch.tensor(r)
        attn[i, :len(r)] = 1
        target[i, n:len(r)] = True
    return ids, attn, target


def answer_loss(logits, ids, target, torch):
    """Mean cross-entropy over answer tokens: the logits at position t predict token t + 1."""
    mask = target[:, 1:]
    return torch.nn.functional.cross_entropy(logits[:, :-1][mask].float(), ids[:, 1:][mask])
