"""Measure collection: configure the selected measures, collect each kind of input they need once per
revision and suite, call them, and shape their results into table rows.

The inputs, each built on first use by :class:`SuiteInputs` and then shared by every measure of the
revision and suite:

* the forward sweep (:func:`ckptgeo.engine.forward.run_suite`): per-layer hidden states, probe
  states with labels, and per-item scores, for ``needs="hidden_states"``, ``"probe_states"`` and
  ``"outputs"``;
* the model context (:class:`~ckptgeo.metrics.context.ModelContext`): the fixed batch and the loss
  closure, for ``needs="model"``; inputs several whole-model measures share (per-sample gradients)
  are kept on it, so they are computed once.

How a result becomes rows depends only on what the measure needs (:data:`ROWS`), never on its name.
A cross-checkpoint measure (CKA, weight distance) yields an artifact per revision instead of rows
(:data:`ARTIFACTS`); the scan stores it and :func:`ckptgeo.metrics.cross.combine` makes the rows.

Every measure takes the option ``revisions`` (``--metric-option hessian.revisions=every-5``): a revision
selector applied to the scan's selection, the revisions at which that measure runs (default: all).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

from ckptgeo.errors import InvalidParameterError

__all__ = ["Measure", "SuiteInputs", "configure_metrics", "restrict_to_revisions", "measure_revision", "ROWS",
           "ARTIFACTS", "REVISIONS_OPTION"]

#: the option every measure takes: a revision selector of the revisions it runs at
REVISIONS_OPTION = "revisions"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Measure:
    """A selected measure with its settings: the registry's ``spec``, its ``config`` instance, the
    ``revisions`` selector it was asked at (None: every revision) and, once the scan's selection is known
    (:func:`restrict_to_revisions`), the names it selects (``at``)."""

    spec: Any
    config: Any
    selector: str | None = None
    at: frozenset | None = None

    def runs_at(self, revision: str) -> bool:
        """Whether this measure runs at ``revision``."""
        return self.at is None or revision in self.at

    @property
    def name(self) -> str:
        return self.spec.name

    @cached_property
    def settings(self) -> dict:
        """The config as a dict (``{}`` for a measure without settings) and the ``revisions`` selector when
        one was given, as recorded in every row and in the config hash."""
        out = dataclasses.asdict(self.config) if self.config is not None else {}
        return {**out, REVISIONS_OPTION: self.selector} if self.selector is not None else out

    @cached_property
    def hashed(self) -> dict:
        """:attr:`settings` as they enter the config hash: without the fields the config lists in
        ``_hashed_when_not_default`` while they hold their defaults (settings added after datasets existed
        that change no value, RankMe's interval: at their defaults those datasets keep their config hash)."""
        quiet = getattr(self.config, "_hashed_when_not_default", ())
        default = self.spec.default_config()
        return {k: v for k, v in self.settings.items()
                if not (k in quiet and default is not None and v == getattr(default, k))}

    @cached_property
    def settings_json(self) -> str:
        return json.dumps(self.settings, sort_keys=True, default=str)

    def columns(self) -> dict:
        """The settings its spec writes as table columns of their own (RankMe's ``centered``, ``epsilon``)."""
        return {column: self.settings.get(field) for field, column in self.spec.columns}


def configure_metrics(config) -> dict[str, Measure]:
    """The measures ``config`` selects, each with its options set and checked.

    Options come from ``config.metric_options`` and the alias fields (``centered``, ``epsilon``); a
    measure whose config has a ``seed`` follows the scan's ``seed`` unless its options set one.

    Raises
    ------
    InvalidParameterError
        An unknown measure, options for a measure not selected, an unknown option (valid ones
        listed) or a value outside its range (*The 'k' parameter of hessian must be an int in
        [1, inf). Got -1.*).
    """
    from ckptgeo.metrics.registry import get_metric, parse_metrics

    names = parse_metrics(list(config.metrics) if config.metrics else None)
    for name in config.metric_options or {}:
        get_metric(name)  # an unknown name: did-you-mean and the available ones
        if name not in names:
            raise InvalidParameterError(f"Options given for metric {name!r}, which is not selected "
                                        f"(metrics: {', '.join(names)}); add it to --metrics", name="metric_options",
                                        value=name)
    measures = {}
    for name in names:
        spec = get_metric(name)
        options = config.options_of(name)
        selector = options.pop(REVISIONS_OPTION, None)
        if selector is not None and (not isinstance(selector, str) or not selector.strip()):
            raise InvalidParameterError(f"The 'revisions' option of {name} must be a revision selector such as "
                                        f"'every-5' or 'step100,step200'. Got {selector!r}.",
                                        name="metric_options", value=selector)
        if spec.config is not None and "seed" in {f.name for f in dataclasses.fields(spec.config)}:
            options.setdefault("seed", config.seed)  # e.g. the probe's folds: the scan's --seed
        measures[name] = Measure(spec, spec.configure(options), selector=selector)
    return measures


def restrict_to_revisions(measures: dict[str, Measure], selected: list) -> dict[str, Measure]:
    """Each measure with a ``revisions`` selector, resolved against the scan's ``selected`` revisions (the
    same list in every process of a sharded scan).

    Raises
    ------
    RevisionNotFoundError, EmptySelectionError, InvalidParameterError
        The selector names a revision not in the selection, matches none of it, or does not parse.
    """
    from ckptgeo.errors import EmptySelectionError, RevisionNotFoundError
    from ckptgeo.sources.revisions import select_revisions

    out = {}
    for name, m in measures.items():
        if m.selector is not None:
            try:
                picked = select_revisions(list(selected), m.selector, source="the scan's selection")
            except RevisionNotFoundError as err:
                names = [r.name for r in selected]
                raise RevisionNotFoundError(
                    f"--metric-option {name}.revisions={m.selector}: {err.revision!r} is not among the scan's "
                    f"{len(names)} selected revisions ({', '.join(names[:3])}{' ...' if len(names) > 3 else ''}); "
                    f"closest: {', '.join(err.closest) or '-'}. Name revisions that --revisions selects.",
                    revision=err.revision, closest=err.closest) from err
            except EmptySelectionError as err:
                raise EmptySelectionError(f"--metric-option {name}.revisions={m.selector} selects none of the "
                                          f"scan's {len(selected)} selected revisions ({err})") from err
            m = dataclasses.replace(m, at=frozenset(r.name for r in picked))
        out[name] = m
    return out


class SuiteInputs:
    """The inputs of the measures at one revision and suite, each collected on first use, then shared.

    Parameters
    ----------
    model : torch.nn.Module
        The revision's model.
    prepared : PreparedSuite
        The suite, tokenized.
    config : ScanConfig
        ``batch_size``, ``position``, ``device``, ``seed``, ``model_items``.
    revision : str
        For error messages.
    with_probes : bool
        Whether the forward sweep also collects the states only probes read.
    batch_sizes : dict, optional
        The scan's :class:`~ckptgeo.engine.batching.BatchChoice` by suite name, kept across revisions: when ``config.batch_size`` is None and this suite has none yet, it is chosen
        here (:func:`~ckptgeo.engine.batching.choose_batch_size`, measured on a CPU) and logged. None: the
        forward's own default (:func:`~ckptgeo.engine.forward.auto_batch_size`).
    """

    def __init__(self, model, prepared, config, *, revision: str, with_probes: bool, batch_sizes: dict | None = None):
        self.model, self.prepared, self.config = model, prepared, config
        self.revision, self.with_probes, self.batch_sizes = revision, with_probes, batch_sizes
        self.forward_seconds = 0.0

    def _batch_size(self) -> int | None:
        from ckptgeo.engine.batching import choose_batch_size

        if self.config.batch_size is not None or self.batch_sizes is None:
            return self.config.batch_size
        key = self.prepared.suite.name
        if key not in self.batch_sizes:
            choice = choose_batch_size(self.model, self.prepared, self.config, revision=self.revision,
                                       with_probes=self.with_probes)
            log.info("%s", choice.describe())
            self.batch_sizes[key] = choice
        return self.batch_sizes[key].batch_size

    @cached_property
    def outputs(self):
        """The forward sweep's :class:`~ckptgeo.engine.forward.SuiteOutputs` (hidden states, probe states,
        per-item scores)."""
        from ckptgeo.engine.forward import run_suite

        batch_size = self._batch_size()
        t0 = time.perf_counter()
        out = run_suite(self.model, self.prepared, batch_size=batch_size, position=self.config.position,
                        device=self.config.device, revision=self.revision, with_probes=self.with_probes,
                        share_prefix=self.config.share_prefix,
                        precision_kind=getattr(self.config, "precision", "fp32"))   # a MonitorConfig has none
        self.forward_seconds = time.perf_counter() - t0
        pad = out.extra["padding"]
        log.info("%s, suite %s: %d token slots in the forward batches, %d of them padding (%.1f%%); batch size %d",
                 self.revision, out.suite, pad.slots, pad.pad, 100 * pad.share, out.extra["batch_size"])
        return out

    def reuse(self, outputs) -> None:
        """Take the forward sweep of another suite whose items are the same tokens (:func:`suite_key`): its
        outputs under this suite's name and chance level, with no pass of its own."""
        chance = self.prepared.suite.header.get("chance")
        self.__dict__["outputs"] = dataclasses.replace(outputs, suite=self.prepared.suite.name,
                                                       chance=float(outputs.chance if chance is None else chance))

    @cached_property
    def context(self):
        """The :class:`~ckptgeo.metrics.context.ModelContext` every whole-model measure of this suite shares."""
        import torch

        from ckptgeo.engine.forward import model_batch
        from ckptgeo.metrics.context import ModelContext

        cfg = self.config
        return ModelContext(model=self.model, batch=model_batch(self.prepared, cfg.model_items, cfg.device),
                            device=torch.device(cfg.device), seed=cfg.seed, revision=self.revision,
                            suite=self.prepared.suite.name)


# ------------------------------------------------------------------------------------ rows per need

def _hidden_state_rows(m: Measure, inputs: SuiteInputs, row0: dict) -> list[dict]:
    states = inputs.outputs.states
    rows = []
    for layer in range(states.shape[0]):
        t0 = time.perf_counter()
        value = float(m.spec.fn(states[layer], m.config))
        low = high = None
        if m.spec.interval is not None:
            low, high = (float(x) for x in m.spec.interval(states[layer], m.config, int(row0.get("seed") or 0) + layer))
            low, high = (None, None) if math.isnan(low) else (low, high)
        reason = None
        if math.isnan(value):
            reason = "all-zero hidden states" if not bool(states[layer].any()) else "undefined (NaN) on these states"
        rows.append({**row0, **m.columns(), "layer": layer, "metric": m.name, "index": None, "value": value,
                     "value_low": low, "value_high": high,
                     "reason": reason or m.spec.out_of_range(value), "settings": m.settings_json,
                     "seconds": time.perf_counter() - t0})
    return rows


def _probe_rows(m: Measure, inputs: SuiteInputs, row0: dict) -> list[dict]:
    from ckptgeo.store.dataset import SCHEMAS

    out = inputs.outputs
    columns = set(SCHEMAS[m.spec.table].names)
    rows = []
    for layer in range(out.probe_states.shape[0]):
        res = m.spec.fn(out.probe_states[layer], out.probe_labels, m.config)
        d = res if isinstance(res, dict) else dataclasses.asdict(res)
        rows.append({**row0, **m.columns(), "layer": layer, "settings": m.settings_json,
                     **{k: v for k, v in d.items() if k in columns and k not in row0}})
    return rows


def _output_rows(m: Measure, inputs: SuiteInputs, row0: dict) -> list[dict]:
    out = inputs.outputs
    scores = {"accuracy": out.correct, "accuracy_norm": out.correct_norm, "loss": out.loss}
    return [{**row0, **m.columns(), "metric": label, "value": m.spec.fn(correct, m.config),
             "n_items": len(out.correct), "chance": None if label == "loss" else out.chance, "kind": out.kind,
             "seconds": inputs.forward_seconds}
            for label, correct in scores.items() if correct is not None]


def _model_rows(m: Measure, inputs: SuiteInputs, row0: dict) -> list[dict]:
    t0 = time.perf_counter()
    values = m.spec.fn(inputs.context, m.config)
    secs = time.perf_counter() - t0
    return [{**row0, **m.columns(), "layer": -1, "metric": m.name, "index": v.index, "value": float(v.value),
             "converged": _optional_bool(v.extra.get("converged")), "grad_norm": v.extra.get("grad_norm"),
             "reason": v.reason or m.spec.out_of_range(float(v.value)),
             "settings": json.dumps({**m.settings, **v.extra}, sort_keys=True, default=str), "seconds": secs}
            for v in values]


def _optional_bool(x) -> bool | None:
    return None if x is None else bool(x)


def _state_artifacts(m: Measure, inputs: SuiteInputs) -> dict:
    states, suite = inputs.outputs.states, inputs.prepared.suite.name
    return {f"{suite}/{layer}/{key}": arr for layer in range(states.shape[0])
            for key, arr in m.spec.fn(states[layer], m.config).items()}


def _weight_artifacts(m: Measure, inputs: SuiteInputs) -> dict:
    return dict(m.spec.fn(inputs.model, m.config))


#: How a cross-checkpoint measure's artifact is made, by what it needs (``weights``: once per revision).
ARTIFACTS: dict[str, Callable[[Measure, SuiteInputs], dict]] = {"hidden_states": _state_artifacts,
                                                                 "weights": _weight_artifacts}

#: How the result of a measure becomes rows, by what it needs.
ROWS: dict[str, Callable[[Measure, SuiteInputs, dict], list[dict]]] = {
    "hidden_states": _hidden_state_rows, "probe_states": _probe_rows, "outputs": _output_rows, "model": _model_rows}


def measure_revision(model, prepared: list, measures: dict[str, Measure], config, row0: dict, *, revision: str,
                     states_dir: Path | None = None, seconds: dict[str, float] | None = None,
                     artifacts: dict | None = None, batch_sizes: dict | None = None,
                     forward: list[float] | None = None) -> dict[str, list[dict]]:
    """Every measure over every prepared suite at one revision: rows per table.

    Parameters
    ----------
    model : torch.nn.Module
        The revision's model, in eval mode.
    prepared : list of PreparedSuite
    measures : dict of str to Measure
        From :func:`configure_metrics`.
    config : ScanConfig
    row0 : dict
        Columns every row of this revision carries (model, revision, step, commit, tokens, scan settings).
    revision : str
        The revision's name, for error messages.
    states_dir : Path, optional
        Where to keep each suite's hidden states (``--save-states``).
    seconds : dict, optional
        Filled with the wall seconds spent per measure name, summed over suites (the forward pass a suite's
        measures share is counted in the first measure that asks for it).
    artifacts : dict, optional
        Filled with each cross-checkpoint measure's artifact, ``{measure: {key: ndarray}}``; when None,
        those measures are not run (a caller that cannot store artifacts).
    batch_sizes : dict, optional
        The forward batch size chosen per suite, kept by the caller across revisions (see :class:`SuiteInputs`).
    forward : list of float, optional
        Each forward sweep's wall seconds are appended (a suite that reuses another's sweep adds none).

    Measures whose ``revisions`` option leaves out ``revision`` are not run.

    Returns
    -------
    dict of str to list of dict
        Table name -> rows, in the table's columns.

    Raises
    ------
    NonFiniteActivationsError
        NaN or inf in the hidden states or a whole-model measure's loss (revision, layer, suite named).
    """
    from ckptgeo.engine.forward import suite_key

    here = [m for m in measures.values() if m.runs_at(revision) and (artifacts is not None or not m.spec.cross)]
    if artifacts is None and any(m.spec.cross for m in measures.values()):
        log.warning("%s compare checkpoints through artifacts only a scan stores; not measured here",
                    ", ".join(m.name for m in measures.values() if m.spec.cross))
    with_probes = any(m.spec.needs == "probe_states" for m in here)
    rows: dict[str, list[dict]] = {m.spec.table: [] for m in here if not m.spec.cross}
    seconds = {} if seconds is None else seconds
    swept: dict[tuple, Any] = {}  # suites whose items are the same tokens share one forward sweep
    for i, ps in enumerate(prepared):
        inputs = SuiteInputs(model, ps, config, revision=revision, with_probes=with_probes, batch_sizes=batch_sizes)
        key = suite_key(ps)
        if key in swept:
            inputs.reuse(swept[key])
        if states_dir is not None:
            _save_states(states_dir, ps.suite.name, inputs.outputs)
        row0_suite = {**row0, "suite": ps.suite.name}
        for m in here:
            t0 = time.perf_counter()
            if not m.spec.cross:
                rows[m.spec.table] += ROWS[m.spec.needs](m, inputs, row0_suite)
            elif m.spec.needs != "weights" or i == 0:
                artifacts.setdefault(m.name, {}).update(ARTIFACTS[m.spec.needs](m, inputs))
            seconds[m.name] = seconds.get(m.name, 0.0) + time.perf_counter() - t0
        if "outputs" in inputs.__dict__:
            if key not in swept and forward is not None:
                forward.append(inputs.forward_seconds)
            swept.setdefault(key, inputs.outputs)
    return rows


def _save_states(folder: Path, suite: str, outputs) -> None:
    from safetensors.torch import save_file

    from ckptgeo._io import atomic_path, safe_name

    # the suite's name comes from its file (header or items): made one safe path component inside ``folder``
    with atomic_path(folder / f"{safe_name(suite, what='suite name')}.safetensors") as tmp:
        save_file({"states": outputs.states.contiguous(), "probe_states": outputs.probe_states.contiguous()},
                  str(tmp))
