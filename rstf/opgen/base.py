"""The op-handler registry and the pieces every handler shares.

A handler turns one TensorFlow node into one C function specialised to that node's exact
shapes and dtype (rstream-tf.txt §II.C, Fig. 3). Adding an op takes one handler class
registered with `@op_handler("OpType", ...)`, one Jinja template under
`rstf/templates/ops/`, and one test.

The C a handler emits stays inside the raisable subset of `docs/design.md`: array
parameters with static extents, `for` loops with affine bounds, affine subscripts and affine
`if` guards, one assignment per statement, reductions as an initialisation statement followed
by an update statement, and data-dependent choices inside expressions.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os

import jinja2
import numpy as np

from ..frontend.graph import Graph, Node

# dtype -> (C type, suffix of float literals, suffix of <math.h> functions). A TF bool is
# one byte holding 0 or 1 (C++ `bool`); the C side reads and writes it as `unsigned char`,
# which has that layout and which the polyhedral pass's parser knows without a typedef.
C_TYPES = {
    np.dtype(np.float32): ("float", "f", "f"),
    np.dtype(np.int32): ("int", "", ""),
    np.dtype(np.int64): ("long", "", ""),
    np.dtype(np.bool_): ("unsigned char", "", ""),
}
FLOAT = frozenset({np.dtype(np.float32)})
INTEGER = frozenset({np.dtype(np.int32), np.dtype(np.int64)})
ALL_DTYPES = frozenset(C_TYPES)

# Eigen's float packet: 8 lanes in the tensorflow-cpu wheel (AVX). Where a TensorFlow kernel
# gives one result on its vector path and another on its scalar one (an estimate-based rsqrt
# or reciprocal, a reduction's order), whole packets of 8 take the first.
EIGEN_FLOAT_PACKET = 8


def eigen_vector_prefix(n: int) -> int:
    """How many of n float elements (from the first) TensorFlow's kernels take on their
    vector path: its whole packets; the rest take its scalar path."""
    return n // EIGEN_FLOAT_PACKET * EIGEN_FLOAT_PACKET


TEMPLATE_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "templates")


@functools.lru_cache(maxsize=1)
def jinja_env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        undefined=jinja2.StrictUndefined,  # a typo in a template fails loudly, not silently
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["sub"] = subscript
    return env


def render(template: str, **params) -> str:
    return jinja_env().get_template(template).render(**params)


def subscript(array: str, indices) -> str:
    """`x`, ['i0', '0'] -> 'x[i0][0]'; a rank-0 tensor is stored as a 1-element array."""
    indices = list(indices)
    if not indices:
        return f"{array}[0]"
    return array + "".join(f"[{i}]" for i in indices)


def index_names(prefix: str, rank: int) -> list[str]:
    return [f"{prefix}{d}" for d in range(rank)]


def broadcast_indices(in_shape, out_shape, names) -> list[str]:
    """Subscripts reading an input broadcast (numpy rules) to the output's index `names`."""
    offset = len(out_shape) - len(in_shape)
    subs = []
    for d, extent in enumerate(in_shape):
        if extent == out_shape[d + offset]:
            subs.append(names[d + offset])
        elif extent == 1:
            subs.append("0")  # broadcast dimension: every output index reads element 0
        else:
            raise ValueError(f"shape {in_shape} does not broadcast to {out_shape}")
    return subs


@dataclasses.dataclass
class ArrayParam:
    """One array parameter of an op function: its C name and the shape it is declared with.

    The declared shape is a *view*: Reshape declares its input and output flat, Softmax views
    its operand as [rows][classes]. Views only ever regroup a contiguous row-major buffer.
    """

    name: str
    shape: tuple[int, ...]
    ctype: str = "float"


@dataclasses.dataclass
class OpFunction:
    """What a handler emits for one node.

    `inputs[i]` is the view of the node's i-th *data* input (the ones not listed in the
    handler's `ignored_inputs`), `outputs[i]` the view of its i-th output, `scratch` extra
    arrays the function needs for the duration of the call (the caller allocates them).
    """

    body: str
    inputs: list[ArrayParam]
    outputs: list[ArrayParam]
    scratch: list[ArrayParam] = dataclasses.field(default_factory=list)
    summary: str = ""  # one line saying what was specialised (shapes, attrs) for the comment


class Unsupported(Exception):
    """A handler's `check` refuses a node; the message says why (kept in report.json)."""


class OpHandler:
    """Base class: one subclass per TF op type (or a family sharing one template).

    Subclasses set `ignored_inputs` (input positions consumed at generation time, such as
    axes or shapes, which the generated function does not receive) and implement `emit`.
    `check` refuses nodes the generator cannot handle exactly; such nodes stay TF nodes.
    """

    op_types: tuple[str, ...] = ()
    # The dtypes of data inputs and outputs the handler's C computes exactly; the default,
    # float32 only, because most templates are float arithmetic (0.0f, fmaf, expf).
    dtypes: frozenset = FLOAT
    ignored_inputs: tuple[int, ...] = ()
    const_inputs: tuple[int, ...] = ()  # ignored inputs whose *value* the generator needs

    def check(self, node: Node, graph: Graph) -> None:
        """Raise Unsupported(reason) unless this node can be generated exactly."""
        for t in self.data_inputs(node):
            if not _static(graph.tensor_shape(t)):
                raise Unsupported(f"input {t} has a non-static shape")
            if graph.tensor_dtype(t) not in self.dtypes:
                raise Unsupported(f"input {t} has dtype {graph.tensor_dtype(t)}")
        produced = self.num_outputs(node)
        for i in range(produced):
            if not _static(node.out_shapes[i]):
                raise Unsupported(f"output {i} has a non-static shape")
            if node.out_dtypes[i] not in self.dtypes:
                raise Unsupported(f"output {i} has dtype {node.out_dtypes[i]}")
        for i in self.const_inputs:
            if i >= len(node.inputs) or not graph.is_const(node.inputs[i]):
                raise Unsupported(f"input {i} must be a constant")
        if produced < len(node.out_shapes):
            if node.name in graph.outputs:
                raise Unsupported("a model output whose secondary outputs are not generated")
            for c in graph.consumers[node.name]:
                for t in graph.nodes[c].inputs:
                    src, idx = t.rsplit(":", 1)
                    if src == node.name and int(idx) >= produced:
                        raise Unsupported(f"output {idx} is used, only {produced} generated")

    # A node whose C is outside the raisable subset (data-dependent subscripts) is selected
    # as a custom op of its own: in a subgraph with others, the polyhedral pass would have to
    # leave all of them as textbook C (pipeline.select).
    isolated = False

    # Dynamic batch (rstf/cgen/batch.py): does the op compute each sample of dimension 0 from that
    # sample alone? Only handlers that know it say so; the rest stay in TensorFlow there.
    keeps_samples_apart = False

    def check_batch(self, node: Node, graph: Graph) -> None:
        """Raise Unsupported unless output sample n depends only on input sample n (plus
        constants). `graph` is the batch-1 graph; shape rules are checked by the caller."""
        if not self.keeps_samples_apart:
            raise Unsupported(f"{node.op} is not known to keep the samples of a dynamic "
                              "batch apart")

    def num_outputs(self, node: Node) -> int:
        """How many of the node's outputs the generated function writes (always a prefix:
        FusedBatchNorm in inference writes `y` only, and is refused if the rest is read)."""
        return len(node.out_shapes)

    def data_inputs(self, node: Node) -> list[str]:
        return [t for i, t in enumerate(node.inputs) if i not in self.ignored_inputs]

    def flops(self, node: Node, graph: Graph) -> int:
        """Estimated floating-point operations; the default is one per output element."""
        return sum(_numel(s) for s in node.out_shapes if s is not None)

    def emit(self, node: Node, graph: Graph) -> OpFunction:
        raise NotImplementedError

    # helpers shared by handlers -------------------------------------------------------
    @staticmethod
    def ctype(node: Node, index: int = 0) -> str:
        return C_TYPES[node.out_dtypes[index]][0]

    @staticmethod
    def input_ctype(graph: Graph, tensor: str) -> str:
        return C_TYPES[graph.tensor_dtype(tensor)][0]

    @staticmethod
    def literal_suffix(node: Node) -> str:
        return C_TYPES[node.out_dtypes[0]][1]

    @staticmethod
    def math_suffix(node: Node) -> str:
        return C_TYPES[node.out_dtypes[0]][2]

    @staticmethod
    def attr_str(node: Node, key: str, default: str = "") -> str:
        if key not in node.attr:
            return default
        return node.attr[key].s.decode("utf-8", "replace")

    @staticmethod
    def attr_bool(node: Node, key: str, default: bool = False) -> bool:
        return node.attr[key].b if key in node.attr else default


def _static(shape) -> bool:
    return shape is not None and all(d is not None for d in shape)


def _numel(shape) -> int:
    return int(math.prod(d for d in shape if d is not None)) if shape is not None else 0


numel = _numel

# --------------------------------------------------------------------------- registry

HANDLERS: dict[str, OpHandler] = {}


def op_handler(*op_types: str):
    """Class decorator registering one handler instance for the given TF op types."""

    def register(cls):
        inst = cls()
        inst.op_types = op_types
        for t in op_types:
            if t in HANDLERS:
                raise RuntimeError(f"two handlers registered for {t}")
            HANDLERS[t] = inst
        return cls

    return register


def get_handler(op_type: str) -> OpHandler | None:
    return HANDLERS.get(op_type)


# The most elements a tensor of generated code may have. The generated C indexes with `int`
# loop variables and subscripts, and the polyhedral pass may lay a tensor out again up to 4x
# larger (a Winograd F(4x4,3x3) weight: 36 transformed taps for 9), so every index stays
# below 2^31 when each tensor stays below this. Larger tensors stay in TensorFlow.
MAX_ELEMENTS = (2**31 - 1) // 4


def check_node(node: Node, graph: Graph) -> str | None:
    """None when rstf can generate this node, else the reason it cannot."""
    h = HANDLERS.get(node.op)
    if h is None:
        return f"no code generator for {node.op}"
    too_big = _too_many_elements(node, graph)
    if too_big:
        return too_big
    try:
        h.check(node, graph)
    except Unsupported as e:
        return str(e)
    return None


def _too_many_elements(node: Node, graph: Graph) -> str | None:
    """The reason a node's input or output tensor is too large for 32-bit indices, or None."""
    tensors = [(t, graph.tensor_shape(t)) for t in node.inputs]
    tensors += [(f"{node.name}:{i}", s) for i, s in enumerate(node.out_shapes)]
    for name, shape in tensors:
        if shape is not None and None not in shape and math.prod(shape) > MAX_ELEMENTS:
            return (f"tensor {name} has {math.prod(shape):,} elements, more than the "
                    f"{MAX_ELEMENTS:,} the generated C's 32-bit indices allow")
    return None
