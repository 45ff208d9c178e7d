"""``ckptgeo.claims(DIR)``: the paper's claims judged on a study or scan folder, the Python twin of
``ckptgeo claims``."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Callable

import pandas as pd

__all__ = ["claims", "dataset_folder"]

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


def claims(dir: str | os.PathLike, *, calibrate: int = 0, n_permutations: int = 999, n_power: int = 40,
           seed: int = 0, write: bool = True,
           progress: Callable[[int, int, str], None] | None = None) -> pd.DataFrame:
    """Judge each claim of arXiv:2602.15997 on a study or scan folder, each with its test, null and power.

    Runs :func:`ckptgeo.analyze` on the dataset (without writing it), builds the claim table (one row per
    registered claim, ``ckptgeo.CLAIMS``; the hard-minus-easy contrast of leads is the primary row, the others
    are Holm-adjusted) and, with ``calibrate``, reruns every row on that many null copies of each kind.

    Parameters
    ----------
    dir : path
        A study folder (``ckptgeo reproduce --out``, holding ``dataset/``) or a scanned dataset.
    calibrate : int, default=0
        Null copies of each kind (``iid``, ``random_walk``, ``permuted``, ``setting``); 0: none.
    n_permutations : int, default=999
        Relabellings per test (the calibration's copies use at most 199).
    n_power : int, default=40
        Planted replicates per lead in each row's power analysis (the calibration's at most 10).
    seed : int, default=0
        Seed of the tests, the power analyses and the null copies.
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
    logger.info("claims: analysing %s (%d relabellings a test, %d planted replicates a lead)", dataset,
                n_permutations, n_power)
    table, analysis = dataset_claims(dataset, n_permutations=n_permutations, n_power=n_power, seed=seed)
    calib = None
    if calibrate > 0:
        runs = run_calibration(analysis, int(calibrate), n_permutations=min(n_permutations, 199),
                               n_power=min(n_power, 10), seed=seed, progress=progress)
        calib = calibration_table(runs)
    paths = write_claims(dataset, table, analysis, calib, study=study) if write else []
    table.attrs["calibration"] = calib
    table.attrs["paths"] = [str(p) for p in paths]
    return table
