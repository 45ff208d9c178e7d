"""Shared test fixtures: a loopback Hugging Face Hub, per-test caches and the ``--device`` option.

Network isolation happens at import, before any test module imports ``huggingface_hub`` (which
reads its environment once, at import): ``HF_ENDPOINT`` points at ``http://127.0.0.1:<free port>``
where :func:`local_hub` will serve, ``HF_HOME`` at a session temp dir, telemetry is off, and
variables that would change the client's behaviour (``HF_HUB_OFFLINE``, ``HF_TOKEN``, cache
overrides) are removed. An audit hook makes any socket connection or DNS lookup to a non-loopback
host raise ``OSError`` in the test process (subprocesses inherit the environment, not the hook).
No test can reach the public Hub, whether or not it uses the server.

Fixtures
--------
local_hub (session)
    Builds ``testorg/pythia-tiny`` (:data:`scripts.make_test_repo.DEFAULT_STEPS`, tiny GPT-NeoX,
    weights as LFS objects) and serves it with ``scripts/olah_local.py``; yields a :class:`LocalHub`.
    Use ``local_hub.add_repo(name, **make_test_repo_kwargs)`` for more repositories (duplicates,
    corrupt or architecture-changed branches); they are served at once.
_isolated_caches (autouse)
    Points ``HF_HOME``, ``HF_HUB_CACHE``, ``HF_XET_CACHE``, ``HF_DATASETS_CACHE`` and
    ``CKPTGEO_CACHE`` at ``tmp_path`` -- in the environment *and* in the module constants of
    ``huggingface_hub`` / ``ckptgeo`` already imported -- so every test starts with empty caches.
public_data marker
    ``@pytest.mark.public_data("bigbench")``: skipped, with what is missing and how to get it, when the
    public reference files are absent (:func:`tests._checkpoints.missing_public_data`); a failure instead
    when ``CKPTGEO_REQUIRE_PUBLIC_DATA=1`` (``.ci/run`` sets it).
device (session)
    The ``--device`` option (default ``"cpu"``), e.g. ``python -m pytest --device cuda``. Tests
    marked ``gpu`` are skipped when CUDA is unavailable.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import pytest

from scripts.olah_local import free_port  # stdlib only at import; olah is imported by the server process

#: an outside package's code, installed only in test_plugins' child processes (importing it here would
#: register its measure in every test's registry)
collect_ignore = ["plugin_example"]


# --------------------------------------------------------------------------------------------------
# network isolation, at import time
# --------------------------------------------------------------------------------------------------
REPO_ROOT = Path(__file__).resolve().parents[1]
HUB_PORT = free_port()
HUB_URL = f"http://127.0.0.1:{HUB_PORT}"
_SESSION_HF_HOME = tempfile.mkdtemp(prefix="ckptgeo-tests-hf-")

for _var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN",
             "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_XET_CACHE", "HF_DATASETS_CACHE", "HF_TOKEN_PATH",
             "HUGGINGFACE_CO_STAGING"):
    os.environ.pop(_var, None)
os.environ["HF_ENDPOINT"] = HUB_URL
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["HF_HOME"] = _SESSION_HF_HOME
os.environ["CKPTGEO_CACHE"] = os.path.join(_SESSION_HF_HOME, "ckptgeo")

_LOOPBACK = {"127.0.0.1", "::1", "localhost", "0.0.0.0", "::"}


def _deny_non_loopback(event: str, args: tuple) -> None:
    """Audit hook: any socket connection or name lookup beyond loopback raises ``OSError``."""
    if event == "socket.getaddrinfo":
        host = args[0].decode() if isinstance(args[0], bytes) else args[0]
    elif event == "socket.connect" and isinstance(args[1], tuple):
        host = args[1][0]
    else:
        return
    if host is not None and host not in _LOOPBACK and not str(host).startswith("127."):
        raise OSError(f"tests/conftest.py blocks network access beyond loopback (to {host!r}).")


sys.addaudithook(_deny_non_loopback)   # cannot be removed; covers this process only, not subprocesses

if "huggingface_hub.constants" in sys.modules:   # imported before us (a plugin?): patch what matters
    import huggingface_hub.constants as _hf_constants

    warnings.warn("huggingface_hub was imported before tests/conftest.py; patching its ENDPOINT.")
    _hf_constants.ENDPOINT = HUB_URL
    _hf_constants.HUGGINGFACE_CO_URL_TEMPLATE = HUB_URL + "/{repo_id}/resolve/{revision}/{filename}"
    _hf_constants.HF_URL_HOSTS = _hf_constants.HF_URL_HOSTS | {"127.0.0.1"}


# --------------------------------------------------------------------------------------------------
# --device and the gpu marker
# --------------------------------------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--device", default="cpu",
                     help="torch device for tests that compute (cpu, cuda, cuda:1, ...); default: cpu")


def pytest_configure(config: pytest.Config) -> None:
    device = config.getoption("--device")
    if device != "cpu":
        import torch

        if device.startswith("cuda") and not torch.cuda.is_available():
            raise pytest.UsageError(f"--device {device} requested but torch.cuda.is_available() is False.")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA device")
    for marker in item.iter_markers("public_data"):
        from tests._checkpoints import missing_public_data

        for name in marker.args:
            why = missing_public_data(name)
            if why and os.environ.get("CKPTGEO_REQUIRE_PUBLIC_DATA") == "1":
                pytest.fail(f"{why} (CKPTGEO_REQUIRE_PUBLIC_DATA=1: this run must not skip it)", pytrace=False)
            if why:
                pytest.skip(why)


@pytest.fixture(scope="session")
def device(pytestconfig: pytest.Config) -> str:
    """The ``--device`` option, e.g. ``"cpu"`` or ``"cuda"``."""
    return pytestconfig.getoption("--device")


# --------------------------------------------------------------------------------------------------
# per-test caches
# --------------------------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _isolated_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Give each test empty HF / ckptgeo caches under ``tmp_path``.

    huggingface_hub 2.4 reads ``HF_HOME``/``HF_HUB_CACHE``/``HF_XET_CACHE`` once into
    ``huggingface_hub.constants``; ``snapshot_download``, ``hf_hub_download`` and transformers use
    ``constants.HF_HUB_CACHE`` at call time, but ``scan_cache_dir()`` uses a copy imported by name
    into ``huggingface_hub.utils._cache_manager``. Both are patched, as are ``ckptgeo.constants``
    and ``datasets.config`` when imported. Modules imported later read the environment, also patched.
    """
    hf_home = tmp_path / "hf_home"
    hub_cache = hf_home / "hub"
    hub_cache.mkdir(parents=True)          # scan_cache_dir() raises CacheNotFound on a missing dir
    xet_cache, ckptgeo_cache, datasets_cache = hf_home / "xet", tmp_path / "ckptgeo_cache", hf_home / "datasets"
    for var, value in (("HF_HOME", hf_home), ("HF_HUB_CACHE", hub_cache), ("HF_XET_CACHE", xet_cache),
                       ("HF_DATASETS_CACHE", datasets_cache), ("CKPTGEO_CACHE", ckptgeo_cache)):
        monkeypatch.setenv(var, str(value))

    patches: list[tuple[str, str, Any]] = [
        ("huggingface_hub.constants", "HF_HOME", str(hf_home)),
        ("huggingface_hub.constants", "HF_HUB_CACHE", str(hub_cache)),
        ("huggingface_hub.constants", "HUGGINGFACE_HUB_CACHE", str(hub_cache)),
        ("huggingface_hub.constants", "HF_XET_CACHE", str(xet_cache)),
        ("huggingface_hub.utils._cache_manager", "HF_HUB_CACHE", str(hub_cache)),
        ("datasets.config", "HF_DATASETS_CACHE", datasets_cache),
        ("ckptgeo.constants", "CACHE_DIR", ckptgeo_cache),
    ]
    for module_name, attr, value in patches:
        module = sys.modules.get(module_name)
        if module is not None and hasattr(module, attr):
            monkeypatch.setattr(module, attr, value)


# --------------------------------------------------------------------------------------------------
# the loopback Hub
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LocalHub:
    """A running ``scripts/olah_local.py`` serving test repositories (see :func:`local_hub`).

    Attributes
    ----------
    url : str
        ``http://127.0.0.1:<port>``, equal to ``HF_ENDPOINT``.
    repo_id : str
        The session repository, ``"testorg/pythia-tiny"``.
    commits : Mapping[str, str]
        Its branch -> commit sha, ``main`` included.
    steps : tuple of int
        Its steps (one ``step{N}`` branch each).
    mirrors : Path
        The folder served: repositories live at ``mirrors/models/<org>/<name>``.
    repo : scripts.make_test_repo.CheckpointRepo
        Everything the builder recorded (weight sha256 and bytes per branch, shape, ...).
    log : Path
        The server's stdout/stderr.
    """

    url: str
    repo_id: str
    commits: Mapping[str, str]
    steps: tuple[int, ...]
    mirrors: Path
    repo: Any
    log: Path
    _added: dict = field(default_factory=dict, repr=False, compare=False)

    def served_bytes(self, repo_id: str | None = None) -> dict[tuple[str, str], int]:
        """Bytes the server has sent so far per (revision, file path), over every GET (of ``repo_id`` only when given):
        what went over loopback, counted by the server (:func:`scripts.olah_local.served_bytes`)."""
        from scripts.olah_local import served_bytes

        return served_bytes(self.log.parent / "olah", repo_id)

    def add_repo(self, name: str, *, org: str = "testorg", **kwargs: Any):
        """Build ``<org>/<name>`` with ``make_test_repo(**kwargs)`` and serve it (no restart needed).

        Calling again with the same name and arguments returns the repository already built, so
        several tests can share one; other arguments for an existing name raise ``ValueError``.

        Returns
        -------
        scripts.make_test_repo.CheckpointRepo
            With ``.repo_id``, ``.commits``, ``.steps``, ``.weight_sha256``, ...
        """
        from scripts.make_test_repo import make_test_repo

        key = f"{org}/{name}"
        spec = repr(sorted(kwargs.items()))
        if key in self._added:
            built_spec, built = self._added[key]
            if built_spec != spec:
                raise ValueError(f"{key} was already built with {built_spec}; pick another name.")
            return built
        built = make_test_repo(self.mirrors / "models" / org / name, **kwargs)
        self._added[key] = (spec, built)
        return built


@pytest.fixture(scope="session")
def local_hub(tmp_path_factory: pytest.TempPathFactory):
    """Serve ``testorg/pythia-tiny`` on ``HF_ENDPOINT`` for the whole session; yields a :class:`LocalHub`."""
    from scripts.make_test_repo import make_test_repo
    from scripts.olah_local import launch, stop, wait_ready

    root = tmp_path_factory.mktemp("local_hub")
    mirrors, workdir, log = root / "mirrors", root / "olah", root / "olah.log"
    mirrors.mkdir()
    proc = launch(mirrors, HUB_PORT, workdir, log)  # boots (~1 s) while the repository is being built
    try:
        repo = make_test_repo(mirrors / "models" / "testorg" / "pythia-tiny")
        wait_ready(f"{HUB_URL}/api/models/{repo.repo_id}/refs", proc, log)
        yield LocalHub(url=HUB_URL, repo_id=repo.repo_id, commits=repo.commits, steps=repo.steps,
                       mirrors=mirrors, repo=repo, log=log)
    finally:
        stop(proc)
