"""How the processes of a launcher share a study: each scans its runs as a single process
(:func:`one_process`), and the last to finish its share analyses (:func:`wait_for_others`)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["one_process", "wait_for_others"]


def one_process():
    """The study splits *runs* between a launcher's processes; each run's scan must then measure every
    revision itself, not its rank's share (:func:`ckptgeo.engine.scan.shard` reads the launcher's variables)."""
    from unittest import mock

    return mock.patch.dict(os.environ, {"RANK": "0", "WORLD_SIZE": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"})


def wait_for_others(out: Path, key: str, rank: int, world: int) -> bool:
    """Mark this process's share done; True for the process that finds every share done (it analyses).

    The markers live in ``OUT/.done/``; the process that finds all ``world`` of them (under a lock) removes
    them, so a rerun starts counting afresh and exactly one process of each run analyses."""
    import fcntl

    marks = out / ".done"
    marks.mkdir(parents=True, exist_ok=True)
    (marks / f"rank{rank}-of-{world}").write_text(key, encoding="utf-8")
    with open(marks / ".lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        done = [p for p in marks.glob(f"rank*-of-{world}") if p.read_text(encoding="utf-8") == key]
        if len(done) < world:
            return False
        for p in done:
            p.unlink()
        return True
