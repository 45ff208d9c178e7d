"""Checkpoints on the Hugging Face Hub: one git branch per checkpoint (Pythia's ``step{N}``, OLMo-2's
``stage1-step1000-tokens5B``, ... see :mod:`ckptgeo.sources.naming`), or, where no branch names a
checkpoint, one folder per checkpoint in ``main`` (a Trainer's ``checkpoint-{N}/``), fetched one folder at
a time with ``allow_patterns``.

Everything goes through huggingface_hub, so ``HF_HOME``, ``HF_HUB_CACHE``, ``HF_ENDPOINT`` and
``HF_TOKEN`` behave as the client documents. Files land in the client's normal cache::

    $HF_HUB_CACHE/models--ORG--NAME/
      refs/<branch>              commit sha
      blobs/<etag>               file bytes (shared between revisions)
      snapshots/<commit>/<file>  links into blobs/

Only ``config.json`` and the weight files are fetched per revision, the tokenizer once. After a
revision is measured, :meth:`HubSource.release` deletes its snapshot with the client's cache API
(``scan_cache_dir().delete_revisions(...).execute()``) unless ``keep_cache`` is set or the revision was
already in the cache before the scan (the user's own files are never evicted). A blob whose sha256 a
revision still to come also serves (:meth:`HubSource.expect`; the same LFS object on several branches)
stays: ``hf_hub_download`` then links it into that revision's snapshot instead of downloading it again.
Downloads use whatever fast backend the client finds installed (:func:`transfer_backend`).

Offline (``HF_HUB_OFFLINE=1``, the usual set-up on compute nodes): revisions are read from the cache's
``refs/`` and ``snapshots/`` only; a revision whose weights are not in the cache is not listed, and
selecting it is a :class:`~ckptgeo.errors.RevisionNotFoundError` saying so, without any network call.
``ckptgeo fetch`` fills the cache beforehand (it records ``refs/<branch>`` for every revision it fetches).

Rate limits: HTTP 429 is retried after the server's ``Retry-After`` (or ``RateLimit`` reset) seconds,
for at most :data:`MAX_RATE_LIMIT_WAIT` seconds in all per call, with a warning each time; downloads of
files are retried by huggingface_hub itself (``http_backoff``), which also honours ``Retry-After``.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from pathlib import Path

from ckptgeo._io import atomic_write_text
from ckptgeo.constants import NO_PROGRESS
from ckptgeo.errors import (CkptgeoError, CorruptCheckpointError, HubUnreachableError, RevisionNotFoundError,
                      SourceNotFoundError)
from ckptgeo.sources.naming import parse_names
from ckptgeo.sources.revisions import Revision, revision_from_name
from ckptgeo.sources.protocol import CheckpointSource, DownloadOptions, WeightFile
from ckptgeo.sources.weights import pick_weight_files

__all__ = ["HubSource", "offline_note", "transfer_backend"]

log = logging.getLogger(__name__)

_TOKENIZER_PATTERNS = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                       "merges.txt", "tokenizer.model"]
_RETRIES = 3
#: seconds one Hub call may spend waiting on HTTP 429 answers before it gives up
MAX_RATE_LIMIT_WAIT = 300.0


class HubSource(CheckpointSource):
    """A Hub model repository whose branches are checkpoints.

    Parameters
    ----------
    repo_id : str
        ``"EleutherAI/pythia-160m"``.
    step_pattern : str, optional
        Regex reading the step (named group ``step`` or the first group; optional ``stage``, ``tokens``)
        from branch names; default: the built-in naming schemes of :mod:`ckptgeo.sources.naming`.
    keep_cache : bool
        Never evict fetched revisions.
    cache_dir : path, optional
        Hub cache folder; default: the client's (``HF_HUB_CACHE``).

    Raises
    ------
    SourceNotFoundError
        The repository does not exist (or is private without a token).
    HubUnreachableError
        ``HF_ENDPOINT`` cannot be reached after retries.
    """

    options = DownloadOptions
    downloads = True
    default_selector = "every-1000"
    #: asked last by :func:`~ckptgeo.sources.registry.open_source`: whatever no other source claims.
    claim_order = 100

    @classmethod
    def claims(cls, spec: str) -> bool:
        """Always: the Hub is the fallback; :meth:`from_spec` says why a spec is not a repo id."""
        return True

    @classmethod
    def from_spec(cls, spec: str, options: DownloadOptions | None = None) -> "HubSource":
        """The source of repo id ``spec`` with ``options``.

        Raises
        ------
        SourceNotFoundError
            ``spec`` looks like a mistyped local path (its parent folder exists), or is not a repo id.
        """
        path = Path(spec).expanduser()
        if path.exists() or path.parent != Path(".") and path.parent.is_dir():
            # "runs/nosuch" next to an existing runs/: a mistyped folder, not a Hub repo id
            what = ("is not a folder of step{N} checkpoints" if path.exists() else
                    "does not exist (a mistyped folder?)")
            raise SourceNotFoundError(f"{spec} {what}: its parent {path.parent} exists locally; to use a Hub repo "
                                      f"of that name, run from another directory or write hub:{spec}", path=str(spec))
        from huggingface_hub.errors import HFValidationError
        from huggingface_hub.utils import validate_repo_id

        try:
            validate_repo_id(str(spec))
        except HFValidationError as err:
            raise SourceNotFoundError(f"{spec} is not an existing checkpoint folder, nor a Hub repo id "
                                      f"('org/name')", path=str(spec)) from err
        return cls(str(spec), **dataclasses.asdict(options or DownloadOptions()))

    def __init__(self, repo_id: str, *, step_pattern: str | None = None, keep_cache: bool = False,
                 cache_dir: str | Path | None = None):
        from huggingface_hub import HfApi

        self.repo_id = repo_id
        self.name = repo_id.split("/")[-1]
        self.step_pattern = step_pattern
        self.keep_cache = keep_cache
        self.cache_dir = str(cache_dir) if cache_dir else None
        #: the naming scheme's known global batch (Pythia, SmolLM3), set when the branches are listed
        self.tokens_per_step: int | None = None
        self._api = HfApi()
        if NO_PROGRESS:
            from huggingface_hub.utils import disable_progress_bars

            disable_progress_bars()
        from huggingface_hub import constants

        self.offline = bool(constants.HF_HUB_OFFLINE)
        self.downloads = not self.offline
        if self.downloads:
            log.info("downloads from %s: %s", constants.ENDPOINT, transfer_backend())
        #: added to the error naming a revision that is not there
        self.missing_note = ("HF_HUB_OFFLINE=1: only revisions whose weights are in the local cache are listed; "
                             "run `ckptgeo fetch` where the Hub is reachable") if self.offline else None
        self._revisions: list[Revision] | None = None
        #: branch -> commit, as listed by :meth:`revisions` (offline: the cache's refs)
        self.branches: dict[str, str] = {}
        self._files: dict[tuple, list[WeightFile]] = {}
        #: (commit, subfolder) -> git blob ids of the small non-LFS files a fetch takes (config.json, an index)
        self._small: dict[tuple, set[str]] = {}
        self._preexisting = self._cached_commits()
        self._had_files: set[str] = set()
        #: revision name -> sha256 of its weight files and blob ids of its small files, for the revisions still to be
        #: fetched (:meth:`expect`)
        self._pending: dict[str, set[str]] = {}
        #: held by a download and by an eviction: an eviction that scanned the cache while the prefetch of the
        #: next revision was still linking its snapshot deleted a blob that snapshot had just linked (a small
        #: non-LFS file both branches hold, e.g. model.safetensors.index.json, has no sha256 to keep it by)
        self._cache_lock = threading.Lock()

    # -- errors -------------------------------------------------------------------------------
    def _call(self, what: str, fn, *args, label: str | None = None, **kwargs):
        """Run a Hub call with retries on transport / 5xx errors and waits on 429, mapping failures to
        ckptgeo errors."""
        from huggingface_hub import constants
        from huggingface_hub.errors import (EntryNotFoundError, HfHubHTTPError, OfflineModeIsEnabled,
                                            RepositoryNotFoundError)
        from huggingface_hub.errors import RevisionNotFoundError as HubRevisionNotFound

        delay, attempt, waited = 0.5, 0, 0.0
        while True:
            attempt += 1
            try:
                return fn(*args, **kwargs)
            except HubRevisionNotFound as err:
                raise RevisionNotFoundError(
                    f"Revision {label!r} not found in {self.repo_id}; run `ckptgeo revisions {self.repo_id}` "
                    f"to list them.", repo_id=self.repo_id, revision=label) from err
            except RepositoryNotFoundError as err:
                raise self._no_such_repo() from err
            except EntryNotFoundError as err:
                if label is None:   # a repo-level call (its branches): a mirror answers a missing repo this way
                    raise self._no_such_repo() from err
                raise CorruptCheckpointError(f"{what}: a file listed for {label} is missing on the Hub",
                                             revision=label) from err
            except OfflineModeIsEnabled as err:
                raise HubUnreachableError(f"{what}: HF_HUB_OFFLINE=1 and it is not in the local cache; run "
                                          f"`ckptgeo fetch` where the Hub is reachable") from err
            except HfHubHTTPError as err:
                response = getattr(err, "response", None)
                status = getattr(response, "status_code", None)
                if status == 429:
                    wait = _retry_after(getattr(response, "headers", {}) or {}, default=delay)
                    if waited + wait > MAX_RATE_LIMIT_WAIT:
                        raise HubUnreachableError(
                            f"{what}: rate limited by {constants.ENDPOINT} (HTTP 429) after waiting {waited:.0f} s; "
                            f"the server asks for {wait:.0f} s more, beyond the {MAX_RATE_LIMIT_WAIT:.0f} s allowed. "
                            f"Set HF_TOKEN (higher limits), or retry later: finished revisions are kept.") from err
                    log.warning("%s: rate limited (HTTP 429); waiting %.1f s as the server asks (%.1f s of at most "
                                "%.0f s waited so far)", what, wait, waited, MAX_RATE_LIMIT_WAIT)
                    time.sleep(wait)
                    waited += wait
                    attempt -= 1  # a rate limit is not a failed attempt
                    continue
                if status is not None and status < 500:
                    raise
                last = err
            except (OSError, ConnectionError) as err:
                last = err
            except Exception as err:  # httpx transport errors do not subclass OSError
                if type(err).__module__.split(".")[0] not in ("httpx", "httpcore", "httpx2", "httpcore2"):
                    raise
                last = err
            log.warning("%s failed (attempt %d/%d): %s", what, attempt, _RETRIES, last)
            if attempt >= _RETRIES:
                break
            time.sleep(delay)
            delay *= 4
        detail = " ".join(str(last).split())  # httpx messages span lines; the CLI prints one
        raise HubUnreachableError(
            f"{what} failed after {_RETRIES} attempts against {constants.ENDPOINT}: {detail}. Check the network, "
            f"or point HF_ENDPOINT at a mirror, or pass a local checkpoint folder as SOURCE.") from last

    def _no_such_repo(self) -> SourceNotFoundError:
        """The repository does not exist on the endpoint (or is private), with a close id when one is known."""
        from huggingface_hub import constants

        close = _close_repo_ids(self.repo_id, self._cache_root())
        hint = f" Did you mean {close[0]}?" if close else ""
        return SourceNotFoundError(f"Repository {self.repo_id!r} does not exist on {constants.ENDPOINT} (or it is "
                                   f"private: set HF_TOKEN).{hint} For a local folder, pass its path.",
                                   repo_id=self.repo_id)

    # -- protocol -----------------------------------------------------------------------------
    def revisions(self) -> list[Revision]:
        if self._revisions is None:
            self._revisions = self._cached_revisions() if self.offline else self._hub_revisions()
        return self._revisions

    def _hub_revisions(self) -> list[Revision]:
        refs = self._call(f"listing branches of {self.repo_id}", self._api.list_repo_refs, self.repo_id)
        commits = {b.name: b.target_commit for b in refs.branches}
        self.branches = commits
        out = self._parse(commits)
        if not out and "main" in commits:  # no branch names a checkpoint: folders of main may (checkpoint-N/)
            entries = self._call(f"listing folders of {self.repo_id}",
                                 lambda: list(self._api.list_repo_tree(self.repo_id, revision=commits["main"])),
                                 label="main")
            folders = [e.path for e in entries if not hasattr(e, "size")]
            out = self._parse({f: commits["main"] for f in folders}, subfolders=True)
        return sorted(out)

    def _parse(self, commits: dict[str, str], *, subfolders: bool = False) -> list[Revision]:
        parsed = parse_names(list(commits), self.step_pattern, where=self.repo_id)
        batches = {p.tokens_per_step for p in parsed.values()}
        self.tokens_per_step = batches.pop() if len(batches) == 1 else None
        if self.tokens_per_step:
            log.info("%s: tokens = step x %s, the global batch of the %s naming scheme", self.repo_id,
                     f"{self.tokens_per_step:,}", next(iter(parsed.values())).scheme)
        return [revision_from_name(n, pattern=self.step_pattern, commit=commits[n], parsed=p,
                                   tokens_per_step=p.tokens_per_step, subfolder=n if subfolders else None)
                for n, p in parsed.items()]

    def _cached_revisions(self) -> list[Revision]:
        """Offline: the revisions whose weights are in the cache (refs -> snapshots)."""
        repo = self._cache_repo()
        if repo is None:
            raise SourceNotFoundError(f"{self.repo_id} is not in the local cache ({self._cache_root()}) and "
                                      f"HF_HUB_OFFLINE=1; run `ckptgeo fetch {self.repo_id} --revisions ...` where "
                                      f"the Hub is reachable", repo_id=self.repo_id)
        commits = {ref: r.commit_hash for r in repo.revisions for ref in r.refs}
        self.branches = commits
        snapshots = {r.commit_hash: r.snapshot_path for r in repo.revisions}
        out = [r for r in self._parse(commits) if pick_weight_files(_files_in(snapshots[r.commit]))]
        if not out and "main" in commits:
            main = snapshots[commits["main"]]
            folders = [p.name for p in main.iterdir() if p.is_dir()]
            out = [r for r in self._parse({f: commits["main"] for f in folders}, subfolders=True)
                   if pick_weight_files(_files_in(main / r.subfolder))]
        return sorted(out)

    def weight_files(self, revision: Revision) -> list[WeightFile]:
        key = (revision.commit or revision.name, revision.subfolder)
        if key not in self._files:
            lister = self._cached_weight_files if self.offline else self._list_weight_files
            self._files[key] = lister(revision)
        return self._files[key]

    def _list_weight_files(self, revision: Revision) -> list[WeightFile]:
        ref = revision.commit or revision.name
        sub = revision.subfolder
        entries = self._call(f"listing files of {self.repo_id}@{revision.name}",
                             lambda: list(self._api.list_repo_tree(self.repo_id, revision=ref, path_in_repo=sub)),
                             label=revision.name)
        files = {e.path[len(sub) + 1:] if sub else e.path: e for e in entries if hasattr(e, "size")}
        picked = pick_weight_files(files)
        if not picked:
            raise CorruptCheckpointError(f"{self.repo_id}@{revision.name} has no weight files "
                                         f"(*.safetensors or pytorch_model*.bin)", revision=revision.name)
        small = [files[n] for n in ("config.json", *picked) if n in files and getattr(files[n], "lfs", None) is None]
        self._small[(ref, sub)] = {e.blob_id for e in small if getattr(e, "blob_id", None)}
        out = []
        for name in picked:
            e = files[name]
            lfs = getattr(e, "lfs", None)
            sha = getattr(lfs, "sha256", None) if lfs is not None else None
            if sha is None and isinstance(lfs, dict):
                sha = lfs.get("sha256")
            out.append(WeightFile(name, int(e.size) if e.size is not None else None, sha))
        return out

    def _cached_weight_files(self, revision: Revision) -> list[WeightFile]:
        folder = self.cached_folder(revision)
        picked = pick_weight_files(_files_in(folder)) if folder is not None else []
        if not picked:
            raise RevisionNotFoundError(
                f"Revision {revision.name!r} of {self.repo_id} is not in the local cache (HF_HUB_OFFLINE=1); run "
                f"`ckptgeo fetch {self.repo_id} --revisions {revision.name}` where the Hub is reachable",
                repo_id=self.repo_id, revision=revision.name)
        out = []
        for name in picked:
            blob = (folder / name).resolve()
            sha = blob.name if re.fullmatch(r"[0-9a-f]{64}", blob.name) else None  # LFS blobs are named by sha256
            out.append(WeightFile(name, blob.stat().st_size, sha))
        return out

    def declared_size(self, revision: Revision, name: str) -> float | None:
        """The bytes the safetensors header of weight file ``name`` of ``revision`` declares (8 + the header's data
        end; the header's own length not counted, so a lower bound), read from the Hub with a range request (no
        weights downloaded): inf when the header cannot be parsed, None for another format or when it cannot be
        asked (offline, unreachable)."""
        if self.offline or not name.endswith(".safetensors"):
            return None
        from huggingface_hub.errors import HfHubHTTPError, SafetensorsParsingError

        path = f"{revision.subfolder}/{name}" if revision.subfolder else name
        try:
            meta = self._call(f"reading the header of {path} of {self.repo_id}@{revision.name}",
                              self._api.parse_safetensors_file_metadata, self.repo_id, path,
                              revision=revision.commit or revision.name, label=revision.name)
        except SafetensorsParsingError:
            return float("inf")
        except (CkptgeoError, HfHubHTTPError, OSError, ValueError) as err:   # advisory: unknown, not a failure
            log.debug("no header of %s@%s %s: %s", self.repo_id, revision.name, path, err)
            return None
        ends = [t.data_offsets[1] for t in meta.tensors.values()]
        return 8 + max(ends) if ends else None

    def fetch(self, revision: Revision) -> Path:
        names = [w.name for w in self.weight_files(revision)]
        if self.offline:
            return self.cached_folder(revision)
        sub = revision.subfolder
        if sub is not None:
            folder = self.cached_folder(revision)
            if folder is not None and all((folder / n).exists() for n in names):
                self._had_files.add(revision.name)  # in the cache before: never evicted
        allow = [f"{sub}/{n}" if sub else n for n in ["config.json", *names]]
        path = self._download(f"downloading {self.repo_id}@{revision.name}", revision, allow)
        return path / sub if sub else path

    def config_folder(self, revision: Revision) -> Path:
        """A cache folder holding ``revision``'s ``config.json`` (only that file is downloaded)."""
        sub = revision.subfolder
        if self.offline:
            folder = self.cached_folder(revision)
            if folder is None or not (folder / "config.json").exists():
                raise RevisionNotFoundError(f"config.json of {self.repo_id}@{revision.name} is not in the local cache "
                                            f"(HF_HUB_OFFLINE=1)", repo_id=self.repo_id, revision=revision.name)
            return folder
        path = self._download(f"downloading config.json of {self.repo_id}@{revision.name}", revision,
                              [f"{sub}/config.json" if sub else "config.json"])
        return path / sub if sub else path

    def _download(self, what: str, revision: Revision, allow: list[str]) -> Path:
        from huggingface_hub import snapshot_download

        with self._cache_lock:   # the ref too: an eviction's cache scan reads a half-written ref (the atomic
            # write's temp file) as a ref to no commit, takes the repo for corrupted and evicts nothing
            path = Path(self._call(what, snapshot_download, self.repo_id, revision=revision.commit or revision.name,
                                   allow_patterns=allow, cache_dir=self.cache_dir, label=revision.name))
            if revision.commit:
                _remember_ref(path, revision.name if revision.subfolder is None else "main", revision.commit)
        return path

    def expect(self, revisions: list[Revision]) -> None:
        """Announce the revisions to be fetched after the current one (in any order). :meth:`release` then
        keeps every blob that one of them still needs, so a file several branches share is downloaded once:
        a weight file (the same LFS object, by its sha256) and a small file such as ``config.json`` (the same
        git blob, by its id: the branches of a run, or of each member of a family, mostly hold one config).
        ``hf_hub_download`` links a blob already in the cache into the next snapshot without fetching it."""
        self._pending = {r.name: {f.sha256 for f in self.weight_files(r) if f.sha256}
                         | self._small.get((r.commit or r.name, r.subfolder), set()) for r in revisions}

    def release(self, revision: Revision) -> None:
        self._pending.pop(revision.name, None)
        if self.keep_cache or self.offline or revision.commit is None or revision.commit in self._preexisting:
            return
        with self._cache_lock:
            self._evict(revision)

    def _evict(self, revision: Revision) -> None:
        if revision.subfolder is not None:
            if revision.name not in self._had_files:
                self._evict_folder(revision)
            return
        from huggingface_hub import scan_cache_dir

        try:
            info = scan_cache_dir(self.cache_dir)
        except Exception as err:  # an absent cache folder: nothing to evict
            log.debug("cache scan failed: %s", err)
            return
        for repo in info.repos:
            if repo.repo_id == self.repo_id and repo.repo_type == "model":
                if any(r.commit_hash == revision.commit for r in repo.revisions):
                    strategy = info.delete_revisions(revision.commit)
                    needed = set().union(*self._pending.values())
                    if strategy.repos and needed:  # its last revision: huggingface_hub would drop the whole repo
                        strategy = _one_revision(strategy, repo, revision.commit)
                    kept = {b for b in strategy.blobs if b.name in needed}
                    if kept:  # a later revision serves the same file: keep its bytes, drop only the links
                        log.debug("%s@%s: keeping %d blob(s) a later revision shares", self.repo_id, revision.name,
                                  len(kept))
                        strategy = dataclasses.replace(strategy, blobs=strategy.blobs - kept)
                    log.debug("evicting %s@%s: %s freed", self.repo_id, revision.name, strategy.expected_freed_size_str)
                    strategy.execute()
                return

    def _evict_folder(self, revision: Revision) -> None:
        """Delete one ``checkpoint-N/`` folder of a snapshot and the blobs no other snapshot file links to."""
        folder = self.cached_folder(revision)
        if folder is None or not folder.is_dir():
            return
        root = folder.parents[2] if revision.subfolder else folder.parents[1]
        needed = set().union(*self._pending.values())
        blobs = {b for p in folder.rglob("*") if p.is_symlink() and (b := p.resolve()).name not in needed}
        for p in sorted(folder.rglob("*"), reverse=True):
            p.unlink() if not p.is_dir() or p.is_symlink() else p.rmdir()
        folder.rmdir()
        still = {p.resolve() for p in (root / "snapshots").rglob("*") if p.is_symlink()}
        for blob in blobs - still:
            blob.unlink(missing_ok=True)
        log.debug("evicted %s@%s", self.repo_id, revision.name)

    def tokenizer_path(self) -> Path:
        revs = self.revisions()
        last = revs[-1] if revs else Revision(0, "main")
        sub = last.subfolder
        if self.offline:  # the last cached revision's tokenizer, else any cached snapshot's
            repo = self._cache_repo()
            folders = [f for r in reversed(revs) if (f := self.cached_folder(r)) is not None]
            folders = [c for f in folders for c in ([f.parent, f] if sub else [f])]
            folders += [r.snapshot_path for r in sorted(repo.revisions, key=lambda r: -r.last_modified)] if repo else []
            for candidate in folders:
                if any((candidate / f).exists() for f in _TOKENIZER_PATTERNS[:2]):
                    return candidate
            raise RevisionNotFoundError(f"no tokenizer of {self.repo_id} in the local cache (HF_HUB_OFFLINE=1); "
                                        f"run `ckptgeo fetch` where the Hub is reachable", repo_id=self.repo_id)
        patterns = _TOKENIZER_PATTERNS + ["config.json"]
        path = self._download(f"downloading the tokenizer of {self.repo_id}", last,
                              patterns + ([f"{sub}/{p}" for p in patterns] if sub else []))
        if sub and not any((path / f).exists() for f in _TOKENIZER_PATTERNS[:2]):
            return path / sub
        return path

    def default_suites(self) -> list[str]:
        from ckptgeo.suites.items import available_suites

        return available_suites()

    # -- helpers ------------------------------------------------------------------------------
    def _cache_root(self) -> Path:
        from huggingface_hub import constants

        return Path(self.cache_dir or constants.HF_HUB_CACHE)

    def _cache_repo(self):
        from huggingface_hub import scan_cache_dir

        try:
            info = scan_cache_dir(self.cache_dir)
        except Exception:
            return None
        return next((r for r in info.repos if r.repo_id == self.repo_id and r.repo_type == "model"), None)

    def cached_folder(self, revision: Revision) -> Path | None:
        """The cache folder of ``revision`` (its subfolder included), or None when its commit is not cached."""
        commit = revision.commit
        root = self._cache_root() / ("models--" + self.repo_id.replace("/", "--"))
        if commit is None:
            ref = root / "refs" / revision.name
            commit = ref.read_text().strip() if ref.is_file() else None
        if commit is None or not (root / "snapshots" / commit).is_dir():
            return None
        folder = root / "snapshots" / commit
        return folder / revision.subfolder if revision.subfolder else folder

    def main_revision(self) -> Revision | None:
        """``main`` at the commit the listing gave it, None where the repository has none."""
        commit = self.branches.get("main")
        return None if commit is None else Revision(step=-1, name="main", commit=commit)

    def listing_note(self, selected, selector: str | None = None) -> str | None:
        """Offline: :func:`offline_note` of this repository; online None."""
        return offline_note([self], self.repo_id, selected, selector) if self.offline else None

    def _cached_commits(self) -> set[str]:
        repo = self._cache_repo()
        return {r.commit_hash for r in repo.revisions} if repo is not None else set()


def offline_note(hubs: list[HubSource], repo: str, selected, selector: str | None = None) -> str:
    """What an offline listing (``HF_HUB_OFFLINE=1``) of the Hub sources ``hubs`` (one repo, or a family's
    members, named ``repo``) could and could not know, in one line.

    Offline, a Hub source (or family) lists only the revisions whose weights are in the local cache: the
    repository's other revisions are not known, so a range or ``all`` may select fewer than on the Hub.
    Branches the cache names (``refs/``) without their weights are named.

    Parameters
    ----------
    hubs : list of HubSource
        The repositories listed.
    repo : str
        How the hint names them (a repo id or a family's spec).
    selected : list of Revision
        What was listed or selected.
    selector : str, optional
        The ``--revisions`` selector, repeated in the hint to fetch.

    Returns
    -------
    str
        ``"offline: 2 revisions from the local cache (HF_HUB_OFFLINE=1); ..."``.
    """
    listed = {(h.repo_id, r.name) for h in hubs for r in h.revisions()}
    weightless = sorted({n for h in hubs for n in h.branches if n != "main" and (h.repo_id, n) not in listed})
    n = len(selected)
    note = (f"offline: {n} revision{'s' if n != 1 else ''} from the local cache (HF_HUB_OFFLINE=1); revisions of "
            f"{repo} not in the cache could not be known")
    if weightless:
        shown = ", ".join(weightless[:5]) + (f" and {len(weightless) - 5} more" if len(weightless) > 5 else "")
        note += f" (the cache names {shown} without weights)"
    sel = f" --revisions {selector!r}" if selector else ""
    return note + f"; run `ckptgeo fetch {repo}{sel}` where the Hub is reachable to add them"


def transfer_backend() -> str:
    """How huggingface_hub will download here, in words: ``hf_xet`` (used by the client for files the Hub
    stores with Xet, with ``HF_XET_HIGH_PERFORMANCE=1`` for more connections), ``hf_transfer`` (used only
    by huggingface_hub < 1.0 with ``HF_HUB_ENABLE_HF_TRANSFER=1``), else plain HTTP. ckptgeo chooses
    nothing itself: the client picks its fastest installed backend per file."""
    from importlib.metadata import PackageNotFoundError, version

    from huggingface_hub import __version__ as hub_version
    from huggingface_hub import constants

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    parts = []
    xet = installed("hf_xet") or installed("hf-xet")
    if xet and not getattr(constants, "HF_HUB_DISABLE_XET", False):
        fast = " (HF_XET_HIGH_PERFORMANCE=1)" if getattr(constants, "HF_XET_HIGH_PERFORMANCE", False) else ""
        parts.append(f"hf_xet {xet}{fast} for Xet-stored files")
    transfer = installed("hf_transfer") or installed("hf-transfer")
    if transfer and int(hub_version.split(".")[0]) < 1 and getattr(constants, "HF_HUB_ENABLE_HF_TRANSFER", False):
        parts.append(f"hf_transfer {transfer} for other LFS files")
    return ", ".join(parts + ["plain HTTP otherwise"]) if parts else "plain HTTP (install hf_xet for Xet-stored files)"


def _one_revision(strategy, repo, commit: str):
    """``strategy`` (huggingface_hub's ``DeleteCacheStrategy`` for ``commit``, the last revision of ``repo``, its
    ``CachedRepoInfo``) narrowed to that revision's snapshot, refs and blobs: ``delete_revisions`` deletes the
    whole repo folder then, blobs a later revision still needs included."""
    rev = next(r for r in repo.revisions if r.commit_hash == commit)
    return dataclasses.replace(strategy, repos=frozenset(), snapshots=frozenset({rev.snapshot_path}),
                               refs=frozenset(repo.repo_path / "refs" / ref for ref in rev.refs),
                               blobs=frozenset(f.blob_path for f in rev.files))


def _files_in(folder: Path) -> list[str]:
    """Names of the files directly in ``folder`` (empty when it does not exist)."""
    return [p.name for p in folder.iterdir() if p.is_file()] if folder.is_dir() else []


def _remember_ref(snapshot: Path, branch: str, commit: str) -> None:
    """Write ``refs/<branch>`` of the cache (as huggingface_hub does for a download by branch name), so
    that the revision is found by name offline. ``snapshot`` is ``<repo cache>/snapshots/<commit>``."""
    refs = snapshot.parents[1] / "refs"
    ref = refs / branch
    if not ref.resolve().is_relative_to(refs.resolve()):  # a branch name from the endpoint: never a path out
        log.warning("not recording the branch name %r: it would lead out of %s", branch, refs)
        return
    try:
        if not ref.is_file() or ref.read_text().strip() != commit:
            atomic_write_text(ref, commit)
    except OSError as err:  # a read-only cache: offline use then needs a download by name
        log.debug("could not record %s -> %s: %s", ref, commit, err)


#: well-known repositories of checkpoint suites, for the suggestion after a misspelled repo id
KNOWN_REPOS = tuple(f"EleutherAI/pythia-{size}{dedup}" for size in ("14m", "31m", "70m", "160m", "410m", "1b", "1.4b",
                                                                    "2.8b", "6.9b", "12b") for dedup in ("", "-deduped"))


def _close_repo_ids(repo_id: str, cache_root: Path) -> list[str]:
    """Repo ids close to ``repo_id``: among :data:`KNOWN_REPOS` and the repositories in the local Hugging Face
    cache (its ``models--org--name`` folders; no request).

    >>> _close_repo_ids("EleutherAI/pythia-14n", Path("/nonexistent"))
    ['EleutherAI/pythia-14m']
    """
    import difflib

    try:
        cached = [p.name[len("models--"):].replace("--", "/", 1) for p in cache_root.iterdir()
                  if p.name.startswith("models--")]
    except OSError:
        cached = []
    known = {r.lower(): r for r in [*KNOWN_REPOS, *cached] if r != repo_id}
    return [known[k] for k in difflib.get_close_matches(repo_id.lower(), list(known), n=1, cutoff=0.9)]


def _retry_after(headers, *, default: float) -> float:
    """Seconds a 429 answer asks to wait: ``Retry-After`` (seconds), else the ``RateLimit`` header's reset
    (``t=``), else ``default``."""
    value = headers.get("Retry-After") or headers.get("retry-after")
    if value is not None and str(value).strip().isdigit():
        return float(value)
    limit = headers.get("RateLimit") or headers.get("ratelimit")
    m = re.search(r"\bt=(\d+)", str(limit or ""))
    return float(m.group(1)) if m else default
