"""Dependence-based parallel loops (placed by rstf/poly/emit.py): the
optimized C on rstf's OpenMP team, and no parallel region inside a long sequential loop."""
import pytest

from poly_cases import NATIVE, _w, _subgraph, _bitwise_case
from rstf.poly import optimize_source
from rstf.frontend.tfutil import tf


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("case", ["conv_same", "conv_1x1_bias_relu", "depthwise_bn_relu6",
                                  "pad_depthwise_s2_bn_relu6", "conv_valid_stride2"])
def test_poly_equals_textbook_bitwise_on_the_team(case, threads):
    """The same on rstf's OpenMP team, as the op library runs the C: every parallel loop
    dynamic (`schedule(RSTF_SCHEDULE(K))` with RSTF_TEAM), the threads' static shares
    stolen from, on 2 threads and on 3 (more than this machine's cores: shares left
    behind)."""
    info, _, new = _bitwise_case(case, threads=threads, team=True)
    assert info["parallel_loops"] >= 1 and "RSTF_SCHEDULE(" in new


def test_no_parallel_region_inside_a_long_sequential_loop():
    """A GEMV whose 1000 columns leave 40 to the residual loops: those run inside the
    2048-step reduction loop, and a parallel region there would start 2048 times for 40
    iterations each (it did: 1.2 ms of ResNet-50's 27). Work per start decides."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 2048], name="x")
        tf.identity(tf.matmul(x, _w(2048, 1000)), name="out")

    g, sg = _subgraph(build)
    new, info = optimize_source(sg.source, sg.entry, target=NATIVE)
    depth, nested = 0, []
    for line in new.splitlines():
        if "#pragma omp parallel" in line and depth > 1:
            nested.append(line)
        depth += line.count("{") - line.count("}")
    assert info["parallel_loops"] >= 1 and not nested, nested
