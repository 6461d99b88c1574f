"""Op code generators, registered by TensorFlow op type (see base.py for the contract).

Importing this package registers every handler family.
"""
from . import copies, elementwise, gather, linalg, nn, pool, reduce, resize, shape  # noqa: F401
from .base import HANDLERS, OpFunction, OpHandler, check_node, get_handler, op_handler

__all__ = ["HANDLERS", "OpFunction", "OpHandler", "check_node", "get_handler", "op_handler"]
