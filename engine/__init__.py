"""Search router engine: one question in, one fused, provenanced, signed answer out."""

__version__ = "0.1.0"
