"""Fault injection for tests: SIGKILL a scan at a chosen point, and an HTTP proxy that misbehaves.

Nothing here touches the library: faults are injected from outside, by patching the library's
collaborators in a child process (kills) or by standing between the client and a server (network).

Kills
-----
:func:`killed_scan` runs ``scan(...)`` in a child forked from a *forkserver* that has already
imported torch, transformers and ckptgeo (a child starts in about a second instead of seven), with
one patch installed that sends the child ``SIGKILL`` at the ``n``-th time it reaches a point of
:data:`KILL_POINTS`, e.g. ``("write", 2)``: just before the second Parquet part is written. The
parent gets the child's exit code (``-9`` when the point was reached).

Network
-------
:class:`FaultProxy` is a threaded HTTP/1.1 proxy on 127.0.0.1 in front of any upstream URL (the
loopback Hub of ``tests/conftest.py``, or :class:`StubHub` here). Rules, matched in order against
``METHOD path``, make it answer a status N times, drop the connection after N body bytes, or wait
before answering; every request is logged with what was done to it.
"""

from __future__ import annotations

import http.client
import http.server
import json
import multiprocessing
import os
import re
import signal
import socket
import socketserver
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["KILL_POINTS", "killed_scan", "FaultRule", "FaultProxy", "StubHub"]

# ------------------------------------------------------------------------------------------------
# kills
# ------------------------------------------------------------------------------------------------

_PRELOAD = ["torch", "transformers", "tokenizers", "safetensors.torch", "pyarrow.parquet", "pandas",
            "ckptgeo.scan", "ckptgeo.store", "ckptgeo.models", "ckptgeo.activations", "ckptgeo.sources.local",
            "ckptgeo.metrics.registry", "transformers.models.gpt_neox.modeling_gpt_neox"]
_CTX = None


def _context():
    global _CTX
    if _CTX is None:
        _CTX = multiprocessing.get_context("forkserver")
        _CTX.set_forkserver_preload(_PRELOAD)
    return _CTX


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # never reached


class _Counter:
    def __init__(self, n: int):
        self.n, self.calls = n, 0

    def hit(self) -> bool:
        self.calls += 1
        return self.calls == self.n


def _wrap(owner, attr: str, n: int, *, after: bool = False) -> None:
    """Replace ``owner.attr`` by a wrapper that dies before (or after) its n-th call."""
    orig = getattr(owner, attr)
    count = _Counter(n)

    def wrapper(*args, **kwargs):
        hit = count.hit()
        if hit and not after:
            _die()
        out = orig(*args, **kwargs)
        if hit:
            _die()
        return out

    setattr(owner, attr, staticmethod(wrapper) if isinstance(owner, type) and _is_static(owner, attr)
            else wrapper)


def _is_static(cls: type, attr: str) -> bool:
    return isinstance(cls.__dict__.get(attr), staticmethod)


class _OsProxy:
    """``os`` for :mod:`ckptgeo.store` only, with ``replace`` wrapped (other modules keep the real one)."""

    def __init__(self, replace):
        self.replace = replace

    def __getattr__(self, name):
        return getattr(os, name)


def _kill_fetch(n):  # "while downloading": before the n-th fetch returns (in the prefetch thread)
    from ckptgeo.sources.local import LocalSource

    _wrap(LocalSource, "fetch", n)


def _kill_load(n):  # before the n-th revision's weights are read
    from ckptgeo.models import ModelHolder

    _wrap(ModelHolder, "load", n)


def _kill_swap(n):  # weights read and checked, not yet copied into the model
    import ckptgeo.models as models

    _wrap(models, "load_state_dict", n, after=True)


def _kill_forward(n):  # "while computing": at the n-th forward pass of the model
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXForCausalLM

    _wrap(GPTNeoXForCausalLM, "forward", n)


def _kill_metric(n):  # at the n-th RankMe (one per layer)
    import dataclasses

    from ckptgeo.metrics import registry

    registry.all_metrics()
    spec = registry._REGISTRY["rankme"]
    holder = type("H", (), {"fn": staticmethod(spec.fn)})
    _wrap(holder, "fn", n)
    registry._REGISTRY["rankme"] = dataclasses.replace(spec, fn=holder.fn)


def _kill_write(n):  # "while writing a part": before the n-th Parquet part is written
    import ckptgeo.store as store

    _wrap(store.pq, "write_table", n)


def _kill_torn(n):  # mid-write: half of the n-th part's bytes are in its temp file, then the kill
    import io

    import ckptgeo.store as store

    orig = store.pq.write_table
    count = _Counter(n)

    def torn(table, where, *args, **kwargs):
        if count.hit():
            buf = io.BytesIO()
            orig(table, buf, *args, **kwargs)
            data = buf.getvalue()
            with open(where, "wb") as f:
                f.write(data[: len(data) // 2])
            _die()
        return orig(table, where, *args, **kwargs)

    store.pq.write_table = torn


def _kill_replace(n):  # just after the n-th rename into place (marker, run record or part)
    import ckptgeo.store as store

    count = _Counter(n)

    def replace(src, dst):
        os.replace(src, dst)
        if count.hit():
            _die()

    store.os = _OsProxy(replace)


def _kill_small(n):  # the n-th small JSON (ckptgeo.json, runs/<hash>.json) is in its temp file, not renamed
    import ckptgeo.store as store

    count = _Counter(n)

    def replace(src, dst):
        if str(dst).endswith(".json") and count.hit():
            _die()
        os.replace(src, dst)

    store.os = _OsProxy(replace)


def _kill_resolve(n):  # inside the duplicate resolution of the n-th finishing process
    from ckptgeo.store import Dataset

    _wrap(Dataset, "resolve_duplicates", n)


def _kill_tokenizer(n):
    import transformers

    _wrap(transformers.AutoTokenizer, "from_pretrained", n)


def _kill_timer(n):  # after n tenths of a second: a point the clock picks, not the code
    threading.Timer(n / 10, _die).start()


#: name -> installer(n). Points the tests reach deterministically (a given call count).
KILL_POINTS = {
    "tokenizer": _kill_tokenizer, "fetch": _kill_fetch, "load": _kill_load, "swap": _kill_swap,
    "forward": _kill_forward, "metric": _kill_metric, "write": _kill_write, "torn": _kill_torn,
    "replace": _kill_replace, "small": _kill_small, "resolve": _kill_resolve, "timer": _kill_timer,
}


def _child(point: str, n: int, source: str, out: str, kwargs: dict) -> None:
    import tqdm

    tqdm.tqdm.set_lock(threading.RLock())  # no multiprocessing semaphore left behind by the kill
    os.environ["CKPTGEO_NO_PROGRESS"] = "1"
    KILL_POINTS[point](n)
    from ckptgeo.scan import scan

    scan(source, out=out, **kwargs)


def killed_scan(point: str, n: int, source, out, timeout: float = 300, **kwargs) -> int:
    """Run ``scan(source, out=out, **kwargs)`` in a forked child that SIGKILLs itself at the ``n``-th
    hit of ``point`` (a key of :data:`KILL_POINTS`); returns the child's exit code (-9: killed there,
    0: the scan finished before reaching the point)."""
    if point not in KILL_POINTS:
        raise KeyError(f"unknown kill point {point!r}; known: {sorted(KILL_POINTS)}")
    proc = _context().Process(target=_child, args=(point, n, str(source), str(out), kwargs))
    proc.start()
    proc.join(timeout)
    if proc.exitcode is None:
        proc.kill()
        proc.join()
        raise TimeoutError(f"scan killed at {point}:{n} did not end within {timeout} s")
    return proc.exitcode


def _child_result(source: str, out: str, kwargs: dict, result_path: str, start) -> None:
    import tqdm

    tqdm.tqdm.set_lock(threading.RLock())
    os.environ["CKPTGEO_NO_PROGRESS"] = "1"
    import warnings

    from ckptgeo.scan import scan

    start.wait(60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = scan(source, out=out, **kwargs)
    Path(result_path).write_text(json.dumps({"measured": res.measured, "skipped": res.skipped,
                                             "failed": res.failed, "locked": res.locked}))


def scans_at_once(n: int, source, out, tmp: Path, timeout: float = 300, **kwargs) -> list[dict]:
    """Start ``n`` scans of ``source`` into the same ``out`` at the same moment (forked children released
    by one event); returns each one's ScanResult as a dict (measured, skipped, failed, locked)."""
    ctx = _context()
    start = ctx.Event()
    paths = [tmp / f"result-{i}.json" for i in range(n)]
    procs = [ctx.Process(target=_child_result, args=(str(source), str(out), kwargs, str(p), start)) for p in paths]
    for p in procs:
        p.start()
    time.sleep(0.2)
    start.set()
    for p in procs:
        p.join(timeout)
        if p.exitcode is None:
            p.kill()
            p.join()
    codes = [p.exitcode for p in procs]
    if codes != [0] * n:
        raise RuntimeError(f"concurrent scans exited with {codes}")
    return [json.loads(p.read_text()) for p in paths]
