"""Re-indent generated C by brace depth, so templates can stay flat and output stays readable."""


def format_c(text: str, indent: str = "    ") -> str:
    out, depth = [], 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            # Blank lines only between top-level items; templates leave stray ones inside.
            if depth == 0 and out and out[-1] != "":
                out.append("")
            continue
        if line.startswith("}"):
            depth = max(depth - 1, 0)
        out.append(indent * depth + line)
        depth += line.count("{") - line.count("}") + (1 if line.startswith("}") else 0)
    return "\n".join(out).strip("\n") + "\n"
