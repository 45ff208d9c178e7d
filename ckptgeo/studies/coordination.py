"""How the processes of a launcher share a study: each scans its runs as a single process
(:func:`one_process`), and the last to finish its share analyses (:func:`wait_for_others`)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

from ckptgeo._io import Claim, atomic_write_text

__all__ = ["one_process", "wait_for_others"]

#: the launcher's variables a scan shards by (:func:`ckptgeo.engine.scan.shard`), as one process sets them
ONE_PROCESS = {"RANK": "0", "WORLD_SIZE": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}


@contextlib.contextmanager
def one_process() -> Iterator[None]:
    """The study splits *runs* between a launcher's processes; each run's scan must then measure every
    revision itself, not its rank's share: within the block the launcher's variables say one process
    (:data:`ONE_PROCESS`), and they are restored after it."""
    saved = {k: os.environ.get(k) for k in ONE_PROCESS}
    os.environ.update(ONE_PROCESS)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def wait_for_others(out: Path, key: str, rank: int, world: int) -> bool:
    """Mark this process's share done; True for the process that finds every share done (it analyses).

    The markers live in ``OUT/.done/`` (each written atomically); the process that finds all ``world`` of them
    (holding the folder's :class:`ckptgeo._io.Claim`, which works across nodes) removes them, so a rerun starts
    counting afresh and exactly one process of each run analyses."""
    marks = out / ".done"
    marks.mkdir(parents=True, exist_ok=True)
    atomic_write_text(marks / f"rank{rank}-of-{world}", key)
    with Claim(marks / ".lock", blocking=True):
        done = [p for p in marks.glob(f"rank*-of-{world}") if p.read_text(encoding="utf-8") == key]
        if len(done) < world:
            return False
        for p in done:
            p.unlink()
        return True
