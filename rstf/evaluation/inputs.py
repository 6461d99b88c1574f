"""The inputs `rstf compare` and `rstf bench` feed a model: the user's (`--inputs FILE.npz`),
or seeded random values shaped like the ones a deployed model sees.

Random values (`--seed`), per input:

- float, 4-D (image-shaped, NHWC or NCHW): uniform in [0, 1), a normalised image;
- float, any other rank: standard normal;
- every float input, with `--input-range LO,HI`: uniform in [LO, HI);
- integer whose values reach the indices of a gather (GatherV2, Gather, ResourceGather),
  directly or through ops that only move or convert values (Identity, Cast, Reshape,
  ExpandDims, Squeeze, Transpose, Slice, StridedSlice, Tile, ConcatV2, Pack, and the value
  operands of SelectV2/Select, which keras' embedding lookup uses to wrap negative ids): uniform
  integers in [0, rows), rows = the gathered table's static size along the gather axis (the
  smallest, when the input reaches several tables), so every id is in the table;
- any other integer: 0 or 1 (valid for masks, segment ids, booleans stored as integers);
- bool: False or True.

Why not standard normal everywhere: an image model fed standard-normal "pixels" computes
logits far larger than real images give, and an error measured relative to the largest
logit then looks much smaller than it is on real inputs. Token ids drawn past the
embedding table's rows make TensorFlow itself fail.

`--inputs FILE.npz` keys name inputs by Placeholder name, with or without ":0", or by a
SavedModel signature's input key. A key that names no input is an error listing the graph's
inputs; an input the file lacks is drawn at random as above, with one warning line each.
"""
from __future__ import annotations

import math
import sys
import zipfile

import numpy as np

from ..errors import RstfError

# Ops whose output holds some of the values of these inputs (moved, or converted as Cast
# converts): an id that flows through them is still an id. ConcatV2 and Pack: see below.
_VALUE_INPUTS = {op: 0 for op in ("Identity", "StopGradient", "Snapshot", "Cast", "Reshape",
                                  "ExpandDims", "Squeeze", "Transpose", "Slice",
                                  "StridedSlice", "Tile")}
# Gathers: (input slot of the indices, input slot of the axis or None for axis 0).
_GATHERS = {"GatherV2": (1, 2), "Gather": (1, None), "ResourceGather": (1, None)}


def parse_input_range(value) -> tuple[float, float] | None:
    """`--input-range LO,HI` -> (LO, HI): two finite numbers, LO < HI, given as the text
    "LO,HI" or as a pair (the Python API). None passes through. Raises RstfError."""
    if value is None:
        return None
    try:
        text = value if isinstance(value, str) else ",".join(map(str, value))
    except TypeError:  # not a pair at all
        text = str(value)
    parts = text.split(",")
    try:
        lo, hi = (float(p) for p in parts) if len(parts) == 2 else (None, None)
    except (TypeError, ValueError):
        lo = hi = None
    if lo is None or not (math.isfinite(lo) and math.isfinite(hi)):
        raise RstfError(f"--input-range {text!r}: expected LO,HI, two finite numbers "
                        "(e.g. 0,1 or -1,1)")
    if not lo < hi:
        raise RstfError(f"--input-range {text!r}: LO must be less than HI")
    if not math.isfinite(hi - lo):
        raise RstfError(f"--input-range {text!r}: HI - LO overflows a float")
    return lo, hi


def gather_rows(graph, name: str) -> int | None:
    """Rows of the smallest table the Placeholder `name`'s values index (module docstring),
    or None when they reach no gather or no table of static size."""
    bound, seen, todo = None, set(), [f"{name}:0"]
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        for c in dict.fromkeys(graph.consumers.get(t.rpartition(":")[0], [])):
            node = graph.nodes[c]
            for slot, inp in enumerate(node.inputs):
                if inp != t:
                    continue
                if node.op in _GATHERS and slot == _GATHERS[node.op][0]:
                    rows = _table_rows(graph, node)
                    if rows is not None:
                        bound = rows if bound is None else min(bound, rows)
                elif (_VALUE_INPUTS.get(node.op) == slot or node.op == "Pack"
                      or (node.op in ("SelectV2", "Select") and slot > 0)
                      or (node.op == "ConcatV2" and slot < len(node.inputs) - 1)):
                    todo.append(f"{c}:0")
    return bound


def _table_rows(graph, gather) -> int | None:
    """The size of a gather's params along its axis, when static."""
    shape = graph.tensor_shape(gather.inputs[0])
    axis_slot = _GATHERS[gather.op][1]
    axis = 0
    if axis_slot is not None:
        if not graph.is_const(gather.inputs[axis_slot]):
            return None
        axis = int(graph.const_value(gather.inputs[axis_slot]))
    if shape is None or not -len(shape) <= axis < len(shape):
        return None
    return shape[axis]


def _describe(p) -> str:
    shape = p.shape(0)
    dims = "?" if shape is None else "x".join("?" if d is None else str(d) for d in shape)
    return f"{p.name} ({p.out_dtypes[0]}, {dims or 'scalar'})"


def read_user_inputs(graph, path: str) -> dict[str, np.ndarray]:
    """{Placeholder name: array} from an .npz (module docstring for its keys). Raises
    RstfError, naming the graph's inputs, for a key that names none of them."""
    try:
        npz = np.load(path)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise RstfError(f"--inputs {path}: not an .npz of named arrays (write one with "
                            "numpy.savez(FILE, NAME=ARRAY, ...))")
        with npz:
            arrays = dict(npz)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise RstfError(f"--inputs {path}: cannot read ({e})") from None
    aliases = {}
    for p in graph.placeholders:
        aliases[p.name] = aliases[f"{p.name}:0"] = p.name
    for key, tensor in graph.signature.get("inputs", {}).items():
        node, _, index = tensor.rpartition(":")
        if index == "0" and node in aliases:
            aliases.setdefault(key, node)
    unknown = [k for k in arrays if k not in aliases]
    if unknown:
        inputs = ", ".join(_describe(p) for p in graph.placeholders) or "none"
        raise RstfError(f"--inputs {path}: {', '.join(map(repr, unknown))} "
                        f"{'names' if len(unknown) == 1 else 'name'} no input of the graph; "
                        f"its inputs: {inputs}")
    out = {}
    for key, value in arrays.items():
        name = aliases[key]
        if name in out:
            raise RstfError(f"--inputs {path}: two arrays for input {name!r}")
        out[name] = value
    return out


def draw_inputs(graph, seed: int, user_inputs: str | None = None, batch: int = 1,
                input_range: tuple[float, float] | None = None, warn=None
                ) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Feeds for every Placeholder ({"name:0": array}) and how each was made ({name:
    "uniform [0, 1)", "from FILE", ...}): the user's arrays, checked against the graph, and
    seeded random values (module docstring) for the rest, each named by `warn` (default:
    one `rstf: warning:` line on stderr) when a file was given. An unknown dimension 0 (a
    dynamic batch) of a random input gets `batch` samples."""
    if warn is None:
        warn = lambda msg: print(f"rstf: warning: {msg}", file=sys.stderr)  # noqa: E731
    rng = np.random.RandomState(seed)
    provided = read_user_inputs(graph, user_inputs) if user_inputs else {}
    feeds, sources = {}, {}
    for p in graph.placeholders:
        shape, dtype = p.shape(0), p.out_dtypes[0]
        if p.name in provided:
            val = np.asarray(provided[p.name])
            if shape is not None and (len(val.shape) != len(shape) or any(
                    d is not None and d != v for d, v in zip(shape, val.shape))):
                raise RstfError(f"--inputs: {p.name} has shape {list(val.shape)}, the graph "
                                f"expects {list(shape)}")
            feeds[f"{p.name}:0"] = val.astype(dtype)
            sources[p.name] = f"from {user_inputs}"
            continue
        if shape and shape[0] is None:
            shape = (batch, *shape[1:])
        if shape is None or any(d is None for d in shape):
            raise RstfError(f"input {p.name!r} has an unknown shape; pass --inputs FILE.npz")
        feeds[f"{p.name}:0"], sources[p.name] = _random(graph, p, shape, dtype, rng,
                                                        input_range)
        if user_inputs:
            warn(f"--inputs {user_inputs} has no array for input {p.name!r}; using random "
                 f"values ({sources[p.name]})")
    return feeds, sources


def _random(graph, p, shape, dtype, rng, input_range) -> tuple[np.ndarray, str]:
    """Placeholder `p`'s random value (module docstring) and its description."""
    if np.issubdtype(dtype, np.floating):
        if input_range is not None:
            lo, hi = input_range
        elif len(shape) == 4:
            lo, hi = 0.0, 1.0
        else:
            return rng.standard_normal(shape).astype(dtype), "standard normal"
        lo_t, hi_t = _inside(lo, hi, dtype)
        if lo_t > hi_t:
            raise RstfError(f"--input-range {lo:g},{hi:g}: no {dtype} value of input "
                            f"{p.name!r} lies in it")
        val = np.clip(rng.uniform(lo, hi, shape).astype(dtype), lo_t, hi_t)
        return val, f"uniform [{lo:g}, {hi:g})"
    if np.issubdtype(dtype, np.integer):
        rows = gather_rows(graph, p.name)
        if rows == 0:
            raise RstfError(f"input {p.name!r} indexes an empty table; pass --inputs "
                            "FILE.npz")
        if rows is not None:
            return (rng.randint(0, rows, size=shape).astype(dtype),
                    f"integers in [0, {rows}) (the gathered table's rows)")
        return rng.randint(0, 2, size=shape).astype(dtype), "0 or 1"
    if dtype == np.bool_:
        return rng.randint(0, 2, size=shape).astype(bool), "False or True"
    raise RstfError(f"input {p.name!r}: cannot generate values of dtype {dtype}")


def _inside(lo: float, hi: float, dtype) -> tuple:
    """The smallest value >= LO and the largest < HI of `dtype`: rounding a float64 draw
    to float32 can carry it onto HI, or below a LO that float32 cannot represent."""
    t = np.dtype(dtype).type
    lo_t, hi_t = t(lo), t(hi)
    if lo_t < lo:
        lo_t = np.nextafter(lo_t, t(np.inf))
    if hi_t >= hi:
        hi_t = np.nextafter(hi_t, t(-np.inf))
    return lo_t, hi_t


def make_inputs(graph, seed: int, user_inputs: str | None = None, batch: int = 1,
                input_range: tuple[float, float] | None = None, warn=None
                ) -> dict[str, np.ndarray]:
    """The feeds of `draw_inputs` alone."""
    return draw_inputs(graph, seed, user_inputs, batch, input_range, warn)[0]
