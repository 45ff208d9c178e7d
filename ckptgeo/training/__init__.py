"""Training small GPT-NeoX decoders on the algorithmic tasks into dense ``step{N}`` checkpoint folders.

* :mod:`ckptgeo.training.trainer`: :func:`train` (one run or a mixture), its loop and evaluator; it re-exports
  the names below so ``from ckptgeo.training.trainer import TrainConfig, train`` keeps working.
* :mod:`ckptgeo.training.config`: :class:`TrainConfig`, each setting's default, flag and help declared once.
* :mod:`ckptgeo.training.schedule`: checkpoint and learning-rate schedules, the optimiser, the recipe record.
* :mod:`ckptgeo.training.batches`: fresh training items per step and their encoding.
* :mod:`ckptgeo.training.runfolder`: the run folder's files, resume checks, checkpoint listing, history.
* :mod:`ckptgeo.training.grid`: :func:`train_grid`, tasks x levels x sizes x seeds, split across processes.
* :mod:`ckptgeo.training.sizes`: the six GPT-NeoX sizes, ``tiny`` (2x128) to ``xl`` (12x1024).

The tasks themselves are suites (:mod:`ckptgeo.suites.tasks`, :mod:`ckptgeo.suites.vocab`), re-exported
here for convenience. Nothing here imports torch at import time.
"""

from ckptgeo.suites.tasks import (LEVELS, TASKS, LevelSpec, chance, generate, get_level, heldout_items, sample,
                                  space_size, suite_header, suite_name)
from ckptgeo.suites.vocab import VOCAB, build_tokenizer
from ckptgeo.training.sizes import SIZES, ModelSize, build_config, count_parameters, get_size

__all__ = ["TASKS", "LEVELS", "LevelSpec", "get_level", "suite_name", "chance", "space_size", "sample", "generate",
           "heldout_items", "suite_header", "SIZES", "ModelSize", "get_size", "build_config", "count_parameters",
           "VOCAB", "build_tokenizer"]
