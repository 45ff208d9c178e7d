"""The algorithmic tasks: eight seeded generators at three levels, their vocabulary, and model sizes.

* :mod:`ckptgeo.tasks.generators`: copy, reverse, compare, parity, addition, modular, sort,
  multiplication; :func:`generate`, :func:`heldout_items`, :func:`get_level`, :func:`chance`.
* :mod:`ckptgeo.tasks.vocab`: the shared word-level vocabulary and :func:`build_tokenizer`.
* :mod:`ckptgeo.tasks.sizes`: the six GPT-NeoX sizes, ``tiny`` (2x128) to ``xl`` (12x1024).

Training lives in :mod:`ckptgeo.train`. Nothing here imports torch at import time.
"""

from .generators import (LEVELS, TASKS, LevelSpec, chance, generate, get_level, heldout_items, sample,
                         space_size, suite_header, suite_name)
from .sizes import SIZES, ModelSize, build_config, count_parameters, get_size
from .vocab import VOCAB, build_tokenizer

__all__ = ["TASKS", "LEVELS", "LevelSpec", "get_level", "suite_name", "chance", "space_size", "sample", "generate",
           "heldout_items", "suite_header", "SIZES", "ModelSize", "get_size", "build_config", "count_parameters",
           "VOCAB", "build_tokenizer"]
