"""``lsgd train --fault SPEC`` (repeatable): faults injected into a run, and their log.

The kinds and their fields are in :data:`FIELDS` (what each does: docs/reliability.md, "Faults
at random"). STEP is a worker's step, or ``@S`` its first step after S seconds of the training
clock; SECOND counts wall seconds from the run's first training step. A fault fires once per
run: it is logged in ``faults.jsonl`` (by its worker or :mod:`lsgd.train.injector`) before it
strikes, and a restarted worker reads the log. The run's answers (restart, fall-back, heal,
reset) go to the same log, which :func:`write_table` turns into ``faults.csv``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Kind: its fields after the kind, in order.
FIELDS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("kill", "nan", "segv"), ("rank", "step")),
    "stop": ("rank", "step", "seconds"), "kill-node": ("node", "step"),
    "corrupt-checkpoint": ("step",), "link-down": ("node", "second", "seconds"),
    "slow": ("node", "second", "rate", "seconds")}
#: Kinds that end a process (its node's agent restarts it).
FATAL = ("kill", "segv", "kill-node", "corrupt-checkpoint")
#: Kinds the link injector fires (a shaped network, --link with processes).
LINK_KINDS = ("link-down", "slow")
#: Kinds the simulator (``--backend threads``) can take.
THREAD_KINDS = ("nan",)
LOG = "faults.jsonl"
_EXAMPLES = {"kill": "kill:1:30", "nan": "nan:1:30", "segv": "segv:1:30",
             "stop": "stop:1:60:5", "kill-node": "kill-node:2:40",
             "corrupt-checkpoint": "corrupt-checkpoint:48", "link-down": "link-down:2:20:10",
             "slow": "slow:2:20:1mbit:10"}


@dataclass(frozen=True)
class Fault:
    """One ``--fault`` event (fields not in its kind's :data:`FIELDS` stay None)."""

    spec: str
    kind: str
    rank: int | None = None
    node: int | None = None
    step: int | None = None  #: the worker step it fires before
    at_second: float | None = None  #: or the training second (``@S``, second of link kinds)
    seconds: float | None = None
    rate: str | None = None

    def due(self, step: int, elapsed: float) -> bool:
        """Whether a step-triggered fault fires before ``step``, ``elapsed`` s into training."""
        if self.step is not None:
            return step == self.step
        return self.at_second is not None and elapsed >= self.at_second


def parse(spec: str) -> Fault:
    """A :class:`Fault` from ``KIND:FIELD:...``; ``ValueError`` saying what to write."""
    kind, *texts = spec.strip().split(":")
    if kind not in FIELDS:
        raise ValueError(f"--fault {spec!r}: unknown kind {kind!r}; choose one of "
                         f"{', '.join(FIELDS)} (e.g. {_EXAMPLES['kill']})")
    names = FIELDS[kind]
    usage = f"give {':'.join(map(str.upper, [kind, *names]))}, e.g. {_EXAMPLES[kind]}"
    if len(texts) != len(names):
        raise ValueError(f"--fault {spec!r}: {usage}")
    values: dict[str, Any] = {}
    try:
        for name, text in zip(names, texts):
            if name in ("rank", "node"):
                values[name] = _at_least(int(text), 0)
            elif name == "step" and not text.startswith("@"):
                values["step"] = _at_least(int(text), 1)
            elif name in ("step", "second"):
                values["at_second"] = _at_least(float(text.removeprefix("@")), 0.0)
            elif name == "seconds":
                values["seconds"] = _at_least(float(text), 1e-3)
            else:  # rate
                from lsgd.links.spec import parse_link

                parse_link(text)
                values["rate"] = text
    except ValueError:
        raise ValueError(f"--fault {spec!r}: {usage}") from None
    return Fault(spec=spec.strip(), kind=kind, **values)


def _at_least(value: Any, least: float) -> Any:
    """``value`` if finite and at least ``least``, else ``ValueError``."""
    if not math.isfinite(value) or value < least:
        raise ValueError(value)
    return value


def config_errors(cfg: Any) -> list[str]:
    """What is wrong with ``cfg.faults.fault`` for this run (one line each, with the fix)."""
    errors: list[str] = []
    for spec in cfg.faults.fault:
        try:
            errors += _fit_errors(parse(spec), cfg)
        except ValueError as error:
            errors.append(str(error))
    return errors


def _fit_errors(fault: Fault, cfg: Any) -> list[str]:
    where = f"--fault {fault.spec!r}"
    if cfg.backend == "threads" and fault.kind not in THREAD_KINDS:
        return [f"{where}: {fault.kind} needs worker processes; drop --backend threads "
                f"(the simulator takes {', '.join(THREAD_KINDS)} only)"]
    if fault.kind in LINK_KINDS and cfg.link is None:
        return [f"{where}: {fault.kind} acts on a node's shaped link; add --link RATE "
                "(e.g. --link 100mbit) with --groups nodes"]
    if fault.rank is not None and fault.rank >= cfg.workers:
        return [f"{where}: rank {fault.rank} is not one of the {cfg.workers} workers "
                f"(0 to {cfg.workers - 1})"]
    nodes = nodes_of(cfg)
    if fault.node is not None and fault.node >= nodes:
        return [f"{where}: node {fault.node} is not one of the {nodes} nodes (--groups; "
                f"0 to {nodes - 1})"]
    if fault.kind == "corrupt-checkpoint" and (cfg.elastic or not cfg.faults.restarts
                                               or not cfg.faults.checkpoint_every):
        return [f"{where}: a restartable run's checkpoints; give --restarts N and "
                "--checkpoint-every STEPS (elastic runs keep no checkpoint)"]
    return []


def nodes_of(cfg: Any) -> int:
    """The run's nodes: its groups, or an elastic run's torchft replica groups."""
    return int(cfg.elastic_nodes() if cfg.elastic else cfg.groups)


def node_of(rank: int, cfg: Any) -> int:
    """The node that worker ``rank`` runs on (the same number of workers on each)."""
    return rank // max(1, cfg.workers // max(1, nodes_of(cfg)))


def append(run: Path, **row: Any) -> None:
    """Append one event to ``run``'s fault log (one line, written whole, flushed to disk)."""
    row.setdefault("time", time.time())
    with open(run / LOG, "ab") as log:  # the line in one write, at the end of the file
        log.write((json.dumps(row) + "\n").encode())
        log.flush()
        os.fsync(log.fileno())


def read_log(run: Path) -> list[dict[str, Any]]:
    """The events in ``run``'s fault log, in order (a torn last line is skipped)."""
    try:
        lines = (run / LOG).read_text().splitlines()
    except OSError:
        return []
    events = []
    for line in lines:
        with contextlib.suppress(ValueError):
            events.append(json.loads(line))
    return events


def fired(run: Path) -> set[str]:
    """The specs of the faults that have fired in ``run`` (kept across restarts)."""
    return {e["spec"] for e in read_log(run) if e.get("event") == "fault"}


def answer(run: Path, what: str, **where: Any) -> None:
    """Record what the run did about a fault (restart, heal, fell back, reset); ``rank``
    in ``where``: the worker it was done to."""
    append(run, event="answer", what=what, **where)


def started(run: Path, rank: int | None = None) -> float | None:
    """When worker ``rank`` (default: any) first began training in ``run``, from the log."""
    return min((e["time"] for e in read_log(run)
                if e.get("event") == "start" and rank in (None, e.get("rank"))), default=None)


class Faults:
    """The step-triggered faults of worker ``rank`` not yet fired in ``run``; its first step
    in the run is logged as a ``start`` event (the link injector's origin)."""

    def __init__(self, specs: list[str], rank: int, node: int, run: Path | None,
                 checkpoints: Path | None = None) -> None:
        self.rank, self.node, self.run, self.checkpoints = rank, node, run, checkpoints
        self.resets: int | None = None
        done = fired(run) if run is not None else set()
        self.pending = [f for f in map(parse, specs) if f.kind not in LINK_KINDS
                        and f.spec not in done and self._mine(f)]
        self.unstarted = run is not None and bool(specs) and started(run, rank) is None
        self.active = bool(self.pending) or self.unstarted

    def _mine(self, fault: Fault) -> bool:
        if fault.kind == "kill-node":
            return fault.node == self.node
        if fault.kind == "corrupt-checkpoint":
            return self.rank == 0
        return fault.rank == self.rank

    def apply(self, loss: Any, step: int, seconds: float) -> Any:
        """``loss`` of step ``step``, ``seconds`` of training into the run, or NaN; or a
        fault that stops or ends the process."""
        if self.unstarted and self.run is not None:  # the link injector's origin
            append(self.run, event="start", rank=self.rank)
            self.unstarted = False
            self.active = bool(self.pending)
        for fault in [f for f in self.pending if f.due(step, seconds)]:
            self.pending.remove(fault)
            self.active = bool(self.pending)
            self._log(fault, step, seconds)
            if fault.kind == "nan":
                loss = loss * math.nan
            else:
                self._strike(fault)
        return loss

    def note_resets(self, resets: int, step: int) -> None:
        """Log a reset of this worker's state (what the run did about its NaN)."""
        if self.resets is not None and resets > self.resets and self.run is not None:
            answer(self.run, f"reset worker {self.rank} at step {step}", rank=self.rank)
        self.resets = resets  # the first call: what a restart or heal brought

    def _log(self, fault: Fault, step: int, elapsed: float) -> None:
        print(f"fault: {fault.spec} strikes worker {self.rank} at step {step} "
              f"({elapsed:.1f} s into training)", file=sys.stderr, flush=True)
        if self.run is not None:
            append(self.run, event="fault", spec=fault.spec, kind=fault.kind, rank=self.rank,
                   node=self.node, step=step, second=round(elapsed, 3))

    def _strike(self, fault: Fault) -> None:
        pid = os.getpid()
        if fault.kind == "stop":
            # The helper sleeps in a session of its own, then wakes this process.
            subprocess.Popen(["sh", "-c", f"sleep {fault.seconds}; kill -CONT {pid}"],
                             start_new_session=True, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            os.kill(pid, signal.SIGSTOP)
            return
        if fault.kind == "corrupt-checkpoint":  # the newest complete one's files cut to half
            found = sorted(p for p in (self.checkpoints.glob("step-*") if self.checkpoints else ())
                           if (p / "meta.json").exists())
            for file in found[-1].glob("rank-*.pt") if found else ():
                os.truncate(file, file.stat().st_size // 2)
        if fault.kind == "segv":
            signal.signal(signal.SIGSEGV, signal.SIG_DFL)
            os.kill(pid, signal.SIGSEGV)
        os.kill(pid, signal.SIGKILL)


COLUMNS = ("second", "kind", "node", "rank", "step", "spec", "outcome", "recovered s")


def write_table(run: Path, start: float) -> dict[str, int]:
    """Write ``faults.csv`` from ``run``'s log: a row per fault fired, its second from the
    first training step (else ``start``), the answers logged after it until the run
    recovered (an answer that puts the run back answers every fault before it; an elastic
    worker's restart is followed by its heal) and its time to recover, from the fault to
    that answer (:func:`_back`); the counts for the summary."""
    from lsgd.train.outputs import write_csv

    events = sorted(read_log(run), key=lambda e: e.get("time", 0.0))
    origin = min((e["time"] for e in events if e.get("event") == "start"), default=start)
    rows: dict[str, dict[str, Any]] = {}
    waiting: list[dict[str, Any]] = []  # faults since the last answer
    for event in events:
        if event.get("event") == "fault":
            waiting = [row for row in waiting if row["recovered s"] == ""]
            row = rows.get(event["spec"])
            if row is None:  # kill-node: one event per worker of the node, one row
                row = rows[event["spec"]] = {
                    "second": round(event["time"] - origin, 1), "kind": event["kind"],
                    "node": event.get("node", ""), "rank": "", "step": event.get("step", ""),
                    "spec": event["spec"], "answers": [], "time": event["time"],
                    "recovered s": ""}
                waiting.append(row)
            if event.get("rank") is not None:
                row["rank"] = " ".join(filter(None, [str(row["rank"]), str(event["rank"])]))
        elif event.get("event") == "answer":
            for row in _answered(waiting, event["what"], event.get("rank")):
                if event["what"] not in row["answers"]:
                    row["answers"].append(event["what"])
                if row["recovered s"] == "" and _back(event["what"]):
                    row["recovered s"] = round(event["time"] - row["time"], 1)
    for row in rows.values():
        row["outcome"] = "; ".join(row["answers"]) or _RIDDEN[row["kind"]]
    if rows or (run / LOG).exists():
        write_csv(run / "faults.csv", list(rows.values()), COLUMNS)
    return {"faults": len(rows), "fatal_faults": sum(r["kind"] in FATAL for r in rows.values())}


def _answered(waiting: list[dict[str, Any]], what: str, rank: int | None) -> list[dict[str, Any]]:
    """The faults not yet recovered from that an answer of worker ``rank`` (None: of the
    whole run) is about: of a kind that can cause it, that worker's own if any; a
    worker's restart or heal is about the latest of them, a fatal one first."""
    def mine(row: dict[str, Any]) -> bool:
        return rank is not None and str(rank) in str(row["rank"]).split()

    # One recovered from is open only to its worker's next answers and to a fall-back.
    rows = [r for r in waiting if r["kind"] in _CAUSES[what.split()[0]]
            and (r["recovered s"] == "" or mine(r) or what.startswith("fell"))]
    if rank is not None:
        rows = [r for r in rows if mine(r)] or rows
    if what.startswith(("restart", "heal")):
        rows = [r for r in rows if r["kind"] in FATAL] or rows
        if rank is not None:
            rows = rows[-1:]
    return rows


def _back(what: str) -> bool:
    """Whether an answer puts the run back: a heal, a reset, a fall-back, or a restart of
    the whole run (``restart N from step S``; an elastic worker's restart heals next)."""
    return what.startswith(("heal", "reset", "fell")) or "from step" in what


#: The kinds of fault each answer (by its first word) can follow from.
_CAUSES = {"restart": (*FATAL, "stop", "link-down"), "heal": (*FATAL, "stop", "link-down", "slow"),
           "fell": ("corrupt-checkpoint",), "reset": ("nan",)}

#: What the run did about a fault that no worker answered: it went on.
_RIDDEN = {**dict.fromkeys(FATAL, "none recorded"), "nan": "went on (no reset needed)",
           "stop": "waited", "link-down": "waited", "slow": "rode it out"}
