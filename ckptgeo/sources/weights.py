"""Which files of a checkpoint hold its weights: the one rule set every source and the model loader use.

A checkpoint's weights are its safetensors files (``*.safetensors``, sharded ones with their
``*.safetensors.index.json``) when it has any, else its PyTorch files (``pytorch_model*.bin`` with
``pytorch_model.bin.index.json``). Names are matched on their last path component, so the rule is the
same for a repo's file list, a folder on disk and a subfolder of a revision.
"""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath

from ckptgeo.errors import CorruptCheckpointError

__all__ = ["is_weight_file", "pick_weight_files", "weight_files_in", "weight_shards"]

_SAFETENSORS = re.compile(r".+\.safetensors(\.index\.json)?")
_PYTORCH = re.compile(r"pytorch_model.*\.bin(\.index\.json)?")


def _base(name: str) -> str:
    return PurePosixPath(name).name


def is_weight_file(name: str) -> bool:
    """Whether a file named ``name`` holds weights (or indexes weight shards).

    Examples
    --------
    >>> [is_weight_file(n) for n in ("model.safetensors", "pytorch_model-00001-of-00002.bin", "config.json")]
    [True, True, False]
    """
    base = _base(name)
    return bool(_SAFETENSORS.fullmatch(base) or _PYTORCH.fullmatch(base))


def pick_weight_files(names) -> list[str]:
    """The weight files among ``names``, sorted: the safetensors ones if any, else the PyTorch ones.

    Examples
    --------
    >>> pick_weight_files(["config.json", "pytorch_model.bin", "model.safetensors"])
    ['model.safetensors']
    """
    names = [n for n in names if is_weight_file(n)]
    safetensors = [n for n in names if _SAFETENSORS.fullmatch(_base(n))]
    return sorted(safetensors or names)


def weight_files_in(folder: str | Path) -> list[Path]:
    """The weight files (:func:`pick_weight_files`) of a checkpoint folder on disk."""
    folder = Path(folder)
    return [folder / n for n in pick_weight_files(p.name for p in folder.iterdir() if p.is_file())] \
        if folder.is_dir() else []


def weight_shards(folder: str | Path, *, revision: str = "") -> list[Path]:
    """The tensor files to read for the checkpoint in ``folder``: the shards its index names, or its weight
    files when it has no index.

    Raises
    ------
    CorruptCheckpointError
        The index cannot be read.
    """
    folder = Path(folder)
    files = weight_files_in(folder)
    index = next((f for f in files if f.name.endswith(".index.json")), None)
    if index is None:
        return files
    try:
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise CorruptCheckpointError(f"{revision}: unreadable weight index {index.name}: {err}",
                                     revision=revision, path=str(index)) from err
    return [folder / s for s in shards]
