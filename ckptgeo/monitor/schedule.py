"""When the monitor measures: log-spaced early, regular later (the trainer's checkpoint shape)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ckptgeo.errors import InvalidParameterError

__all__ = ["Schedule", "DEFAULT_EVERY"]

#: the default interval of the regular part, in optimiser steps.
DEFAULT_EVERY = 25


@dataclass(frozen=True)
class Schedule:
    """The steps at which the monitor measures.

    Either a rule (``every``): step 0, the powers of two below ``every``, then every ``every`` steps,
    open-ended, so it needs no total step count; or an explicit set of ``steps``.

    Parameters
    ----------
    every : int, default=25
        Interval of the regular part, in optimiser steps (>= 1).
    steps : tuple of int, optional
        Explicit steps; ``every`` is then ignored.

    Raises
    ------
    InvalidParameterError
        ``every`` < 1 or a negative step.

    Examples
    --------
    >>> s = Schedule(every=10)
    >>> [n for n in range(45) if s.due(n)]
    [0, 1, 2, 4, 8, 10, 20, 30, 40]
    >>> Schedule(steps=(0, 5, 7)).up_to(6)
    (0, 5)
    """

    every: int = DEFAULT_EVERY
    steps: tuple[int, ...] | None = None

    def __post_init__(self):
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 1:
            raise InvalidParameterError(f"The 'every' parameter of Schedule must be an int in [1, inf). "
                                        f"Got {self.every!r}.", name="every", value=self.every)
        if self.steps is not None:
            bad = [s for s in self.steps if isinstance(s, bool) or not isinstance(s, int) or s < 0]
            if bad:
                raise InvalidParameterError(f"Schedule steps must be ints >= 0. Got {bad[0]!r}.", name="steps",
                                            value=bad[0])
            object.__setattr__(self, "steps", tuple(sorted(set(self.steps))))

    @classmethod
    def of(cls, value: "Schedule | int | Iterable[int] | None") -> "Schedule":
        """A schedule from what a user passes: None (the default rule), an int (``every``), steps, or a
        Schedule."""
        if value is None:
            return cls()
        if isinstance(value, Schedule):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(every=value)
        return cls(steps=tuple(value))

    def due(self, step: int) -> bool:
        """Whether ``step`` is a measuring step."""
        if self.steps is not None:
            return step in self.steps
        if step < self.every:
            return step == 0 or (step & (step - 1)) == 0
        return step % self.every == 0

    def up_to(self, last: int) -> tuple[int, ...]:
        """Every measuring step from 0 to ``last`` inclusive."""
        if self.steps is not None:
            return tuple(s for s in self.steps if s <= last)
        return tuple(s for s in range(last + 1) if self.due(s))
