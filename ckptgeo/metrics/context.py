"""What a whole-model measure (``needs="model"``) receives: the model, a fixed batch, the loss, and
the inputs that several measures share.

The engine builds one :class:`ModelContext` per revision and suite and hands the same object to every
whole-model measure selected, so an input they have in common is computed once: per-sample gradients
(``grad_rank`` and ``grad_cov_rank``, see :func:`ckptgeo.metrics.gradients.shared_gradients`) are
kept by :meth:`ModelContext.shared` under a key naming their settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Hashable

if TYPE_CHECKING:  # torch is imported where a loss is computed, so `ckptgeo scan --help` stays cheap
    import torch

__all__ = ["ModelContext"]


@dataclass
class ModelContext:
    """The model, its fixed batch and loss at one revision and suite, and the inputs measures share.

    ``model`` is the causal LM in eval mode on ``device``. ``batch`` holds ``input_ids`` and
    ``attention_mask`` of shape ``(n_items, seq_len)`` and ``labels`` of the same shape with -100
    where a position is not scored (the answer tokens of each item are scored). ``seed`` seeds any
    randomness; ``position_ids`` (optional) give left-padded rows their positions. :meth:`loss` is the
    task loss: the mean token cross-entropy (nats) over scored positions, the output head applied only
    at the positions that predict a scored token (``_autodiff.task_loss``; per item, at the last
    :meth:`logits_to_keep` positions, ``_autodiff.task_token_losses``);
    :meth:`per_sample_loss` returns one loss per item, shape ``(n_items,)``. A measure that samples
    around the weights (LLC) works on copies of ``model`` and leaves it unchanged. :meth:`shared` keeps
    inputs several measures read (per-sample gradients), computed once.
    """

    model: torch.nn.Module
    batch: dict
    device: torch.device
    seed: int = 0
    revision: str = ""
    suite: str = ""
    _shared: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def logits_to_keep(self, batch: dict | None = None) -> int:
        """Last positions whose logits the task loss reads (see ``_autodiff.scored_tail``); computed once
        from ``batch`` (default this context's), outside any ``vmap``."""
        from ckptgeo.metrics._autodiff import scored_tail

        if batch is None or batch is self.batch:
            if getattr(self, "_keep", None) is None:
                self._keep = scored_tail(self.batch["labels"])
            return self._keep
        return scored_tail(batch["labels"])

    def per_sample_loss(self, model: torch.nn.Module | None = None, batch: dict | None = None,
                        keep: int | None = None) -> torch.Tensor:
        from ckptgeo.metrics._autodiff import task_token_losses

        batch = batch or self.batch
        tok, mask = task_token_losses(model or self.model, batch, keep or self._tail(batch))
        return tok.sum(1) / mask.sum(1).clamp_min(1)

    def loss(self, model: torch.nn.Module | None = None, batch: dict | None = None) -> torch.Tensor:
        from ckptgeo.metrics._autodiff import task_loss

        batch = batch or self.batch
        return task_loss(model or self.model, batch, self._tail(batch))

    def _tail(self, batch: dict) -> int:
        # rows drawn from this context's batch keep its columns, so its tail covers them
        same = "labels" in self.batch and batch["labels"].shape[1] == self.batch["labels"].shape[1]
        return self.logits_to_keep() if same else self.logits_to_keep(batch)

    def shared(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The input ``key`` of this context: ``compute()`` on first request, the same object after.

        The key also holds a fingerprint of the weights, so a context whose weights were changed in
        place computes again instead of serving a stale input.
        """
        weights = _weights_fingerprint(self.model)
        if self._shared.get("_weights") != weights:
            self._shared = {"_weights": weights}
        if key not in self._shared:
            self._shared[key] = compute()
        return self._shared[key]


def _weights_fingerprint(model: torch.nn.Module) -> tuple:
    import torch

    with torch.no_grad():
        return (id(model),) + tuple(float(p.detach().flatten()[:16].double().sum()) for p in model.parameters())
