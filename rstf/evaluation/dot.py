"""Graphviz drawing of a partitioned graph (`rstf inspect --svg`).

Names from the user's graph reach DOT text only through `dot_string`, as quoted strings whose
backslashes, quotes and control characters are escaped: a name can neither end the string
nor trigger graphviz's label escapes (`\\N`, `\\l`...). Tooltips are not labels: graphviz
(2.43) expands `\\N` in them even after an escaped backslash, so there a backslash is shown
as U+29F5 (reverse solidus operator); TensorFlow refuses such names anyway. DOT node ids
are generated (`n0`, `n1`...). The SVG is written to a temporary file next to the target,
then renamed.
"""
from __future__ import annotations

import colorsys
import dataclasses
import os
import shutil
import subprocess
import tempfile

from ..errors import RstfError

# Partition fill colours: ColorBrewer Set3 (light, black text stays readable), then
# golden-ratio hues for graphs with more partitions than that.
PALETTE = ["#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69",
           "#fccde5", "#d9ef8b", "#bc80bd", "#ccebc5", "#ffed6f"]
UNSUPPORTED = "#bdbdbd"
INSTALL_HINT = "graphviz's `dot` is not installed (apt-get install graphviz)"
LABEL_CHARS = 28  # node labels show the end of the name, the full name is the tooltip


@dataclasses.dataclass
class DrawNode:
    name: str  # the user's node name: escaped before it reaches DOT
    op: str
    kind: str  # partition | supported (left to TF: moves data only) | unsupported | input
    partition: int | None = None


def dot_string(text: str, tooltip: bool = False) -> str:
    """`text` as a DOT quoted string whose label rendering shows exactly `text` (a newline
    as a line break, other control characters as \\xNN). For a `tooltip`, backslashes become
    U+29F5 (module docstring)."""
    out = []
    for ch in text:
        if ch == "\\" and tooltip:
            out.append("\u29f5")
        elif ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def partition_color(i: int) -> str:
    if i < len(PALETTE):
        return PALETTE[i]
    r, g, b = colorsys.hsv_to_rgb((i * 0.618033988749895) % 1.0, 0.35, 0.97)
    return "#%02x%02x%02x" % (int(r * 255), int(g * 255), int(b * 255))


def _darker(color: str, factor: float = 0.65) -> str:
    """The cluster border: the fill colour darkened, so light fills still show a frame."""
    rgb = [int(color[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{int(c * factor):02x}" for c in rgb)


def _short(name: str) -> str:
    return name if len(name) <= LABEL_CHARS else "..." + name[-(LABEL_CHARS - 3):]


def to_dot(nodes: list[DrawNode], edges: list[tuple[str, str, bool]], legend: list[str],
           title: str) -> str:
    """DOT text: `nodes` in order, `edges` (source name, target name, is control edge), each
    partition a cluster of its colour, and a legend (one line per entry of `legend`, which
    names partition i at index i)."""
    ids = {n.name: f"n{i}" for i, n in enumerate(nodes)}
    lines = ["digraph rstf {",
             f"  graph [label={dot_string(title)}, labelloc=t, fontname=Helvetica, "
             "rankdir=TB, newrank=true, nodesep=0.15, ranksep=0.3, outputorder=edgesfirst];",
             '  node [shape=box, style="rounded,filled", fontname=Helvetica, fontsize=10, '
             'height=0.3, margin="0.06,0.02"];',
             "  edge [arrowsize=0.5, color=\"#555555\"];"]

    def node_line(n: DrawNode) -> str:
        attrs = {"label": f"{n.op}\n{_short(n.name)}", "tooltip": f"{n.name} ({n.op})"}
        text = ", ".join(f"{k}={dot_string(v, tooltip=k == 'tooltip')}"
                         for k, v in attrs.items())
        if n.kind == "partition":
            style = f'fillcolor="{partition_color(n.partition)}"'
        elif n.kind == "unsupported":
            style = f'fillcolor="{UNSUPPORTED}", fontcolor="#333333"'
        elif n.kind == "input":
            style = 'shape=ellipse, fillcolor="white"'
        else:
            style = 'fillcolor="white", style="rounded,dashed"'
        return f"{ids[n.name]} [{text}, {style}];"

    by_part: dict[int, list[DrawNode]] = {}
    for n in nodes:
        if n.kind == "partition":
            by_part.setdefault(n.partition, []).append(n)
        else:
            lines.append("  " + node_line(n))
    for p, members in sorted(by_part.items()):
        color = _darker(partition_color(p))
        lines.append(f"  subgraph cluster_p{p} {{")
        lines.append(f'    graph [label={dot_string(f"subgraph_{p}")}, style="rounded", '
                     f'color="{color}", penwidth=3, fontsize=12];')
        lines.extend("    " + node_line(n) for n in members)
        lines.append("  }")
    for src, dst, control in edges:
        lines.append(f"  {ids[src]} -> {ids[dst]}" + (" [style=dashed];" if control else ";"))
    lines.extend(_legend(legend))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _legend(entries: list[str]) -> list[str]:
    """A legend cluster: the node kinds, then one swatch per partition."""
    rows = [("l_unsupported", "unsupported: stays in TensorFlow",
             f'fillcolor="{UNSUPPORTED}"'),
            ("l_supported", "supported, left to TF (moves data only)",
             'fillcolor="white", style="rounded,dashed"'),
            ("l_input", "input", 'shape=ellipse, fillcolor="white"')]
    rows += [(f"l_p{i}", text, f'fillcolor="{partition_color(i)}"')
             for i, text in enumerate(entries)]
    lines = ["  subgraph cluster_legend {",
             '    graph [label="legend", style="rounded", color="#999999", fontsize=12];']
    for ident, text, style in rows:
        lines.append(f"    {ident} [label={dot_string(text)}, {style}];")
    for (a, _, _), (b, _, _) in zip(rows, rows[1:]):  # a column: one row per entry
        lines.append(f"    {a} -> {b} [style=invis];")
    lines.append("  }")
    return lines


def check_output(path: str) -> None:
    """Fail early: `dot` missing, or the SVG's folder missing or not writable."""
    if shutil.which("dot") is None:
        raise RstfError(INSTALL_HINT)
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise RstfError(f"--svg {path}: is a folder")
    if not os.path.isdir(parent):
        raise RstfError(f"--svg {path}: no such directory {parent}")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise RstfError(f"--svg {path}: {parent} is not writable")


def render_svg(dot_text: str, path: str, timeout: float = 300) -> None:
    """Run `dot -Tsvg` on `dot_text` into a temporary file next to `path`, then rename."""
    check_output(path)
    parent = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".rstf-", suffix=".svg", dir=parent)
    os.close(fd)
    try:
        try:
            proc = subprocess.run(["dot", "-Tsvg", "-o", tmp], input=dot_text.encode(),
                                  capture_output=True, timeout=timeout)
        except OSError as e:
            raise RstfError(f"{INSTALL_HINT}: {e.strerror}") from None
        except subprocess.TimeoutExpired:
            raise RstfError(f"graphviz took over {timeout:.0f} s to draw the graph") from None
        if proc.returncode != 0:
            err = " ".join(proc.stderr.decode(errors="replace").split())[:300]
            raise RstfError(f"graphviz failed to draw the graph: {err}")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp made it private; a new file's usual mode
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
