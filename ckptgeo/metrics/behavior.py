"""Behaviour: accuracy per suite, from the log-probabilities the scan's forward pass produces.

Conventions (as lm-evaluation-harness scores them):

* multiple choice: each choice is a continuation of the prompt (BIG-bench choices carry a leading
  space); its score is the summed log-probability of its tokens given the prompt. ``accuracy`` picks the
  highest sum; ``accuracy_norm`` divides each sum by the choice's length in bytes (harness ``acc_norm``).
* minimal pair: the whole-sentence log-probability, the first token conditioned on the BOS/EOS token;
  correct when log P(good) > log P(bad).
* generation: exact match of the greedy continuation of ``len(target tokens)`` tokens, computed by
  teacher forcing (greedy matches the target iff every target token is the arg-max given the prompt and
  the target's own prefix).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ckptgeo.metrics.registry import register_metric

__all__ = ["BehaviorConfig", "behavior", "chance_level"]


@dataclass(frozen=True)
class BehaviorConfig:
    """No settings yet; present so the registry's contract holds for every metric."""


def chance_level(kinds_and_choices: list[tuple[str, int]]) -> float:
    """Expected accuracy of guessing: mean of 1/n_choices (multiple choice), 0.5 (minimal pair),
    0 (generation) over items given as ``(kind, n_choices)``."""
    vals = [1.0 / n if k == "multiple_choice" else 0.5 if k == "minimal_pair" else 0.0
            for k, n in kinds_and_choices]
    return float(np.mean(vals)) if vals else float("nan")


@register_metric(name="behavior", needs="outputs", cost="cheap", unit="fraction correct", range=(0.0, 1.0),
                 config=BehaviorConfig, table="behavior", higher_is_better=True)
def behavior(correct: np.ndarray, config: BehaviorConfig | None = None) -> float:
    """Accuracy: the mean of per-item correctness.

    Parameters
    ----------
    correct : ndarray of shape (n_items,)
        1.0 where the model's answer is right, 0.0 where wrong.

    Returns
    -------
    float
        Fraction correct in [0, 1]; NaN for no items.

    Examples
    --------
    >>> behavior(np.array([1.0, 0.0, 1.0, 1.0]))
    0.75
    """
    correct = np.asarray(correct, dtype=np.float64)
    return float(correct.mean()) if correct.size else float("nan")
