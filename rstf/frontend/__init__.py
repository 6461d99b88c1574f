"""Loading a model into rstf's graph IR, and the graph rewrites done while loading
(pass-through nodes, constant folding, Tensordot, scale folding, Pad absorption)."""
