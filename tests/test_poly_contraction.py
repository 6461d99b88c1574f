"""Which statements are contractions, and which reduction loops one kernel call runs
(rstf/poly/contraction.py)."""
import dataclasses

import pytest

from poly_cases import NATIVE, _w, _subgraph
from rstf.poly import raise_subgraph
from rstf.poly.cparse import is_accumulation
from rstf.poly.contraction import find_contraction
from rstf.frontend.tfutil import tf


def test_contraction_roles():
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 10, 10, 8], name="x")
        tf.identity(tf.nn.conv2d(x, _w(3, 3, 8, 32), 2, "SAME"), name="out")

    _, sg = _subgraph(build)
    scop = raise_subgraph(sg.source, sg.entry)
    upd = [s for s in scop.statements if is_accumulation(s.ast)][0]
    k = find_contraction(upd, scop, NATIVE)
    assert (k.r, k.k, k.v) == ("ow", "ic", "oc") and k.nv * 16 <= 32
    init = [s for s in scop.statements if not is_accumulation(s.ast)][0]
    assert find_contraction(init, scop, NATIVE) is None


@pytest.mark.parametrize("ic,padding,inside", [
    (32, "SAME", "kw"),  # a 32-step call: kw joins it although the border cuts kw
    (80, "VALID", "kw"),  # no border: kw joins the 80 input channels
    (64, "SAME", None),  # border chunks would cost more than 64-step calls
    (128, "VALID", None),  # 384 steps: beyond Tuning.kin_depth_long
])
def test_which_reductions_a_conv_kernel_runs(ic, padding, inside):
    """Which of a 3x3 conv's reduction loops one kernel call runs beside ic, and which
    stay outside it and accumulate through memory (contraction.find_contraction). Where kw
    joins, kh, the one left, joins too (its K3 level): a call runs the whole reduction."""
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [1, 12, 12, ic], name="x")
        tf.identity(tf.nn.conv2d(x, _w(3, 3, ic, 64), 1, padding), name="out")

    _, sg = _subgraph(build)
    scop = raise_subgraph(sg.source, sg.entry)
    upd = [s for s in scop.statements if is_accumulation(s.ast)][0]
    k = find_contraction(upd, scop, NATIVE)
    assert (k.k, k.kin, k.kin3) == ("ic", inside, "kh" if inside else None)
    assert k.depth == ic * (9 if inside else 1)
    assert k.ranged == (["kh", "kw", "ic"] if inside else [])
    # Without the third level (Tuning.kin3 off), kh stays outside the call.
    off = dataclasses.replace(NATIVE, tuning=dataclasses.replace(NATIVE.tuning, kin3=False))
    k = find_contraction(upd, scop, off)
    assert (k.kin, k.kin3, k.depth) == (inside, None, ic * (3 if inside else 1))
