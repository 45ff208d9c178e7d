"""Analysis steps: each reads tables by name and writes tables by name; :func:`run_steps` runs them in
dependency order.

A step is a function ``fn(ctx: StepContext) -> dict`` of table name to table, registered with the tables it
``reads`` and ``writes``::

    from ckptgeo import register_step

    @register_step(name="gap_by_task", reads=("events",), writes=("gap_by_task",))
    def gap_by_task(ctx):
        e = ctx["events"]
        return {"gap_by_task": e.groupby("task", as_index=False)["gap_steps"].median()}

:func:`~ckptgeo.analysis.pipeline.analyze` runs every registered step: the built-ins
(:mod:`ckptgeo.analysis.builtin_steps`), those installed packages declare in the entry-point group
``ckptgeo.analysis_steps`` (``[project.entry-points."ckptgeo.analysis_steps"] gap_by_task =
"my_package.steps"``), and those registered in this process. Each DataFrame a step returns is written to
``OUT/<folder>/<table>.parquet`` (``folder="summary"`` by default) with the analysis's rules in its
metadata (:func:`ckptgeo.analysis.config.read_rules`; a table named in ``ckptgeo.store.schemas.SCHEMAS``,
``events`` or ``compare``, with that schema's column types), and is on ``Analysis.tables[<table>]``; any other
value (an intermediate such as the null curves) is passed on to the steps that read it and not written.

The tables present before any step (:data:`INPUTS`): ``geometry``, ``behavior``, ``probes``,
``revisions`` (grouped revisions left out), ``curves`` and ``accuracy`` (the cleaned geometry and
behaviour curves) and ``left_out``. The order is a topological sort of reads on writes, ties broken by
registration order (built-ins first), so it is the same on every run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

import pandas as pd

from ckptgeo._registry import Registry
from ckptgeo.analysis.config import AnalysisConfig
from ckptgeo.errors import AnalysisStepError

__all__ = ["Step", "StepContext", "STEPS", "BUILTIN_STEPS", "INPUTS", "register_step", "all_steps", "order_steps", "run_steps"]

#: tables every step may read without a step writing them (the dataset, cleaned)
INPUTS = ("geometry", "behavior", "probes", "revisions", "curves", "accuracy", "left_out")
#: table and folder names become file names under ``--out``: letters, digits and underscores only
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Step:
    """One analysis step.

    Attributes
    ----------
    name : str
        The step's name (unique among steps).
    fn : callable
        ``fn(ctx: StepContext) -> dict`` returning exactly the tables of ``writes``.
    reads, writes : tuple of str
        The tables it needs and the tables it produces.
    folder : str or None
        The folder under ``out`` its DataFrames are written to as ``<table>.parquet``; None: not written.
    rules : bool
        Whether each file carries the analysis's rules in its Parquet metadata.
    writer : callable or None
        ``writer(table: DataFrame, folder: Path) -> list[Path]`` writes the table in another format
        instead (the runs table: CSV and LaTeX); it is then left out of :attr:`Analysis.folders`.
    report : callable, False or None
        Its section of ``report.md``: ``report(analysis) -> list[str]`` of markdown parts; False: none; None: a
        section per DataFrame it writes (:func:`ckptgeo.analysis.report.table_sections`).
    """

    name: str
    fn: Callable[["StepContext"], Mapping[str, Any]]
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    folder: str | None = "summary"
    rules: bool = True
    writer: Callable[[pd.DataFrame, Path], list[Path]] | None = None
    report: Callable[[Any], list[str]] | bool | None = None


@dataclass(frozen=True)
class StepContext:
    """What a step sees: the tables it reads (``ctx["events"]``), the analysis's settings, and where the dataset
    is. Reading a table the step did not declare raises ``KeyError``.

    Attributes
    ----------
    step : Step
    tables : mapping of str to object
        Only the tables of ``step.reads``.
    config : AnalysisConfig
    root, out : Path
        The dataset folder and the analysis's output folder.
    difficulty : mapping of str to str or None
        The user's difficulty class per suite (``analyze(difficulty=...)``).
    """

    step: Step
    tables: Mapping[str, Any]
    config: AnalysisConfig
    root: Path
    out: Path
    difficulty: Mapping[str, str] | None = None

    def __getitem__(self, table: str) -> Any:
        if table not in self.tables:
            raise KeyError(f"analysis step {self.step.name!r} reads {table!r} without declaring it; add it to the "
                           f"step's reads (it declares: {', '.join(self.step.reads) or 'none'})")
        return self.tables[table]


def _check_step(name: str, obj) -> None:
    if not isinstance(obj, Step):
        raise TypeError(f"expected a step registered with @register_step(name={name!r}, ...), got "
                        f"{type(obj).__name__} {getattr(obj, '__qualname__', obj)!r}")


#: Every analysis step: the built-ins (:mod:`ckptgeo.analysis.builtin_steps`, imported on first use), then the
#: ones installed packages declare in the ``ckptgeo.analysis_steps`` entry-point group, then those registered in
#: this process (ckptgeo's own packages above the analysis register theirs so, when imported: the forecast step of
#: :mod:`ckptgeo.forecasting.tables`, which ``ckptgeo.analyze`` and ``ckptgeo analyze`` import first).
BUILTIN_STEPS = ("acquisitions", "events", "null_curves", "precursor_rates", "precursor_rates_by_model", "top_down",
                 "probe_lead", "across_sizes", "seed_spread", "difficulty_slope", "seed_events", "compare", "runs")
STEPS = Registry("analysis step", "ckptgeo.analysis_steps",
                 {name: "ckptgeo.analysis.builtin_steps" for name in BUILTIN_STEPS}, check=_check_step)


def register_step(*, name: str, writes: tuple[str, ...], reads: tuple[str, ...] = (), folder: str | None = "summary",
                  rules: bool = True, writer: Callable | None = None, report: Callable | bool | None = None):
    """Decorator registering ``fn(ctx) -> dict`` as analysis step ``name`` in :data:`STEPS` (``fn`` is returned).

    Parameters
    ----------
    name : str
    writes : tuple of str
        The tables ``fn`` returns (at least one; each a letter, then letters, digits, underscores).
    reads : tuple of str, default=()
        The tables it needs: :data:`INPUTS` or tables other steps write.
    folder : str or None, default="summary"
        Where its DataFrames are written under the output folder; None: kept in memory only.
    rules : bool, default=True
        Write the analysis's rules into each file's metadata.
    writer : callable or None, default=None
        ``writer(table, folder) -> list[Path]`` replacing the Parquet file (one table only).
    report : callable, False or None, default=None
        Its section of ``report.md``, ``report(analysis) -> list[str]`` (markdown parts, in the order the steps
        ran); False: none; None: each DataFrame it writes as a table under its name.

    Raises
    ------
    DuplicateNameError
        ``name`` already registered to another function.
    ValueError
        No ``writes``, a table or folder name that is not a plain name, or ``writer`` with several tables.
    """
    writes, reads = tuple(writes), tuple(reads)
    bad = [n for n in (*writes, *reads, *([folder] if folder is not None else [])) if not _NAME.match(str(n))]
    if not writes or bad:
        raise ValueError(f"analysis step {name!r}: writes must name at least one table, and table and folder "
                         f"names must be letters, digits and underscores; got writes={writes!r}, bad names {bad!r}")
    if report is True or (report not in (None, False) and not callable(report)):
        raise ValueError(f"analysis step {name!r}: report must be a function, False or None; got {report!r}")
    if writer is not None and len(writes) != 1:
        raise ValueError(f"analysis step {name!r}: a writer writes one table; got writes={writes!r}")

    def deco(fn):
        STEPS.register(name, Step(name=name, fn=fn, reads=reads, writes=writes, folder=folder, rules=rules,
                                  writer=writer, report=report))
        return fn

    return deco


def all_steps() -> dict[str, Step]:
    """Every registered step by name, in registration order (built-ins, entry points, then registered here)."""
    return {name: STEPS.get(name) for name in STEPS.names(sorted_=False)}


def order_steps(steps: Mapping[str, Step], inputs=INPUTS) -> list[Step]:
    """``steps`` in dependency order: a step after every step that writes a table it reads.

    Ties keep the order of ``steps``, so the order is deterministic.

    Raises
    ------
    AnalysisStepError
        A step reads a table that no step writes and ``inputs`` lacks; two steps (or a step and the inputs)
        write one table; the steps read each other's tables in a cycle.
    """
    writer_of: dict[str, str] = {}
    for step in steps.values():
        for table in step.writes:
            if table in writer_of or table in inputs:
                other = repr(writer_of[table]) if table in writer_of else "the dataset (an input table)"
                raise AnalysisStepError(f"table {table!r} is written by two analysis steps: {other} and "
                                        f"{step.name!r}; rename one step's table", step=step.name, table=table)
            writer_of[table] = step.name
    needs: dict[str, set[str]] = {}
    for step in steps.values():
        missing = [t for t in step.reads if t not in writer_of and t not in inputs]
        if missing:
            raise AnalysisStepError(
                f"analysis step {step.name!r} reads table {missing[0]!r}, which no step writes and the dataset does "
                f"not provide (inputs: {', '.join(inputs)}; written: {', '.join(sorted(writer_of)) or 'none'})",
                step=step.name, table=missing[0])
        needs[step.name] = {writer_of[t] for t in step.reads if t in writer_of}
    order: list[Step] = []
    done: set[str] = set()
    while len(order) < len(steps):
        ready = next((s for n, s in steps.items() if n not in done and needs[n] <= done), None)
        if ready is None:
            raise AnalysisStepError(f"analysis steps read each other's tables in a cycle: "
                                    f"{_cycle({n: needs[n] - done for n in steps if n not in done})}",
                                    step=next(n for n in steps if n not in done))
        order.append(ready)
        done.add(ready.name)
    return order


def _cycle(needs: dict[str, set[str]]) -> str:
    """One cycle among steps that all wait on another, as ``a -> b -> a``."""
    path = [next(iter(needs))]
    while True:
        nxt = sorted(needs[path[-1]])[0]
        if nxt in path:
            return " -> ".join(path[path.index(nxt):] + [nxt])
        path.append(nxt)


def run_steps(steps: list[Step], tables: dict[str, Any], *, config: AnalysisConfig, root: Path, out: Path,
              difficulty: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run ``steps`` (in :func:`order_steps` order) on ``tables``; returns ``tables`` with what each wrote.

    Raises
    ------
    AnalysisStepError
        A step returned other tables than it declares.
    """
    tables = dict(tables)
    for step in steps:
        ctx = StepContext(step, MappingProxyType({t: tables[t] for t in step.reads}), config, root, out, difficulty)
        result = dict(step.fn(ctx) or {})
        if set(result) != set(step.writes):
            raise AnalysisStepError(f"analysis step {step.name!r} returned tables {sorted(result)}, but declares "
                                    f"writes={list(step.writes)}", step=step.name)
        tables.update((t, result[t]) for t in step.writes)
    return tables
