"""Scale: a synthetic 20,000-node graph goes through selection and partitioning quickly."""
import random
import resource
import time

import networkx as nx
import pytest

from rstf.partition import partition_subgraph, quotient_is_acyclic, select_subgraphs


def cnn_like(n_nodes: int, unsupported_rate: float, seed: int = 0):
    """A long chain with short skips and branches (like stacked residual/inception blocks)."""
    rnd = random.Random(seed)
    dag, names = nx.DiGraph(), []
    for i in range(n_nodes):
        name = f"n{i}"
        dag.add_node(name)
        recent = names[-8:]
        if recent:
            for src in rnd.sample(recent, min(1 if rnd.random() < 0.8 else 2, len(recent))):
                dag.add_edge(src, name)
        names.append(name)
    return dag, {n for n in names if rnd.random() < unsupported_rate}


@pytest.mark.parametrize("rate", [0.0, 0.002, 0.02])
def test_20000_nodes_select_and_partition(rate):
    dag, unsupported = cnn_like(20000, rate)
    t0 = time.perf_counter()
    sets = select_subgraphs(dag, lambda n: n not in unsupported)
    parts = [p for s in sets for p in partition_subgraph(dag, s, 400)]
    seconds = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"rate {rate}: {len(sets)} subgraphs, {len(parts)} parts, {seconds:.2f} s, "
          f"peak RSS {peak_mb:.0f} MB")
    assert seconds < 60
    assert all(len(p) <= 400 for p in parts)
    assert sum(len(p) for p in parts) == 20000 - len(unsupported)
    assert quotient_is_acyclic(dag, parts)
