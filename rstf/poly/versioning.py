"""Versioned placement: code that adapts to sizes known only at run time.

Implements static versioning (the paper's §4; see docs/design.md) on isl:

- `place` is the placement pass (§4.2). For each statement it tries the parallel loops from
  the outermost in, and keeps the first whose *maximum* trip count (from a parametric
  bounding box of the loop's projection) passes the occupation test `t >= c * P`, where P is
  the number of threads and c the occupancy. When the answer depends on the parameters, the
  pass makes its assumption explicit: the current version keeps `t >= c*P`, and SPECIALIZE
  (Algorithm 1) queues a clone whose context is intersected with `t <= c*P - 1`; placement
  restarts at this pass for the clone (the paper's default, which bounds compile time).
  Bad specializations (empty or duplicate contexts) are dropped.
- `tree_gen` is TREE-GEN (Algorithm 2, §4.3.2) after its pre-processing (drop empty and
  duplicate contexts): it picks, among the available constraints, the one that splits the
  active contexts most evenly, recurses on both sides, and collapses nested ifs without an
  else into conjunctions (§4.3.3).
- `dispatch_c` lowers a family to C: the specialisation tree, or the plain if/else chain
  when the inequality of §4.3.2 says the chain checks fewer constraints.

P is a parameter like any other here, and the generated tests are C expressions in P: we
read the thread count at run time (TensorFlow decides its intra-op pool when the session
starts, and a served model runs on machines with other core counts than the one that
optimized it), so one compiled library picks the right version everywhere. The price is a
few integer comparisons per call.

Contexts are kept *disjoint*: a version's context is the part of its parent's context where
its assumptions hold, so exactly one version applies to any parameter values of the base
context, and the path of true conditions to a leaf describes exactly that leaf's context
(Lemma 4.2), which the tests check.
"""
from __future__ import annotations

import dataclasses
from fractions import Fraction

import islpy as isl


@dataclasses.dataclass
class PlacedStatement:
    """A statement for placement: its parametric domain and its parallel loop dims."""
    name: str
    domain: isl.Set  # over the statement's loop dims, parameters include P
    parallel: list[int]  # dims without a loop-carried dependence, outermost first


@dataclasses.dataclass
class Version:
    """One specialized copy: where it applies and which loop each statement distributes."""
    context: isl.BasicSet  # over the parameters, gisted against the base context
    placement: dict[str, int | None]  # statement -> placed dim (None: sequential)
    parent: int | None = None  # the version it was specialized from


def max_trip(domain: isl.Set, dim: int) -> isl.PwAff:
    """Maximum trip count of loop `dim`: the parametric bounding box of its projection."""
    n = domain.dim(isl.dim_type.set)
    proj = domain.project_out(isl.dim_type.set, dim + 1, n - dim - 1)
    proj = proj.project_out(isl.dim_type.set, 0, dim)
    return proj.dim_max(0).sub(proj.dim_min(0)).add_constant_val(1)


def _occupied(trip: isl.PwAff, c: Fraction, p: str) -> isl.Set:
    """Parameter values where den*t >= num*P, i.e. the loop occupies c*P threads."""
    space = trip.get_domain_space()
    cp = isl.PwAff.read_from_str(trip.get_ctx(),
                                 f"[{', '.join(space.get_var_names(isl.dim_type.param))}] -> "
                                 f"{{ [({c.numerator}*{p})] }}")
    cp = cp.align_params(space)
    t = trip.align_params(cp.get_domain_space()).scale_val(isl.Val(c.denominator))
    return t.ge_set(cp)


def place(statements: list[PlacedStatement], base: isl.Set, occupancy=1,
          p: str = "P", specialize: bool = True) -> list[Version]:
    """The placement pass with SPECIALIZE: one version per context of the family.

    With `specialize=False` it is the pass before versioning: a parametric occupation test
    is assumed to hold, unchecked, and there is one version.

    `base` is the original context (e.g. `[N, P] -> { : N >= 1 and P >= 1 }`). Versions come
    in creation order: the original first, then its specializations.
    """
    c = Fraction(occupancy).limit_denominator(1000)
    if c <= 0:
        raise ValueError("occupancy must be positive")
    # Where each candidate loop occupies c*P threads: a set of parameter values, computed once.
    occupied = {(s.name, d): _occupied(max_trip(s.domain, d), c, p).align_params(base.get_space())
                for s in statements for d in s.parallel}
    work: list[tuple[isl.Set, int | None]] = [(base, None)]
    seen: list[isl.Set] = []
    versions: list[Version] = []
    while work:
        ctx, parent = work.pop(0)
        if ctx.is_empty() or any(ctx.is_equal(s) for s in seen):
            continue  # a bad specialization (Algorithm 1)
        seen.append(ctx)
        placement: dict[str, int | None] = {}
        for s in statements:
            placement[s.name] = None
            for d in s.parallel:
                ok = occupied[(s.name, d)]
                if ctx.is_subset(ok):
                    placement[s.name] = d
                    break
                if ctx.intersect(ok).is_empty():
                    continue  # too short for every parameter value: try the next loop in
                # Depends on the parameters: SPECIALIZE under the opposite constraint, and
                # keep the assumption (the loop occupies the grid) for this version.
                if specialize:
                    for piece in ctx.subtract(ok).get_basic_sets():
                        work.append((isl.Set.from_basic_set(piece), len(versions)))
                    ctx = ctx.intersect(ok)
                placement[s.name] = d
                break
        for piece in ctx.coalesce().get_basic_sets():
            versions.append(Version(piece, dict(placement), parent))
    return [dataclasses.replace(v, context=v.context.gist(_basic_hull(base))) for v in versions]


def _basic_hull(s: isl.Set) -> isl.BasicSet:
    return s.simple_hull() if s.n_basic_set() > 1 else s.get_basic_sets()[0]


# --- TREE-GEN -------------------------------------------------------------------------------

@dataclasses.dataclass
class Cnd:
    """A condition node: a conjunction of constraints, a true child and an optional else."""
    constraints: list[isl.Constraint]
    then: "Cnd | Call"
    orelse: "Cnd | Call | None" = None


@dataclasses.dataclass
class Call:
    """A leaf: call version `index`."""
    index: int


def _halfspace(c: isl.Constraint) -> isl.BasicSet:
    return isl.BasicSet.universe(c.get_space()).add_constraint(c)


def constraints_of(ctx: isl.BasicSet) -> list[isl.Constraint]:
    return list(ctx.get_constraints())


def preprocess(contexts: list[isl.BasicSet]) -> list[int]:
    """Indices of the contexts TREE-GEN works on: non-empty, and no two equal."""
    keep: list[int] = []
    for i, ctx in enumerate(contexts):
        if ctx.is_empty() or any(ctx.is_equal(contexts[j]) for j in keep):
            continue
        keep.append(i)
    return keep


def tree_gen(contexts: list[isl.BasicSet], collapse_ifs: bool = True) -> Cnd | Call:
    """The specialization tree of Algorithm 2 over `contexts` (indices are versions).

    Constraints count as equal when they include the same integer points. Among the
    differentiating constraints, the one whose true side holds closest to half of the active
    contexts is taken (§4.3.2's refinement), ties broken by first appearance.
    """
    active = preprocess(contexts)
    if not active:
        raise ValueError("no non-empty context to dispatch on")
    avail: list[isl.Constraint] = []
    for i in active:
        for c in constraints_of(contexts[i]):
            if not any(_halfspace(c).is_equal(_halfspace(a)) for a in avail):
                avail.append(c)
    halves = [_halfspace(c) for c in avail]
    includes = {(k, i): contexts[i].is_subset(h) for k, h in enumerate(halves) for i in active}
    own = {(k, i): any(_halfspace(c).is_equal(h) for c in constraints_of(contexts[i]))
           for k, h in enumerate(halves) for i in active}
    # A context that straddles a constraint would be sent to one side while some of its
    # parameter values belong to the other; with disjoint contexts the splits SPECIALIZE
    # made are clean (every context inside or outside), so those are preferred.
    excludes = {(k, i): contexts[i].intersect(h).is_empty()
                for k, h in enumerate(halves) for i in active}

    def gen(act: list[int], av: list[int]) -> Cnd | Call:
        if len(act) > 1:
            best = None
            for k in av:
                inc = sum(includes[(k, i)] for i in act)
                if 0 < inc < len(act):
                    clean = all(includes[(k, i)] or excludes[(k, i)] for i in act)
                    score = (not clean, abs(2 * inc - len(act)))
                    if best is None or score < best[0]:
                        best = (score, k)
            assert best is not None, "Lemma 4.1: a differentiating constraint exists"
            k = best[1]
        else:
            # Only the context's own constraints: each is checked once on the path, which
            # gives Lemma 4.3's bound (n(s) splits, then at most #(C_i) checks).
            k = next((k for k in av if own[(k, act[0])]), None)
            if k is None:
                return Call(act[0])
        inside = [i for i in act if includes[(k, i)]]
        outside = [i for i in act if excludes[(k, i)]]
        # A straddling context (only when no clean split exists) stays active on both sides.
        straddle = [i for i in act if i not in inside and i not in outside]
        rest = straddle + outside
        sub = [x for x in av if x != k]
        node = Cnd([avail[k]], gen(inside + straddle, sub))
        if rest:
            node.orelse = gen(rest, sub)
        return node

    tree = gen(active, list(range(len(avail))))
    return collapse(tree) if collapse_ifs else tree


def collapse(node: Cnd | Call) -> Cnd | Call:
    """Nested ifs without an else become one if with a conjunction (§4.3.3)."""
    if isinstance(node, Call):
        return node
    then = collapse(node.then)
    orelse = collapse(node.orelse) if node.orelse is not None else None
    if isinstance(then, Cnd) and then.orelse is None and orelse is None:
        return Cnd(node.constraints + then.constraints, then.then, orelse)
    return Cnd(node.constraints, then, orelse)


def paths(node: Cnd | Call, prefix=()) -> dict[int, list[tuple[isl.Constraint, bool]]]:
    """For each leaf, the conditions on its path: (constraint, taken as true?)."""
    if isinstance(node, Call):
        return {node.index: list(prefix)}
    out = paths(node.then, prefix + tuple((c, True) for c in node.constraints))
    if node.orelse is not None:
        # The else branch is taken when the conjunction fails; record each as not-taken.
        out.update(paths(node.orelse, prefix + tuple((c, False) for c in node.constraints)))
    return out


def use_tree(contexts: list[isl.BasicSet]) -> bool:
    """§4.3.2's inequality: the tree beats the if/else chain when
    n(s)^2 <= sum_{i=1}^{n-1} #(C_i) * (n - i)."""
    n = len(contexts)
    counts = [len(constraints_of(c)) for c in contexts]
    return n * n <= sum(counts[i - 1] * (n - i) for i in range(1, n))


# --- lowering -------------------------------------------------------------------------------

def constraint_c(c: isl.Constraint) -> str:
    """A constraint as a C comparison over the parameter names, e.g. `N + 1 <= 2 * P`."""
    coefs = c.get_coefficients_by_name()
    lhs, rhs = [], []
    const = int(coefs.get(1, isl.Val(0)).to_python())
    for name, v in coefs.items():
        if name == 1:
            continue
        k = int(v.to_python())
        if k:
            (lhs if k > 0 else rhs).append(name if abs(k) == 1 else f"{abs(k)} * {name}")
    # sum(lhs) - sum(rhs) + const  (>= or ==)  0
    if const > 0:
        lhs.append(str(const))
    elif const < 0:
        rhs.append(str(-const))
    op = "==" if c.is_equality() else ">="
    return f"{' + '.join(lhs) or '0'} {op} {' + '.join(rhs) or '0'}"


def context_c(ctx: isl.BasicSet) -> str:
    cs = constraints_of(ctx)
    return " && ".join(f"({constraint_c(c)})" for c in cs) if cs else "1"


def dispatch_c(contexts: list[isl.BasicSet], call: "callable", indent: str = "    ") -> str:
    """C statements that call exactly one version: `call(i)` gives version i's call text."""
    keep = preprocess(contexts)
    if len(keep) == 1:
        return f"{indent}{call(keep[0])}\n"
    if not use_tree([contexts[i] for i in keep]):
        lines = []
        for n, i in enumerate(keep):
            kw = "if" if n == 0 else "} else if"
            lines.append(f"{indent}{kw} ({context_c(contexts[i])}) {{")
            lines.append(f"{indent}    {call(i)}")
        lines.append(f"{indent}}}")
        return "\n".join(lines) + "\n"
    return _tree_c(tree_gen(contexts), call, indent)


def _tree_c(node, call, indent: str) -> str:
    if isinstance(node, Call):
        return f"{indent}{call(node.index)}\n"
    cond = " && ".join(f"({constraint_c(c)})" for c in node.constraints)
    out = f"{indent}if ({cond}) {{\n{_tree_c(node.then, call, indent + '    ')}"
    if node.orelse is not None:
        out += f"{indent}}} else {{\n{_tree_c(node.orelse, call, indent + '    ')}"
    return out + f"{indent}}}\n"


def describe(versions: list[Version]) -> list[dict]:
    """report.json's `versions` entries: the context's constraints as C, and the placement."""
    return [{"context": [constraint_c(c) for c in constraints_of(v.context)] or ["true"],
             "placement": {k: v_ for k, v_ in v.placement.items()},
             "specialized_from": v.parent} for v in versions]
