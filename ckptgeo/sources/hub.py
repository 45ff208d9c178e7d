"""Checkpoints on the Hugging Face Hub: one git branch per checkpoint (Pythia's ``step{N}``).

Everything goes through huggingface_hub, so ``HF_HOME``, ``HF_HUB_CACHE``, ``HF_ENDPOINT`` and
``HF_TOKEN`` behave as the client documents. Files land in the client's normal cache::

    $HF_HUB_CACHE/models--ORG--NAME/
      refs/<branch>              commit sha
      blobs/<etag>               file bytes (shared between revisions)
      snapshots/<commit>/<file>  links into blobs/

Only ``config.json`` and the weight files are fetched per revision, the tokenizer once. After a
revision is measured, :meth:`HubSource.release` deletes its snapshot with the client's cache API
(``scan_cache_dir().delete_revisions(...).execute()``) unless ``keep_cache`` is set or the revision was
already in the cache before the scan (the user's own files are never evicted).
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

from ckptgeo.constants import NO_PROGRESS, PYTHIA_TOKENS_PER_STEP
from ckptgeo.errors import (CorruptCheckpointError, HubUnreachableError, RevisionNotFoundError,
                      SourceNotFoundError)
from ckptgeo.sources.naming import parse_names
from ckptgeo.sources.revisions import Revision, revision_from_name
from ckptgeo.sources.protocol import WeightFile

__all__ = ["HubSource"]

log = logging.getLogger(__name__)

_TOKENIZER_PATTERNS = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                       "merges.txt", "tokenizer.model"]
_RETRIES = 3


def _is_weight(name: str) -> bool:
    return name.endswith(".safetensors") or name.endswith(".safetensors.index.json") or bool(
        re.fullmatch(r"pytorch_model.*\.bin(\.index\.json)?", name))


def _pick_weights(names: list[str]) -> list[str]:
    st = [n for n in names if n.endswith(".safetensors") or n.endswith(".safetensors.index.json")]
    return sorted(st) if st else sorted(n for n in names if _is_weight(n))


class HubSource:
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

    downloads = True
    default_selector = "every-1000"

    def __init__(self, repo_id: str, *, step_pattern: str | None = None, keep_cache: bool = False,
                 cache_dir: str | Path | None = None):
        from huggingface_hub import HfApi

        self.repo_id = repo_id
        self.name = repo_id.split("/")[-1]
        self.step_pattern = step_pattern
        self.keep_cache = keep_cache
        self.cache_dir = str(cache_dir) if cache_dir else None
        self.tokens_per_step = PYTHIA_TOKENS_PER_STEP if re.match(r"EleutherAI/pythia-", repo_id) else None
        self._api = HfApi()
        if NO_PROGRESS:
            from huggingface_hub.utils import disable_progress_bars

            disable_progress_bars()
        self._revisions: list[Revision] | None = None
        self._files: dict[str, list[WeightFile]] = {}
        self._preexisting = self._cached_commits()

    # -- errors -------------------------------------------------------------------------------
    def _call(self, what: str, fn, *args, label: str | None = None, **kwargs):
        """Run a Hub call with retries on transport / 5xx errors, mapping failures to ckptgeo errors."""
        from huggingface_hub import constants
        from huggingface_hub.errors import (EntryNotFoundError, HfHubHTTPError, RepositoryNotFoundError)
        from huggingface_hub.errors import RevisionNotFoundError as HubRevisionNotFound

        delay = 0.5
        for attempt in range(1, _RETRIES + 1):
            try:
                return fn(*args, **kwargs)
            except HubRevisionNotFound as err:
                raise RevisionNotFoundError(
                    f"Revision {label!r} not found in {self.repo_id}; run `ckptgeo revisions {self.repo_id}` "
                    f"to list them.", repo_id=self.repo_id, revision=label) from err
            except RepositoryNotFoundError as err:
                raise SourceNotFoundError(
                    f"Repository {self.repo_id!r} not found on {constants.ENDPOINT} (or it is private: set "
                    f"HF_TOKEN). For a local folder, pass its path.", repo_id=self.repo_id) from err
            except EntryNotFoundError as err:
                raise CorruptCheckpointError(f"{what}: a file listed for {label} is missing on the Hub",
                                             revision=label) from err
            except HfHubHTTPError as err:
                status = getattr(getattr(err, "response", None), "status_code", None)
                if status is not None and status < 500 and status != 429:
                    raise
                last = err
            except (OSError, ConnectionError) as err:
                last = err
            except Exception as err:  # httpx transport errors do not subclass OSError
                if type(err).__module__.split(".")[0] not in ("httpx", "httpcore", "httpx2", "httpcore2"):
                    raise
                last = err
            log.warning("%s failed (attempt %d/%d): %s", what, attempt, _RETRIES, last)
            if attempt < _RETRIES:
                time.sleep(delay)
                delay *= 4
        detail = " ".join(str(last).split())  # httpx messages span lines; the CLI prints one
        raise HubUnreachableError(
            f"{what} failed after {_RETRIES} attempts against {constants.ENDPOINT}: {detail}. Check the network, "
            f"or point HF_ENDPOINT at a mirror, or pass a local checkpoint folder as SOURCE.") from last

    # -- protocol -----------------------------------------------------------------------------
    def revisions(self) -> list[Revision]:
        if self._revisions is None:
            refs = self._call(f"listing branches of {self.repo_id}", self._api.list_repo_refs, self.repo_id)
            commits = {b.name: b.target_commit for b in refs.branches}
            parsed = parse_names(list(commits), self.step_pattern, where=self.repo_id)
            self._revisions = sorted(revision_from_name(n, pattern=self.step_pattern, commit=commits[n],
                                                        tokens_per_step=self.tokens_per_step) for n in parsed)
        return self._revisions

    def weight_files(self, revision: Revision) -> list[WeightFile]:
        key = revision.commit or revision.name
        if key not in self._files:
            self._files[key] = self._list_weight_files(revision)
        return self._files[key]

    def _list_weight_files(self, revision: Revision) -> list[WeightFile]:
        ref = revision.commit or revision.name
        entries = self._call(f"listing files of {self.repo_id}@{revision.name}",
                             lambda: list(self._api.list_repo_tree(self.repo_id, revision=ref)),
                             label=revision.name)
        files = {e.path: e for e in entries if hasattr(e, "size")}
        picked = _pick_weights(list(files))
        if not picked:
            raise CorruptCheckpointError(f"{self.repo_id}@{revision.name} has no weight files "
                                         f"(*.safetensors or pytorch_model*.bin)", revision=revision.name)
        out = []
        for name in picked:
            e = files[name]
            lfs = getattr(e, "lfs", None)
            sha = getattr(lfs, "sha256", None) if lfs is not None else None
            if sha is None and isinstance(lfs, dict):
                sha = lfs.get("sha256")
            out.append(WeightFile(name, int(e.size) if e.size is not None else None, sha))
        return out

    def fetch(self, revision: Revision) -> Path:
        from huggingface_hub import snapshot_download

        names = [w.name for w in self.weight_files(revision)]
        path = self._call(f"downloading {self.repo_id}@{revision.name}", snapshot_download, self.repo_id,
                          revision=revision.commit or revision.name, allow_patterns=["config.json", *names],
                          cache_dir=self.cache_dir, label=revision.name)
        return Path(path)

    def config_folder(self, revision: Revision) -> Path:
        """A cache folder holding ``revision``'s ``config.json`` (only that file is downloaded)."""
        from huggingface_hub import snapshot_download

        return Path(self._call(f"downloading config.json of {self.repo_id}@{revision.name}", snapshot_download,
                               self.repo_id, revision=revision.commit or revision.name,
                               allow_patterns=["config.json"], cache_dir=self.cache_dir))

    def release(self, revision: Revision) -> None:
        if self.keep_cache or revision.commit is None or revision.commit in self._preexisting:
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
                    log.debug("evicting %s@%s: %s freed", self.repo_id, revision.name, strategy.expected_freed_size_str)
                    strategy.execute()
                return

    def tokenizer_path(self) -> Path:
        from huggingface_hub import snapshot_download

        revs = self.revisions()
        ref = revs[-1].commit if revs else "main"
        return Path(self._call(f"downloading the tokenizer of {self.repo_id}", snapshot_download, self.repo_id,
                               revision=ref, allow_patterns=_TOKENIZER_PATTERNS + ["config.json"],
                               cache_dir=self.cache_dir))

    def default_suites(self) -> list[str]:
        from ckptgeo.suites.items import available_suites

        return available_suites()

    # -- helpers ------------------------------------------------------------------------------
    def _cached_commits(self) -> set[str]:
        from huggingface_hub import scan_cache_dir

        try:
            info = scan_cache_dir(self.cache_dir)
        except Exception:
            return set()
        return {r.commit_hash for repo in info.repos if repo.repo_id == self.repo_id for r in repo.revisions}
