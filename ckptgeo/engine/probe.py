"""``ckptgeo probe``: behaviour and linear probes of a suite across a model's checkpoints.

A thin layer over the scan engine: :func:`probe_checkpoints` runs :func:`ckptgeo.engine.scan.scan` with the
metrics ``behavior`` and ``probe`` only, so the output folder has the same dataset layout (and
resumes the same way) as ``ckptgeo scan``, with ``behavior/`` and ``probes/`` tables filled.
Heavy imports happen inside the functions so ``ckptgeo --help`` stays instant.
"""

from __future__ import annotations

from pathlib import Path

from ckptgeo.errors import HubUnreachableError

__all__ = ["DEFAULT_SOURCE", "DEFAULT_REVISIONS", "PROBE_METRICS", "probe_checkpoints", "unreachable_message"]

DEFAULT_SOURCE = "EleutherAI/pythia-160m"
DEFAULT_REVISIONS = "every-1000"
PROBE_METRICS = ("behavior", "probe")


def unreachable_message(source: str, err: BaseException) -> str:
    """The message of a probe whose source Hub cannot be reached: how to point at a mirror or a folder."""
    return (f"The Hugging Face Hub cannot be reached for {source!r} ({err}). Point ckptgeo at a mirror "
            f"with HF_ENDPOINT (e.g. `HF_ENDPOINT=https://my-mirror.example ckptgeo probe ...`), or at a local "
            f"folder of step{{N}} checkpoints: `ckptgeo probe --suite ... path/to/run --out ...`.")


def probe_checkpoints(source: str | Path = DEFAULT_SOURCE, *, suites, revisions: str | None = None,
                      out: str | Path | None = None):
    """Measure behaviour and per-layer linear probes of ``suites`` at each selected revision.

    Parameters
    ----------
    source : str or Path, default="EleutherAI/pythia-160m"
        A Hub model id (its ``step{N}`` branches) or a local folder of ``step{N}`` checkpoints.
    suites : str or sequence of str
        Suite names, paths or loader specs (``logic``, ``path/to/task.json``, ``hf:blimp/...``).
    revisions : str, optional
        Revision selector, as for ``ckptgeo scan`` (default: every-1000 on the Hub, all for a folder).
    out : str or Path, optional
        Output dataset folder (default ``results/<source name>``); ``behavior/`` and ``probes/`` tables
        are written (resumable).

    Returns
    -------
    ScanResult

    Raises
    ------
    InvalidParameterError
        An unknown suite (checked before any download).
    SuiteFormatError
        A suite file breaks the item schema.
    HubUnreachableError
        The Hub cannot be reached; the message shows ``HF_ENDPOINT`` and the local-folder form.
    """
    from ckptgeo.suites.items import load_suite
    from ckptgeo.engine.scan import scan

    suites = [suites] if isinstance(suites, (str, Path)) else list(suites)
    for spec in suites:  # fail on a mistyped suite before touching the network
        if not str(spec).startswith("hf:"):
            load_suite(spec)
    try:
        return scan(str(source), revisions=revisions, suites=[str(s) for s in suites], metrics=list(PROBE_METRICS),
                    out=out)
    except HubUnreachableError as err:
        raise HubUnreachableError(unreachable_message(str(source), err)) from err
