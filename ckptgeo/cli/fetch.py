"""``ckptgeo fetch``: download a selection of revisions into the Hub cache for later offline scans."""

from __future__ import annotations

import argparse
from pathlib import Path

from ckptgeo.cli._options import add_source_options, parse_source_options

__all__ = ["add_parser", "fetch_revisions"]

_EPILOG = """examples (on a login node with network, then scan on compute nodes with HF_HUB_OFFLINE=1):
  ckptgeo fetch EleutherAI/pythia-160m --revisions every-10000 --max-disk 20GB
  HF_HUB_OFFLINE=1 ckptgeo scan EleutherAI/pythia-160m --revisions every-10000
  ckptgeo fetch allenai/OLMo-2-1124-7B --revisions 'stage2-ingredient1:final'"""


def fetch_revisions(source, selector: str | None = None, *, max_disk: int | None = None):
    """Download config, weights and tokenizer of the selected revisions of ``source`` into the Hub cache
    (never evicted), so that a scan with ``HF_HUB_OFFLINE=1`` finds them.

    Parameters
    ----------
    source : str or CheckpointSource
        A Hub repo id or family spec (see :func:`ckptgeo.sources.registry.open_source`).
    selector : str, optional
        Revision selector (default: the source's, ``every-1000`` for a Hub repo).
    max_disk : int, optional
        Bytes: refuse before downloading anything when the selection's weights not yet cached exceed it.

    Returns
    -------
    list of (Revision, Path)
        Each revision and its cache folder.

    Raises
    ------
    DiskSpaceError
        The selection exceeds ``max_disk`` or the free disk of the cache.
    RevisionNotFoundError, EmptySelectionError, SourceNotFoundError, HubUnreachableError
        As for a scan.
    """
    from ckptgeo.errors import DiskSpaceError
    from ckptgeo.sources.registry import open_source
    from ckptgeo.sources.revisions import select_revisions

    if isinstance(source, str):
        label, source = source, open_source(source, keep_cache=True)
    else:
        label = source.label
    selector = source.default_selector if selector is None else selector
    revs = select_revisions(source.revisions(), selector, source=label,
                            note=source.missing_note)
    need = sum(_missing_bytes(source, r) for r in revs)
    if max_disk is not None and need > max_disk:
        raise DiskSpaceError(f"the {len(revs)} selected revisions of {label} need {need / 1e6:,.1f} MB, above "
                             f"--max-disk {max_disk / 1e6:,.1f} MB; select fewer (e.g. every-N) or raise it",
                             needed=need, available=max_disk)
    if need and source.downloads:
        import shutil

        from huggingface_hub import constants

        root = Path(source.cache_dir or constants.HF_HUB_CACHE)
        root = next((p for p in [root, *root.parents] if p.exists()), Path("/"))
        free = shutil.disk_usage(root).free
        if need > free:
            raise DiskSpaceError(f"the {len(revs)} selected revisions of {label} need {need / 1e6:,.1f} MB, "
                                 f"{free / 1e6:,.1f} MB free on {root}", needed=need, available=free)
    out = [(r, source.fetch(r)) for r in revs]
    source.tokenizer_path()
    return out


def _missing_bytes(source, revision) -> int:
    """Bytes of ``revision``'s weight files not yet in the cache."""
    folder = source.cached_folder(revision)
    return sum(f.size or 0 for f in source.weight_files(revision) if folder is None or not (folder / f.name).exists())


def _cmd_fetch(args) -> int:
    from ckptgeo.engine.scan import parse_size
    from ckptgeo.sources.registry import open_source

    source = open_source(args.source, step_pattern=args.step_pattern, keep_cache=True,
                         options=parse_source_options(args.source_options))
    got = fetch_revisions(source, args.revisions, max_disk=parse_size(args.max_disk))
    total = 0
    for rev, path in got:
        size = sum(f.size or 0 for f in source.weight_files(rev))
        total += size
        print(f"{rev.name:<24} {size / 1e6:8.1f} MB  {path}")
    print(f"fetched {len(got)} revision{'s' if len(got) != 1 else ''} ({total / 1e6:,.1f} MB of weights); "
          f"scan them offline with HF_HUB_OFFLINE=1")
    return 0


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``ckptgeo fetch`` to an argparse ``subparsers`` object and return its parser."""
    p = subparsers.add_parser("fetch", help="download revisions into the Hub cache for offline scans",
                              epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
                              description="Download config, weights and tokenizer of the selected revisions into "
                                          "the Hugging Face cache (kept), for scans with HF_HUB_OFFLINE=1.")
    add_source_options(p)
    p.add_argument("--max-disk", default=None, help="refuse if the selection's weights exceed this (e.g. 40GB)")
    p.set_defaults(func=_cmd_fetch)
    return p
