"""A seeded fault injector against a real `dlsched serve` (local backend) running real small jobs.

Why it exists: the live runtime promises that no job is lost, none is run twice, and a fault
costs at most one checkpoint interval of work. Each promise has its own unit test, but faults
compound (a service restarting while a trainer it does not know about is dying, a corrupt
checkpoint found by a run started after a restart, a second service started against the store
in the middle of it all). This drives them together, from one seed, and then checks the
promises on what the jobs themselves wrote (`progress.jsonl`, `done.json`) and what the store
says — not on what the controller believes.

Faults, by kind:
- `kill-trainer`: SIGKILL one live trainer process of a running job whose run has started training
  (its `start` record is written), so the kill costs work to recover from; a trainer still in its
  start-up (imports take seconds) has nothing to resume from, and a run whose kills all landed there
  showed no recovery at all (a `.ci/run` here: three kills of one job, each in start-up). With none
  training it is tried again later, as any fault with nothing to hit.
- `kill-service`: SIGKILL the service (no clean-up at all) and start it again on the same store.
- `corrupt-checkpoint`: overwrite a running job's newest checkpoint with garbage, then SIGKILL its
  trainer so the next run has to read it.
- `second-service`: start another service against the same work dir and database on another port;
  it must refuse to start.

`run_chaos` returns a `ChaosReport`; `tests/test_chaos.py` runs a small one in CI and
`benchmarks/chaos_run.py` a large one (figures in docs/LIVE.md).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from dlsched.trainer.checkpoint import KEEP
from tests.live_service import Service, _pids, all_ended, progress_records

KINDS = ("kill-trainer", "kill-service", "corrupt-checkpoint", "second-service")


@dataclass
class ChaosConfig:
    jobs: int = 6
    faults: int = 8
    seed: int = 0
    steps: tuple[int, int] = (400, 1200)
    checkpoint_every_s: float = 1.0
    gap_s: tuple[float, float] = (1.0, 3.0)  # pause between two faults
    weights: dict[str, float] = field(default_factory=lambda: {"kill-trainer": 4, "kill-service": 2,
                                                               "corrupt-checkpoint": 2, "second-service": 1})
    nodes: list[dict] = field(default_factory=lambda: [{"name": "n0", "gpus": 2, "cpus": 2, "mem_gb": 8},
                                                       {"name": "n1", "gpus": 2, "cpus": 2, "mem_gb": 8}])
    policy: str = "fifo"
    timeout_s: float = 600.0


@dataclass
class Fault:
    time: float
    kind: str
    job: str | None = None
    outcome: str = ""


@dataclass
class Boundary:
    """Where one run of a job ended and the next began."""

    job: str
    kind: str  # "stop" (checkpointed on request), "crash" (no stop record), "corrupt" (a crash after a
    # corruption), "corrupt-all" (the injector destroyed every checkpoint the trainer keeps: from step 0)
    last_step: int  # the furthest step the ended run reported
    resumed_from: int  # where the next run started
    interval_steps: int  # the largest gap between two checkpoints of the job (its checkpoint interval)
    destroyed: int = 0  # checkpoints the injector corrupted between the one resumed from and the next run

    @property
    def allowed(self) -> int:
        """At most one checkpoint interval, plus one for each checkpoint destroyed on the way: a
        fallback resumes from the checkpoint before the bad one (two corruptions in a row can take
        both kept checkpoints)."""
        return self.interval_steps * (1 + self.destroyed) if self.kind != "corrupt-all" else self.last_step

    @property
    def lost(self) -> int:
        return max(0, self.last_step - self.resumed_from)


@dataclass
class ChaosReport:
    faults: list[Fault]
    jobs: dict[str, dict]  # job id -> its API record at the end
    expected_steps: dict[str, int]
    boundaries: list[Boundary]
    done_records: dict[str, int]  # job id -> "done" records in its progress.jsonl
    overlaps: dict[str, list[tuple[str, str]]]  # job id -> pairs of runs that wrote at the same time
    intruders_started: int  # second services that came up (must be 0)
    elapsed_s: float

    @property
    def faults_by_kind(self) -> Counter:
        return Counter(f.kind for f in self.faults if f.outcome == "injected")

    @property
    def finished(self) -> list[str]:
        return [j for j, r in self.jobs.items() if r["status"] == "done"]

    @property
    def failed(self) -> dict[str, str]:
        return {j: r.get("reason") or "" for j, r in self.jobs.items() if r["status"] == "failed"}

    @property
    def run_twice(self) -> list[str]:
        return sorted(j for j, n in self.done_records.items() if n > 1) + sorted(j for j, o in self.overlaps.items() if o)

    def problems(self) -> list[str]:
        """Every broken promise, as a sentence (empty when the run kept them all)."""
        out = []
        for j, rec in self.jobs.items():
            if rec["status"] == "done":
                if rec["steps_done"] != self.expected_steps[j]:
                    out.append(f"{j}: done with {rec['steps_done']} of {self.expected_steps[j]} steps")
                if self.done_records.get(j, 0) != 1:
                    out.append(f"{j}: {self.done_records.get(j, 0)} 'done' records (trained to the end that often)")
            elif rec["status"] == "failed":
                if not (rec.get("reason") or "").strip():
                    out.append(f"{j}: failed without a reason")
            else:
                out.append(f"{j}: still {rec['status']} at the end")
        missing = set(self.expected_steps) - set(self.jobs)
        out += [f"{j}: lost (not in the store)" for j in sorted(missing)]
        for j, pairs in self.overlaps.items():
            out += [f"{j}: runs {a} and {b} wrote its folder at the same time" for a, b in pairs]
        if self.intruders_started:
            out.append(f"{self.intruders_started} second service(s) started on a store that had an owner")
        for b in self.boundaries:
            if b.kind != "stop" and b.lost > b.allowed:
                out.append(f"{b.job}: a {b.kind} lost {b.lost} steps, more than {b.allowed} ({1 + b.destroyed} "
                           f"checkpoint interval(s) of {b.interval_steps} steps)")
            if b.kind == "stop" and b.lost > 0:
                out.append(f"{b.job}: a checkpointed stop lost {b.lost} steps")
        return out

    def summary(self) -> dict:
        lost = defaultdict(list)
        for b in self.boundaries:
            lost[b.kind].append(b.lost)
        return {
            "elapsed_s": round(self.elapsed_s, 1),
            "faults_injected": dict(self.faults_by_kind),
            "faults_skipped": sum(f.outcome != "injected" for f in self.faults),
            "jobs": len(self.expected_steps), "finished": len(self.finished), "failed": len(self.failed),
            "failed_reasons": self.failed,
            "run_boundaries": {k: len(v) for k, v in lost.items()},
            "steps_lost_max": {k: max(v) for k, v in lost.items()},
            "steps_lost_mean": {k: round(sum(v) / len(v), 1) for k, v in lost.items()},
            "checkpoint_interval_steps_median": _median([b.interval_steps for b in self.boundaries]),
            "jobs_run_twice": len(self.run_twice),
            "second_services_started": self.intruders_started,
            "problems": self.problems(),
        }


def _median(xs: list[int]) -> float | None:
    xs = sorted(xs)
    return None if not xs else float(xs[len(xs) // 2])


class _Injector:
    def __init__(self, tmp: Path, cfg: ChaosConfig):
        self.tmp, self.cfg = Path(tmp), cfg
        self.rng = random.Random(cfg.seed)
        self.svc = Service(self.tmp / "svc", cfg.policy, cfg.nodes, stop_jobs_on_exit=False)
        self.faults: list[Fault] = []
        self.intruders_started = 0
        self.corrupted: dict[str, list[float]] = defaultdict(list)  # job -> when its checkpoint was corrupted

    # -- what is running
    def running(self) -> list[dict]:
        try:
            return [j for j in self.svc.jobs() if j["status"] == "running"]
        except httpx.HTTPError:
            return []

    def trainer_pids(self, job_id: str) -> list[int]:
        try:
            data = json.loads((self.svc.job_dir(job_id) / "pids.json").read_text())
        except (OSError, ValueError):
            return []
        return [p for p in _pids(data) if psutil.pid_exists(p)]

    def _shuffled_running(self) -> list[dict]:
        jobs = self.running()
        self.rng.shuffle(jobs)
        return jobs

    # -- faults
    def inject(self, kind: str) -> Fault:
        fault = Fault(time.time(), kind)
        try:
            getattr(self, "_" + kind.replace("-", "_"))(fault)
        except httpx.HTTPError as exc:  # the service was between lives: count it as not injected
            fault.outcome = f"skipped: {exc.__class__.__name__}"
        self.faults.append(fault)
        return fault

    def training(self, job_id: str) -> bool:
        """The job's current run (pids.json) has written its `start` record: it trains."""
        job_dir = self.svc.job_dir(job_id)
        try:
            run = json.loads((job_dir / "pids.json").read_text())["run"]
            recs = progress_records(job_dir)
        except (OSError, ValueError, KeyError):
            return False
        return any(r.get("run") == run and r.get("event") == "start" for r in recs)

    def _kill_trainer(self, fault: Fault) -> None:
        for job in self._shuffled_running():
            pids = self.trainer_pids(job["id"])
            if pids and self.training(job["id"]):
                fault.job = job["id"]
                os.kill(self.rng.choice(pids), signal.SIGKILL)
                fault.outcome = "injected"
                return
        fault.outcome = "skipped: nothing training"

    def _kill_service(self, fault: Fault) -> None:
        self.svc.kill()
        time.sleep(self.rng.uniform(0.2, 1.5))
        self.svc.start()
        fault.outcome = "injected"

    def _corrupt_checkpoint(self, fault: Fault) -> None:
        for job in self._shuffled_running():
            ckpt = _newest_checkpoint(self.svc.job_dir(job["id"]))
            pids = self.trainer_pids(job["id"])
            if ckpt is None or not pids:
                continue
            fault.job = job["id"]
            ckpt.write_bytes(self.rng.randbytes(self.rng.randint(1, 4096)))
            self.corrupted[job["id"]].append(time.time())
            for pid in pids:  # the next run must read what we wrote
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            fault.outcome = "injected"
            return
        fault.outcome = "skipped: no running job with a checkpoint"

    def _second_service(self, fault: Fault) -> None:
        intruder = Service(self.tmp / f"intruder{len(self.faults)}", self.cfg.policy, self.cfg.nodes,
                           work_dir=str(self.svc.tmp / "work"), stop_jobs_on_exit=True)
        log = open(intruder.tmp / "service.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "dlsched.cli", "serve", "--config", str(intruder.config)],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:  # it came up: a broken promise; stop it the way an operator would
            self.intruders_started += 1
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(60)
        fault.outcome = "injected"
        fault.job = f"exit {code}"


def _schedule(rng: random.Random, cfg: ChaosConfig) -> list[str]:
    """`cfg.faults` kinds in a seeded order: every kind with a weight at least once (when there are
    enough faults), the rest drawn by weight."""
    kinds = [k for k, w in cfg.weights.items() if w > 0]
    out = kinds[: cfg.faults]
    out += rng.choices(kinds, [cfg.weights[k] for k in kinds], k=cfg.faults - len(out))
    rng.shuffle(out)
    return out


def _newest_checkpoint(job_dir: Path) -> Path | None:
    files = [p for p in Path(job_dir).glob("checkpoint*.pt") if p.is_file()]
    return max(files, key=lambda p: p.stat().st_mtime) if files else None


def run_chaos(tmp: Path, cfg: ChaosConfig, progress=None) -> ChaosReport:
    """Submit `cfg.jobs` jobs, inject `cfg.faults` faults while they run, wait for every job to end."""
    inj = _Injector(tmp, cfg)
    t0 = time.time()
    inj.svc.start()
    expected: dict[str, int] = {}
    try:
        for i in range(cfg.jobs):
            steps = inj.rng.randint(*cfg.steps)
            workers = inj.rng.choice((1, 1, 2))
            job = inj.svc.submit(name=f"chaos{i}", model=inj.rng.choice(("mlp", "cnn")), steps=steps, seed=i,
                                 batch_size=32, workers=workers, checkpoint_every_s=cfg.checkpoint_every_s)
            expected[job["id"]] = steps
        schedule = _schedule(inj.rng, cfg)
        deadline = t0 + cfg.timeout_s
        while schedule and time.time() < deadline:
            time.sleep(inj.rng.uniform(*cfg.gap_s))
            if all_ended(inj.svc.jobs()):  # ran out of work before faults: more jobs keep the faults honest
                i = len(expected)
                steps = inj.rng.randint(*cfg.steps)
                job = inj.svc.submit(name=f"chaos{i}", model="mlp", steps=steps, seed=i, batch_size=32,
                                     checkpoint_every_s=cfg.checkpoint_every_s)
                expected[job["id"]] = steps
                continue
            fault = inj.inject(schedule.pop(0))
            if fault.outcome != "injected":
                schedule.append(fault.kind)  # nothing to hit right now: try that kind again later
            if progress is not None:
                progress(fault)
        jobs = inj.svc.wait(all_ended, max(60.0, deadline - time.time()), "every job to end after the faults")
    finally:
        inj.svc.stop()
    final = {j["id"]: j for j in jobs}
    report = ChaosReport(faults=inj.faults, jobs=final, expected_steps=expected, boundaries=[], done_records={},
                         overlaps={}, intruders_started=inj.intruders_started, elapsed_s=time.time() - t0)
    for job_id in expected:
        recs = progress_records(inj.svc.job_dir(job_id)) if (inj.svc.job_dir(job_id) / "progress.jsonl").exists() else []
        report.done_records[job_id] = sum(r.get("event") == "done" for r in recs)
        report.overlaps[job_id] = _overlapping_runs(recs)
        report.boundaries += _boundaries(job_id, recs, inj.corrupted.get(job_id, []))
    return report


def _runs(recs: list[dict]) -> list[list[dict]]:
    """The records grouped by run, in the order the runs started."""
    by: dict[str, list[dict]] = {}
    for r in recs:
        by.setdefault(str(r.get("run")), []).append(r)
    return sorted(by.values(), key=lambda rs: rs[0]["time"])


def _overlapping_runs(recs: list[dict]) -> list[tuple[str, str]]:
    """Pairs of runs whose records interleave in time: two trainers writing one folder at once."""
    spans = [(rs[0]["time"], rs[-1]["time"], str(rs[0].get("run"))) for rs in _runs(recs)]
    return [(a[2], b[2]) for a, b in zip(spans, spans[1:]) if b[0] < a[1]]


def _checkpoint_interval_steps(runs: list[list[dict]]) -> int:
    """What one checkpoint interval costs this job in steps: the largest gap between two consecutive
    checkpoints of one run (the state a run resumed from counts as its first)."""
    gaps = [0]
    for rs in runs:
        marks = [r.get("resumed_from", 0) for r in rs if r.get("event") == "start"][:1]
        marks += [r["step"] for r in rs if r.get("event") == "checkpoint"]
        gaps += [b - a for a, b in zip(marks, marks[1:])]
    return max(gaps)


def _boundaries(job_id: str, recs: list[dict], corrupted_at: list[float]) -> list[Boundary]:
    out = []
    runs = _runs(recs)
    interval = _checkpoint_interval_steps(runs)
    for ended, nxt in zip(runs, runs[1:]):
        start = next((r for r in nxt if r.get("event") == "start"), None)
        if start is None:
            continue
        resumed = int(start.get("resumed_from", 0))
        # when the checkpoint resumed from was written (the job's first record for step 0)
        since = next((r["time"] for r in recs if r.get("event") == "checkpoint" and r.get("step") == resumed),
                     recs[0]["time"])
        destroyed = sum(since <= t <= start["time"] for t in corrupted_at)
        stopped = any(r.get("event") == "stop" for r in ended)
        kind = ("stop" if stopped else "corrupt-all" if destroyed >= KEEP else "corrupt" if destroyed else "crash")
        out.append(Boundary(job_id, kind,
                            last_step=max(r.get("step", 0) for r in ended), resumed_from=resumed,
                            interval_steps=interval, destroyed=destroyed))
    return out
