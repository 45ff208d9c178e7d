"""The settings of a scan (:class:`ScanConfig`) and their checks."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ckptgeo._params import Interval, Options, validate_params
from ckptgeo.constants import DEFAULT_N_SAMPLES
from ckptgeo.errors import InvalidParameterError

__all__ = ["ScanConfig", "parse_size", "validate_scan_config", "METRIC_OPTION_ALIASES"]

#: ScanConfig fields kept as short forms of one measure's option: ``centered=True`` is
#: ``metric_options={"rankme": {"centered": True}}`` (``--centered`` on the command line).
METRIC_OPTION_ALIASES = {"centered": ("rankme", "centered"), "epsilon": ("rankme", "eps")}


@dataclass(frozen=True)
class ScanConfig:
    """Settings of a scan; the fields are the keyword options of :func:`ckptgeo.engine.scan.scan`, where
    each is documented. Those that change values (not ``device``, ``batch_size``, ``prefetch``, the disk
    and resume options) enter the config hash that keys resume, and are written in every row.
    """

    revisions: str | None = None
    suites: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    metric_options: Mapping[str, Mapping[str, Any]] | None = None
    n_samples: int = DEFAULT_N_SAMPLES
    position: str = "last"
    centered: bool | None = None
    dtype: str = "float32"
    epsilon: float | None = None
    seed: int = 0
    batch_size: int | None = None
    device: str = "cpu"
    prefetch: int = 1
    max_disk: int | None = None
    keep_cache: bool = False
    overwrite: bool = False
    save_states: bool = False
    on_error: str = "skip"
    step_pattern: str | None = None
    model_items: int = 32
    threads: int | None = None
    share_prefix: bool = True
    tokenizer: str | None = None

    _parameter_constraints = {
        "n_samples": [Interval(int, 2, None)],
        "batch_size": [Interval(int, 1, None), None],
        "prefetch": [Interval(int, 0, 64)],
        "seed": [Interval(int, 0, None)],
        "model_items": [Interval(int, 1, None)],
        "max_disk": [Interval(int, 1, None), None],
        "threads": [Interval(int, 1, None), None],
        "position": [Options("last", "mean")],
        "on_error": [Options("skip", "raise")],
        "dtype": [Options("float32", "float64", "bfloat16", "float16", "auto")],
    }

    def options_of(self, metric: str) -> dict[str, Any]:
        """The options given for ``metric``: ``metric_options[metric]`` plus the alias fields set
        (``centered``, ``epsilon`` for RankMe).

        Raises
        ------
        InvalidParameterError
            An alias and ``metric_options`` set the same option to different values.
        """
        options = dict((self.metric_options or {}).get(metric) or {})
        for field, (owner, option) in METRIC_OPTION_ALIASES.items():
            value = getattr(self, field)
            if owner != metric or value is None:
                continue
            if option in options and options[option] != value:
                raise InvalidParameterError(f"{field}={value!r} and metric_options[{metric!r}][{option!r}]="
                                            f"{options[option]!r} disagree; give it once", name=field, value=value)
            options[option] = value
        return options


def validate_scan_config(config: ScanConfig) -> None:
    """Check a scan's settings (measure options are checked by each measure's config).

    Raises
    ------
    InvalidParameterError
        A value outside its range or choices (*The 'n_samples' parameter of scan must be an int in
        [2, inf). Got 1.*), a ``step_pattern`` that does not compile or captures no step, or
        ``metric_options`` that is not a mapping of metric names to mappings.
    """
    validate_params(config, owner="scan")
    if config.step_pattern is not None:
        try:
            groups = re.compile(config.step_pattern).groups
        except re.error as err:
            raise InvalidParameterError(f"--step-pattern {config.step_pattern!r} is not a valid regular expression: "
                                        f"{err}", name="step_pattern", value=config.step_pattern) from err
        if groups < 1:
            raise InvalidParameterError(f"--step-pattern {config.step_pattern!r} needs a group capturing the step, "
                                        r"e.g. '^ckpt-(\d+)$'", name="step_pattern", value=config.step_pattern)
    options = config.metric_options
    if options is not None and (not isinstance(options, Mapping)
                                or not all(isinstance(v, Mapping) for v in options.values())):
        raise InvalidParameterError(f"The 'metric_options' parameter of scan must be a mapping of metric names to "
                                    f"mappings of options, e.g. {{'hessian': {{'k': 10}}}}. Got {options!r}.",
                                    name="metric_options", value=options)


def merge_options(config: ScanConfig | None, options: Mapping[str, Any]) -> ScanConfig:
    """``config`` (default: all defaults) with the ``options`` that differ from their defaults set on it."""
    if config is None:
        return ScanConfig(**options)
    defaults = {f.name: f.default for f in dataclasses.fields(ScanConfig)}
    return dataclasses.replace(config, **{k: v for k, v in options.items() if v != defaults[k]})


def parse_size(text: str | int | None) -> int | None:
    """``"20GB"``, ``"500M"``, ``"1.5TiB"``, ``1000`` -> bytes.

    >>> parse_size("2GB"), parse_size("1KiB")
    (2000000000, 1024)
    """
    if text is None or isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?)(i?)B?\s*", str(text), flags=re.I)
    if not m:
        raise InvalidParameterError(f"Cannot parse size {text!r}; use e.g. 500MB, 20GB, 1.5TiB",
                                    name="max_disk", value=text)
    base = 1024 if m.group(3) else 1000
    return int(float(m.group(1)) * base ** " KMGT".index(m.group(2).upper() or " "))
