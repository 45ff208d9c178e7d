"""Constants and the environment variables ckptgeo reads (each read once, here).

``CKPTGEO_DEBUG=1``      the CLI prints tracebacks instead of one-line errors.
``CKPTGEO_NO_PROGRESS=1`` silences progress bars.
``CKPTGEO_CACHE``         where ckptgeo keeps its own files (default ``~/.cache/ckptgeo``).
``CKPTGEO_CLAIM_STALE_S`` seconds without a heartbeat after which another worker takes a revision's claim
                          over (default 600; the holder touches its claim every tenth of that).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = [
    "DEBUG", "NO_PROGRESS", "CACHE_DIR", "RANKME_EPS", "PYTHIA_TOKENS_PER_STEP", "SMOLLM3_TOKENS_PER_STEP",
    "DEFAULT_N_SAMPLES",
    "DATASET_SCHEMA_VERSION", "STEP_PATTERN",
    "CLAIM_STALE_S", "SLURM_ENV",
]


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


DEBUG = _flag("CKPTGEO_DEBUG")
NO_PROGRESS = _flag("CKPTGEO_NO_PROGRESS")
CACHE_DIR = Path(os.environ.get("CKPTGEO_CACHE", Path.home() / ".cache" / "ckptgeo"))
#: seconds without a heartbeat after which a claim on a revision is stale (another worker takes it over).
CLAIM_STALE_S = float(os.environ.get("CKPTGEO_CLAIM_STALE_S") or 600)
#: the Slurm variables that name a worker in its claim (and in ``ckptgeo status``).
SLURM_ENV = ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_ID")

#: epsilon added to each normalised singular value in RankMe (Garrido et al. 2023).
RANKME_EPS = 1e-7
#: Pythia's batch: 1024 sequences x 2048 tokens per optimiser step.
PYTHIA_TOKENS_PER_STEP = 2_097_152
#: SmolLM3's global batch in tokens per optimiser step (its model card: 2.36M tokens; 576 x 4096).
SMOLLM3_TOKENS_PER_STEP = 2_359_296
DEFAULT_N_SAMPLES = 200
#: bump when a table's columns change incompatibly; written to ``DIR/ckptgeo.json``.
DATASET_SCHEMA_VERSION = 1
#: default pattern mapping branch names to steps.
STEP_PATTERN = r"^step(\d+)$"
