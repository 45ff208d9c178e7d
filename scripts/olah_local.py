#!/usr/bin/env python
"""Serve local git repositories over loopback HTTP the way the Hugging Face Hub serves them.

This launcher runs `olah <https://github.com/vtuber-plan/olah>`_ **0.5.4** (pinned: the patches
below touch its internals) in *offline* mode over one or more "mirror" folders of git
repositories, one branch per checkpoint. The unmodified ``huggingface_hub`` / ``transformers``
clients reach it with nothing but ``HF_ENDPOINT=http://127.0.0.1:PORT``. ckptgeo's tests use it
as their Hub; nothing here is imported by the package.

Layout served::

    <mirrors>/
    └── models/                     # repo type level ("models", "datasets", "spaces")
        └── <org>/
            └── <name>/             # a git repository, bare or not (``make_test_repo`` builds bare ones)
                ├── refs/heads/main, step0, step1000, ...   # one branch per checkpoint
                └── lfs/objects/aa/bb/<sha256>              # LFS objects (bare; ``.git/lfs`` if not)

Repositories are opened per request, so repositories and branches added while the server runs are
served at once.

Why olah needs patching
-----------------------
Online mode is unusable without internet: every route first asks the upstream Hub whether the repo
is visible. Offline mode skips that, but stock 0.5.4 resolves names only from its own proxy cache,
which is empty for local mirrors. The patches, applied in-process by :func:`apply_patches` (no file
of olah is edited):

1. *Branch -> commit* (``repo_utils.get_commit_hf_offline``): resolved from the mirror's git refs.
   Stock answers 401 RepoNotFound for any path not found by branch name, which
   ``AutoTokenizer.from_pretrained`` turns into a hard error.
2. *Newest commit* (``repo_utils.get_newest_commit_hf_offline``): the mirror's ``main`` (else
   ``HEAD``), so ``model_info(repo)`` without a revision works (stock: 401).
3. *Missing file -> 404 EntryNotFound* on ``HEAD``/``GET .../resolve/{rev}/{path}`` (stock GET: 500,
   stock HEAD by branch name: 401).
4. *Unknown revision -> 404 RevisionNotFound* on resolve, tree, paths-info and revision routes
   (stock: 401 RepoNotFound), so clients raise ``RevisionNotFoundError`` as they do against the Hub.
5. *Fast, Hub-like file serving*: ``HEAD`` reads sizes from the blob header or the LFS pointer (stock
   decompresses the blob three times and hashes LFS objects on every ``HEAD``); ``GET`` streams 8 MiB
   chunks and honours a single ``Range`` (stock: 4 KiB chunks, no ranges); LFS objects are found
   from ``git_dir`` so bare repositories work (stock: ``working_dir/.git`` only). As on the Hub, the
   ETag of an LFS file is its sha256 (also sent as ``X-Linked-Etag``/``X-Linked-Size``) and that of a
   plain blob is the git blob id.
6. *File metadata in model_info*: with ``?blobs=true`` (``HfApi.model_info(files_metadata=True)``),
   each sibling carries ``size``, ``blobId`` and ``lfs: {sha256, size, pointerSize}`` as on the Hub
   (stock: ``rfilename`` only).
7. *Unknown repository -> 401 RepoNotFound* on every route, as on the Hub (stock offline: 404
   EntryNotFound "Repository refs are not cached locally" from the refs route). Under the org
   :data:`STOCK_MISSING_ORG` an unknown repository is answered as stock olah answers it, so tests see a
   mirror that reports a missing repository as a missing entry.

``list_repo_refs``, ``list_repo_tree`` and ``get_paths_info`` work on stock olah once 1 and 4 are
in place; tree and paths-info entries carry ``size`` and, for LFS files, ``lfs.oid`` (sha256).

The "upstream Hub" is pointed at a dead loopback port, so even a code path that ignored ``offline``
could not leave the machine.

Usage
-----
::

    python scripts/olah_local.py --mirrors /tmp/mirrors --port 18090 [--workdir /tmp/olah]
    HF_ENDPOINT=http://127.0.0.1:18090 python -c \\
        "from huggingface_hub import list_repo_refs; print(list_repo_refs('testorg/pythia-tiny'))"

Readiness: probe ``/api/models/<org>/<name>/refs`` (``GET /`` answers 500 with current starlette).
"""

from __future__ import annotations

import argparse
import contextvars
import logging
import os
import re
import sys
import tempfile
import warnings
from dataclasses import dataclass
from importlib import metadata
from typing import Iterator, Optional
from urllib.parse import parse_qs

__all__ = ["OLAH_VERSION", "apply_patches", "build_config", "main", "free_port", "launch", "wait_ready", "stop"]

logger = logging.getLogger("olah_local")

#: the olah release whose internals the patches were written against.
OLAH_VERSION = "0.5.4"
#: bytes per chunk when streaming a file.
_CHUNK = 8 * 1024 * 1024
#: a git-lfs pointer file (spec v1); LFS pointers are 120-150 bytes in practice.
_LFS_POINTER = re.compile(
    rb"version https://git-lfs\.github\.com/spec/v[0-9]\noid sha256:([0-9a-f]{64})\nsize ([0-9]+)\n"
)
#: whether the current request asked for per-file metadata (``?blobs=true``).
_WANT_BLOBS: contextvars.ContextVar[bool] = contextvars.ContextVar("want_blobs", default=False)
_PATCHED = False
#: an org whose unknown repositories get stock olah's answer (404 EntryNotFound from the refs route), not patch 7's
STOCK_MISSING_ORG = "stockmirror"


# --------------------------------------------------------------------------------------------------
# git helpers (one short-lived Repo per request: repositories may change while the server runs)
# --------------------------------------------------------------------------------------------------
def _mirror_dirs(app, repo_type: str, org: Optional[str], repo: str) -> list[str]:
    paths = app.state.app_settings.config.mirrors_path
    return [os.path.join(p, repo_type, org or "", repo) for p in paths
            if os.path.isdir(os.path.join(p, repo_type, org or "", repo))]


def _open(path: str):
    import git

    try:
        return git.Repo(path, odbt=git.GitDB)
    except (git.exc.InvalidGitRepositoryError, git.exc.NoSuchPathError):
        return None


def _commit(git_repo, rev: str):
    """The commit ``rev`` names (branch, tag, full or short sha), or None."""
    import gitdb

    try:
        commit = git_repo.commit(rev)
        commit.tree  # a full sha of a missing object only fails when read
        return commit
    except (gitdb.exc.BadName, gitdb.exc.BadObject, ValueError, KeyError):
        return None


def _rev_parse(app, repo_type: str, org: Optional[str], repo: str, rev: str) -> Optional[str]:
    for path in _mirror_dirs(app, repo_type, org, repo):
        git_repo = _open(path)
        if git_repo is None:
            continue
        try:
            commit = _commit(git_repo, rev)
            if commit is not None:
                return commit.hexsha
        finally:
            git_repo.close()
    return None


@dataclass(frozen=True)
class _Entry:
    """A file at a commit: where its bytes are and the headers the Hub would send."""

    commit: str
    size: int
    etag: str
    lfs_path: Optional[str]   # LFS object file, or None for a plain blob
    blob_sha: str
    repo_path: str


def _lfs_pointer(blob) -> Optional[tuple[str, int]]:
    if not 100 < blob.size < 200:
        return None
    match = _LFS_POINTER.match(blob.data_stream.read())
    if match is None:
        return None
    return match.group(1).decode(), int(match.group(2))


def _find_entry(app, repo_type: str, org: Optional[str], repo: str, rev: str, path: str):
    """Return ``(_Entry | None, revision_found)`` for ``path`` at ``rev`` in the first mirror having it."""
    revision_found = False
    for mirror in _mirror_dirs(app, repo_type, org, repo):
        git_repo = _open(mirror)
        if git_repo is None:
            continue
        try:
            commit = _commit(git_repo, rev)
            if commit is None:
                continue
            revision_found = True
            try:
                blob = commit.tree / path.strip("/")
            except KeyError:
                continue
            if blob.type != "blob":
                continue
            pointer = _lfs_pointer(blob)
            if pointer is None:
                return _Entry(commit.hexsha, blob.size, blob.hexsha, None, blob.hexsha, mirror), True
            oid, _ = pointer
            lfs_path = os.path.join(git_repo.git_dir, "lfs", "objects", oid[:2], oid[2:4], oid)
            if not os.path.isfile(lfs_path):
                logger.warning("LFS object %s of %s missing in %s", oid, path, mirror)
                continue
            return _Entry(commit.hexsha, os.path.getsize(lfs_path), oid, lfs_path, blob.hexsha, mirror), True
        finally:
            git_repo.close()
    return None, revision_found


def _read_range(entry: _Entry, start: int, stop: int) -> Iterator[bytes]:
    """Yield bytes ``[start, stop)`` of ``entry`` in chunks (runs in starlette's threadpool)."""
    if entry.lfs_path is not None:
        with open(entry.lfs_path, "rb") as fh:
            fh.seek(start)
            left = stop - start
            while left > 0:
                chunk = fh.read(min(_CHUNK, left))
                if not chunk:
                    break
                left -= len(chunk)
                yield chunk
        return
    git_repo = _open(entry.repo_path)
    try:
        data = git_repo.odb.stream(bytes.fromhex(entry.blob_sha)).read()
    finally:
        git_repo.close()
    for i in range(start, stop, _CHUNK):
        yield data[i:min(i + _CHUNK, stop)]


def _parse_range(header: Optional[str], size: int) -> Optional[tuple[int, int]]:
    """``[start, stop)`` for a single ``bytes=a-b`` / ``bytes=a-`` / ``bytes=-n`` range, else None."""
    if not header:
        return None
    match = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", header)
    if match is None or match.group(1) == match.group(2) == "":
        return None
    first, last = match.group(1), match.group(2)
    if first == "":
        start, stop = max(size - int(last), 0), size
    else:
        start = int(first)
        stop = min(int(last) + 1, size) if last else size
    return (start, stop) if start < stop or size == 0 else None


# --------------------------------------------------------------------------------------------------
# the patches
# --------------------------------------------------------------------------------------------------
#: file under the server's repos-path where every GET of a file appends one line, once its body is sent:
#: ``org/name<TAB>revision<TAB>path<TAB>bytes`` (the bytes that went over the socket for that request)
SERVED_FILE = "served.tsv"


def _counted(chunks: Iterator[bytes], ledger: str, where: str, total: int) -> Iterator[bytes]:
    """``chunks`` passed through; their length appended to ``ledger`` just before the last of the ``total``
    bytes is sent (so a client holding the whole body finds the line written), or when a stream ends early."""
    sent, written = 0, False

    def record() -> None:
        try:
            os.makedirs(os.path.dirname(ledger), exist_ok=True)
            with open(ledger, "a") as f:
                f.write(f"{where}\t{sent}\n")
        except OSError as err:  # the count is lost, the download is not
            logger.warning("cannot record served bytes in %s: %s", ledger, err)

    try:
        for chunk in chunks:
            sent += len(chunk)
            if sent >= total and not written:
                record()
                written = True
            yield chunk
    finally:
        if not written:
            record()


def served_bytes(workdir, repo_id: Optional[str] = None) -> dict[tuple[str, str], int]:
    """Bytes served per (revision as requested, file path) by the server whose ``--workdir`` is ``workdir``
    (GETs summed; only repository ``repo_id`` when given); empty before any GET."""
    path = os.path.join(str(workdir), "repos", SERVED_FILE)
    out: dict[tuple[str, str], int] = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            repo, rev, name, sent = line.rstrip("\n").split("\t")
            if repo_id is None or repo == repo_id:
                out[(rev, name)] = out.get((rev, name), 0) + int(sent)
    return out


def apply_patches() -> None:
    """Patch the imported olah modules in place (idempotent).

    Raises
    ------
    RuntimeError
        If the installed olah is not :data:`OLAH_VERSION`.
    """
    global _PATCHED
    if _PATCHED:
        return
    installed = metadata.version("olah")
    if installed != OLAH_VERSION:
        raise RuntimeError(
            f"scripts/olah_local.py patches olah {OLAH_VERSION} internals; found olah {installed}. "
            f"Install it with `pip install olah=={OLAH_VERSION}`."
        )

    # GitDB (pure Python, see _open) reads objects in-process; the default backend starts `git cat-file`
    # processes for every Repo. Its deprecation concerns untrusted repositories, not local test mirrors.
    warnings.filterwarnings("ignore", message="GitDB is deprecated", category=DeprecationWarning)
    from fastapi.responses import Response, StreamingResponse

    import olah.mirror.repos as mirror_repos
    import olah.server_api_routes as api_routes
    import olah.server_file_routes as file_routes
    import olah.utils.repo_utils as repo_utils
    from olah.errors import error_entry_not_found_branch, error_repo_not_found, error_revision_not_found
    from olah.server import app
    from olah.server_access import build_repo_ref
    from olah.server_mirror import has_local_mirror

    # 7. unknown repository -> 401 RepoNotFound everywhere, as on the Hub (stock offline refs/tree
    #    routes answer 404 EntryNotFound "not cached locally", which clients misread as a missing file)
    stock_visibility = api_routes.ensure_repo_visibility

    async def ensure_repo_visibility(app_, repo, authorization):
        error = await stock_visibility(app_, repo, authorization)
        if error is None and app_.state.app_settings.config.offline and not has_local_mirror(app_, repo) \
                and getattr(repo, "org", None) != STOCK_MISSING_ORG:
            return error_repo_not_found()
        return error

    api_routes.ensure_repo_visibility = ensure_repo_visibility
    file_routes.ensure_repo_visibility = ensure_repo_visibility

    # 1. branch -> commit from the mirror's refs
    stock_commit_offline = repo_utils.get_commit_hf_offline

    async def get_commit_hf_offline(app_, repo_type, org, repo, commit):
        if _mirror_dirs(app_, repo_type, org, repo):
            return _rev_parse(app_, repo_type, org, repo, commit)   # None: unknown here (patch 4)
        return await stock_commit_offline(app_, repo_type, org, repo, commit)

    # 2. newest commit = main (else HEAD)
    stock_newest_offline = repo_utils.get_newest_commit_hf_offline

    async def get_newest_commit_hf_offline(app_, repo_type, org, repo):
        for rev in ("main", "HEAD"):
            sha = _rev_parse(app_, repo_type, org, repo, rev)
            if sha is not None:
                return sha
        return await stock_newest_offline(app_, repo_type, org, repo)

    # both are called through repo_utils' module globals
    repo_utils.get_commit_hf_offline = get_commit_hf_offline
    repo_utils.get_newest_commit_hf_offline = get_newest_commit_hf_offline

    # 4. unknown revision on API routes -> 404 RevisionNotFound
    stock_resolve = api_routes.resolve_requested_commit

    async def resolve_requested_commit(app_, repo, requested_commit, authorization, **kwargs):
        resolved, error = await stock_resolve(app_, repo, requested_commit, authorization, **kwargs)
        if resolved is None and app_.state.app_settings.config.offline and has_local_mirror(app_, repo):
            return None, error_revision_not_found(revision=requested_commit)
        return resolved, error

    api_routes.resolve_requested_commit = resolve_requested_commit
    file_routes.resolve_requested_commit = resolve_requested_commit

    # 3 + 4 + 5. resolve routes for mirrored repos served straight from git
    stock_head = file_routes.file_head_common
    stock_get = file_routes.file_get_common

    def _lookup(app_, repo_type, org, repo, commit, file_path):
        entry, revision_found = _find_entry(app_, repo_type, org, repo, commit, file_path)
        if not revision_found:
            return None, error_revision_not_found(revision=commit)
        if entry is None:
            return None, error_entry_not_found_branch(commit, file_path)
        return entry, None

    def _headers(entry: _Entry) -> dict[str, str]:
        headers = {
            "content-length": str(entry.size),
            "etag": f'"{entry.etag}"',
            "x-repo-commit": entry.commit,
            "accept-ranges": "bytes",
            "content-type": "application/octet-stream",
        }
        if entry.lfs_path is not None:
            headers["x-linked-etag"] = f'"{entry.etag}"'
            headers["x-linked-size"] = str(entry.size)
        return headers

    async def file_head_common(app_, repo_type, org, repo, commit, file_path, request):
        if not (app_.state.app_settings.config.offline
                and has_local_mirror(app_, build_repo_ref(repo_type, org, repo))):
            return await stock_head(app_, repo_type, org, repo, commit, file_path, request)
        entry, error = _lookup(app_, repo_type, org, repo, commit, file_path)
        return error if error is not None else Response(headers=_headers(entry))

    async def file_get_common(app_, repo_type, org, repo, commit, file_path, request):
        if not (app_.state.app_settings.config.offline
                and has_local_mirror(app_, build_repo_ref(repo_type, org, repo))):
            return await stock_get(app_, repo_type, org, repo, commit, file_path, request)
        entry, error = _lookup(app_, repo_type, org, repo, commit, file_path)
        if error is not None:
            return error
        headers = _headers(entry)
        span = _parse_range(request.headers.get("range"), entry.size)
        ledger = os.path.join(app_.state.app_settings.config.repos_path, SERVED_FILE)
        where = f"{org}/{repo}\t{commit}\t{file_path}"
        if span is None:
            return StreamingResponse(_counted(_read_range(entry, 0, entry.size), ledger, where, entry.size),
                                     headers=headers)
        start, stop = span
        headers["content-length"] = str(stop - start)
        headers["content-range"] = f"bytes {start}-{stop - 1}/{entry.size}"
        return StreamingResponse(_counted(_read_range(entry, start, stop), ledger, where, stop - start),
                                 status_code=206, headers=headers)

    # the route functions call these through file_routes' module globals
    file_routes.file_head_common = file_head_common
    file_routes.file_get_common = file_get_common

    # 6. per-file metadata in model_info(files_metadata=True)
    stock_get_meta = mirror_repos.LocalMirrorRepo.get_meta

    def get_meta(self, commit_hash):
        meta = stock_get_meta(self, commit_hash)
        if meta is None or not _WANT_BLOBS.get():
            return meta
        commit = self._git_repo.commit(meta["sha"])
        siblings = []
        for info in self._get_tree_files(commit.tree, recursive=True):
            if info["type"] != "file":
                continue
            sibling = {"rfilename": info["path"], "blobId": info["oid"], "size": info["size"]}
            if "lfs" in info:
                lfs = info["lfs"]
                sibling["lfs"] = {"sha256": lfs["oid"], "size": lfs["size"], "pointerSize": lfs["pointerSize"]}
            siblings.append(sibling)
        meta["siblings"] = siblings
        return meta

    mirror_repos.LocalMirrorRepo.get_meta = get_meta

    class _BlobsFlag:
        """ASGI middleware: remember whether the request carries ``blobs=true``."""

        def __init__(self, inner):
            self.inner = inner

        async def __call__(self, scope, receive, send):
            if scope["type"] != "http":
                await self.inner(scope, receive, send)
                return
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            token = _WANT_BLOBS.set(query.get("blobs", ["false"])[-1].lower() in {"1", "true"})
            try:
                await self.inner(scope, receive, send)
            finally:
                _WANT_BLOBS.reset(token)

    app.add_middleware(_BlobsFlag)
    _PATCHED = True


def build_config(mirrors: list[str], *, host: str, port: int, workdir: str):
    """An offline ``OlahConfig`` serving ``mirrors`` on ``host:port``; upstream set to a dead port.

    Parameters
    ----------
    mirrors : list of str
        Folders laid out as ``<mirror>/models/<org>/<name>``.
    host, port : str, int
        Where to listen.
    workdir : str
        olah's own cache folder goes to ``workdir/repos`` (unused offline, but created).

    Returns
    -------
    olah.configs.OlahConfig
    """
    from olah.configs import OlahConfig

    config = OlahConfig()
    config.host, config.port = host, port
    config.repos_path = os.path.join(workdir, "repos")
    config.mirrors_path = [os.path.abspath(m) for m in mirrors]
    config.offline = True
    config.hf_scheme = "http"
    config.hf_netloc = config.hf_lfs_netloc = "127.0.0.1:9"    # discard port: nothing listens
    config.mirror_scheme = "http"
    config.mirror_netloc = config.mirror_lfs_netloc = f"{host}:{port}"
    return config


# --------------------------------------------------------------------------------------------------
# starting a server from another process (tests, benchmarks)
# --------------------------------------------------------------------------------------------------
def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(mirrors, port: int, workdir, log):
    """Start this launcher in a subprocess serving ``mirrors`` on ``port``; its output goes to ``log``.
    Returns the ``subprocess.Popen``; pair with :func:`wait_ready`."""
    import subprocess
    from pathlib import Path

    with open(log, "wb") as log_file:
        return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--mirrors", str(mirrors),
                                 "--port", str(port), "--workdir", str(workdir)],
                                stdout=log_file, stderr=subprocess.STDOUT, cwd=str(Path(log).parent))


def stop(proc, timeout: float = 10.0) -> None:
    """Terminate a server started by :func:`launch`; kill it if it has not exited after ``timeout`` s."""
    import subprocess

    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_ready(url: str, proc, log, timeout: float = 60.0) -> None:
    """Poll ``url`` (a repo's ``/refs`` route, not ``/``) until it answers.

    Raises ``RuntimeError`` with the end of ``log`` if the server exits or ``timeout`` seconds pass."""
    import time
    import urllib.error
    import urllib.request
    from pathlib import Path

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                response.read()
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = Path(log).read_text(errors="replace")[-3000:] if Path(log).exists() else ""
            raise RuntimeError(f"local Hub did not become ready at {url} (exit code {proc.poll()}); log:\n{tail}")
        time.sleep(0.05)


def main(argv: Optional[list[str]] = None) -> None:
    """Parse arguments, patch olah and serve until killed."""
    parser = argparse.ArgumentParser(
        description="Serve local git mirrors as a Hugging Face Hub (olah 0.5.4, offline, patched).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  python scripts/olah_local.py --mirrors /tmp/mirrors --port 18090\n"
               "  HF_ENDPOINT=http://127.0.0.1:18090 python -c \"from huggingface_hub import "
               "list_repo_refs; print(list_repo_refs('testorg/pythia-tiny'))\"",
    )
    parser.add_argument("--mirrors", action="append", required=True,
                        help="folder holding models/<org>/<name> git repos (repeatable)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workdir", default=None, help="olah's cache and logs (default: a temp dir)")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (default: warning)")
    args = parser.parse_args(argv)

    logging.basicConfig(level=logging.WARNING, format="olah_local: %(message)s")
    workdir = args.workdir or tempfile.mkdtemp(prefix="olah-local-")
    os.makedirs(workdir, exist_ok=True)
    apply_patches()

    import uvicorn
    from olah.server import AppSettings, app
    from olah.utils.logging import build_logger

    app.state.logger = build_logger("olah", "olah.log", logger_dir=os.path.join(workdir, "logs"))
    app.state.app_settings = AppSettings(
        config=build_config(args.mirrors, host=args.host, port=args.port, workdir=workdir))
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    sys.exit(main())
