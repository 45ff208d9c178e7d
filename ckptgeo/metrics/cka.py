"""Linear CKA between the representations of two checkpoints on the same items (Kornblith et al., ICML 2019).

For representations ``X`` (n x d1) and ``Y`` (n x d2) of the same n rows, centred column-wise::

    CKA(X, Y) = ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F) = <K, L> / (||K||_F ||L||_F),  K = X X^T, L = Y Y^T

1 for the same representation, invariant to orthogonal transforms and isotropic scaling of either side,
in [0, 1]. It is a cross-checkpoint measure (:mod:`ckptgeo.metrics.registry`): at each revision the scan
stores, per suite and layer, the centred representation ``X`` when ``d_model < n`` (n x d float64) or
else its centred Gram matrix ``K`` (n x n float64), whichever is smaller; after the scan each revision
is compared with the previous one measured and with a reference revision (``reference``: the last one,
or a revision the user names).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ckptgeo._settings import NonEmptyStr, setting
from ckptgeo.errors import NonFiniteActivationsError
from ckptgeo.metrics.registry import CompareValue, register_metric

__all__ = ["CKAConfig", "linear_cka", "cka_artifact", "compare_cka"]


@dataclass(frozen=True)
class CKAConfig:
    """Settings of CKA. ``reference``: the revision every other is also compared with, ``"last"`` (the
    last revision of the scan's selection that has an artifact) or a revision name (``step1000``)."""

    reference: str = setting("last", admits=(NonEmptyStr,))


def _centred(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x - x.mean(axis=0, keepdims=True)


def _gram(form: str, a: np.ndarray) -> np.ndarray:
    return a @ a.T if form == "x" else a


def _cka(form_a: str, a: np.ndarray, form_b: str, b: np.ndarray) -> float:
    """CKA of two stored (form, array) pairs, both centred: ``"x"`` (n x d) or ``"gram"`` (n x n)."""
    if form_a == "x" and form_b == "x":
        cross = float(np.sum((b.T @ a) ** 2))
        norm_a, norm_b = np.linalg.norm(a.T @ a), np.linalg.norm(b.T @ b)
    else:
        k, m = _gram(form_a, a), _gram(form_b, b)
        cross = float(np.sum(k * m))
        norm_a, norm_b = np.linalg.norm(k), np.linalg.norm(m)
    if norm_a == 0.0 or norm_b == 0.0:
        return math.nan
    return cross / float(norm_a * norm_b)


def linear_cka(x, y) -> float:
    """Linear CKA of two representations of the same rows.

    Parameters
    ----------
    x : array-like, shape (n_rows, d1)
    y : array-like, shape (n_rows, d2)

    Returns
    -------
    float
        In [0, 1] (to rounding); NaN when either side is constant over the rows. Computed in float64.

    Raises
    ------
    ValueError
        ``x`` and ``y`` have different numbers of rows, or are not 2-D.

    Examples
    --------
    >>> rng = np.random.default_rng(0); x = rng.normal(size=(50, 8))
    >>> round(linear_cka(x, 3 * x), 12)
    1.0
    """
    x, y = _centred(x), _centred(y)
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] != y.shape[0]:
        raise ValueError(f"CKA needs two 2-D arrays with the same rows; got shapes {x.shape} and {y.shape}")
    return _cka("x", x, "x", y)


def cka_artifact(states, config: CKAConfig) -> dict[str, np.ndarray]:
    """What the scan stores of one layer's states for CKA, the smaller of the two equivalent forms.

    Parameters
    ----------
    states : torch.Tensor or ndarray, shape (n_samples, d_model)
        One layer's hidden states over the suite's items (the rows RankMe reads).
    config : CKAConfig

    Returns
    -------
    dict of str to ndarray
        ``{"x": centred states}`` (n x d float64) when d < n, else ``{"gram": centred Gram matrix}``
        (n x n float64); :func:`compare_cka` reads either.

    Raises
    ------
    NonFiniteActivationsError
        NaN or inf in ``states``.

    References
    ----------
    Kornblith, Norouzi, Lee and Hinton, "Similarity of Neural Network Representations Revisited",
    ICML 2019 (linear CKA).
    """
    x = _centred(states.detach().cpu().double().numpy() if hasattr(states, "detach") else states)
    if not np.isfinite(x).all():
        raise NonFiniteActivationsError("hidden states hold NaN or inf; CKA cannot be computed")
    n, d = x.shape
    return {"x": x} if d < n else {"gram": x @ x.T}


def compare_cka(a: dict, b: dict, config: CKAConfig) -> list[CompareValue]:
    """CKA per (suite, layer) between two revisions' artifacts (keys ``<suite>/<layer>/<form>``).

    A (suite, layer) one side lacks, or stored on a different number of rows (other items), gives a
    NaN value with its reason.
    """
    def index(art):
        out = {}
        for key, arr in art.items():
            suite_layer, _, form = key.rpartition("/")
            suite, _, layer = suite_layer.rpartition("/")
            out[(suite, int(layer))] = (form, arr)
        return out

    ia, ib = index(a), index(b)
    values = []
    for (suite, layer), (fa, xa) in sorted(ia.items()):
        if (suite, layer) not in ib:
            values.append(CompareValue(math.nan, layer=layer, suite=suite, reason="the partner has no states here"))
            continue
        fb, xb = ib[(suite, layer)]
        if xa.shape[0] != xb.shape[0]:
            values.append(CompareValue(math.nan, layer=layer, suite=suite, n_rows=xa.shape[0],
                                       reason=f"{xa.shape[0]} rows here, {xb.shape[0]} at the partner"))
            continue
        value = _cka(fa, xa, fb, xb)
        values.append(CompareValue(value, layer=layer, suite=suite, n_rows=int(xa.shape[0]),
                                   reason="constant representation: CKA undefined" if math.isnan(value) else None))
    return values


register_metric(name="cka", needs="hidden_states", cost="expensive", unit="similarity", range=(0.0, 1.0 + 1e-9),
                config=CKAConfig, compare=compare_cka, partners=("previous", "reference"))(cka_artifact)
