"""Fetching ahead: each revision's files fetched and checked (size and sha256) in background threads.

:class:`Prefetcher` runs a scan's fetches in ``prefetch`` threads, each followed by :func:`verify_files`, so the
download and the hash of revision i+1 run while revision i is measured (:mod:`ckptgeo.engine.scan`); the main
thread waits only for what they have not finished.
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ckptgeo.errors import CorruptCheckpointError
from ckptgeo.sources.protocol import WeightFile
from ckptgeo.sources.revisions import Revision

__all__ = ["Fetched", "Prefetcher", "verify_files"]

log = logging.getLogger(__name__)


@dataclass
class Fetched:
    """A revision's folder with its weight files verified (size and sha256, :func:`verify_files`), and the
    seconds its ``download`` (the fetch call) and its ``verify`` (reading and hashing every weight file) took,
    wherever they ran."""

    path: Path
    files: list[WeightFile]
    download: float
    verify: float


class Prefetcher:
    """Downloads and verifies ahead: ``ahead(i)`` starts revision i (unless under way), then i+1 … i+prefetch (K
    threads, so K revisions are in flight at once); each thread fetches its revision, then checks every weight
    file's size and sha256 against what the source announced (:func:`verify_files`, the files of one revision
    hashed in parallel), so the hash of revision i+1 runs while revision i is measured, and reading the files to
    hash them leaves them in the page cache for the load. ``get(i)`` waits for revision i's :class:`Fetched`
    (raising what its fetch or check raised: a corrupt download is refused there), ``drop(i)`` gives up a
    revision this process will not measure after all."""

    def __init__(self, source, todo: list[Revision], prefetch: int, needs_fetch, files_of=None):
        self.source, self.todo, self.prefetch, self.needs_fetch = source, todo, prefetch, needs_fetch
        #: revision -> the weight files the source announced (``[]``: none known; the fetched ones are hashed)
        self.files_of = files_of or (lambda rev: [])
        self.pool = ThreadPoolExecutor(max_workers=max(prefetch, 1))
        self.futures: dict[int, Future] = {}

    def _fetch(self, rev: Revision, ahead: bool) -> Fetched:
        from ckptgeo.engine.model import read_ahead

        t0 = time.perf_counter()
        path = self.source.fetch(rev)
        t1 = time.perf_counter()
        if ahead:   # the kernel reads while this thread hashes: the hash then reads memory, and so does the load
            read_ahead(path)
        files = verify_files(path, self.files_of(rev), rev)
        return Fetched(path, files, t1 - t0, time.perf_counter() - t1)

    def _submit(self, i: int, ahead: bool = True) -> None:
        if i < len(self.todo) and i not in self.futures and self.needs_fetch(self.todo[i]):
            self.futures[i] = self.pool.submit(self._fetch, self.todo[i], ahead)

    def ahead(self, i: int) -> None:
        self._submit(i, ahead=False)   # first: with K=1 the pool fetches one revision at a time, in this order
        for j in range(i + 1, i + 1 + self.prefetch):
            self._submit(j)

    def get(self, i: int) -> Fetched:
        self._submit(i, ahead=False)
        return self.futures.pop(i).result()

    def drop(self, i: int) -> None:
        future = self.futures.pop(i, None)
        if future is None or future.cancel():
            return
        try:
            future.result()
        except Exception as err:  # the download or its check failed: nothing of it to keep
            log.debug("prefetch of %s failed: %s", self.todo[i].name, err)
        self.source.release(self.todo[i])

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def verify_files(path: Path, files: list[WeightFile], rev: Revision) -> list[WeightFile]:
    """Size and sha256 of each fetched weight file, checked against what the source announced.

    Every byte of every weight file is read and hashed, every time, whatever the source: the digests are what the
    ``revisions`` table records, what tells byte-identical branches apart (``duplicate_of``, weight groups), and
    what refuses a damaged download. For a Hub repo the listing gives each LFS weight file's size and sha256
    before the download (:meth:`~ckptgeo.sources.hub.HubSource.weight_files`); the file on disk is hashed here,
    after its download and before its load, and compared with it (the download client names the cached blob after
    the server's ETag without hashing its bytes). A folder announces sizes only: its digests are recorded. The scan
    calls this in its prefetch thread (:class:`Prefetcher`), so the hash of revision i+1 runs while revision i is
    measured; the files of one revision are hashed in parallel threads (``hashlib`` releases the GIL), as are
    the ``prefetch`` revisions in flight.

    Parameters
    ----------
    path : Path
        The fetched revision's folder.
    files : list of WeightFile
        The weight files the source announced (size and sha256 where known).
    rev : Revision
        For error messages.

    Returns
    -------
    list of WeightFile
        The same files with their size and sha256 on disk.

    Raises
    ------
    CorruptCheckpointError
        A file is missing, or its bytes or sha256 differ from the source's metadata (a truncated or altered
        download).
    """
    from ckptgeo.engine.model import damaged_file_advice, sha256_file

    for f in files:
        if not (path / f.name).exists():
            raise CorruptCheckpointError(f"{rev.name}: weight file {f.name} is missing", revision=rev.name,
                                         path=str(path / f.name))
    if len(files) > 1:
        with ThreadPoolExecutor(max_workers=min(len(files), os.cpu_count() or 1)) as pool:
            digests = list(pool.map(lambda f: sha256_file(path / f.name), files))
    else:
        digests = [sha256_file(path / f.name) for f in files]
    out = []
    for f, digest in zip(files, digests):
        local = path / f.name
        size = local.stat().st_size
        if (f.size is not None and f.size != size) or (f.sha256 is not None and f.sha256 != digest):
            raise CorruptCheckpointError(
                f"{rev.name}: {f.name} does not match the source's metadata ({size} bytes, sha256 {digest[:12]}…; "
                f"expected {f.size} bytes, sha256 {(f.sha256 or '?')[:12]}…); {damaged_file_advice(local)}",
                revision=rev.name, path=str(local))
        out.append(WeightFile(f.name, size, digest))
    return out
