"""Writing files so that a kill or a full disk never leaves a torn result, and the locks between processes.

Every result file ckptgeo writes (Parquet parts, run records, events and summaries, report.md, figures,
checkpoints, manifests, training state, saved hidden states, suite files) goes through
:func:`atomic_path` (or its two shorthands, or :func:`atomic_dir` for a checkpoint folder)::

    TARGET_DIR/
      .<name>.tmp-<pid>-<8 hex>    the temporary file, written and fsync-ed (readers skip dot names)
      <name>                       appears in one os.replace, complete

The result's permissions follow the user's umask like any normal file (0644 under umask 022), whatever
the writer did (``mkstemp`` and safetensors make 0600 files), and the temporary file is unlinked in
``finally`` whatever happens. A folder is made with ``os.mkdir`` (0755 under umask 022).

Two kinds of locks between processes:

- :class:`Claim`, a claim file made by an atomic ``link`` (which NFS and Lustre do atomically, unlike
  ``flock``, which they may refuse or not share between nodes), holding the claimant's host, pid, the pid's
  start time and Slurm job; a thread touches its mtime (the heartbeat) while it is held. A claim whose holder is
  dead (same host, pid gone or reused) or whose heartbeat is older than ``stale_after`` seconds is taken over.
  This is what the scan's per-revision locks and the dataset-wide lock use.
- :class:`FileLock`, the kernel's ``flock``: it vanishes with a killed process, but only works between
  processes of one machine on file systems that support it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import threading
import time
import uuid
import warnings
from pathlib import Path
from typing import IO, Iterator

__all__ = ["atomic_path", "atomic_write_bytes", "atomic_write_text", "atomic_dir", "FileLock", "load_torch_safely",
           "safe_name", "distinct_name", "NAME_MAX_BYTES", "temp_target", "Claim", "read_claim", "claim_is_stale"]

log = logging.getLogger(__name__)

#: the longest file-name part :func:`safe_name` returns, in bytes: a part name of a model and a revision,
#: a config hash and a temporary-file prefix and suffix stays under the 255-byte limit of file names
NAME_MAX_BYTES = 80


def safe_name(name: str, *, what: str = "name") -> str:
    """The part of a file name made from ``name`` (a suite, model, revision, stage or family member name read
    from an input): one path component that stays inside its folder.

    Every run of characters outside ``A-Z a-z 0-9 . _ -`` (separators ``/`` and ``\\``, NUL, spaces, ``@``,
    non-ASCII) becomes ``_``; leading dots become ``_`` (so ``..`` is ``__`` and no result is hidden or
    looks like a temporary file of :func:`atomic_path`); a result longer than :data:`NAME_MAX_BYTES` keeps
    its start and ends in ``-`` and 8 hex digits of the name's sha256, so long names stay distinct.
    Names already safe (``step1000``, ``pythia-160m``, ``copy-L1``) come back unchanged.

    Parameters
    ----------
    name : str
        The name as the input gave it.
    what : str, default="name"
        What the name is (``"suite name"``), for the error message.

    Returns
    -------
    str
        At most :data:`NAME_MAX_BYTES` ASCII characters, none of them a separator.

    Raises
    ------
    InvalidParameterError
        ``name`` is not a string, or is empty.

    Examples
    --------
    >>> safe_name("../../x"), safe_name("/abs/path/model"), safe_name("a@step1000"), safe_name("a b")
    ('___.._x', '_abs_path_model', 'a_step1000', 'a_b')
    >>> len(safe_name("x" * 300)), safe_name("x" * 300)[-9:]
    (80, '-0d4e2ca9')
    """
    from ckptgeo.errors import InvalidParameterError

    if not isinstance(name, str) or not name:
        raise InvalidParameterError(f"A {what} must be a non-empty string. Got {name!r}.", name=what, value=name)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name)
    slug = re.sub(r"^\.+", lambda m: "_" * len(m.group()), slug)
    if len(slug) > NAME_MAX_BYTES:
        slug = f"{slug[:NAME_MAX_BYTES - 9]}-{_tag(name)}"
    return slug


def _tag(name: str) -> str:
    """8 hex digits of ``name``'s sha256: the suffix :func:`safe_name` and :func:`distinct_name` append."""
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def distinct_name(name: str, *, what: str = "name") -> str:
    """:func:`safe_name` made one-to-one: a name that needed no change comes back as it is (``step1000``);
    one that :func:`safe_name` changed ends in ``-`` and 8 hex digits of its sha256, so two names that
    :func:`safe_name` makes alike (``a/b`` and ``a_b``, both legal Hub branch names) stay apart.

    Raises
    ------
    InvalidParameterError
        ``name`` is not a string, or is empty.

    Examples
    --------
    >>> distinct_name("step1000"), distinct_name("a_b"), distinct_name("a/b"), distinct_name("a@b")
    ('step1000', 'a_b', 'a_b-c14cddc0', 'a_b-7508d8b5')
    >>> len(distinct_name("x/" * 100)) <= NAME_MAX_BYTES
    True
    """
    slug = safe_name(name, what=what)
    if slug == name:
        return slug
    tag = _tag(name)
    if slug.endswith(f"-{tag}"):   # a long name safe_name already cut and tagged
        return slug
    return f"{slug[:NAME_MAX_BYTES - 9]}-{tag}"


def _temp_name(path: Path) -> Path:
    return path.parent / f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"


_TEMP = re.compile(r"\.(?P<target>.+)\.tmp-\d+-[0-9a-f]{8}")


def temp_target(name: str) -> str | None:
    """The file name a temporary file of :func:`atomic_path` / :func:`atomic_dir` was for, or None when
    ``name`` is not such a name (``.step6.tmp-4242-0a1b2c3d`` -> ``step6``; ``.draft.tmp-1`` -> None).

    A clean-up deletes a leftover only when this names one of its own files, never by a looser pattern.

    Examples
    --------
    >>> temp_target(".step6.tmp-4242-0a1b2c3d"), temp_target(".draft.tmp-1"), temp_target("step6")
    ('step6', None, None)
    """
    m = _TEMP.fullmatch(name)
    return m.group("target") if m else None


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (``/proc/self/status``)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: the classic read-by-setting, restored at once
    os.umask(mask)
    return mask


def _finish_file(path: Path) -> None:
    """Give ``path`` a normal file's permissions (0666 less the umask: some writers, e.g. safetensors, make
    0600 files) and flush it to disk."""
    os.chmod(path, 0o666 & ~_umask())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _naming(tmp: Path) -> Iterator[None]:
    """Name ``tmp`` on an OSError that names no file (a write or close on a full disk names none), so that the
    one-line error can say which file was being written (:func:`temp_target` maps it to its target)."""
    try:
        yield
    except OSError as err:
        if not err.filename:
            err.filename = str(tmp)
        raise


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path next to ``path`` to write to; on a clean exit it gets a normal file's permissions
    (0666 less the umask), is fsync-ed and renamed onto ``path``.

    The parent folder is created if needed. Whatever writes the file (``pq.write_table``, ``fig.savefig``,
    ``torch.save``, ``open(tmp, "w")``) must have closed it by the end of the ``with`` block.

    Raises
    ------
    OSError
        From the writer or the rename (``errno.ENOSPC`` on a full disk); the temporary file is removed and
        ``path`` is left as it was.

    Examples
    --------
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> with atomic_path(d / "a.txt") as tmp:
    ...     _ = tmp.write_text("done")
    >>> (d / "a.txt").read_text(), [p.name for p in d.iterdir()]
    ('done', ['a.txt'])
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(path)
    try:
        with _naming(tmp):
            yield tmp
            _finish_file(tmp)
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_path`); returns ``path``."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`atomic_path`); returns ``path``."""
    return atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary folder next to ``path`` to fill; on a clean exit every file in it gets a normal file's
    permissions and is fsync-ed, and the folder is renamed onto ``path`` (which must not exist yet). On an error the temporary folder is removed.

    Raises
    ------
    OSError
        From the writer, or ``path`` exists and is not an empty folder.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_name(path)
    os.mkdir(tmp)
    try:
        with _naming(tmp):
            yield tmp
            for f in tmp.rglob("*"):
                if f.is_file():
                    _finish_file(f)
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def load_torch_safely(path: str | os.PathLike, *, label: str = ""):
    """Read a ``torch.save`` / pickle file without running any code from it.

    The file is read by ``torch.load(path, map_location="cpu", weights_only=True)``, whose unpickler builds
    tensors, numbers, strings and containers only and refuses every other global (a pickle's
    ``os.system`` or any class). Nothing else in ckptgeo unpickles a file.

    Parameters
    ----------
    path : path
        The file.
    label : str, default=""
        Put before the path in the error message (e.g. ``"step1000: weight file "``).

    Returns
    -------
    object
        What the file holds (tensors on the CPU, dicts, lists, numbers, strings).

    Raises
    ------
    UnsafeFileError
        The weights-only loader refused the file (it asks for another type, such as a pickle's
        ``os.system``, or uses a pickle feature that loader lacks); the message names the file and why.
    Exception
        Whatever torch raises on a truncated or corrupt file (``RuntimeError``, ``EOFError``,
        ``KeyError``, ``pickle.UnpicklingError``): the caller names the file as damaged.
    """
    import pickle

    import torch

    from ckptgeo.errors import UnsafeFileError

    try:
        with warnings.catch_warnings():  # torch's note on a legacy (non-zip) pickle: the refusal below says it all
            warnings.simplefilter("ignore", UserWarning)
            return torch.load(os.fspath(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "weights only load failed" not in str(err).lower():
            raise
        why = (str(err.__context__ or "").strip().splitlines() or ["refused"])[0]
        raise UnsafeFileError(
            f"{label}{path} cannot be loaded safely: torch's weights-only loader, which builds only tensors, "
            f"numbers and containers, refused it ({why}); ckptgeo never loads a pickle any other way, since that "
            f"could run code from it.", path=os.fspath(path)) from None


class FileLock:
    """An exclusive ``flock`` on ``path`` (created if needed), held until :meth:`close` or the ``with`` exit.

    Parameters
    ----------
    path : path
        The lock file; its folder is created if needed.
    blocking : bool, default=True
        Wait for the lock; with False, raise ``BlockingIOError`` at once if another process holds it.

    Raises
    ------
    BlockingIOError
        ``blocking=False`` and the lock is held elsewhere.
    """

    def __init__(self, path: str | os.PathLike, *, blocking: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO | None = open(self.path, "a+")
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BaseException:
            self._file.close()
            self._file = None
            raise

    def close(self) -> None:
        """Release the lock (closing the file releases the ``flock``)."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "FileLock":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _pid_start(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (``/proc/PID/stat`` field 22), which tells
    a reused pid from the original; None where unreadable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _pid_alive(pid: int, start: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: alive
    now = _pid_start(pid)
    return start is None or now is None or now == start


def read_claim(path: str | os.PathLike) -> dict | None:
    """The holder of the claim file ``path``: its JSON (``host``, ``pid``, ``pid_start``, ``started`` in Unix
    seconds, ``token``, ``slurm`` job variables) plus ``heartbeat``, the file's mtime; None if there is no
    claim (or it vanished while being read). An unreadable claim file reads as ``{"heartbeat": mtime}``."""
    path = Path(path)
    try:
        heartbeat = path.stat().st_mtime
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        info = json.loads(text)
        if not isinstance(info, dict):
            info = {}
    except ValueError:
        info = {}
    info["heartbeat"] = heartbeat
    return info


def claim_is_stale(info: dict, *, now: float, stale_after: float, host: str | None = None) -> bool:
    """Whether a claim (as :func:`read_claim` gives it) may be taken over: its heartbeat is older than
    ``stale_after`` seconds at time ``now``, or its holder ran on this host (``host``, default this machine's
    name) and its process is gone (or the pid now belongs to another process)."""
    if now - info.get("heartbeat", now) > stale_after:
        return True
    if info.get("host") == (host or socket.gethostname()) and isinstance(info.get("pid"), int):
        return not _pid_alive(info["pid"], info.get("pid_start"))
    return False


class Claim:
    """An exclusive claim on ``path`` that works on network file systems and survives a dead holder.

    The claim file appears complete in one ``os.link`` (which fails if it exists, atomically, on local disks,
    NFS and Lustre alike). While held, a daemon thread sets its mtime to ``clock()`` every ``heartbeat``
    seconds. Another process takes it over when :func:`claim_is_stale` says so: it renames the file to a
    private name, checks that the file it moved is the stale one it judged (not a fresh claim made
    meanwhile, which it puts back), and claims afresh. Clocks of the hosts sharing a folder must agree to
    well within ``stale_after``.

    Parameters
    ----------
    path : path
        The claim file; its folder is created if needed.
    blocking : bool, default=False
        Wait (polling every ``poll`` seconds) until the claim can be taken; with False raise at once.
    stale_after : float, optional
        Seconds without a heartbeat after which the claim is stale (default
        :data:`ckptgeo.constants.CLAIM_STALE_S`, env ``CKPTGEO_CLAIM_STALE_S``).
    heartbeat : float, optional
        Seconds between heartbeats (default a tenth of ``stale_after``); 0 for none (tests).
    clock : callable, default=time.time
        Unix seconds, for the heartbeat and the staleness test (a fake clock in tests).
    poll : float, default=0.2
        Seconds between tries when ``blocking``.

    Attributes
    ----------
    holder : dict
        What this claim wrote (host, pid, pid_start, started, token, slurm).

    Raises
    ------
    BlockingIOError
        ``blocking=False`` and another live process holds the claim; ``.holder`` on the error is its
        :func:`read_claim`.
    """

    def __init__(self, path: str | os.PathLike, *, blocking: bool = False, stale_after: float | None = None,
                 heartbeat: float | None = None, clock=time.time, poll: float = 0.2):
        from ckptgeo.constants import CLAIM_STALE_S, SLURM_ENV

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.stale_after = CLAIM_STALE_S if stale_after is None else float(stale_after)
        self._clock = clock
        pid = os.getpid()
        self.holder = {"host": socket.gethostname(), "pid": pid, "pid_start": _pid_start(pid),
                       "started": clock(), "token": uuid.uuid4().hex,
                       "slurm": {k: os.environ[k] for k in SLURM_ENV if k in os.environ}}
        while True:
            try:
                self._take()
                break
            except BlockingIOError:
                if not blocking:
                    raise
                time.sleep(poll)
        self._stop = threading.Event()
        every = self.stale_after / 10 if heartbeat is None else heartbeat
        self._thread = None
        if every > 0:
            self._thread = threading.Thread(target=self._beat, args=(every,), daemon=True,
                                            name=f"claim-heartbeat-{self.path.name}")
            self._thread.start()

    def _create(self) -> bool:
        tmp = _temp_name(self.path)
        now = self._clock()
        try:
            with _naming(tmp):
                tmp.write_text(json.dumps(self.holder), encoding="utf-8")
            os.utime(tmp, (now, now))
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                return False
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def _take(self) -> None:
        if self._create():
            return
        info = read_claim(self.path)
        if info is None:   # released between our link and our read: try once more
            if self._create():
                return
            info = read_claim(self.path) or {}
        if not claim_is_stale(info, now=self._clock(), stale_after=self.stale_after):
            err = BlockingIOError(f"{self.path} is held by {info.get('host', '?')} pid {info.get('pid', '?')}")
            err.holder = info
            raise err
        moved = self.path.parent / f".{self.path.name}.stale-{self.holder['token'][:8]}"
        try:
            os.rename(self.path, moved)
        except FileNotFoundError:   # another process took it over first
            raise BlockingIOError(f"{self.path} was taken over by another process") from None
        try:
            got = read_claim(moved) or {}
            if got.get("token") != info.get("token"):   # a fresh claim replaced the stale one: put it back
                with contextlib.suppress(FileExistsError):
                    os.link(moved, self.path)
                raise BlockingIOError(f"{self.path} was taken over by another process")
            log.warning("taking over the stale claim %s of %s pid %s (started %s, last heartbeat %.0f s ago)",
                        self.path.name, info.get("host", "?"), info.get("pid", "?"), info.get("started", "?"),
                        self._clock() - info.get("heartbeat", self._clock()))
        finally:
            with contextlib.suppress(FileNotFoundError):
                moved.unlink()
        if not self._create():
            raise BlockingIOError(f"{self.path} was taken over by another process")

    def held(self) -> bool:
        """Whether the claim file is still this claim's (not taken over after a long stall)."""
        info = read_claim(self.path)
        return info is not None and info.get("token") == self.holder["token"]

    def touch(self) -> None:
        """One heartbeat: set the claim file's mtime to ``clock()`` (if it is still ours)."""
        if self.held():
            now = self._clock()
            with contextlib.suppress(FileNotFoundError):
                os.utime(self.path, (now, now))

    def _beat(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                if not self.held():
                    log.warning("the claim %s was taken over by another process", self.path)
                    return
                self.touch()
            except OSError as err:   # a network file system hiccup: try again at the next beat
                log.warning("heartbeat of %s failed: %s", self.path, err)

    def close(self) -> None:
        """Stop the heartbeat and remove the claim file (only if it is still this claim's)."""
        if getattr(self, "_stop", None) is None or self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.held():
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    def __enter__(self) -> "Claim":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
