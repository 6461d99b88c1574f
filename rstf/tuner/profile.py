"""The per-machine tuning profile: the register tiles and loop orders `rstf tune` measured,
in a human-readable JSON file beside the build cache, keyed by the CPU and vector target.

File format (version 1), one file a machine:

    {"format": "rstf-tile-profile", "version": 1,
     "machine": {"cpu": "<model name>", "target": "avx512-full", "threads": 2},
     "contractions": {
        "<key>": {"model": "8x3 rows",           # the analytic model's choice
                  "choice": "6x4 rows",          # what `rstf optimize` takes
                  "ms": {"8x3 rows": [2.25, 2.21], "6x4 rows": [1.96], ...},
                  "vs_model": {"8x3 rows": [1.0, 0.998], "6x4 rows": [0.874], ...},
                  "nodes": ["<a TF node with this contraction>", ...]}},
     "runs": {"<model id>": {"model": "<path>", "variants": 6, "reps": 30,
                             "done": [0, 1, 2]}}}

A key (`tiles.Extents.key`) names a contraction by the extents the tile decision reads, so
one measurement serves every layer, and every model, with that contraction. `ms` holds one
figure a probe: the median milliseconds of the groups that run the contraction, summed over
them, with that choice; `vs_model` the same over the model's choice timed beside it in the
same probe (`search._paired`), the figure the choice is made on: a ratio taken in one
window of the machine's load, where two absolute times from different minutes of a shared
host differ by more than the tiles do. `noise` (where a run measured it) is how much that
ratio moves on this machine with no change: the model's tile timed against itself in the
same pairing (`spread`). `choice` is the candidate whose confirmed ratios (`evidence`)
have the least median, where that median is under 1 - `needed(noise, n)`, else the
model's. `runs` lets a stopped `rstf tune` resume where it stopped, and keeps each run's
samples of the noise.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import statistics
import tempfile

from ..build.cache import cache_dir
from ..errors import RstfError
from ..poly.tiles import TileChoice, TileTable

FORMAT = "rstf-tile-profile"
VERSION = 1
MARGIN = 0.02  # a measured choice must be this much faster than the model's to be taken
# ... and, on a noisy machine, this many times the standard error of its confirmed ratios'
# median, the error taken from the noise the same run measured (`needed`).
NOISE_Z = 2.0


def spread(samples: list[float]) -> float:
    """The noise of one timed ratio, from samples of its log where the model's tile was
    timed against itself (`search._note`): their median absolute deviation, scaled to a
    standard deviation (1.4826), robust to the bursts of a shared host. 0 with fewer than
    4 samples."""
    if len(samples) < 4:
        return 0.0
    mid = statistics.median(samples)
    return 1.4826 * statistics.median(abs(x - mid) for x in samples)


def needed(noise: float, n: int) -> float:
    """How much faster than the model's a choice confirmed by `n` ratios must be: `MARGIN`,
    or `NOISE_Z` standard errors of their median where the machine's noise is larger."""
    return max(MARGIN, NOISE_Z * noise / math.sqrt(max(n, 1)))


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or the platform's processor string."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine() or "unknown"


def tuning_dir() -> str:
    """Where profiles live: beside the build cache (`~/.cache/rstf/tuning`), or in
    `$RSTF_CACHE_DIR/tuning` when the cache is moved."""
    if os.environ.get("RSTF_CACHE_DIR"):
        return os.path.join(os.environ["RSTF_CACHE_DIR"], "tuning")
    return os.path.join(os.path.dirname(cache_dir()), "tuning")


def default_path(target: str, cpu: str | None = None) -> str:
    """This machine's profile for vector target `target`."""
    slug = re.sub(r"[^a-z0-9]+", "-", (cpu or cpu_model()).lower()).strip("-") or "cpu"
    return os.path.join(tuning_dir(), f"{slug}--{target}.json")


@dataclasses.dataclass
class Profile:
    """A profile file's contents (see the module docstring)."""
    path: str
    machine: dict
    contractions: dict = dataclasses.field(default_factory=dict)
    runs: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def load(cls, path: str) -> "Profile":
        """The profile at `path`; a one-line RstfError when it is not one."""
        try:
            with open(path) as f:
                data = json.load(f)
        except FileNotFoundError:
            raise RstfError(f"tuning profile {path}: no such file") from None
        except (OSError, ValueError) as e:
            raise RstfError(f"tuning profile {path}: not readable JSON ({e})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise RstfError(f"tuning profile {path}: not an rstf tile profile")
        if data.get("version") != VERSION:
            raise RstfError(f"tuning profile {path}: version {data.get('version')!r}, this "
                            f"rstf reads version {VERSION}; run `rstf tune` again")
        machine, entries = data.get("machine"), data.get("contractions")
        if not isinstance(machine, dict) or not isinstance(entries, dict):
            raise RstfError(f"tuning profile {path}: no 'machine' or 'contractions'")
        for key, e in entries.items():
            try:
                TileChoice.parse(e["choice"])
                TileChoice.parse(e["model"])
            except (KeyError, TypeError, ValueError):
                raise RstfError(f"tuning profile {path}: contraction {key!r} has no valid "
                                f"'choice' and 'model'") from None
        return cls(path, machine, entries, data.get("runs") or {})

    @classmethod
    def open(cls, path: str, machine: dict) -> "Profile":
        """The profile at `path` if there is one (it must be for `machine`'s target), else
        a new, empty one that will be written there."""
        if not os.path.exists(path):
            return cls(path, dict(machine))
        prof = cls.load(path)
        prof.check_target(machine["target"])
        return prof

    def check_target(self, target: str) -> None:
        if self.machine.get("target") != target:
            raise RstfError(f"tuning profile {self.path} was measured for vector target "
                            f"{self.machine.get('target')!r}, this build's is {target!r}")

    def record(self, key: str, choice: TileChoice, ms: float, ratio: float,
               nodes: list[str], model: TileChoice | None = None) -> None:
        """One probe's figures for `choice` of contraction `key`: its milliseconds, and
        their ratio to the model's choice timed beside it. `model`: the analytic model's
        choice, where this probe ran it (a key's first record must say)."""
        e = self.contractions.get(key)
        if e is None:
            if model is None:
                raise ValueError(f"contraction {key!r}: its model's choice is not known")
            e = self.contractions[key] = {"model": model.label, "choice": model.label,
                                          "ms": {}, "vs_model": {}, "nodes": []}
        e["ms"].setdefault(choice.label, []).append(round(ms, 5))
        e.setdefault("vs_model", {}).setdefault(choice.label, []).append(round(ratio, 4))
        e["nodes"] = sorted(set(e["nodes"]) | set(nodes))[:8]
        e["choice"] = self.best(key)

    def evidence(self, key: str, label: str) -> list[float]:
        """The ratios to the model's a choice is judged on: those of the rounds that timed
        it again (`search._confirm`), without the probe that put it forward. That probe
        made it the least of several noisy ratios, which is biased low (on a noisy host
        by more than tiles differ); alone where nothing timed it again."""
        v = self.contractions[key].get("vs_model", {}).get(label, [])
        return v[1:] if len(v) > 1 else v

    def best(self, key: str) -> str:
        """The label `optimize` takes for `key`: of the candidates timed again (or, where
        none was, of those only a probe timed), the one of the least median `evidence`
        where that is under 1 - `needed`, else the model's. A candidate no round timed
        again (a run's probes, before `_confirm`, or `--confirm 0`) needs `MARGIN` only:
        that puts it forward to be confirmed."""
        e = self.contractions[key]
        ratios = {label: v for label, v in e.get("vs_model", {}).items()
                  if v and label != e["model"]}
        if not ratios:
            return e["model"]
        # Only those timed again where any was: a candidate that won one probe was timed
        # again (`search._confirm`), and one that lost there must not hand the choice to
        # a runner-up measured once, whose one ratio is as likely to be luck.
        most = max(map(len, ratios.values()))
        ev = {label: self.evidence(key, label) for label, v in ratios.items()
              if len(v) >= min(most, 2)}
        med = {label: statistics.median(v) for label, v in ev.items()}
        label = min(med, key=med.get)
        # (put forward by its probe, not timed again yet: the margin alone)
        need = MARGIN if most == 1 else needed(e.get("noise", 0.0), len(ev[label]))
        return label if med[label] < 1 - need else e["model"]

    def contender(self, key: str) -> str | None:
        """The candidate to time again next for `key`: its choice, where only the probe
        that put it forward timed it; else, of the candidates only a probe timed, the
        fastest where it beat by `MARGIN` there what stands: the model's (where the
        candidate its probes put forward lost its confirmation rounds, or none was put
        forward), or a confirmed choice's median ratio (a later probe's candidate faster
        than the choice is timed again as the choice was, and `best` weighs the two on
        their confirmations). None where there is none."""
        e = self.contractions[key]
        ratios = e.get("vs_model", {})
        if e["choice"] != e["model"] and len(ratios.get(e["choice"], [])) == 1:
            return e["choice"]
        bar = (1.0 if e["choice"] == e["model"]
               else statistics.median(self.evidence(key, e["choice"])))
        once = {label: v[0] for label, v in ratios.items()
                if label not in (e["model"], e["choice"]) and len(v) == 1}
        label = min(once, key=once.get, default=None)
        return label if label is not None and once[label] < bar * (1 - MARGIN) else None

    def note_noise(self, keys, noise: float) -> None:
        """Record the noise a run measured (`spread`) on its contractions `keys`, and
        choose again with it."""
        for key in keys:
            e = self.contractions.get(key)
            if e is not None:
                e["noise"] = round(noise, 4)
                e["choice"] = self.best(key)

    def table(self) -> TileTable:
        """The measured choices as the pass takes them (those that differ from the
        model's)."""
        return TileTable(tuple(sorted(
            (key, TileChoice.parse(e["choice"])) for key, e in self.contractions.items()
            if e["choice"] != e["model"])))

    def save(self) -> None:
        """Write the file whole or not at all (a temporary beside it, renamed)."""
        folder = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(folder, exist_ok=True)
        data = {"format": FORMAT, "version": VERSION, "machine": self.machine,
                "contractions": dict(sorted(self.contractions.items())), "runs": self.runs}
        fd, tmp = tempfile.mkstemp(prefix=".profile-", suffix=".json", dir=folder)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1)
                f.write("\n")
            os.replace(tmp, self.path)
        except BaseException:
            os.unlink(tmp)
            raise


def resolve(tuning: str, target: str) -> Profile | None:
    """The profile `rstf optimize --tuning` names: 'off' none, 'auto' this machine's where
    `rstf tune` wrote one, else the file at that path (which must exist and be for
    `target`)."""
    if tuning == "off":
        return None
    if tuning == "auto":
        path = default_path(target)
        if not os.path.exists(path):
            return None
    else:
        path = tuning
    prof = Profile.load(path)
    prof.check_target(target)
    return prof
