"""The six model sizes of the algorithmic suites: GPT-NeoX decoders, built the way Pythia is.

Pre-norm blocks with a parallel residual (``use_parallel_residual=True``), rotary embeddings on a
quarter of each head (``partial_rotary_factor=0.25``), GELU MLP of width ``4 * d_model``, biases on,
untied input and output embeddings: the same ``GPTNeoXForCausalLM`` code path that loads Pythia.

========  ========  =======  =======  =============  ======================
name      n_layers  d_model  n_heads  non-embedding  total (146-token vocab)
========  ========  =======  =======  =============  ======================
tiny      2         128      4        396,800        434,176
mini      4         256      4        3,159,552      3,234,304
small     6         384      6        10,647,552     10,759,680
medium    8         512      8        25,220,096     25,369,600
large     12        768      12       85,056,000     85,280,256
xl        12        1024     16       151,156,736    151,455,744
========  ========  =======  =======  =============  ======================

Per block: ``12 d^2 + 13 d`` parameters (QKV and output projections with biases, the MLP with biases,
two layer norms); plus the final layer norm (``2 d``) and the two embedding tables (``2 V d``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckptgeo.errors import InvalidParameterError
from ckptgeo.suites.vocab import EOS, PAD, BOS, VOCAB

if TYPE_CHECKING:  # pragma: no cover
    from transformers import GPTNeoXConfig

__all__ = ["ModelSize", "SIZES", "get_size", "build_config", "count_parameters", "MAX_POSITIONS"]

#: longest sequence the models are built for (the longest task item is 60 tokens).
MAX_POSITIONS = 128


@dataclass(frozen=True)
class ModelSize:
    """One model size: depth, width and heads of a GPT-NeoX decoder.

    Attributes
    ----------
    name : str
        Short name used in run folders (``modular-L1-tiny-s0``).
    n_layers, d_model, n_heads : int
        Blocks, residual width and attention heads; the MLP is ``4 * d_model`` wide.
    """

    name: str
    n_layers: int
    d_model: int
    n_heads: int

    def n_parameters(self, vocab_size: int = len(VOCAB), *, embeddings: bool = True) -> int:
        """Parameter count from the architecture alone (no model is built).

        Parameters
        ----------
        vocab_size : int, default=146
            Rows of each embedding table.
        embeddings : bool, default=True
            Include the input and output embedding tables (``2 * vocab_size * d_model``).

        Examples
        --------
        >>> SIZES["tiny"].n_parameters()
        434176
        >>> SIZES["tiny"].n_parameters(embeddings=False)
        396800
        """
        d = self.d_model
        n = self.n_layers * (12 * d * d + 13 * d) + 2 * d
        return n + (2 * vocab_size * d if embeddings else 0)


SIZES: dict[str, ModelSize] = {s.name: s for s in (
    ModelSize("tiny", 2, 128, 4),
    ModelSize("mini", 4, 256, 4),
    ModelSize("small", 6, 384, 6),
    ModelSize("medium", 8, 512, 8),
    ModelSize("large", 12, 768, 12),
    ModelSize("xl", 12, 1024, 16),
)}


def get_size(name: str) -> ModelSize:
    """The :class:`ModelSize` called ``name``.

    Raises
    ------
    InvalidParameterError
        ``name`` is not one of :data:`SIZES`.
    """
    try:
        return SIZES[name]
    except KeyError:
        raise InvalidParameterError(
            f"Unknown model size {name!r}. Available: {', '.join(SIZES)}.", name="size", value=name) from None


def build_config(size: str | ModelSize, *, vocab_size: int = len(VOCAB)) -> "GPTNeoXConfig":
    """The ``GPTNeoXConfig`` of a named size, Pythia's settings at that depth and width.

    Parameters
    ----------
    size : str or ModelSize
        A name from :data:`SIZES` or a size object.
    vocab_size : int, default=146
        The task vocabulary's size (both embedding tables get exactly this many rows).

    Raises
    ------
    InvalidParameterError
        Unknown size name.
    """
    from transformers import GPTNeoXConfig

    spec = get_size(size) if isinstance(size, str) else size
    return GPTNeoXConfig(
        vocab_size=vocab_size, hidden_size=spec.d_model, num_hidden_layers=spec.n_layers,
        num_attention_heads=spec.n_heads, intermediate_size=4 * spec.d_model, hidden_act="gelu",
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        max_position_embeddings=MAX_POSITIONS, initializer_range=0.02, layer_norm_eps=1e-5,
        use_parallel_residual=True, attention_bias=True, tie_word_embeddings=False, hidden_dropout=0.0,
        attention_dropout=0.0, bos_token_id=VOCAB.index(BOS), eos_token_id=VOCAB.index(EOS),
        pad_token_id=VOCAB.index(PAD))


def count_parameters(model) -> int:
    """Number of parameters of a built ``torch.nn.Module`` (each tensor counted once)."""
    return sum(p.numel() for p in model.parameters())
