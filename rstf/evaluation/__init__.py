"""Judging the result: `rstf compare`, `rstf bench`, `rstf inspect`, the per-engine runner
and its inputs, and differential fuzzing."""
