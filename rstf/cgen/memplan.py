"""Workspace planning: temporaries share memory when their lifetimes do not overlap.

rstream-tf.txt §II.F: the op wrapper allocates the subgraph's temporaries. One workspace is
allocated per call and each temporary gets an offset in it. Two temporaries may share bytes
only if their live ranges [first step, last step] are disjoint; a producer's output and its
inputs are live at the same step, so an op never reads and writes the same memory (the
`restrict` on op-function parameters stays true).
"""
from __future__ import annotations

import dataclasses

ALIGN = 64  # bytes: a cache line, and what AVX-512 loads like


@dataclasses.dataclass
class Buffer:
    key: str
    size: int  # bytes
    start: int  # first step at which it is live
    end: int  # last step at which it is live (inclusive)


def _round_up(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


def plan(buffers: list[Buffer]) -> tuple[dict[str, int], int]:
    """Greedy best-fit by decreasing size. Returns ({key: byte offset}, workspace bytes)."""
    placed: list[tuple[int, int, Buffer]] = []  # (offset, padded size, buffer)
    offsets: dict[str, int] = {}
    total = 0
    for b in sorted(buffers, key=lambda b: (-b.size, b.start, b.key)):
        size = _round_up(max(b.size, 1))
        busy = sorted((off, off + sz) for off, sz, o in placed
                      if not (o.end < b.start or b.end < o.start))
        offset = 0
        for lo, hi in busy:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        offsets[b.key] = offset
        placed.append((offset, size, b))
        total = max(total, offset + size)
    return offsets, total
