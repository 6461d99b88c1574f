"""The polyhedral pass (issue 4), stage by stage: raise (raise_c), dependences (deps).

Scheduling, tiling, placement and lowering build on these; see shared/DESIGN.md.
"""
from .deps import Dependences, compute_dependences, violated
from .raise_c import NotRaisable, Scop, Statement, raise_subgraph

__all__ = ["Dependences", "NotRaisable", "Scop", "Statement", "compute_dependences",
           "raise_subgraph", "violated"]
