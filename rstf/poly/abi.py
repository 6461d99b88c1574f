"""The microkernels' calling convention, stated once.

A microkernel's parameters depend on its `microkernel.Shape` (a second reduction level,
a prefetched weight, a prefetched next panel) and on what finishes its tile (a store to
`y`, or a register epilogue's operands). `Abi` lists them, in order, by name; the
kernel's C signature, a dispatcher's forwarding of its own parameters and every call site
in the lowered C are all printed from the same `Abi`, so they cannot disagree. A call
site gives its arguments by parameter name (`Abi.call`), and a missing or unknown one is
an error, not a shifted argument.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    ctype: str  # the declaration before the name: "const float *restrict", "const char *"

    @property
    def decl(self) -> str:
        return f"{self.ctype}{'' if self.ctype.endswith('*') else ' '}{self.name}"


@dataclasses.dataclass(frozen=True)
class Abi:
    """A kernel's parameters, in order."""
    params: tuple[Param, ...]

    def __add__(self, other: "Abi") -> "Abi":
        return Abi(self.params + other.params)

    def signature(self, wrap_before: str | None = None, indent: int = 0) -> str:
        """The parameter declarations, comma-separated; `wrap_before`: start a new line,
        indented by `indent` spaces, at that parameter."""
        out = ""
        for i, p in enumerate(self.params):
            if i:
                out += ",\n" + " " * indent if p.name == wrap_before else ", "
            out += p.decl
        return out

    def forward(self) -> str:
        """The parameters passed on by name: a dispatcher calling the kernel it picks."""
        return ", ".join(p.name for p in self.params)

    def call(self, function: str, args: dict[str, str]) -> str:
        """`function(...)` with each parameter's argument taken from `args` by name."""
        names = [p.name for p in self.params]
        if set(args) != set(names):
            missing = [n for n in names if n not in args]
            extra = sorted(set(args) - set(names))
            raise ValueError(f"call of {function}: missing arguments {missing}, "
                             f"unknown {extra}")
        return f"{function}({', '.join(args[n] for n in names)})"


def _abi(*decls: str) -> Abi:
    params = []
    for d in decls:
        ctype, name = d.rsplit(" ", 1)
        stars = len(name) - len(name.lstrip("*"))  # "const char *pf": a "const char *"
        params.append(Param(name[stars:], f"{ctype} {name[:stars]}" if stars else ctype))
    return Abi(tuple(params))


def reduction(shape) -> Abi:
    """The operands and the reduction, every kernel's leading parameters: the trip count
    K, the row operand `a` with its row and k strides, the column operand `b` with its k
    stride; a second level K2 with both strides, and a third K3; the prefetched weight's
    pointer `pf`; the next panel's pointer `pp` and its lines `npp`."""
    out = _abi("int K", "const float *restrict a", "long sar", "long sak",
               "const float *restrict b", "long sbk")
    if shape.two:
        out += _abi("int K2", "long sak2", "long sbk2")
    if shape.three:
        out += _abi("int K3", "long sak3", "long sbk3")
    if shape.pf:
        out += _abi("const char *pf")
    if shape.pp:
        out += _abi("const char *pp", "int npp")
    return out


ROWS = _abi("int rows")  # a dispatcher's first parameter: the chunk's rows (1..RB)
STORE = _abi("float *restrict y", "long syr")  # the tile's output and its row stride


def store_kernel(shape) -> Abi:
    """A kernel that adds its tile into `y`."""
    return reduction(shape) + STORE


def store_dispatcher(shape) -> Abi:
    """`rows`, then a storing kernel's parameters."""
    return ROWS + store_kernel(shape)


def epilogue_operands(operands) -> Abi:
    """A register epilogue's arrays (`regepi.Operand`s), each at the tile's first row and
    column: written ones plain, read ones const."""
    return Abi(tuple(Param(f"{o.array}_p",
                           f"{'' if o.write else 'const '}{o.ctype} *restrict")
                     for o in operands))


def epilogue_kernel(shape, operands) -> Abi:
    """A kernel that runs the chain on its accumulators and stores the chain's results."""
    return reduction(shape) + epilogue_operands(operands)


def epilogue_dispatcher(shape, operands) -> Abi:
    return ROWS + epilogue_kernel(shape, operands)
