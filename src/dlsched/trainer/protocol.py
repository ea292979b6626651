"""The files a trainer leaves in its job directory, and how backends read them.

It lives with the trainer because the trainer defines the format; the runtime (backends,
controller, measured throughput) only reads it. It imports nothing of the scheduler.

The trainer's reporting rank appends one JSON object per line to `progress.jsonl`:

    {"time": 1700000000.1, "event": "progress", "step": 120, "loss": 1.93,
     "steps_per_s": 14.2, "samples_per_s": 454.4, "workers": 2, "ps": 0, "run": "<launch id>"}

`event` is "resume" (what a run loaded, before its first step: see below), "start" (first step
of a run done: the end of a resize pause), "progress", "checkpoint", "stop" (checkpointed on
SIGTERM) or "done". `done.json` appears, atomically, when the job has trained all its steps, after
its final checkpoint; it is what makes a job done, so a job is never run twice to completion.

Checkpoints are `checkpoint-<step, 9 digits>-<xxh3 of the file>.pt`, each written to a temporary
file and renamed; the two newest good ones are kept (`dlsched.trainer.checkpoint`). The "resume"
record says what a run starts from, written by rank 0 once it has loaded:

    {"time": ..., "event": "resume", "step": 5600, "checkpoint": "checkpoint-000005600-....pt",
     "problems": ["checkpoint-000005661-....pt: checksum mismatch (...)"], "run": "<launch id>"}

`checkpoint` is null when the run starts from step 0; `problems` lists each newer checkpoint that
was skipped and why (a bad file is renamed `*.bad`). The log is read incrementally: a backend
calls `ProgressReader.poll` as often as it likes and pays only for the new lines.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# ------------------------------------------------------------------ the launch contract
# How a backend starts a run: `python -m dlsched.trainer <TrainJob.trainer_argv(job_dir, ps)>` once
# per rank, with this environment (torch.distributed's names plus ours). Written once here, next
# to the files the trainer leaves, so every backend (local processes, Ray actors, pods) and the
# trainer's own `--help` agree.
ENV_RANK, ENV_WORLD_SIZE = "RANK", "WORLD_SIZE"
ENV_MASTER_ADDR, ENV_MASTER_PORT = "MASTER_ADDR", "MASTER_PORT"
ENV_LOCAL_RANK, ENV_LOCAL_WORLD_SIZE = "LOCAL_RANK", "LOCAL_WORLD_SIZE"
ENV_NODE_ADDR = "DLSCHED_NODE_ADDR"  # the only address the rank's sockets listen on
ENV_RUN_ID = "DLSCHED_RUN_ID"  # echoed as "run" in progress records
ENV_NODE, ENV_ROLE = "DLSCHED_NODE", "DLSCHED_ROLE"  # for people reading logs: node name, "ps" | "worker"


def new_run_id(job_id: str, attempt: int) -> str:
    """A fresh id for attempt `attempt` of `job_id`: unique even when an attempt is retried."""
    return f"{job_id}-a{attempt}-{uuid.uuid4().hex[:8]}"


def rank_env(run_id: str, ranks: Sequence[tuple[str, str]], rank: int, *, master_addr: str | None = None,
             master_port: int | None = None, node_addr: str | None = None,
             local_ranks: bool = True) -> dict[str, str]:
    """The environment of rank `rank` of a run whose ranks are `ranks`, (role, node name) each in
    rank order (parameter servers first, then workers: `live.backends.ranks.rank_layout`).
    With `local_ranks`, LOCAL_RANK / LOCAL_WORLD_SIZE count the ranks on the same node (a backend
    that gives each rank its own devices, as Ray does, leaves them to the node). The rendezvous
    address and the node address are left out when None (a backend that learns them on the node
    sets them there)."""
    role, node = ranks[rank]
    env = {ENV_RANK: str(rank), ENV_WORLD_SIZE: str(len(ranks)), ENV_RUN_ID: run_id, ENV_NODE: node, ENV_ROLE: role}
    if local_ranks:
        local = [i for i, (_, n) in enumerate(ranks) if n == node]
        env[ENV_LOCAL_RANK], env[ENV_LOCAL_WORLD_SIZE] = str(local.index(rank)), str(len(local))
    if master_addr is not None:
        env[ENV_MASTER_ADDR] = master_addr
    if master_port is not None:
        env[ENV_MASTER_PORT] = str(master_port)
    if node_addr is not None:
        env[ENV_NODE_ADDR] = node_addr
    return env


PROGRESS = "progress.jsonl"
DONE = "done.json"
RESUME = "resume"
#: What versions before checkpoints were verified wrote: tried after the verified ones.
LEGACY_CHECKPOINT = "checkpoint.pt"
_CHECKPOINT_NAME = re.compile(r"checkpoint-(\d{9,})-([0-9a-f]{16})\.pt")


def checkpoint_name(step: int, digest: str) -> str:
    return f"checkpoint-{step:09d}-{digest}.pt"


def parse_checkpoint_name(name: str) -> tuple[int, str] | None:
    """(step, digest) of a checkpoint's file name; None for any other file."""
    m = _CHECKPOINT_NAME.fullmatch(name)
    return (int(m.group(1)), m.group(2)) if m else None


def list_checkpoints(job_dir: Path) -> list[Path]:
    """The job directory's checkpoints, newest (highest step, then latest written) first."""
    found = []
    for p in Path(job_dir).glob("checkpoint-*.pt"):
        parsed = parse_checkpoint_name(p.name)
        if parsed is not None:
            try:
                found.append((parsed[0], p.stat().st_mtime_ns, p))
            except FileNotFoundError:
                continue  # pruned meanwhile
    return [p for _, _, p in sorted(found, key=lambda t: (t[0], t[1]), reverse=True)]


def log_tail(path: str | Path | None, limit: int) -> str:
    """The last `limit` bytes of a log, stripped ("" when it cannot be read): what a failure
    message quotes of a trainer's output."""
    try:
        with open(path or "", "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode(errors="replace").strip()
    except OSError:
        return ""


def is_done(job_dir: Path) -> bool:
    return (Path(job_dir) / DONE).is_file()


def read_done(job_dir: Path) -> dict | None:
    try:
        return json.loads((Path(job_dir) / DONE).read_text())
    except (OSError, ValueError):
        return None


@dataclass
class ProgressReader:
    """Incremental reader of one job's `progress.jsonl` (a partial last line is left for later)."""

    job_dir: Path
    step: int = 0
    loss: float | None = None
    steps_per_s: float | None = None
    samples: list[tuple[int, float]] = field(default_factory=list)
    last: dict | None = None  # the newest record
    starts: list[dict] = field(default_factory=list)  # every "start" record, oldest first
    resumes: list[dict] = field(default_factory=list)  # every "resume" record, oldest first
    _offset: int = 0

    def poll(self) -> list[dict]:
        """Read the lines appended since the last call and fold them in; returns them."""
        path = Path(self.job_dir) / PROGRESS
        try:
            with path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self._offset += end + 1
        out = []
        for line in chunk[: end + 1].splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a torn line from a killed writer: skip it, the next report supersedes it
            if not isinstance(rec, dict):
                continue
            out.append(rec)
            self._fold(rec)
        return out

    def _fold(self, rec: dict) -> None:
        self.last = rec
        step = rec.get("step")
        if isinstance(step, int):
            self.step = step if rec.get("event") in ("start", RESUME) else max(self.step, step)
        loss = rec.get("loss")
        if isinstance(loss, (int, float)) and isinstance(step, int):
            self.loss = float(loss)
            self.samples.append((step, float(loss)))
        rate = rec.get("steps_per_s")
        if isinstance(rate, (int, float)) and rate > 0:
            self.steps_per_s = float(rate)
        if rec.get("event") == "start":
            self.starts.append(rec)
        elif rec.get("event") == RESUME:
            self.resumes.append(rec)
