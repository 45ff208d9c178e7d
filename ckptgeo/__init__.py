"""ckptgeo: walk the checkpoints of a training run and measure what changes inside the model."""

__version__ = "0.1.0"
