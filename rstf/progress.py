"""What a run tells the user while it works: stages, messages, verbose logs.

A `Reporter` is made once per `rstf optimize` run. Its verbosity decides what is shown:

* 0 (`-q`): nothing but errors (errors are exceptions, printed by the CLI);
* 1 (default): the messages of the run (`rstf: folded 12 constant subexpressions`) and, with
  `progress`, the stages (load, select, partition, generate, optimise, compile, write);
* 2 (`-v`): also the `rstf` logger at INFO level: each stage's time and each subgraph's
  polyhedral result.

On a terminal the stages are live `rich` bars with an ETA for the counted stages (optimise:
one step per subgraph; compile: one per compilation unit). When the stream is not a terminal
(CI, pipes, tests) the same progress is plain lines:

    rstf: load done in 1.2 s
    rstf: optimise 0/12
    rstf: optimise 6/12, eta 0:00:07
    rstf: optimise 12/12 done in 14.2 s

Library callers get no progress unless they ask for it, and may pass `log`, a callable that
receives the run's messages instead of stderr (verbosity then only affects the bars and logs).
"""
from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time

LOGGER = logging.getLogger("rstf")

QUIET, NORMAL, VERBOSE = 0, 1, 2


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


class Stage:
    """One stage of a run; `advance()` counts a step of a stage that has a `total`."""

    def __init__(self, reporter: "Reporter", name: str, total: int | None):
        self.reporter, self.name, self.total = reporter, name, total
        self.done = 0
        self.start = time.perf_counter()
        self._task = None
        self._shown_decile = 0

    def advance(self, steps: int = 1) -> None:
        with self.reporter._lock:
            self.done += steps
            self.reporter._advanced(self)

    def count(self) -> str:
        return f"{self.done}/{self.total}" if self.total else ""

    def eta(self) -> float | None:
        if not self.total or not self.done or self.done >= self.total:
            return None
        elapsed = time.perf_counter() - self.start
        return elapsed / self.done * (self.total - self.done)


class Reporter:
    """Stages, messages and logs of one run (module docstring)."""

    def __init__(self, verbosity: int = NORMAL, progress: bool = False, log=None,
                 stream=None):
        self.verbosity = verbosity
        self.stream = stream if stream is not None else sys.stderr
        self._log = log
        self._lock = threading.RLock()
        self.timings: dict[str, float] = {}
        show = bool(progress) and verbosity >= NORMAL
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.live = show and tty
        self.plain = show and not tty
        self.console = None
        self._bars = None
        self._handler = None
        self._old_level = None

    # ------------------------------------------------------------------ lifetime

    def __enter__(self) -> "Reporter":
        if self.live or self.verbosity >= VERBOSE:
            from rich.console import Console

            self.console = Console(file=self.stream, stderr=self.stream is sys.stderr)
        if self.live:
            from rich.progress import (BarColumn, Progress, SpinnerColumn, TextColumn,
                                       TimeElapsedColumn, TimeRemainingColumn)

            self._bars = Progress(SpinnerColumn(), TextColumn("{task.description:<10}"),
                                  BarColumn(), TextColumn("{task.fields[count]:>9}"),
                                  TimeElapsedColumn(), TextColumn("eta"),
                                  TimeRemainingColumn(),
                                  console=self.console, transient=False)
            self._bars.start()
        if self.verbosity >= VERBOSE:
            self._install_log_handler()
        return self

    def __exit__(self, *exc) -> None:
        if self._bars is not None:
            self._bars.stop()
            self._bars = None
        if self._handler is not None:
            LOGGER.removeHandler(self._handler)
            LOGGER.setLevel(self._old_level)
            self._handler = None

    def _install_log_handler(self) -> None:
        if self.live:
            from rich.logging import RichHandler

            handler = RichHandler(console=self.console, show_time=False, show_path=False,
                                  show_level=False)
            handler.setFormatter(logging.Formatter("%(message)s"))
        else:
            handler = logging.StreamHandler(self.stream)
            handler.setFormatter(logging.Formatter("rstf: %(message)s"))
        self._old_level = LOGGER.level
        LOGGER.setLevel(logging.INFO)
        LOGGER.addHandler(handler)
        self._handler = handler

    # ------------------------------------------------------------------ output

    def message(self, msg: str) -> None:
        """A message of the run: to `log` if given, else to the stream unless quiet."""
        if self._log is not None:
            self._log(msg)
        elif self.verbosity >= NORMAL:
            self._line(f"rstf: {msg}")

    def _line(self, text: str) -> None:
        with self._lock:
            if self._bars is not None:
                self.console.print(text, markup=False, highlight=False)
            else:
                print(text, file=self.stream, flush=True)

    @contextlib.contextmanager
    def stage(self, name: str, total: int | None = None):
        """A stage of the run, timed; yields a `Stage` to `advance()` when it has a total."""
        st = Stage(self, name, total)
        with self._lock:
            if self._bars is not None:
                st._task = self._bars.add_task(name, total=total, count=st.count())
            elif self.plain and total:
                self._line(f"rstf: {name} 0/{total}")
        try:
            yield st
        except BaseException:
            if self._bars is not None:  # the error is the message; no finished stage
                self._bars.stop_task(st._task)
            raise
        elapsed = time.perf_counter() - st.start
        self.timings[name] = self.timings.get(name, 0.0) + elapsed
        with self._lock:
            if self._bars is not None:
                done = total if total else 1
                self._bars.update(st._task, total=done, completed=done, count=st.count())
                self._bars.stop_task(st._task)
            elif self.plain and self.verbosity < VERBOSE:  # -v logs the time below
                self._line(f"rstf: {name} " + (f"{st.done}/{total} " if total else "")
                           + f"done in {elapsed:.1f} s")
        LOGGER.info("stage %s: %.2f s", name, elapsed)

    def _advanced(self, st: Stage) -> None:
        if self._bars is not None:
            self._bars.update(st._task, completed=st.done, count=st.count())
        elif self.plain and st.total:
            decile = 10 * st.done // st.total
            if decile > st._shown_decile and st.done < st.total:
                st._shown_decile = decile
                eta = st.eta()
                self._line(f"rstf: {st.name} {st.done}/{st.total}"
                           + (f", eta {_clock(eta)}" if eta is not None else ""))
