"""The training-time monitor: a scan of the live model at scheduled steps, no checkpoint saved.

A :class:`Monitor` is built once from the model's tokenizer and the suites to watch; at each
scheduled step, :meth:`Monitor.step` runs the suites' fixed items through the live model (eval mode,
forward passes without gradients, the training mode and the random-number state restored after) and
writes the same rows a scan of a saved checkpoint would, with the scan's own measuring code, into a
ckptgeo dataset::

    OUT/                            a ckptgeo dataset (layout: ckptgeo.store.dataset)
      geometry/<model>--step{N}--<config_hash>.parquet     per-layer RankMe (and other metrics)
      behavior/ ...  probes/ ...                           accuracy; probes when asked for
      revisions/<model>--step{N}--<config_hash>.parquet    written last: step N is done
      runs/<config_hash>.json                              the settings
      sources.json                                         model name -> ``monitor:<run id>``
      models.json                                          model name -> its parameter count (runs.tex's size)

``revision`` is ``step{N}``; the config hash is the one ``ckptgeo scan`` gives the same settings and
items, so ``ckptgeo analyze OUT`` (and every figure) works unchanged, and rows from a monitor and from
a later scan of the same weights can be compared directly. Live events (collapse, recovery onset,
acquisition) are found as the curve arrives (:mod:`ckptgeo.monitor.live`) and logged under the
``ckptgeo.monitor`` logger, and handed to ``on_event``.

Each monitored run has a run id (``run_id``, default: a digest of the step-0 weights), written as the
``commit`` of its rows and kept in ``sources.json`` under its model name. A second run into the same
folder under the same model name is refused when its run id differs, never merged: give it another
``model_name`` (kept apart) or another ``out``. A resumed run (first measured step above 0) continues
the recorded run; so does a restart from step 0 with the same initial weights. Two runs from the same
initial weights (another learning rate) are told apart only by ``run_id``.

Several processes (``accelerate launch``, ``torchrun``): only the main process measures and writes;
a wrapped model (DDP, DeepSpeed, ``torch.compile``) is unwrapped first.

Threads: each measurement runs under the thread rule of ``ckptgeo scan`` and ``ckptgeo train``
(:mod:`ckptgeo._threads`: one intra-op thread for a model under 10M parameters; ``MonitorConfig(threads=N)``
overrides it) and restores torch's thread count after, so the training loop around it keeps the user's setting.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from ckptgeo._version import __version__
from ckptgeo.constants import DEFAULT_N_SAMPLES
from ckptgeo.events.rules import EventRules
from ckptgeo.engine.config import (ScanConfig, ScanSetting, declared, monitor_settings, settings_from,
                                   with_settings_doc)
from ckptgeo.errors import InvalidParameterError
from ckptgeo.monitor.live import LiveEvent, LiveTracker
from ckptgeo.monitor.schedule import Schedule
from ckptgeo.suites.items import Suite

__all__ = ["MonitorConfig", "Monitor", "Reading", "task_suite"]

log = logging.getLogger("ckptgeo.monitor")


@dataclass(frozen=True)
class MonitorConfig(EventRules, monitor_settings(batch_size=64)):
    """Settings of a monitor. The measuring ones are the scan's settings declared for the monitor in
    :mod:`ckptgeo.engine.config` (their fields, defaults and checks, except ``batch_size``: 64 here) and
    enter the same config hash; the event ones are the event rules of ``ckptgeo analyze``
    (:class:`ckptgeo.events.rules.EventRules`: the same declaration, defaults, checks and detector).

    Attributes
    ----------
    {settings}
    event_layers : "last", "all" or tuple of int, default="last"
        RankMe layers whose events are reported.

    Notes
    -----
    ``seed`` also draws the held-out items of an algorithmic task named as a suite.
    """

    event_layers: str | tuple[int, ...] = "last"


MonitorConfig.__doc__ = with_settings_doc(MonitorConfig.__doc__, MonitorConfig)


@dataclass(frozen=True)
class Reading:
    """What one measuring step gave.

    Attributes
    ----------
    step : int
    rankme : dict of str to dict of int to float
        RankMe per suite and layer.
    accuracy : dict of str to float
        Accuracy per suite.
    events : tuple of LiveEvent
        Events this step revealed.
    seconds : float
        Wall time of the measurement (forward passes, metrics, writing).
    forecasts : tuple of LiveForecast
        With ``forecast_from``: the acquisition forecast of each suite at this step.
    """

    step: int
    rankme: dict
    accuracy: dict
    events: tuple[LiveEvent, ...] = ()
    seconds: float = 0.0
    forecasts: tuple = ()

    def log_values(self) -> dict[str, float]:
        """Flat numbers for a training logger (``Trainer.log``: TensorBoard, W&B, MLflow, ...).

        For one suite: ``rankme/L{k}`` and ``accuracy``; the events this step revealed as the step where each
        lies, ``event/collapse_step/L{k}`` (with ``event/collapse_floor/L{k}``, RankMe at the floor),
        ``event/recovery_step/L{k}``, ``event/acquisition_step`` and ``event/gap_steps`` (the precursor gap at
        the deepest tracked layer, when it has one); with a forecast, ``forecast/median_step``,
        ``forecast/low_step`` and ``forecast/high_step`` (left out beyond the horizon) and ``forecast/p_next``.
        For several suites the suite follows the group: ``rankme/{suite}/L{k}``, ``accuracy/{suite}``,
        ``event/{suite}/acquisition_step``, ``forecast/{suite}/p_next``. Every value is logged at the
        measuring step (an event's ``reported_at``), so a chart of ``event/acquisition_step`` has one point,
        at the step the acquisition became known, whose value is the acquisition step.

        Examples
        --------
        >>> Reading(10, {"copy-L1": {2: 4.5}}, {"copy-L1": 0.25}).log_values()
        {'rankme/L2': 4.5, 'accuracy': 0.25}
        """
        one = len(self.accuracy) <= 1 and len(self.rankme) <= 1

        def key(group: str, suite: str, tail: str = "") -> str:
            return "/".join(p for p in (group, None if one else suite, tail) if p)

        out: dict[str, float] = {}
        for suite, layers in self.rankme.items():
            for k, v in layers.items():
                out[key("rankme", suite, f"L{k}")] = v
        for suite, a in self.accuracy.items():
            out[key("accuracy", suite)] = a
        for e in self.events:
            layer = f"/L{e.layer}" if e.layer is not None else ""
            out[key("event", e.suite, f"{e.kind}_step{layer}")] = e.step
            if e.kind == "collapse":
                out[key("event", e.suite, f"collapse_floor{layer}")] = e.value
            if e.kind == "acquisition" and e.gap_steps is not None:
                out[key("event", e.suite, "gap_steps")] = e.gap_steps
        for f in self.forecasts:
            for name in ("median_step", "low_step", "high_step", "p_next"):
                v = float(getattr(f, name))
                if math.isfinite(v):
                    out[key("forecast", f.suite, name)] = v
        return out


def task_suite(task: str, level: int, *, n_items: int = DEFAULT_N_SAMPLES, seed: int = 0) -> Suite:
    """The held-out items of an algorithmic task level as a suite, the same ``ckptgeo train`` writes to
    ``suites/<task>-L<level>.jsonl`` for that seed (:func:`ckptgeo.suites.tasks.task_suite`).

    Raises
    ------
    InvalidParameterError
        Unknown task or level, or more items than half the level's prompts.
    """
    from ckptgeo.suites.tasks import task_suite as _task_suite

    return _task_suite(task, level, n_items=n_items, seed=seed)


def _load_suite(spec, n_items: int, seed: int) -> Suite:
    from ckptgeo.suites.items import available_suites, load_suite
    from ckptgeo.suites.tasks import parse_task_level

    if isinstance(spec, Suite):
        return spec
    if isinstance(spec, tuple) and len(spec) == 2:
        return task_suite(spec[0], spec[1], n_items=n_items, seed=seed)
    task_level = parse_task_level(spec)
    if task_level and not Path(str(spec)).is_file() and str(spec) not in available_suites():
        return task_suite(*task_level, n_items=n_items, seed=seed)
    return load_suite(spec)


def _unwrap(model):
    from accelerate.utils import extract_model_from_parallel

    return extract_model_from_parallel(model)


class Monitor:
    """Measure a live model at scheduled steps, writing a ckptgeo dataset and reporting live events.

    Parameters
    ----------
    tokenizer : transformers tokenizer
        The model's tokenizer (suites are tokenized once, at the first measuring step).
    suites : sequence of str, Path, Suite or (task, level)
        Bundled suite names, suite files, :class:`~ckptgeo.suites.items.Suite` objects, or algorithmic
        tasks as ``"modular-L1"`` / ``("modular", 1)`` (their held-out items, see :func:`task_suite`).
    out : path
        The dataset folder (created; an existing ckptgeo dataset is added to).
    schedule : Schedule, int, iterable of int or None, default=None
        When to measure: a :class:`Schedule`, an ``every`` interval, explicit steps, or the default
        (step 0, powers of two below 25, then every 25 steps).
    config : MonitorConfig, optional
    model_name : str, optional
        The ``model`` column (default: the name of ``out``).
    run_id : str, optional
        Names this run (the ``commit`` of its rows). Default: the first 16 hex digits of a sha256 of the
        model's weights when it is first measured at step 0; a run resumed later (first measured step
        above 0) takes the recorded one. A different run id under a recorded model name is refused.
    tokens_per_step : int, optional
        Fills the ``tokens`` column (step x tokens_per_step).
    on_event : callable, optional
        Called with each :class:`~ckptgeo.monitor.live.LiveEvent` as it is found.
    overwrite : bool, default=False
        Measure a step again although the dataset holds it; otherwise a step already written (a
        resumed run) is skipped and its values feed the live curves.
    main_process : bool, optional
        Whether this process writes (default: rank 0 of ``RANK``/``WORLD_SIZE``, as set by ``accelerate
        launch`` and ``torchrun``; always True in one process).
    forecast_from : path, optional
        A dataset of finished runs: a forecast of each suite's acquisition, fitted to them
        (:class:`ckptgeo.forecasting.live.LiveForecaster`), is logged at every measuring step
        (``acquisition forecast: step 1200 [900, 1600], P(next 5 checkpoints) 0.31``), kept on
        :attr:`Reading.forecasts` and written to the ``live_forecast`` table.
    planned_steps : int, optional
        The steps the run is planned to train for: the forecast reads training time as a share of it (default:
        the median plan of the runs in ``forecast_from``). ``ckptgeo train`` passes ``--steps``;
        :class:`~ckptgeo.monitor.callback.MonitorCallback` the Trainer's ``max_steps``.

    Raises
    ------
    InvalidParameterError
        A setting is out of range, or an unknown suite or metric.
    DatasetLayoutError
        ``out`` is a folder that is not a ckptgeo dataset; ``forecast_from`` holds fewer than two runs or no
        acquisition.
    RunMismatchError
        (at the first measurement) ``out`` holds another run id under this model name (unless ``overwrite``).

    Examples
    --------
    >>> monitor = Monitor(tokenizer, ["modular-L1"], "runs/live", schedule=50)  # doctest: +SKIP
    >>> for step in range(n_steps + 1):                                          # doctest: +SKIP
    ...     monitor.step(model, step)            # measures only at scheduled steps
    ...     train_one_step(model)
    """

    def __init__(self, tokenizer, suites: Sequence, out, *, schedule: Schedule | int | Iterable[int] | None = None,
                 config: MonitorConfig | None = None, model_name: str | None = None,
                 tokens_per_step: int | None = None, on_event: Callable[[LiveEvent], None] | None = None,
                 overwrite: bool = False, main_process: bool | None = None, run_id: str | None = None,
                 forecast_from: str | Path | None = None, planned_steps: int | None = None):
        from ckptgeo.engine.config import validate_scan_config
        from ckptgeo.engine.measure import configure_metrics
        from ckptgeo.store.dataset import Dataset

        self.config = config or MonitorConfig()
        cfg = self.config
        scan_config = _scan_config(cfg)
        validate_scan_config(scan_config)
        if isinstance(suites, (str, Path, Suite)):
            suites = [suites]
        if not suites:
            raise InvalidParameterError("Monitor needs at least one suite (a name, a path, a Suite or a task such "
                                        "as 'modular-L1').", name="suites", value=())
        self.tokenizer = tokenizer
        self.suites = [_load_suite(s, cfg.n_samples, cfg.seed) for s in suites]
        self.measures = configure_metrics(scan_config)
        self.schedule = Schedule.of(schedule)
        self.out = Path(out)
        self.model_name = model_name or self.out.resolve().name
        self.run_id = run_id
        self._given_run_id = run_id
        self.tokens_per_step = tokens_per_step
        self.on_event = on_event
        self.overwrite = overwrite
        if main_process is None:
            from ckptgeo.engine.scan import shard

            main_process = shard()[0] == 0
        self.main_process = main_process
        self.tracker = LiveTracker(cfg, layers=cfg.event_layers)
        self.dataset = Dataset(self.out) if main_process else None
        self.readings: list[Reading] = []
        self.forecast_from = None if forecast_from is None else str(forecast_from)
        self.planned_steps = planned_steps
        self.forecaster = None
        self._loss: dict[str, dict[int, float]] = {}   # suite -> step -> task loss
        if forecast_from is not None and main_process:
            from ckptgeo.forecasting.live import LiveForecaster

            self.forecaster = LiveForecaster.from_dataset(forecast_from)
        self.seconds = 0.0
        self._prepared = None
        self._scan_config = None
        self.config_hash: str | None = None
        self._done: set[int] = set()

    # -------------------------------------------------------------------------------------------- set-up
    def _setup(self, model, step: int) -> None:
        """At the first measurement: tokenize the suites (bounded by the model's context), fix the settings
        and their hash (the model's dtype is one of them), check that the folder holds no other run under
        this model name, and replay steps already in the dataset."""
        from ckptgeo.engine.forward import prepare_suite
        from ckptgeo.engine.plan import config_hash, row_settings, scan_settings

        cfg = self.config
        param = next(model.parameters())
        dtype = str(param.dtype).removeprefix("torch.")
        self._scan_config = dataclasses.replace(_scan_config(cfg), suites=tuple(s.name for s in self.suites),
                                                metrics=tuple(self.measures), dtype=dtype, device=str(param.device))
        settings = scan_settings(self._scan_config, self.suites, self.measures)
        self.config_hash = config_hash(settings)
        self._claim_run(model, step)   # before anything is written: a refused run leaves the folder as it was
        self.dataset.record_model(self.model_name, sum(p.numel() for p in model.parameters()))
        self.dataset.write_run(self.config_hash, {**settings, "source": f"monitor:{self.model_name}",
                                                  "ckptgeo_version": __version__})
        max_len = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        self._prepared = [prepare_suite(s, self.tokenizer, n_samples=cfg.n_samples, seed=cfg.seed, max_length=max_len)
                          for s in self.suites]
        self._common = row_settings(self._scan_config, self.config_hash)
        self._replay()

    def _claim_run(self, model, step: int) -> None:
        """Fix the run id and refuse a second run under a model name the folder already holds."""
        from ckptgeo.errors import RunMismatchError

        own = self._given_run_id or (_weights_digest(model) if step == 0 else None)
        known = self.dataset.sources().get(self.model_name, "").removeprefix("monitor:") or None
        if not self.overwrite and own and known and own != known:
            raise RunMismatchError(
                f"{self.out} already holds monitored run {known} as model {self.model_name!r}; this is run {own} "
                f"(other step-0 weights, or another run_id). Pass another model_name= to keep this run beside it, "
                f"another out folder, or overwrite=True to measure over it.", path=str(self.out),
                differences=(("run_id", known, own),))
        self.run_id = own or known
        if self.run_id:
            self.dataset.record_source(self.model_name, f"monitor:{self.run_id}")

    def _replay(self) -> None:
        """Feed steps this dataset already holds (same model and hash) to the live curves, silently."""
        revs = self.dataset.read("revisions", model=self.model_name)
        if revs.empty:
            return
        mine = revs[(revs.model == self.model_name) & (revs.config_hash == self.config_hash)
                    & revs.status.isin(["ok"])]
        if mine.empty or self.overwrite:
            return
        self._done = set(int(s) for s in mine.step)
        geo, beh = self.dataset.read("geometry"), self.dataset.read("behavior")
        geo = geo[(geo.model == self.model_name) & (geo.config_hash == self.config_hash) & (geo.metric == "rankme")]
        beh = beh[(beh.model == self.model_name) & (beh.config_hash == self.config_hash)]
        self._keep_loss(beh[beh.metric == "loss"].to_dict("records"))
        beh = beh[beh.metric == "accuracy"]
        for step in sorted(self._done):
            self._track(step, *self._values(geo[geo.step == step], beh[beh.step == step]), report=False)

    def _keep_loss(self, rows) -> None:
        """Keep the task loss of behaviour ``rows`` (dicts) by suite and step: the forecast's loss features."""
        for r in rows:
            if r.get("metric") == "loss" and r.get("value") is not None and r.get("step") is not None:
                self._loss.setdefault(str(r["suite"]), {})[int(r["step"])] = float(r["value"])

    @staticmethod
    def _values(geo, beh) -> tuple[dict, dict, dict]:
        rankme: dict = {}
        for r in geo.itertuples():
            rankme.setdefault(r.suite, {})[int(r.layer)] = float(r.value)
        accuracy = {r.suite: float(r.value) for r in beh.itertuples()}
        chance = {r.suite: float(r.chance) for r in beh.itertuples()}
        return rankme, accuracy, chance

    def _track(self, step: int, rankme: dict, accuracy: dict, chance: dict, *, report: bool) -> list[LiveEvent]:
        found = []
        for suite in accuracy:
            found += self.tracker.update(suite, step, accuracy=accuracy[suite], rankme=rankme.get(suite, {}),
                                         chance=chance.get(suite), report=report)
        return found

    # ---------------------------------------------------------------------------------------- measuring
    def due(self, step: int) -> bool:
        """Whether :meth:`step` would measure at ``step``: scheduled, not yet written, on the main process."""
        return self.main_process and self.schedule.due(step) and (self.overwrite or step not in self._done)

    def step(self, model, step: int, *, force: bool = False) -> Reading | None:
        """Measure ``model`` at training step ``step`` if the schedule says so (or ``force``).

        Parameters
        ----------
        model : torch.nn.Module
            The live causal LM (a wrapper from DDP, DeepSpeed, accelerate or ``torch.compile`` is unwrapped).
        step : int
            Optimiser updates applied so far (0 before the first).
        force : bool, default=False
            Measure although the step is not scheduled.

        Returns
        -------
        Reading or None
            None when nothing was measured (not scheduled, already written, or not the main process).

        Raises
        ------
        NonFiniteActivationsError
            NaN or inf in the hidden states (step, layer and suite named).
        """
        if not self.main_process or (not force and not self.due(step)):
            return None
        import torch

        from ckptgeo._threads import torch_threads

        t0 = time.perf_counter()
        model = _unwrap(model)
        # the scan's thread rule (1 thread below 10M parameters; config.threads overrides) for the measurement only:
        # the training loop's own thread count is restored after
        with torch_threads(sum(p.numel() for p in model.parameters()), self.config.threads):
            if self._prepared is None:
                self._setup(model, step)
                if not force and not self.due(step):  # written by an earlier run of this monitor
                    return None
            was_training = model.training
            device = next(model.parameters()).device
            model.eval()
            try:
                # probes and LLC draw random numbers: training's random stream must not see them
                with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                    rows = self._measure(model, step)
            finally:
                model.train(was_training)
        rankme, accuracy, chance = self._values(*(_frame(rows, t) for t in ("geometry", "behavior")))
        self._keep_loss(rows.get("behavior") or [])
        found = self._track(step, rankme, accuracy, chance, report=True)
        self._done.add(step)
        for e in found:
            log.info("%s", e.message)
            if self.on_event is not None:
                self.on_event(e)
        seconds = time.perf_counter() - t0
        self.seconds += seconds
        forecasts = self._forecast(step)
        reading = Reading(step, rankme, accuracy, tuple(found), seconds, forecasts)
        self.readings.append(reading)
        return reading

    def _measure(self, model, step: int) -> dict[str, list[dict]]:
        """The scan's measurement of one revision, on the live model; rows written as a scan writes them."""
        from ckptgeo.engine.measure import measure_revision
        from ckptgeo.engine.scan import revision_row
        from ckptgeo.sources.revisions import Revision
        from ckptgeo.store.dataset import part_name

        t0 = time.perf_counter()
        rev = Revision(step=int(step), name=f"step{int(step)}")
        name = part_name(self.model_name, rev.name, self.config_hash)
        base = {"model": self.model_name, "revision": rev.name, "step": rev.step, "commit": self.run_id,
                "tokens": rev.step * self.tokens_per_step if self.tokens_per_step else None}
        cfg = dataclasses.replace(self._scan_config, device=str(next(model.parameters()).device))
        rows = measure_revision(model, self._prepared, self.measures, cfg, {**base, **self._common}, revision=rev.name)
        for table, trows in rows.items():
            if trows:
                self.dataset.write_part(table, name, trows)
        self.dataset.write_part("revisions", name, [revision_row(base, "ok", self.config_hash, t0)])
        return rows

    def _forecast(self, step: int) -> tuple:
        """Each suite's acquisition forecast at ``step`` (with ``forecast_from``): logged, and written to the
        ``live_forecast`` table."""
        if self.forecaster is None:
            return ()
        from ckptgeo._version import __version__
        from ckptgeo.store.dataset import part_name

        out, rows = [], []
        future = [s for s in self.schedule.up_to(step + 4096) if s > step][:self.forecaster.config.max_horizon]
        for suite, t in self.tracker.tracks.items():
            if not t.steps or t.steps[-1] != step:
                continue
            loss = self._loss.get(suite)
            f = self.forecaster.forecast(suite, t.steps, t.acc, chance=t.chance, rankme=t.rankme,
                                         n_items=float(self.config.n_samples), rules=self.config, future=future or None,
                                         planned_steps=self.planned_steps,
                                         loss=None if not loss else [loss.get(s, float("nan")) for s in t.steps])
            log.info("%s at step %d: %s", suite, step, f.message)
            out.append(f)
            rows.append({"model": self.model_name, "revision": f"step{step}", "step": step, "commit": self.run_id,
                         "suite": suite, "feature_set": f.feature_set, "median_step": f.median_step,
                         "low_step": f.low_step, "high_step": f.high_step, "p_next": f.p_next, "horizon": f.horizon,
                         "acquired": f.acquired, "forecast_from": self.forecast_from, "n_runs": self.forecaster.n_runs,
                         "config_hash": self.config_hash, "ckptgeo_version": __version__})
        if rows:
            self.dataset.write_part("live_forecast", part_name(self.model_name, f"step{step}", self.config_hash), rows)
        return tuple(out)

    # ----------------------------------------------------------------------------------------- reading
    @property
    def events(self) -> list[LiveEvent]:
        """Every event reported so far, in order."""
        return list(self.tracker.events)

    def status(self) -> str:
        """The one-line live status, e.g. ``L2 RankMe 1.1 (collapsed at 207) · acc 0.02``."""
        return self.tracker.status()


def _scan_config(config: MonitorConfig) -> ScanConfig:
    """The scan settings a monitor's config holds, as a :class:`~ckptgeo.engine.config.ScanConfig`."""
    return ScanConfig(**settings_from({f.name: getattr(config, f.name) for f, s in declared(type(config))
                                       if isinstance(s, ScanSetting)}))


def _weights_digest(model) -> str:
    """The first 16 hex digits of a sha256 over the model's parameters and buffers (names and bytes)."""
    import hashlib

    import torch

    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().reshape(-1).contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def _frame(rows: dict, table: str):
    import pandas as pd

    return pd.DataFrame(rows.get(table) or [], columns=["suite", "layer", "metric", "value", "chance"])[
        lambda d: d.metric.isin(["rankme", "accuracy"])]
