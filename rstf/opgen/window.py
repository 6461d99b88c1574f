"""Sliding-window geometry shared by convolutions and pooling (NHWC)."""
from __future__ import annotations

import dataclasses

from ..frontend.graph import Node
from .base import Unsupported


def affine(terms: list[tuple[str, int]], const: int = 0) -> str:
    """[('oh', 2), ('kh', 1)], -1 -> 'oh * 2 + kh - 1': readable affine C expressions."""
    parts = []
    for var, coef in terms:
        if coef == 0:
            continue
        parts.append(var if coef == 1 else f"{var} * {coef}")
    text = " + ".join(parts) if parts else "0"
    if const > 0:
        text += f" + {const}"
    elif const < 0:
        text += f" - {-const}"
    return text


def pad_before(node: Node, dim: int, in_size: int, out_size: int, k: int, stride: int,
               dilation: int) -> int:
    """Padding before spatial dimension `dim` (1 = H, 2 = W), as TensorFlow computes it."""
    padding = node.attr["padding"].s.decode() if "padding" in node.attr else "VALID"
    if padding == "VALID":
        return 0
    if padding == "SAME":
        total = max((out_size - 1) * stride + (k - 1) * dilation + 1 - in_size, 0)
        return total // 2
    if padding == "EXPLICIT":
        pads = list(node.attr["explicit_paddings"].list.i)
        return pads[2 * dim]
    raise Unsupported(f"padding {padding}")


def window_access(out_var: str, k_var: str, stride: int, dilation: int, pad: int,
                  in_size: int, out_size: int, k: int):
    """The input coordinate read by (out_var, k_var) and the guards it needs.

    Only guards that can fail for these exact extents are returned, so VALID windows get
    none and SAME windows usually get one or two.
    """
    expr = affine([(out_var, stride), (k_var, dilation)], -pad)
    guards = []
    if pad > 0:
        guards.append(f"{expr} >= 0")
    if (out_size - 1) * stride + (k - 1) * dilation - pad >= in_size:
        guards.append(f"{expr} < {in_size}")
    return expr, guards


def nhwc_attrs(node: Node, key: str) -> tuple[int, int]:
    """(h, w) of a 4-element NHWC attr (strides, dilations, ksize); rejects N/C != 1."""
    vals = list(node.attr[key].list.i) if key in node.attr else [1, 1, 1, 1]
    if len(vals) != 4 or vals[0] != 1 or vals[3] != 1:
        raise Unsupported(f"{key} {vals} (only spatial values are supported)")
    return vals[1], vals[2]


def check_nhwc(node: Node) -> None:
    fmt = node.attr["data_format"].s.decode() if "data_format" in node.attr else "NHWC"
    if fmt != "NHWC":
        raise Unsupported(f"data_format {fmt}")


def check_window_attrs(node: Node) -> None:
    """Refuse what the window generators cannot do: NCHW, batch/channel strides or
    dilations, explicit padding of the batch or channel dimensions."""
    check_nhwc(node)
    nhwc_attrs(node, "strides")
    nhwc_attrs(node, "dilations")
    if "padding" in node.attr and node.attr["padding"].s == b"EXPLICIT":
        pads = list(node.attr["explicit_paddings"].list.i)
        if len(pads) != 8 or any(pads[i] for i in (0, 1, 6, 7)):
            raise Unsupported(f"explicit_paddings {pads}")


@dataclasses.dataclass
class Window:
    """A 2-D sliding window over NHWC: strides, dilations, padding before, the input row and
    column expressions read at (oh, kh) and (ow, kw), and the guards they need."""

    sh: int
    sw: int
    dh: int
    dw: int
    ph: int
    pw: int
    ih: str
    iw: str
    guards_h: list
    guards_w: list

    @property
    def guards(self) -> list:
        return self.guards_h + self.guards_w

    def describe(self) -> str:
        return (f"stride {self.sh}x{self.sw}, dilation {self.dh}x{self.dw}, "
                f"pad {self.ph},{self.pw}")


def window(node: Node, in_shape, out_shape, kh: int, kw: int) -> Window:
    _, H, W, _ = in_shape
    _, OH, OW, _ = out_shape
    sh, sw = nhwc_attrs(node, "strides")
    dh, dw = nhwc_attrs(node, "dilations")
    ph = pad_before(node, 1, H, OH, kh, sh, dh)
    pw = pad_before(node, 2, W, OW, kw, sw, dw)
    ih, gh = window_access("oh", "kh", sh, dh, ph, H, OH, kh)
    iw, gw = window_access("ow", "kw", sw, dw, pw, W, OW, kw)
    return Window(sh, sw, dh, dw, ph, pw, ih, iw, gh, gw)
