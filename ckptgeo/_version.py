"""The toolkit's version, written once: ``pyproject.toml`` reads it (``[tool.setuptools.dynamic]``), every module that
stamps it on a row or a file imports it from here, and :mod:`ckptgeo` re-exports it."""

__version__ = "0.1.0"
