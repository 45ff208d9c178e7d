"""A third-party measure for ckptgeo, as an outside package would ship it (used by tests/test_plugins.py).

Its ``pyproject.toml`` would declare::

    [project.entry-points."ckptgeo.metrics"]
    mean_norm = "ckptgeo_example_measure"

Importing the module registers the measure; ckptgeo itself is not changed. It follows the same
contract as the built-in measures (tests/test_metrics_contract.py): a frozen config, float64 out, NaN
input rejected with ckptgeo's error, numpydoc sections.
"""

from dataclasses import dataclass

from ckptgeo.errors import NonFiniteActivationsError
from ckptgeo.metrics.registry import register_metric


@dataclass(frozen=True)
class MeanNormConfig:
    """No settings."""


@register_metric(name="mean_norm", needs="hidden_states", cost="expensive", unit="activation units",
                 range=(0.0, float("inf")), config=MeanNormConfig)
def mean_norm(hidden_states, config: MeanNormConfig | None = None) -> float:
    """Mean Euclidean norm of the rows of ``hidden_states``.

    Parameters
    ----------
    hidden_states : Tensor of shape (n_samples, d_model)
    config : MeanNormConfig, optional

    Returns
    -------
    float
        ``mean_i ||h_i||_2``, computed in float64.

    Raises
    ------
    NonFiniteActivationsError
        ``hidden_states`` holds NaN or inf.

    References
    ----------
    None: an example of a plugin, not a measure from the literature.
    """
    h = hidden_states.double()
    if not bool(h.isfinite().all()):
        raise NonFiniteActivationsError("NaN or inf in hidden states given to mean_norm")
    return float(h.norm(dim=1).mean())
