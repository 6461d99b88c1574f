"""Freezing helpers shared by models/build.py and models/bert.py: inline the function calls
that survive `convert_variables_to_constants_v2`, keep only the outputs' ancestors, and write
the GraphDef deterministically and atomically."""
from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Only for annotations: importing TF is slow and noisy.
    import tensorflow as tf

OUTPUT_NAME = "output"  # the image models' one output


_CALL_OPS = ("PartitionedCall", "StatefulPartitionedCall")


def _inline_calls(graph_def: "tf.compat.v1.GraphDef") -> "tf.compat.v1.GraphDef":
    """Inline function calls that survive freezing, so every op is a node of the graph.

    keras 3 runs grouped convolutions (ConvNeXt's depthwise ``Conv2D(groups=C)``) in a
    nested ``tf.function(jit_compile=True)``; frozen, each is a
    ``StatefulPartitionedCall`` (marked ``_XlaMustCompile``) whose body holds the
    ``Conv2D``, invisible to a graph optimizer.  Each call node is replaced by its body,
    named ``CALL/NODE``, and an ``Identity`` (``IdentityN`` for several outputs) named
    like the call, so its consumers are unchanged; control inputs inside the bodies
    (ordering variable reads, now constants) are dropped.  Stock TensorFlow runs the
    grouped ``Conv2D`` on CPU itself.  A graph without calls is returned as is.
    """
    import tensorflow as tf
    from tensorflow.python.framework import op_def_registry

    if not any(n.op in _CALL_OPS for n in graph_def.node):
        return graph_def
    funcs = {f.signature.name: f for f in graph_def.library.function}
    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(graph_def.versions)

    def flat_index(node, out_arg: str, idx: int) -> int:
        k = 0
        for arg in op_def_registry.get(node.op).output_arg:
            if arg.name == out_arg:
                return k + idx
            if arg.number_attr:
                k += node.attr[arg.number_attr].i
            elif arg.type_list_attr:
                k += len(node.attr[arg.type_list_attr].list.type)
            else:
                k += 1
        raise RuntimeError(f"{node.op} {node.name!r} has no output {out_arg!r}")

    def add(node) -> None:
        if node.op not in _CALL_OPS:
            out.node.append(node)
            return
        fdef = funcs[node.attr["f"].func.name]
        data_inputs = [i for i in node.input if not i.startswith("^")]
        args = dict(zip((a.name for a in fdef.signature.input_arg), data_inputs))
        body = {b.name: b for b in fdef.node_def}

        def rename(tensor: str) -> str:
            name, _, rest = tensor.partition(":")
            if name in args and rest in ("", "0"):
                return args[name]
            out_arg, _, idx = rest.partition(":")
            i = flat_index(body[name], out_arg, int(idx or 0))
            return f"{node.name}/{name}" + (f":{i}" if i else "")

        for b in fdef.node_def:
            n = tf.compat.v1.NodeDef()
            n.CopyFrom(b)
            n.name = f"{node.name}/{b.name}"
            n.ClearField("device")
            del n.input[:]
            n.input.extend(rename(i) for i in b.input if not i.startswith("^"))
            add(n)
        rets = [rename(fdef.ret[a.name]) for a in fdef.signature.output_arg]
        ident = out.node.add()
        ident.name = node.name
        types = node.attr["Tout"].list.type
        if len(rets) == 1:
            ident.op = "Identity"
            ident.attr["T"].type = types[0]
        else:
            ident.op = "IdentityN"
            ident.attr["T"].list.type.extend(types)
        ident.input.extend(rets)

    for n in graph_def.node:
        add(n)
    if any(v.HasField("func") or v.list.func for n in out.node for v in n.attr.values()):
        out.library.CopyFrom(graph_def.library)  # other functional ops still need it
    return _depthwise_from_grouped(out)


def _depthwise_from_grouped(graph_def: "tf.compat.v1.GraphDef") -> "tf.compat.v1.GraphDef":
    """Rewrite each grouped ``Conv2D`` with one input channel per group (a depthwise
    convolution, as keras 3 writes ConvNeXt's) as ``DepthwiseConv2dNative``.

    Stock TensorFlow cannot run a grouped ``Conv2D`` on CPU once Grappler fuses it with
    its ``BiasAdd`` ("Fused conv implementation does not support grouped convolutions";
    keras avoids that with XLA).  The two ops agree exactly: the ``(kh, kw, 1, C*M)``
    filter reshaped to ``(kh, kw, C, M)`` maps output channel ``c*M + m`` to input
    channel ``c`` in both.  The reshaped filter is a new ``Const`` named ``CONV/filter``.
    """
    import numpy as np
    import tensorflow as tf

    convs = [n for n in graph_def.node if n.op == "Conv2D"]
    if not convs:
        return graph_def
    g = tf.Graph()
    with g.as_default():
        tf.import_graph_def(graph_def, name="")
    by_name = {n.name: n for n in graph_def.node}

    def const_of(tensor: str):
        node = by_name[tensor.split(":")[0]]
        while node.op == "Identity":
            node = by_name[node.input[0].split(":")[0]]
        return node if node.op == "Const" else None

    new_consts = {}
    for conv in convs:
        in_depth = g.get_tensor_by_name(_tensor_name(conv.input[0])).shape[-1]
        fnode = const_of(conv.input[1])
        if fnode is None or in_depth is None or conv.attr["data_format"].s != b"NHWC":
            continue
        kernel = tf.make_ndarray(fnode.attr["value"].tensor)
        if kernel.shape[2] != 1 or in_depth == 1 or kernel.shape[3] % in_depth:
            continue  # an ordinary convolution, or grouped with several channels a group
        filt = tf.compat.v1.NodeDef(name=f"{conv.name}/filter", op="Const")
        filt.attr["dtype"].type = fnode.attr["dtype"].type
        filt.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.ascontiguousarray(
            kernel.reshape(kernel.shape[0], kernel.shape[1], in_depth, -1))))
        new_consts[conv.name] = filt
        conv.op = "DepthwiseConv2dNative"
        conv.input[1] = filt.name
        del conv.attr["use_cudnn_on_gpu"]
    if not new_consts:
        return graph_def
    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    for n in graph_def.node:
        if n.name in new_consts:
            out.node.append(new_consts[n.name])
        out.node.append(n)
    return out


def _tensor_name(inp: str) -> str:
    return inp if ":" in inp else inp + ":0"


def _prune_to_outputs(graph_def: "tf.compat.v1.GraphDef",
                      outputs=(OUTPUT_NAME,)) -> "tf.compat.v1.GraphDef":
    """Keep only ancestors of the ``outputs`` nodes, preserving node order.

    The concrete function's graph wraps its return value in an extra
    ``Identity`` (named ``Identity``, inputs ``["output", "^NoOp"]``), where the
    ``NoOp`` only carries control dependencies on the (now constant) variable
    reads.  Dropping everything that does not feed ``outputs`` removes both, so
    the outputs are the graph's only sinks (one ``output``: its final node).
    """
    import tensorflow as tf

    by_name = {n.name: n for n in graph_def.node}
    keep: set[str] = set()
    stack = list(outputs)
    while stack:
        name = stack.pop()
        if name in keep:
            continue
        keep.add(name)
        for inp in by_name[name].input:
            # "^ctrl", "node:1" -> "node"
            stack.append(inp.lstrip("^").split(":")[0])
    out = tf.compat.v1.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.library.CopyFrom(graph_def.library)
    out.node.extend(n for n in graph_def.node if n.name in keep)
    return out


# A constant this large is a weight: freeze_function imports the graph without its bytes
# (shape inference reads only small constants' values: shapes, axes, permutations).
_WEIGHT_BYTES = 4096


def freeze_function(concrete, outputs) -> "tf.compat.v1.GraphDef":
    """The frozen GraphDef of a ConcreteFunction: every variable a constant, calls inlined
    (``_inline_calls``), only the ``outputs`` nodes' ancestors kept (``_prune_to_outputs``).

    Byte for byte the graph of ``convert_variables_to_constants_v2(concrete).graph
    .as_graph_def()`` (tests/test_models_build.py checks it), at a fraction of the memory.
    Why: that function's last step wraps the frozen GraphDef in a new ConcreteFunction,
    whose import fixes the node order and drops a few internal attributes, and in doing so
    holds several more copies of every weight (a 790 MB ConvNeXtLarge peaked at 15 GB,
    ConvNeXtXLarge went past 24 GB). Here the same import runs on the graph with its
    weights' bytes left out, and the bytes are copied into the imported graph after it."""
    import tensorflow as tf
    from tensorflow.python.eager import wrap_function
    from tensorflow.python.framework import convert_to_constants as c2c

    data = c2c._FunctionConverterDataInEager(  # the public function's own first two steps
        func=concrete, lower_control_flow=True, aggressive_inlining=False)
    weighted, converted = c2c._replace_variables_by_constants(converter_data=data)
    del data  # the variables' numpy copies

    skeleton, weights = tf.compat.v1.GraphDef(), {}
    skeleton.versions.CopyFrom(weighted.versions)
    skeleton.library.CopyFrom(weighted.library)
    for node in weighted.node:
        tensor = node.attr["value"].tensor if node.op == "Const" else None
        if tensor is not None and len(tensor.tensor_content) > _WEIGHT_BYTES:
            weights[node.name] = node
            stub = skeleton.node.add()
            stub.name, stub.op = node.name, node.op
            stub.input.extend(node.input)
            for key, value in node.attr.items():
                if key != "value":
                    stub.attr[key].CopyFrom(value)
            stub.attr["value"].tensor.dtype = tensor.dtype
            stub.attr["value"].tensor.tensor_shape.CopyFrom(tensor.tensor_shape)
        else:
            skeleton.node.add().CopyFrom(node)

    # _construct_concrete_function's import, on the skeleton.
    captures = concrete.graph.internal_captures
    converted_inputs = {id(captures[i]) for i in converted}
    inputs = [t.name for t in concrete.inputs if id(t) not in converted_inputs]
    imported = wrap_function.function_from_graph_def(
        skeleton, inputs, [t.name for t in concrete.outputs])
    graph_def = imported.graph.as_graph_def()
    del imported, skeleton
    for node in graph_def.node:
        source = weights.get(node.name)
        if source is not None:
            node.attr["value"].tensor.tensor_content = source.attr["value"].tensor.tensor_content
    del weighted, weights
    # After the weights: _inline_calls reads a grouped convolution's filter.
    return _prune_to_outputs(_inline_calls(graph_def), outputs)


def write_graph_def(graph_def: "tf.compat.v1.GraphDef", path: str) -> None:
    """Atomically write ``graph_def`` as deterministic binary protobuf.

    ``deterministic=True`` fixes map-field (attr) ordering; writing a temp file
    in the destination directory and ``os.replace``-ing it means readers never
    see a partial file.
    """
    data = graph_def.SerializeToString(deterministic=True)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".pb")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        # mkstemp creates the file 0600; give it ordinary umask-based perms.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
