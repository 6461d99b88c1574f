"""rstf: a polyhedral optimizer for TensorFlow graphs.

Public interface: the `rstf` command (rstf.cli) and `rstf.optimize` / `rstf.compare`.
"""
__version__ = "0.1.0"
