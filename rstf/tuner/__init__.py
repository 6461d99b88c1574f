"""`rstf tune`: register tiles, loop orders and k-loop steps measured on the machine that
serves.

`search.tune` measures each contraction's candidate tiles (`poly.tiles.candidates`) in the
op library's own harness and writes the fastest to this machine's profile
(`profile.Profile`); `rstf optimize --tuning auto` (the default) reads it back.
"""
