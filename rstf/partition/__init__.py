"""Choosing the subgraphs of a TensorFlow graph that rstf replaces by custom ops.

* :func:`select_subgraphs` groups supported nodes into maximal subgraphs that
  can each be contracted into one op without creating a cycle.
* :func:`partition_subgraph` splits a large subgraph into balanced parts of at
  most ``max_ops`` ops with METIS, repaired so that they stay contractible.
* :func:`is_convex`, :func:`quotient_is_acyclic` and :func:`cut_size` check
  and measure such partitions.
"""

from rstf.partition.metis import cut_size, partition_subgraph
from rstf.partition.select import is_convex, quotient_is_acyclic, select_subgraphs

__all__ = [
    "select_subgraphs",
    "partition_subgraph",
    "is_convex",
    "quotient_is_acyclic",
    "cut_size",
]
