"""``ckptgeo.claims(DIR)``: the paper's claims judged on a study or scan folder, the Python twin of
``ckptgeo claims``."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable

import pandas as pd

__all__ = ["claims", "dataset_folder", "recorded_settings"]

logger = logging.getLogger(__name__)


def dataset_folder(dir: str | os.PathLike) -> tuple[Path, Path | None]:
    """(dataset folder, study folder or None) of ``dir``: a study folder holds ``dataset/``; else ``dir`` is the
    dataset.

    Raises
    ------
    DatasetLayoutError
        Neither ``dir`` nor ``dir/dataset`` holds a geometry table.
    """
    from ckptgeo.errors import DatasetLayoutError

    root = Path(dir)
    study = root if (root / "dataset").is_dir() else None
    dataset = root / "dataset" if study else root
    if not (dataset / "geometry").exists():
        raise DatasetLayoutError(f"{dataset} holds no geometry table: give a study folder or a scanned dataset "
                                 f"(`ckptgeo scan ... --out DIR`).", path=str(dataset))
    return dataset, study


def recorded_settings(dataset: Path, **given):
    """(claim settings, analysis settings) for ``dataset``: the values ``given`` (None: not given), else those its
    study or an earlier ``ckptgeo claims`` recorded (``summary/claims_rules.json``), else the declared defaults
    (:class:`ckptgeo.claimtable.registry.ClaimSettings`); the analysis settings the claims were judged with (None:
    ``AnalysisConfig()``).

    Raises
    ------
    InvalidParameterError
        A value out of its declared range.
    """
    import dataclasses

    from ckptgeo.analysis.config import AnalysisConfig, config_from
    from ckptgeo.claimtable.table import claim_settings
    from ckptgeo.studies.report import recorded_claims

    record = recorded_claims(dataset)
    given = {name: value for name, value in given.items() if value is not None}
    settings = claim_settings(**{**record.get("claim_settings", {}), **given})
    known = {f.name for f in dataclasses.fields(AnalysisConfig)}
    analysis = {k: v for k, v in (record.get("rules", {}).get("analysis") or {}).items() if k in known}
    return settings, (config_from(analysis) if analysis else None)


def claims(dir: str | os.PathLike, *, calibrate: int = 0, n_permutations: int | None = None,
           n_power: int | None = None, seed: int | None = None, write: bool = True,
           progress: Callable[[int, int, str], None] | None = None) -> pd.DataFrame:
    """Judge each claim of arXiv:2602.15997 on a study or scan folder, each with its test, null and power.

    Runs :func:`ckptgeo.analyze` on the dataset (without writing it), builds the claim table (one row per
    registered claim, ``ckptgeo.CLAIMS``; the hard-minus-easy contrast of leads is the primary row, the others
    are Holm-adjusted; every test counts settings, not runs) and, with ``calibrate``, reruns every row on that many
    null copies of each kind.

    Parameters
    ----------
    dir : path
        A study folder (``ckptgeo reproduce --out``, holding ``dataset/``) or a scanned dataset.
    calibrate : int, default=0
        Null copies of each kind (``iid``, ``random_walk``, ``permuted``, ``setting``); 0: none.
    n_permutations, n_power, seed : int, optional
        Relabellings per test, planted replicates per lead of each power analysis, and the seed
        (:class:`ckptgeo.claimtable.registry.ClaimSettings`); not given: what the dataset's study recorded, else the
        declared defaults (999, 40, 0). The calibration's copies use at most 199 and 10.
    write : bool, default=True
        Write ``summary/claims.parquet``, ``summary/leads.parquet``, ``claims.md`` (and with ``calibrate``
        ``summary/claims_calibration.parquet`` and, in a study, ``reproduction.md``'s calibration section) into
        the dataset, as the command does.
    progress : callable ``(done, total, text)``, optional
        Called after each null copy.

    Returns
    -------
    DataFrame
        One row per claim: ``id``, ``claim``, ``paper``, ``measured``, ``verdict`` ("reproduced",
        "not reproduced", "inconclusive" or "descriptive"), ``reason``, ``evidence``, ``source``, ``value``,
        ``low``, ``high``, ``null``, ``p_value``, ``test``, ``kind``, ``p_holm``, ``margin``, ``mde``.
        ``attrs["calibration"]``: the calibration table (per row and null: copies, false "reproduced" rate and
        its interval, ``ok``) or None; ``attrs["paths"]``: the files written.

    Raises
    ------
    DatasetLayoutError
        ``dir`` is neither a study folder nor a dataset with a geometry table.
    InvalidParameterError
        A setting out of its declared range.

    Examples
    --------
    >>> import ckptgeo                                        # doctest: +SKIP
    >>> table = ckptgeo.claims("results/smoke")               # doctest: +SKIP
    >>> table.set_index("id").loc["contrast", "verdict"]      # doctest: +SKIP
    'inconclusive'
    """
    from ckptgeo.claimtable.calibrate import calibrate as run_calibration
    from ckptgeo.claimtable.calibrate import calibration_table, dataset_claims
    from ckptgeo.studies.report import write_claims

    dataset, study = dataset_folder(dir)
    settings, config = recorded_settings(dataset, n_permutations=n_permutations, n_power=n_power, seed=seed)
    logger.info("claims: analysing %s (%d relabellings a test, %d planted replicates a lead)", dataset,
                settings.n_permutations, settings.n_power)
    table, analysis = dataset_claims(dataset, settings=settings, config=config)
    calib = None
    if calibrate > 0:
        runs = run_calibration(analysis, int(calibrate), n_permutations=min(settings.n_permutations, 199),
                               n_power=min(settings.n_power, 10), seed=settings.seed, progress=progress)
        calib = calibration_table(runs, analysis.config.alpha)
    paths = write_claims(dataset, table, analysis, calib, study=study, settings=settings) if write else []
    table.attrs["calibration"] = calib
    table.attrs["paths"] = [str(p) for p in paths]
    return table
