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
loopback Hub of ``tests/conftest.py``, or :class:`StubUpstream` here). Rules, matched in order against
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
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from tests._checkpoints import SUITE

__all__ = ["KILL_POINTS", "killed_scan", "scans_at_once", "quiet_scan", "FaultRule", "FaultProxy", "StubUpstream"]

#: every fault test scans 8 items of the bundled ``logical_deduction`` suite (tests._checkpoints.SUITE)


def quiet_scan(ck, out, **kw):
    """``ckptgeo.engine.scan.scan`` on the fault tests' suite (8 items), keyword arguments overriding; the
    warnings a fault is expected to raise (duplicates, vocabulary) are silenced."""
    import warnings

    from ckptgeo.engine.scan import scan

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return scan(ck, out=out, **{"suites": (SUITE,), "n_samples": 8, **kw})

# ------------------------------------------------------------------------------------------------
# kills
# ------------------------------------------------------------------------------------------------

_PRELOAD = ["torch", "transformers", "tokenizers", "safetensors.torch", "pyarrow.parquet", "pandas",
            "ckptgeo.engine.scan", "ckptgeo.store.dataset", "ckptgeo.engine.model", "ckptgeo.engine.forward", "ckptgeo.sources.local",
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
    """``os`` for :mod:`ckptgeo._io` only (every atomic write), with ``replace`` wrapped (other modules keep the
    real one)."""

    def __init__(self, replace):
        self.replace = replace

    def __getattr__(self, name):
        return getattr(os, name)


def _kill_fetch(n):  # "while downloading": before the n-th fetch returns (in the prefetch thread)
    from ckptgeo.sources.local import LocalSource

    _wrap(LocalSource, "fetch", n)


def _kill_load(n):  # before the n-th revision's weights are read
    from ckptgeo.engine.model import ModelHolder

    _wrap(ModelHolder, "load", n)


def _kill_swap(n):  # weights read and checked, not yet copied into the model
    import ckptgeo.engine.model as models

    _wrap(models, "open_checkpoint", n, after=True)


def _kill_forward(n):  # "while computing": at the n-th forward pass of the model
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXForCausalLM

    _wrap(GPTNeoXForCausalLM, "forward", n)


def _kill_metric(n):  # at the n-th RankMe (one per layer)
    import dataclasses

    from ckptgeo.metrics import registry

    spec = registry.get_metric("rankme")
    holder = type("H", (), {"fn": staticmethod(spec.fn)})
    _wrap(holder, "fn", n)
    registry.METRICS._items["rankme"] = dataclasses.replace(spec, fn=holder.fn)  # replaced, not registered twice


def _kill_write(n):  # "while writing a part": before the n-th Parquet part is written
    import ckptgeo.store.dataset as store

    _wrap(store.pq, "write_table", n)


def _kill_torn(n):  # mid-write: half of the n-th part's bytes are in its temp file, then the kill
    import io

    import ckptgeo.store.dataset as store

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
    import ckptgeo._io as store

    count = _Counter(n)

    def replace(src, dst):
        os.replace(src, dst)
        if count.hit():
            _die()

    store.os = _OsProxy(replace)


def _kill_small(n):  # the n-th small JSON (ckptgeo.json, runs/<hash>.json) is in its temp file, not renamed
    import ckptgeo._io as store

    count = _Counter(n)

    def replace(src, dst):
        if str(dst).endswith(".json") and count.hit():
            _die()
        os.replace(src, dst)

    store.os = _OsProxy(replace)


def _kill_resolve(n):  # inside the duplicate resolution of the n-th finishing process
    from ckptgeo.store.dataset import Dataset

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
    from ckptgeo.engine.scan import scan

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

    from ckptgeo.engine.scan import scan

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


# ------------------------------------------------------------------------------------------------
# network
# ------------------------------------------------------------------------------------------------
@dataclass
class FaultRule:
    """What the proxy does to requests whose ``"METHOD /path?query"`` matches ``pattern`` (``re.search``).

    ``status``: answer it instead of forwarding. ``drop_after``: forward, send the upstream's headers
    (its full Content-Length) and only this many body bytes, then reset the connection. ``delay``:
    seconds to wait before answering (alone: a slow but correct server). ``times``: how many matching
    requests the rule applies to (None: all). ``headers``: sent with a ``status`` answer (``Retry-After``).
    """

    pattern: str
    status: int | None = None
    drop_after: int | None = None
    delay: float = 0.0
    times: int | None = 1
    hits: int = 0
    headers: dict | None = None

    def take(self, line: str) -> bool:
        if (self.times is not None and self.hits >= self.times) or not re.search(self.pattern, line):
            return False
        self.hits += 1
        return True


_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection", "host"}


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of ``upstream`` that applies :class:`FaultRule` s.

    Use as a context manager; ``url`` is where to point ``HF_ENDPOINT``; ``log`` lists
    ``(method, path, action)`` for every request (action: ``"forward"``, ``"status 503"``,
    ``"drop after N"``, with ``" +delay"`` when delayed).

    Examples
    --------
    >>> with FaultProxy("http://127.0.0.1:8000", [FaultRule("GET .*/refs", status=503, times=2)]) as p:  # doctest: +SKIP
    ...     os.environ["HF_ENDPOINT"] = p.url
    """

    def __init__(self, upstream: str, rules: list[FaultRule] | None = None):
        self.upstream = upstream.rstrip("/")
        self.rules = list(rules or [])
        self.log: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _handle(self):
                proxy._serve(self)

            do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _handle

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request, client_address):
                pass  # a client that gave up (timeout tests) is expected, not news

        self._server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "FaultProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add(self, rule: FaultRule) -> FaultRule:
        with self._lock:
            self.rules.append(rule)
        return rule

    def requests(self, pattern: str) -> list[tuple[str, str, str]]:
        """Logged requests whose ``"METHOD path"`` matches ``pattern``."""
        return [e for e in self.log if re.search(pattern, f"{e[0]} {e[1]}")]

    def _serve(self, h: http.server.BaseHTTPRequestHandler) -> None:
        line = f"{h.command} {h.path}"
        with self._lock:
            rule = next((r for r in self.rules if r.take(line)), None)
            h._log_index = len(self.log)  # logged on arrival: a client may see the answer before _record runs
            self.log.append((h.command, h.path, "pending"))
        action = "forward"
        if rule is not None and rule.delay:
            time.sleep(rule.delay)
        if rule is not None and rule.status is not None:
            action = f"status {rule.status}"
            body = json.dumps({"error": f"injected {rule.status}"}).encode()
            h.send_response(rule.status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(body)))
            for k, v in (rule.headers or {}).items():
                h.send_header(k, str(v))
            h.end_headers()
            if h.command != "HEAD":
                h.wfile.write(body)
            self._record(h, action, rule)
            return
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else None
        up = urlsplit(self.upstream)
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
        headers = {k: v for k, v in h.headers.items() if k.lower() not in _HOP}
        headers["Host"] = up.netloc
        try:
            conn.request(h.command, h.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except OSError as err:
            self._record(h, f"upstream error {err}", rule)
            h.send_error(502)
            return
        finally:
            conn.close()
        h.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() in _HOP or k.lower() == "content-length":
                continue
            if k.lower() == "location":
                v = v.replace(self.upstream, self.url)
            h.send_header(k, v)
        size = resp.getheader("Content-Length")
        h.send_header("Content-Length", size if h.command == "HEAD" and size else str(len(data)))
        h.end_headers()
        if h.command == "HEAD":
            self._record(h, action, rule)
            return
        if rule is not None and rule.drop_after is not None:
            action = f"drop after {rule.drop_after}"
            h.wfile.write(data[: rule.drop_after])
            h.wfile.flush()
            h.close_connection = True
            try:
                h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                h.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        else:
            h.wfile.write(data)
        self._record(h, action, rule)

    def _record(self, h, action: str, rule: FaultRule | None) -> None:
        if rule is not None and rule.delay:
            action += " +delay"
        with self._lock:
            self.log[h._log_index] = (h.command, h.path, action)


class StubUpstream:
    """A minimal upstream for testing :class:`FaultProxy` itself: serves ``files`` (path -> bytes) with
    GET/HEAD and single ``Range: bytes=a-`` requests; 404 otherwise."""

    def __init__(self, files: dict[str, bytes]):
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                data = stub.files.get(self.path)
                if data is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                start = 0
                m = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
                if m:
                    start = int(m.group(1))
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(data) - start))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data[start:])

            do_HEAD = do_GET

        self.files = dict(files)
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
