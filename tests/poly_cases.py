"""Shared by the tests of the polyhedral pass (tests/test_poly_*.py): the graphs they
optimize (`CASES`, built by `_subgraph`), the runs that compare the optimized C with the
textbook C (`_run_both`, `_bitwise_case`), and the target they shape the C for by default
(`NATIVE`: this machine's vector width, with the tile model's machine fixed)."""
import dataclasses
import os

import numpy as np
from harness import generate_subgraph, load_graph_def, make_graph_def
from rstf.build.cexec import run_subgraph_c
from rstf.poly import optimize_source
from rstf.poly.prepack import as_fed, pack
from rstf.poly.target import AVX2, AVX512, detect
from rstf.frontend.tfutil import tf

rng = np.random.RandomState(7)

# The target whose C this machine runs at full width: AVX-512's 64-byte vectors on an AVX2
# machine are correct C but gcc keeps them in memory, and compiles one such file in 30 s or
# more under the sanitizers (test_sanitize runs the tests that use this module). AVX512,
# not AVX512_FULL, on any AVX-512 machine: the tests' expected tiles are the Zen 4 model's
# wherever they run.
# The tile-order model's machine is fixed too: a 1 MiB L2 a core (Zen 4's), whatever this
# machine's, so that the expected tiles hold everywhere.
NATIVE = dataclasses.replace(AVX512 if detect().vlen == 16 else AVX2, l2=1 << 20)


def at_l2(target):
    """`target` with NATIVE's L2 (the tests about one target's tiles)."""
    return dataclasses.replace(target, l2=NATIVE.l2)


def tuned(target=NATIVE, **fields):
    """`target` with some `Tuning` fields changed (a test that needs a threshold moved)."""
    return dataclasses.replace(target, tuning=dataclasses.replace(target.tuning, **fields))


def V(name: str, target=NATIVE) -> str:
    """`name` with the target's vector width: V("rstf_fma") -> rstf_fma16."""
    return f"{name}{target.vlen}"


def _w(*shape):
    return rng.randn(*shape).astype(np.float32)


def _subgraph(build, out="out"):
    g = load_graph_def(make_graph_def(build), outputs=[out])
    nodes = [n for n in g.topo_order() if g.nodes[n].op not in ("Const", "Placeholder")]
    return g, generate_subgraph(g, nodes, 0)


def _run_both(g, sg, feeds, threads=2, winograd=False, team=False, target=NATIVE):
    """(textbook outputs, optimized outputs, report entry), the optimized C run with
    `threads` OpenMP threads: libgomp's (its loops static), or, `team`, rstf's team as in
    the op library (its loops dynamic, RSTF_TEAM). The graph's constants are passed as such,
    as the pipeline does: those the new C reads in panel layout are fed packed
    (poly/prepack.py). `winograd` off by default: every conv keeps its direct kernels,
    bit-identical."""
    inputs = {s.tensor: (feeds[s.tensor] if s.tensor in feeds else g.const_value(s.tensor))
              for s in sg.inputs}
    ref = run_subgraph_c(sg, inputs)
    constants = frozenset(s.cname for s in sg.inputs if g.is_const(s.tensor))
    new, info = optimize_source(sg.source, sg.entry, constants=constants, winograd=winograd,
                                target=target)
    assert info["optimizer"] == "poly", info
    assert set(info["prepacked"]) <= constants
    spec = info["prepacked"]
    inputs = {s.tensor: pack(v, spec[s.cname]) if s.cname in spec else v
              for s, v in zip(sg.inputs, inputs.values())}
    old, sg.source = sg.source, new
    old_ws, sg.workspace_bytes = sg.workspace_bytes, info["workspace_bytes"]
    old_in = sg.inputs
    sg.inputs = as_fed(sg.inputs, spec)
    prev = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        got = run_subgraph_c(sg, inputs, team_threads=threads if team else 0)
    finally:
        sg.source, sg.workspace_bytes, sg.inputs = old, old_ws, old_in
        if prev is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = prev
    return ref, got, info, new


CASES = {
    # name: (input shape, builder of the graph on x)
    "conv_same": ((1, 17, 19, 40), lambda x: tf.nn.conv2d(x, _w(3, 3, 40, 72), 1, "SAME")),
    "conv_valid_stride2": ((2, 15, 15, 24),
                           lambda x: tf.nn.conv2d(x, _w(3, 3, 24, 64), 2, "VALID")),
    "conv_1x7_dilated": ((1, 12, 20, 16), lambda x: tf.nn.conv2d(
        x, _w(1, 7, 16, 48), 1, "SAME", dilations=[1, 1, 2, 1])),
    "conv_1x1_bias_relu": ((1, 9, 9, 64), lambda x: tf.nn.relu(tf.nn.bias_add(
        tf.nn.conv2d(x, _w(1, 1, 64, 100), 1, "SAME"), _w(100)))),
    "conv_grouped": ((1, 8, 8, 32), lambda x: tf.nn.conv2d(x, _w(3, 3, 16, 64), 1, "SAME")),
    # 4 groups of 16 channels, then batch norm and ReLU: one column tile a group, so the
    # chain runs as the epilogue of each row of each group (fuse._group_width).
    "conv_grouped_bn_relu": ((1, 7, 9, 64), lambda x: tf.nn.relu(
        tf.nn.conv2d(x, _w(3, 3, 16, 64), 1, "SAME") * _w(64) + _w(64))),
    # 2 groups of 80 channels: a group is more than one column tile (no fused epilogue).
    "conv_grouped_wide_bn_relu": ((1, 5, 6, 160), lambda x: tf.nn.relu(
        tf.nn.conv2d(x, _w(3, 3, 80, 160), 1, "SAME") * _w(160) + _w(160))),
    "conv_bn_relu6_chain": ((1, 9, 11, 16), lambda x: tf.nn.relu6(
        tf.nn.conv2d(x, _w(3, 3, 16, 32), 1, "SAME") * _w(32) + _w(32))),
    "chain_with_fan_out": ((2, 6, 6, 8), lambda x: (lambda m: tf.nn.relu(m + 1.0) * m)(
        tf.nn.sigmoid(x) * _w(8))),
    # The conv's input (a temporary) and the epilogue's output get the same workspace bytes
    # from the memory plan: fusing them row by row would overwrite input rows still read.
    "conv_input_bytes_reused": ((1, 12, 10, 16), lambda x: tf.nn.relu(
        tf.nn.conv2d(tf.nn.relu(x), _w(3, 3, 16, 16), 1, "SAME"))),
    # A first layer: 3 input channels, so (kw, ic) become one reduction of 21 steps.
    "conv_rgb_7x7_stride2": ((1, 30, 30, 3), lambda x: tf.nn.conv2d(
        x, _w(7, 7, 3, 64), 2, "VALID")),
    "conv_rgb_3x3_same": ((1, 13, 13, 3), lambda x: tf.nn.conv2d(x, _w(3, 3, 3, 32), 1, "SAME")),
    # MobileNet v2's first layer: 27 taps in one kernel call (kh as its second level), the
    # bottom and right border (stride 2, SAME) in kernels with fewer taps, BN/ReLU6 in
    # registers.
    "conv_rgb_3x3_s2_bn_relu6_in_registers": ((1, 15, 18, 3), lambda x: tf.nn.relu6(
        tf.nn.conv2d(x, _w(3, 3, 3, 32), 2, "SAME") * _w(32) + _w(32))),
    # Deep weights over few output rows (ResNet's last stage, in small): the column tiles
    # run outermost, each thread packing its weight panel; 176 = 2x64 + 48 leaves a partial
    # last tile, which reads the weights unpacked in the residual loops.
    "conv_deep_weights_packed": ((1, 5, 5, 256), lambda x: tf.nn.relu(
        tf.nn.conv2d(x, _w(3, 3, 256, 176), 1, "SAME") * _w(176) + _w(176))),
    # A 1x1 conv on a 3x3 map (Xception's last block): its 9 pixels merged into one row of
    # calls, the tiles outermost, each 2.4 MB weight panel read by a single call.
    "conv_1x1_3x3_merged_rows_deep_weights": ((1, 3, 3, 1280), lambda x: tf.nn.relu(
        tf.nn.conv2d(x, _w(1, 1, 1280, 480), 1, "SAME") * _w(480) + _w(480))),
    # A 1x1 conv's whole reduction is one kernel call: the kernels start from zero and run
    # the BN/ReLU6 chain in their registers (rstf/poly/regepi.py); no row buffer.
    "conv_1x1_bn_relu6_in_registers": ((1, 10, 23, 16), lambda x: tf.nn.relu6(
        tf.nn.conv2d(x, _w(1, 1, 16, 96), 1, "SAME") * _w(96) + _w(96))),
    # MobileNet v2's projection: 24 channels (a 16-wide kernel and an 8-wide remainder
    # kernel), then the residual add, which reads another tensor of the output's shape.
    "conv_1x1_bn_residual_in_registers": ((1, 7, 9, 24), lambda x: (
        tf.nn.conv2d(tf.nn.relu(x), _w(1, 1, 24, 24), 1, "SAME") * _w(24) + _w(24) + x)),
    # The epilogue's first result is also read outside the chain: stored, not contracted,
    # and read back by the chain's next op from the register it was computed in.
    "conv_1x1_fan_out_in_registers": ((1, 6, 6, 8), lambda x: (lambda m: tf.nn.relu(m) + m[..., :1])(
        tf.nn.conv2d(x, _w(1, 1, 8, 32), 1, "SAME") + _w(32))),
    # A 7x7 map's 1x1 conv: its rows and columns follow each other in memory, so the 49
    # pixels are one row of kernel chunks (contraction.merge_rows), the residual add (rows at
    # the same strides) still in registers.
    "conv_1x1_7x7_merged_rows_residual_in_registers": ((1, 7, 7, 160), lambda x: (
        tf.nn.conv2d(x, _w(1, 1, 160, 160), 1, "VALID") * _w(160) + _w(160) + x)),
    # Merged rows whose epilogue reads a tensor broadcast along the map's rows: not at Y's
    # strides, so no register epilogue; the 7x7x1344 output (263 KB) is too big for a stack
    # row and stays in the workspace.
    "conv_1x1_7x7_merged_rows_broadcast_epilogue": ((1, 7, 7, 16), lambda x: (
        tf.nn.conv2d(x, _w(1, 1, 16, 1344), 1, "VALID") + _w(1, 1, 7, 1344))),
    "matmul": ((20, 70), lambda x: tf.matmul(x, _w(70, 50))),
    # Column remainders that are not a multiple of half a vector: the last tile in a kernel
    # whose last vector's lanes past the columns are masked (SegFormer's attention over 49
    # keys: tiles of 16 and 1 column; ViT's over 197 tokens), no textbook loops.
    "matmul_columns_49_masked": ((60, 32), lambda x: tf.matmul(x, _w(32, 49))),
    "batch_matmul_columns_197_masked": ((2, 20, 16), lambda x: tf.matmul(x, _w(16, 197))),
    # ... and its epilogue still in the registers, the bias's loads and the stores masked too
    "matmul_49_bias_relu_masked": ((2, 30, 32), lambda x: tf.nn.relu(
        tf.matmul(x, _w(32, 49)) + _w(49))),
    "matmul_row": ((1, 300), lambda x: tf.nn.softmax(tf.matmul(x, _w(300, 40)))),
    # A reduction of 515 steps, a weight large enough to prefetch panel by panel: the
    # kernels run 8 steps a trip of k (Target.k_steps) and the last 3 in a rolled loop,
    # each trip's prefetches once.
    "matmul_depth_515_steps": ((40, 515), lambda x: tf.matmul(x, _w(515, 128))),
    # A classifier head: the 1x1 conv's kernels prefetch the GEMV's 1.2 MB weight
    # (prefetch.plan_prefetch); the Mean between them has no kernel.
    "conv_mean_matmul_head": ((1, 7, 7, 64), lambda x: tf.nn.softmax(tf.matmul(
        tf.reduce_mean(tf.nn.relu6(tf.nn.conv2d(x, _w(1, 1, 64, 512), 1, "VALID")), [1, 2]),
        _w(512, 600)))),
    # A dense layer whose reduction runs in TF's k slices, then a classifier's GEMV over a
    # 1.5 MB weight that the dense layer's kernels prefetch (prefetch.plan_prefetch).
    "dense_mean_matmul_head": ((1, 64, 640), lambda x: tf.matmul(
        tf.reduce_mean(tf.nn.relu(tf.matmul(x, _w(640, 640)) + _w(640)), [1]),
        _w(640, 576))),
    # A batch of 8 sequences through a dense layer whose 2.4 MB weight is larger than L2:
    # rows outermost, each sequence runs every column tile in turn, and its calls prefetch
    # the next panel (prefetch.tile_first, streamed).
    "batched_dense_streamed_weights": ((8, 64, 768), lambda x: tf.nn.relu(
        tf.matmul(x, _w(768, 768)) + _w(768))),
    # Four rows against a 2 MB weight, a long k: TensorFlow shards k over its threads
    # (opgen/kslices.py, shardByInnerDim), which leaves each k slice a statement of its
    # own where the machine has two threads or more.
    "matmul_4_rows_k_sharded": ((4, 2048), lambda x: tf.matmul(x, _w(2048, 256))),
    # A dense layer whose rows of A (64 x 2048, 512 KB) and two 2048-deep weight panels are
    # more than the tests' 1 MiB L2: its k in blocks of whole k slices, a call per block,
    # the bias and ReLU after the last (poly/kblocks.py).
    "dense_k_blocks": ((1, 64, 2048), lambda x: tf.nn.relu(
        tf.matmul(x, _w(2048, 192)) + _w(192))),
    # A stride-2 1x1 conv (ResNet-50's 28x28x512 to 14x14x1024 projection): it reads a
    # quarter of its 1.6 MB input, which fits L2 beside a weight panel, so the column
    # tiles run outermost and the 2 MB weight is read once, not once per output row.
    # A 3x3 SAME conv over 32 channels (Inception's 147x147x32 to 64, on a 13x15 map): kh,
    # kw and ic in one call, both borders cutting taps, its bias and ReLU in registers.
    "conv3x3_few_channels_whole_reduction": ((2, 13, 15, 32), lambda x: tf.nn.relu(
        tf.nn.conv2d(x, _w(3, 3, 32, 64), 1, "SAME") + _w(64))),
    "conv1x1_stride2_tiles_outer": ((1, 28, 28, 512), lambda x: tf.nn.relu(
        tf.nn.conv2d(x, _w(1, 1, 512, 1024), 2, "VALID") + _w(1024))),
    # A batch of sequences by a shared weight (bert_base's feed-forward down projection at
    # batch 8, scaled to a 1 MB L2): a sequence's rows (0.8 MB) do not stay in L2 beside
    # a panel, so the column tiles run outermost, each panel read once for every sequence
    # (tilemodel.choose_order).
    "batched_dense_rows_beyond_l2_tiles_outer": ((3, 64, 3072), lambda x: tf.nn.relu(
        tf.matmul(x, _w(3072, 192)) + _w(192))),
    # The same shape with 384 rows: A's rows alone (3 MB) are more than L2, no K blocks.
    "dense_rows_beyond_l2_whole_k": ((1, 384, 2048), lambda x: tf.matmul(x, _w(2048, 96))),
    # A dense layer's GELU (tanh form, whose tanh keeps it out of the registers) over
    # rows longer than L1 holds: each chunk of rows zeroed, computed and through the chain
    # in turn (fuse._per_chunk).
    "dense_gelu_per_chunk": ((1, 600, 64), lambda x: (lambda h: 0.5 * h * (1.0 + tf.tanh(
        0.79788456 * (h + 0.044715 * h * h * h))))(tf.matmul(x, _w(64, 128)) + _w(128))),
    # The same where the row chunks are whole (312 rows: 24 x 13, 26 x 12, ...): the
    # column tile's loop holds the row buffer and the chunk loop alone, and is not
    # collapsed with it.
    "dense_gelu_per_chunk_whole_chunks": ((1, 312, 64), lambda x: (lambda h: 0.5 * h * (
        1.0 + tf.tanh(0.79788456 * (h + 0.044715 * h * h * h))))(
        tf.matmul(x, _w(64, 128)) + _w(128))),
    # A dense layer over [1, M, K] with one column tile (N = 32): its rows are the kernel's
    # chunks, not an outer output loop, so only the register epilogue's true place (in
    # each chunk's kernel, `regepi.kernel_times`) leaves the chunk loop parallel.
    "batch_matmul_one_column_tile_in_registers": ((1, 200, 64), lambda x: (
        tf.matmul(x, _w(64, 32)) + _w(32) + _w(1, 200, 32))),
    # Attention's context, probabilities x values, both computed: per head one column
    # tile of exactly the values' width. A candidate with the column tiles outermost
    # (`rstf tune`'s second probe) has a one-iteration tile loop: nothing to pack.
    "batch_matmul_whole_width_tile_tiles_outer": ((2, 96, 96 + 4 * NATIVE.vlen), lambda x: (
        tf.matmul(x[..., :96], x[..., 96:]))),
    # Attention's mask: SelectV2 on a TF bool, per column (a vector of bytes widened to a
    # lane mask) and per row (one byte, C's own ?:), in the matmul's registers.
    "matmul_select_bool_columns_in_registers": ((2, 12, 32), lambda x: tf.where(
        tf.constant(rng.random_sample(48) > 0.3), tf.matmul(x, _w(32, 48)), -1e9)),
    "matmul_select_bool_rows_in_registers": ((2, 12, 32), lambda x: tf.where(
        tf.constant(rng.random_sample((12, 1)) > 0.3), tf.matmul(x, _w(32, 48)), -1e9)),
    # Row reductions through 16 lane partials (the ops' lane_reduce): a softmax over rows
    # of 100 (6 whole vectors of lanes and a tail of 4) and a layer norm's two moments.
    "softmax_rows_in_lanes": ((2, 8, 100), lambda x: tf.nn.softmax(x)),
    # Attention's softmax over [heads, tokens, keys]: its rows in blocks of 32 (every step of
    # a block before the next), one parallel loop over the blocks.
    "softmax_row_blocks": ((1, 4, 64, 128), lambda x: tf.nn.softmax(x)),
    # Attention's second mask, on the probabilities: the SelectV2 runs in the softmax's
    # blocks (fuse.fuse_block_epilogue), not as a second pass over the scores.
    "softmax_select_row_blocks": ((1, 4, 64, 128), lambda x: tf.where(
        tf.constant(rng.random_sample(128) > 0.3), tf.nn.softmax(x), 0.0)),
    # A layer norm over 128 tokens of 256: its moments' rows in blocks of 16.
    "layer_norm_row_blocks": ((1, 128, 256), lambda x: (lambda m: (x - m) * tf.math.rsqrt(
        tf.reduce_mean(tf.math.squared_difference(x, m), -1, keepdims=True) + 1e-12))(
        tf.reduce_mean(x, -1, keepdims=True))),
    "layer_norm_in_lanes": ((1, 6, 100), lambda x: (lambda m: (x - m) * tf.math.rsqrt(
        tf.reduce_mean(tf.math.squared_difference(x, m), -1, keepdims=True) + 1e-12))(
        tf.reduce_mean(x, -1, keepdims=True))),
    "matmul_transposed_b": ((3, 33), lambda x: tf.matmul(x, _w(48, 33), transpose_b=True)),
    # Attention's key to [heads, depth, tokens]: a transpose that moves the input's innermost
    # axis, written in cache-line tiles of the output's last axis (opgen/shape.py).
    "transpose_key_tiled": ((48, 2, 24), lambda x: tf.transpose(x, [1, 2, 0]) + 1.0),
    # A depthwise conv: a kernel that reads the input as vectors, all 9 taps (kh too) in
    # one call; the rows and columns at the padding border run in kernels with fewer taps,
    # so no point is left to the textbook loops and the BN/ReLU6 chain runs in registers.
    "depthwise_bn_relu6": ((1, 13, 11, 48), lambda x: tf.nn.relu6(
        tf.raw_ops.DepthwiseConv2dNative(input=x, filter=_w(3, 3, 48, 1), strides=[1, 1, 1, 1],
                                         padding="SAME") * _w(48) + _w(48))),
    # MobileNet v2's downsampling: ZeroPadding2D, then a VALID stride-2 depthwise conv. The
    # Pad is absorbed (rstf/frontend/padfold.py): the guarded taps run in the fused per-pixel group.
    "pad_depthwise_s2_bn_relu6": ((1, 14, 14, 32), lambda x: tf.nn.relu6(
        tf.raw_ops.DepthwiseConv2dNative(
            input=tf.pad(x, [[0, 0], [0, 1], [0, 1], [0, 0]]), filter=_w(3, 3, 32, 1),
            strides=[1, 2, 2, 1], padding="VALID") * _w(32) + _w(32))),
    # Two filters per channel: the output channel c*2 + m is not one unit-stride column of
    # both operands, so no depthwise kernel; the textbook loops, still bit-identical.
    "depthwise_multiplier2_dilated": ((1, 11, 12, 16), lambda x: tf.raw_ops.DepthwiseConv2dNative(
        input=x, filter=_w(3, 3, 16, 2), strides=[1, 1, 1, 1], padding="SAME",
        dilations=[1, 2, 2, 1])),
    # Dilated taps: the kernel's strides, with the border chunks cut by 2-pixel steps.
    "depthwise_dilated_bn_in_registers": ((1, 12, 13, 24), lambda x: tf.raw_ops.DepthwiseConv2dNative(
        input=x, filter=_w(3, 3, 24, 1), strides=[1, 1, 1, 1], padding="SAME",
        dilations=[1, 2, 2, 1]) * _w(24) + _w(24)),
    # Stride-1 rows of at most 16 outputs: one sliding-row kernel call per output row and
    # channel vector, the border taps skipped inside it. 16 wide with 24 channels (a half-
    # vector kernel for the last 8) and no epilogue; VALID (the window starts in bounds);
    # 5x5 taps (two border taps each side).
    "depthwise_row16_accumulates": ((1, 5, 16, 24), lambda x: tf.raw_ops.DepthwiseConv2dNative(
        input=x, filter=_w(3, 3, 24, 1), strides=[1, 1, 1, 1], padding="SAME")),
    "depthwise_row_valid_in_registers": ((1, 6, 10, 32), lambda x: tf.nn.relu6(
        tf.raw_ops.DepthwiseConv2dNative(input=x, filter=_w(3, 3, 32, 1), strides=[1, 1, 1, 1],
                                         padding="VALID") + _w(32))),
    "depthwise_row_5x5_in_registers": ((1, 7, 12, 16), lambda x: tf.raw_ops.DepthwiseConv2dNative(
        input=x, filter=_w(5, 5, 16, 1), strides=[1, 1, 1, 1], padding="SAME") * _w(16)),
    # 17 outputs a row: the chunks of Tuning.dw_max_rb rows, as for the wide maps.
    "depthwise_row17_chunks": ((1, 4, 17, 16), lambda x: tf.raw_ops.DepthwiseConv2dNative(
        input=x, filter=_w(3, 3, 16, 1), strides=[1, 1, 1, 1], padding="SAME")),
    "depthwise_pool_mean": ((1, 14, 14, 32), lambda x: tf.reduce_mean(tf.nn.max_pool2d(
        tf.raw_ops.DepthwiseConv2dNative(input=x, filter=_w(3, 3, 32, 1),
                                         strides=[1, 2, 2, 1], padding="SAME"), 3, 1, "SAME"),
        [1, 2])),
}


def _bitwise_case(case, run: bool = True, threads: int = 2, team: bool = False,
                  target=NATIVE):
    """(report entry, subgraph, new C) of CASES[case], its optimized C checked bit-identical
    to the textbook C on random input (with `run`; else only optimized), run as `_run_both`
    runs it."""
    shape, body = CASES[case]

    def build():
        x = tf.compat.v1.placeholder(tf.float32, shape, name="x")
        tf.identity(body(x), name="out")

    g, sg = _subgraph(build)
    if not run:
        constants = frozenset(s.cname for s in sg.inputs if g.is_const(s.tensor))
        new, info = optimize_source(sg.source, sg.entry, constants=constants, winograd=False,
                                    target=target)
        assert info["optimizer"] == "poly", info
        return info, sg, new
    x = rng.randn(*shape).astype(np.float32)
    ref, got, info, new = _run_both(g, sg, {"x:0": x}, threads=threads, team=team,
                                    target=target)
    for k in ref:
        np.testing.assert_array_equal(got[k], ref[k])
    return info, sg, new
