"""Relative weight distance between two checkpoints, per parameter block and for the whole model.

``||W_r - W_p||_F / ||W_p||_F`` for a revision ``r`` and its partner ``p``: the first revision measured
(distance from initialisation when the run starts at step 0) and the previous one. Blocks group the
parameters by module: a numbered transformer block (``gpt_neox.layers.3``) is one block, reported at the
hidden-state layer it produces (``layer = 4``); every other module (embedding, final norm, output head)
is a block of its own (``layer`` null); ``block = "model"`` (``layer = -1``) is the whole model.

A cross-checkpoint measure (:mod:`ckptgeo.metrics.registry`): a revision's partner may be measured by
another process or run, so each revision stores an artifact, per block:

* ``mode="exact"``: the flattened parameters (float32): the distance is exact, the cost is 4 bytes per
  parameter per revision in the dataset (a 0.4M-parameter demo model: 1.6 MB; pythia-14m: 56 MB;
  pythia-160m: 650 MB per revision), read back after the scan.
* ``mode="sketch"``: a CountSketch of ``sketch_dim`` entries (each parameter added, with a random sign,
  into one of ``sketch_dim`` buckets; the same hash at every revision, seeded by ``seed`` and the block
  name) and the exact norm. The sketch is linear, so ``||S(a) - S(b)||^2`` is an unbiased estimate of
  ``||a - b||^2`` with a relative standard deviation of about ``sqrt(2 / sketch_dim)`` (2.2% at the
  default 4096, i.e. about 1.1% on the distance itself); cost ``8 x sketch_dim`` bytes per block per
  revision. The denominators (norms) are exact.
* ``mode="auto"`` (default): exact up to ``exact_max_params`` parameters, sketch above.

The mode used is recorded in every row's ``settings``.
"""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass

import numpy as np

from ckptgeo._settings import Interval, Options, setting
from ckptgeo.errors import NonFiniteActivationsError
from ckptgeo.metrics.registry import CompareValue, register_metric

__all__ = ["WeightDistanceConfig", "weight_blocks", "weight_artifact", "compare_weights", "count_sketch"]

_NUMBERED = re.compile(r"^(.*?\.(?:layers|layer|h|blocks|block)\.(\d+))\.")
_CHUNK = 1 << 22


@dataclass(frozen=True)
class WeightDistanceConfig:
    """Settings of the weight distance (module docstring): ``mode`` in {"auto", "exact", "sketch"},
    ``exact_max_params`` (the largest model ``auto`` stores exactly), ``sketch_dim`` (buckets per block),
    ``seed`` (the sketch's hash; follows the scan's ``--seed``)."""

    mode: str = setting("auto", admits=(Options("auto", "exact", "sketch"),))
    exact_max_params: int = setting(5_000_000, admits=(Interval(int, 0, None),))
    sketch_dim: int = setting(4096, admits=(Interval(int, 16, None),))
    seed: int = setting(0, admits=(Interval(int, 0, None),))


def weight_blocks(names) -> dict[str, tuple[str, int | None]]:
    """Parameter name -> (block, layer). ``gpt_neox.layers.3.attention.dense.weight`` ->
    ``("gpt_neox.layers.3", 4)``; ``embed_out.weight`` -> ``("embed_out", None)``.

    >>> weight_blocks(["gpt_neox.layers.0.mlp.weight", "gpt_neox.final_layer_norm.bias", "bias"])
    {'gpt_neox.layers.0.mlp.weight': ('gpt_neox.layers.0', 1), 'gpt_neox.final_layer_norm.bias': \
('gpt_neox.final_layer_norm', None), 'bias': ('bias', None)}
    """
    out = {}
    for name in names:
        m = _NUMBERED.match(name)
        if m:
            out[name] = (m.group(1), int(m.group(2)) + 1)
        else:
            out[name] = (name.rpartition(".")[0] or name, None)
    return out


def count_sketch(chunks, dim: int, seed: int, block: str) -> np.ndarray:
    """CountSketch of a vector given as float64 numpy ``chunks`` (in order): entry i goes with sign s_i into
    bucket h_i, both drawn from a generator seeded by (``seed``, ``block``, chunk index), so the same for
    every revision whose block is chunked the same way (same shapes). Returns shape ``(dim,)`` float64.

    >>> x = np.arange(10.0)
    >>> s = count_sketch([x[:6], x[6:]], 4096, 0, "b")
    >>> float(s @ s) == float(x @ x)   # no two entries share a bucket here
    True
    """
    out = np.zeros(dim)
    base = zlib.crc32(block.encode())
    for c, x in enumerate(chunks):
        rng = np.random.default_rng([seed, base, c])
        idx = rng.integers(0, dim, size=x.size)
        sign = rng.integers(0, 2, size=x.size) * 2.0 - 1.0
        out += np.bincount(idx, weights=sign * x, minlength=dim)
    return out


def _block_vectors(model) -> dict[str, list]:
    blocks = weight_blocks([n for n, _ in model.named_parameters()])
    groups: dict[str, list] = {}
    for name, p in model.named_parameters():
        groups.setdefault(blocks[name][0], []).append(p)
    return groups


def weight_artifact(model, config: WeightDistanceConfig) -> dict[str, np.ndarray]:
    """What the scan stores of one revision's weights for the weight distance (module docstring).

    Parameters
    ----------
    model : torch.nn.Module
        The revision's model (its ``named_parameters``; tied parameters counted once).
    config : WeightDistanceConfig

    Returns
    -------
    dict of str to ndarray
        Per block: ``<block>/exact`` (float32 flattened parameters) or ``<block>/sketch`` (float64, shape
        ``(sketch_dim,)``), ``<block>/norm`` (float64, shape ``(1,)``, exact Frobenius norm) and
        ``<block>/layer`` (int64, shape ``(1,)``, -2 for a block that is no layer).

    Raises
    ------
    NonFiniteActivationsError
        A parameter holds NaN or inf (the block named).

    References
    ----------
    Charikar, Chen and Farach-Colton, "Finding frequent items in data streams", ICALP 2002 (CountSketch);
    relative weight distance from initialisation as in Li and Liang, NeurIPS 2018.
    """
    n_params = sum(p.numel() for p in model.parameters())
    exact = config.mode == "exact" or (config.mode == "auto" and n_params <= config.exact_max_params)
    layers = {b: l for b, l in weight_blocks([n for n, _ in model.named_parameters()]).values()}
    out: dict[str, np.ndarray] = {}
    for block, params in _block_vectors(model).items():
        flat = [p.detach().reshape(-1).cpu() for p in params]
        norm2 = sum(float((f.double() ** 2).sum()) for f in flat)
        if not math.isfinite(norm2):
            raise NonFiniteActivationsError(f"parameters of {block} hold NaN or inf; no weight distance")
        out[f"{block}/norm"] = np.array([math.sqrt(norm2)])
        out[f"{block}/layer"] = np.array([-2 if layers[block] is None else layers[block]], dtype=np.int64)
        if exact:
            out[f"{block}/exact"] = np.concatenate([f.float().numpy() for f in flat])
        else:
            chunks = (f[i:i + _CHUNK].double().numpy() for f in flat for i in range(0, f.numel(), _CHUNK))
            out[f"{block}/sketch"] = count_sketch(chunks, config.sketch_dim, config.seed, block)
    return out


def _blocks(art: dict) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for key, arr in art.items():
        block, _, part = key.rpartition("/")
        out.setdefault(block, {})[part] = arr
    return out


def compare_weights(a: dict, b: dict, config: WeightDistanceConfig) -> list[CompareValue]:
    """Relative distance ``||a - b|| / ||b||`` per block of ``a`` and for the whole model (``b`` is the
    partner). A block stored differently at the two revisions (exact vs sketch, other size) or missing
    at the partner gives NaN with its reason, and the whole model NaN."""
    ba, bb = _blocks(a), _blocks(b)
    values, total2, partner2, ok = [], 0.0, 0.0, True
    for block in sorted(ba):
        x = ba[block]
        layer = int(x["layer"][0])
        layer = None if layer == -2 else layer
        y = bb.get(block)
        form = "exact" if "exact" in x else "sketch"
        if y is None or form not in y or y[form].shape != x[form].shape:
            ok = False
            values.append(CompareValue(math.nan, layer=layer, block=block,
                                       reason="the partner stores this block differently or not at all"))
            continue
        d2 = float(np.sum((x[form].astype(np.float64) - y[form].astype(np.float64)) ** 2))
        if form == "sketch":
            d2 = max(d2, 0.0)
        norm = float(y["norm"][0])
        total2, partner2 = total2 + d2, partner2 + norm ** 2
        values.append(CompareValue(math.sqrt(d2) / norm if norm > 0 else math.nan, layer=layer, block=block,
                                   distance=math.sqrt(d2), partner_norm=norm, extra={"stored": form},
                                   reason=None if norm > 0 else "the partner's block is all zeros"))
    whole = math.sqrt(total2) / math.sqrt(partner2) if ok and partner2 > 0 else math.nan
    values.append(CompareValue(whole, layer=-1, block="model", distance=math.sqrt(total2) if ok else math.nan,
                               partner_norm=math.sqrt(partner2) if ok else math.nan,
                               reason=None if ok else "some block could not be compared",
                               extra={"stored": "+".join(sorted({("exact" if "exact" in x else "sketch")
                                                                  for x in ba.values()}))}))
    return values


register_metric(name="weight_distance", needs="weights", cost="expensive", unit="relative Frobenius distance",
                range=(0.0, math.inf), config=WeightDistanceConfig, compare=compare_weights,
                partners=("first", "previous"))(weight_artifact)
