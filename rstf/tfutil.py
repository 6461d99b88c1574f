"""Import TensorFlow once, quietly.

TensorFlow prints banners on import (oneDNN notices, CPU feature lines) that would bury
rstf's own one-line messages, so the C++ log level is raised before the first import unless
the user chose one.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

__all__ = ["tf"]
