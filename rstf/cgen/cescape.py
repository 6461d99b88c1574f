"""Escaping for text from a user's graph that reaches generated C, C++ or shell text.

Node and tensor names come from files rstf did not write. They only ever reach generated
sources through these functions: inside comments (where '*/' or a backslash-newline could end
the comment or splice lines) and inside string literals (where quotes, backslashes, trigraphs
and non-ASCII bytes could break out).
"""
from __future__ import annotations

_SAFE_COMMENT = set(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-./:[](),=+<>#@%&!;'\"")


def c_comment(text: str, limit: int = 200) -> str:
    """Text safe inside /* ... */: printable ASCII other than '*' and '\\' kept, every other
    byte written as %xx, so the comment can neither close early nor splice lines."""
    out = []
    for ch in text[:limit]:
        out.append(ch if ch in _SAFE_COMMENT else "".join(f"%{b:02x}" for b in ch.encode()))
    return "".join(out) + ("..." if len(text) > limit else "")


def c_string(text: str) -> str:
    """A C/C++ string literal (with quotes) holding exactly `text`'s UTF-8 bytes.

    Every byte outside [A-Za-z0-9 _./:-] is an octal escape, so no quote, backslash, '?'
    (trigraphs) or control character appears raw.
    """
    safe = set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _./:-")
    return '"' + "".join(chr(b) if b in safe else f"\\{b:03o}" for b in text.encode("utf-8")) + '"'
