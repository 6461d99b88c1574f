"""What the polyhedral pass gives back for one subgraph: `PassResult`.

The pipeline reads its typed fields (the new source, the workspace it needs, the inputs
fed in another layout, why the pass declined); `report()` is the JSON record that
report.json and `rstf inspect` show for the subgraph.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class PassResult:
    """One subgraph through the pass.

    `optimizer` is "poly" when the pass rewrote the C, "none" when it kept the textbook C
    (`diagnostic` says why: outside the raisable subset, or a later stage failed).
    `workspace_bytes`: the workspace the new C needs (None: the textbook C's own plan).
    `prepacked`: the op's frozen inputs it must be fed in another layout, input -> its
    `prepack.pack` spec. The rest describes what was done, for the report."""
    source: str
    optimizer: str
    seconds: float
    diagnostic: str = ""
    target: str | None = None
    workspace_bytes: int | None = None
    prepacked: Mapping[str, int | str] = dataclasses.field(default_factory=dict)
    statements: int = 0
    calls: int = 0
    tiled: tuple = ()  # one record per kernel: its tile, loops, reduction and order
    refused: tuple = ()  # tilings the dependence check rejected, and why
    fused: tuple = ()  # pointwise chains run with their producer
    bands: tuple = ()  # consecutive groups fused row by row
    parallel_loops: int = 0
    simd_loops: int = 0
    kernel_calls: int = 0
    packed: int = 0  # kernels copying their column operand into a contiguous panel
    prefetched: tuple = ()  # kernels prefetching another group's weight
    panel_prefetched: tuple = ()  # kernels prefetching their next weight panel
    winograd: tuple = ()  # convolutions run as Winograd

    @property
    def optimized(self) -> bool:
        return self.optimizer == "poly"

    def report(self) -> dict:
        """The subgraph's JSON record (report.json's `poly`)."""
        if not self.optimized:
            return {"optimizer": self.optimizer, "diagnostic": self.diagnostic,
                    "seconds": self.seconds}
        return {"optimizer": self.optimizer, "statements": self.statements,
                "calls": self.calls, "tiled": list(self.tiled), "refused": list(self.refused),
                "fused": list(self.fused), "bands": list(self.bands),
                "parallel_loops": self.parallel_loops, "simd_loops": self.simd_loops,
                "kernel_calls": self.kernel_calls, "packed": self.packed,
                "prepacked": dict(self.prepacked), "prefetched": list(self.prefetched),
                "panel_prefetched": list(self.panel_prefetched),
                "winograd": list(self.winograd), "workspace_bytes": self.workspace_bytes,
                "seconds": self.seconds, "target": self.target}
