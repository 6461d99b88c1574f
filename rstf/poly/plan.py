"""The lowering plan: every decision between scheduling and lowering, made once.

The schedulers (`schedule`, `fuse`, `band`) say which statements run together, in which
order and in which tiles. Before any C is printed, `make_plan` decides, over all the
scheduled groups at once:

- which groups run as Winograd instead of their kernels (`winograd.plan`), and which of
  their frozen weights the op is fed already transformed;
- which frozen weights the kernels read in panel layout (`prepack.plan`);
- which kernels prefetch another group's weight (`prefetch.plan_prefetch`) or their next
  weight panel (`prefetch.plan_panel_prefetch`). The plan's groups carry those marks on
  new `Kernel`s; the schedule's own groups are left as they were;
- the workspace re-planned for the fused program (`workspace.replan`), with the Winograd
  groups' scratch.

A group's register epilogue was decided when the group was formed (`fuse`) and travels on
the group (`CallSchedule.epilogue`). `lower.lower` reads the plan and decides nothing.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from . import prepack
from .groups import Group, Kernel
from .prefetch import plan_panel_prefetch, plan_prefetch
from .scop import Scop
from .target import Target
from .winograd import Plan as WinogradPlan, plan as winograd_plan
from .workspace import replan, scalar_statement_names, scratch_name


@dataclasses.dataclass(frozen=True)
class LoweringPlan:
    """What `lower.lower` prints, decided. Read-only by convention: nothing after
    `make_plan` changes it."""
    groups: tuple[Group, ...]  # the scheduled groups, their kernels marked
    winograd: Mapping[int, WinogradPlan]  # group's call -> its Winograd plan
    panels: Mapping[str, prepack.Panels]  # frozen weight -> its panel layout
    prefetch: Mapping[int, str]  # computing group's call -> the weight it prefetches
    panel_prefetches: int  # kernels that prefetch their next weight panel
    given: Mapping[str, WinogradPlan]  # frozen weight fed as Winograd's U -> its plan
    offsets: Mapping[str, int]  # workspace temporary (and Winograd scratch) -> byte offset
    workspace_bytes: int

    @property
    def prepacked(self) -> dict[str, int | str]:
        """The op's inputs it is fed in another layout: frozen weight -> panel width, or
        the Winograd spec of a weight fed as U (`prepack.pack`)."""
        return {**{name: pn.vb for name, pn in self.panels.items()},
                **{w: wp.spec for w, wp in self.given.items()}}


def make_plan(scop: Scop, schedules: list[Group], target: Target,
              constants: frozenset[str] = frozenset(), winograd: bool = True) -> LoweringPlan:
    """The plan of the scheduled groups `schedules` (in program order) on `target`.
    `constants`: the op's inputs whose values are fixed when it is built (frozen weights).
    `winograd`: let `winograd.plan` take the groups it accepts."""
    wino = {g.call: wp for g in schedules if winograd and not g.is_band
            and (wp := winograd_plan(scop, g.parts[0], target, constants)) is not None}
    panels = prepack.plan(scop, [k for cs in schedules if cs.call not in wino
                                 for k in cs.kernels],
                          scalar_statement_names(schedules), set(constants))
    prefetch, marks = plan_prefetch(scop, schedules, set(wino), frozenset(constants),
                                    target.tuning, target.threads, target.l2_bytes)
    panel_marked = plan_panel_prefetch(scop, schedules, panels, set(wino), target.tuning,
                                       target.l2_bytes)
    groups = tuple(_marked(g, marks, panel_marked) for g in schedules)
    offsets, workspace_bytes = replan(
        scop, list(groups), {scratch_name(c): wp.scratch_bytes for c, wp in wino.items()})
    return LoweringPlan(groups, wino, panels, prefetch, len(panel_marked),
                        {wp.w: wp for wp in wino.values() if wp.u_given},
                        offsets, workspace_bytes)


def _marked(group: Group, marks: dict[str, tuple[int, str, int]],
            panel_marked: set[str]) -> Group:
    """The group with its kernels replaced by copies carrying their prefetch marks."""
    def kernel(k: Kernel) -> Kernel:
        if k.name not in marks and k.name not in panel_marked:
            return k
        lines, weight, cap = marks.get(k.name, (0, None, 0))
        return dataclasses.replace(k, prefetch=lines, prefetch_of=weight, prefetch_cap=cap,
                                   panel_prefetch=k.name in panel_marked)

    return dataclasses.replace(group, parts=[
        dataclasses.replace(p, kernels=[kernel(k) for k in p.kernels]) for p in group.parts])
