"""The algorithmic tasks: eight seeded generators at three levels, their vocabulary, and model sizes.

* :mod:`ckptgeo.training.tasks`: copy, reverse, compare, parity, addition, modular, sort,
  multiplication; :func:`generate`, :func:`heldout_items`, :func:`get_level`, :func:`chance`.
* :mod:`ckptgeo.training.vocab`: the shared word-level vocabulary and :func:`build_tokenizer`.
* :mod:`ckptgeo.training.sizes`: the six GPT-NeoX sizes, ``tiny`` (2x128) to ``xl`` (12x1024).

Training lives in :mod:`ckptgeo.training.trainer`. Nothing here imports torch at import time.
"""

from ckptgeo.training.tasks import (LEVELS, TASKS, LevelSpec, chance, generate, get_level, heldout_items, sample,
                         space_size, suite_header, suite_name)
from ckptgeo.training.sizes import SIZES, ModelSize, build_config, count_parameters, get_size
from ckptgeo.training.vocab import VOCAB, build_tokenizer

__all__ = ["TASKS", "LEVELS", "LevelSpec", "get_level", "suite_name", "chance", "space_size", "sample", "generate",
           "heldout_items", "suite_header", "SIZES", "ModelSize", "get_size", "build_config", "count_parameters",
           "VOCAB", "build_tokenizer"]
