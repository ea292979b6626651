"""Replay a trace slice on a real Kubernetes API server, in compressed wall-clock time.

The simulator claims to predict what a cluster does; a replay checks that claim against the real
control plane. The trace's jobs are submitted at their arrival times, compressed (`speedup` trace
seconds pass each wall second), to a kube-apiserver whose kwok nodes are shaped like the
simulated cluster (`mirror_nodes`), and either

- a dlsched policy schedules them (`replay_policy`) through the live service's own `Controller`
  and `KubernetesBackend`, exactly as `dlsched serve --backend kubernetes` would: pods bound by
  dlsched, gangs, restarts and resizes as pod deletes and creates; or
- the real kube-scheduler places them (`replay_kube_scheduler` in `default_scheduler.py`).

Each run's pods complete when the job's throughput model says it would: the backend's sim mode
gives each run the model's rate on its allocation (`rate=`) and the run ends at
that trace instant (the backend judges a run done when its made-up step reaches the job's steps,
and `forget` deletes its pods). The controller runs on trace time (a `SteppedClock`: still during a
round; between rounds it moves to the next arrival, run end or policy timer, at most `tick *
speedup` trace seconds), so the policies decide at the simulator's instants, their intervals,
deadlines and overheads are the simulator's, and the API's latency never stretches a job. A replay
gives a `SimResult`, so one jobs.csv / summary / report serves simulated and replayed runs.

What a replay cannot match exactly, and why: jobs that arrive or end at the same trace instant
share a round, as in the simulator, but the API carries out a round's decisions in wall time, so
a pod created in it may be seen a round later; and kube-scheduler's choices (its scoring, its
random tie-breaks, its queue's timing) are its own. Rounds once paced every `tick * speedup` trace
seconds decided up to that long after an arrival or a completion: the replayed deadlines met
fell 7–12 points below the simulation's at 900 s a round (BENCHMARKS.md, issue 28).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

import numpy as np

from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import Architecture, JobSpec
from dlsched.core.snapshot import JobState, JobStatus
from dlsched.sim.config import SimConfig
from dlsched.sim.results import SimResult, Timeline

if TYPE_CHECKING:
    from dlsched.core.policy import Policy
    from dlsched.k8s.controlplane import ControlPlane
    from dlsched.live.spec import TrainJob
    from dlsched.throughput.base import ThroughputModel

#: What a replayed run's policy is called in tables and reports: "fifo@k8s".
REPLAY_SUFFIX = "@k8s"
#: The pseudo-policy name of the real kube-scheduler in `dlsched replay --policies`.
KUBE_SCHEDULER = "kube-scheduler"


class SteppedClock:
    """Trace time for a replay: it stands still during a round and moves `step` trace seconds
    between rounds (`advance`). A round paced at `tick` wall seconds makes `step / tick` the
    speedup; a round that takes longer (a slow API, a busy machine) holds the trace still instead
    of letting the trace run ahead of the controller, so a replay's result depends on the control
    plane's behaviour, never on this machine's speed — only its wall time does."""

    def __init__(self, step: float, origin: float = 0.0):
        if not step > 0:
            raise ConfigError(f"the trace time per round must be > 0, got {step!r}")
        self.step, self.t = float(step), float(origin)

    def __call__(self) -> float:
        return self.t

    def advance(self, until: float | None = None) -> None:
        """Move on `step` trace seconds, or only to `until` when that comes first (the next
        arrival, completion or policy timer: what the simulator would decide at)."""
        self.t = min(self.t + self.step, until) if until is not None and until > self.t else self.t + self.step


@dataclass
class Replay:
    """One replayed run: its result in the simulator's form, and how the control plane kept up."""

    result: SimResult
    wall_seconds: float
    speedup: float
    tick: float  # wall seconds between rounds
    decision_seconds: list[float] = field(default_factory=list)  # wall time of each policy call
    decision_to_bound: list[float] = field(default_factory=list)  # policy call -> its pods bound (wall)
    pods_created: int = 0
    notes: list[str] = field(default_factory=list)
    launch_seconds: list[tuple[int, float]] = field(default_factory=list)  # (pods bound, wall s) per apply

    def figures(self) -> dict[str, float | int | None]:
        """The control plane's side of the run, for the summary and the benchmarks."""
        def p(xs: list[float], q: float) -> float | None:
            return float(np.percentile(xs, q)) if xs else None

        return {"replay_wall_s": round(self.wall_seconds, 1), "replay_speedup": self.speedup,
                "replay_tick_s": self.tick, "pods_created": self.pods_created,
                "pods_per_s": round(self.pods_created / self.wall_seconds, 2) if self.wall_seconds > 0 else None,
                "decision_p50_ms": _ms(p(self.decision_seconds, 50)), "decision_p99_ms": _ms(p(self.decision_seconds, 99)),
                "decision_to_bound_p50_ms": _ms(p(self.decision_to_bound, 50)),
                "decision_to_bound_p99_ms": _ms(p(self.decision_to_bound, 99)),
                "bind_pods_per_s": self.bind_rate()}

    def bind_rate(self) -> float | None:
        """Pods created and bound per wall second of the backend's launch work (dlsched's runs)."""
        pods, secs = sum(n for n, _ in self.launch_seconds), sum(s for _, s in self.launch_seconds)
        return round(pods / secs, 1) if secs > 0 and pods else None


def _ms(x: float | None) -> float | None:
    return None if x is None else round(1000 * x, 1)


# ---------------------------------------------------------------------------- the nodes
def mirror_nodes(cp: "ControlPlane", cluster: Cluster, pool: str) -> list[str]:
    """kwok nodes in `pool` shaped like `cluster`'s nodes (GPUs, CPUs, memory, GPU type, racks),
    one group of `add_nodes` per node shape. Node speeds are not mirrored: a replay's machines
    run at nominal speed (refuse a cluster whose speeds vary before calling this)."""
    shapes: dict[tuple, list[int]] = {}
    for i in range(cluster.num_nodes):
        g, c, m = cluster.capacity[i]
        shapes.setdefault((int(g), int(math.floor(c)), int(math.floor(m)), str(cluster.gpu_type[i])), []).append(i)
    names: list[str] = []
    for k, ((gpus, cpus, mem, gpu_type), idx) in enumerate(sorted(shapes.items(), key=lambda kv: kv[1][0])):
        racks = len({int(cluster.rack[i]) for i in idx})
        names += cp.add_nodes(len(idx), gpus_per_node=gpus, racks=racks, gpu_type=_label_value(gpu_type), pool=pool,
                              cpus=max(1, cpus), mem=f"{max(1, mem)}Gi", prefix=f"{pool}-s{k}-", timeout=600)
    return names


def _label_value(text: str) -> str:
    """A GPU type as a label value (letters, digits, '-', '_', '.'; at most 63)."""
    out = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in text).strip("-_.")[:63]
    return out or "generic"


def check_replayable(cluster: Cluster) -> None:
    if not np.allclose(cluster.speed, 1.0):
        raise ConfigError("a replay runs every machine at nominal speed: drop --variability (machine speeds "
                          "cannot be mirrored on kwok nodes)")


# ---------------------------------------------------------------------------- the jobs
def stand_in(spec: JobSpec) -> "TrainJob":
    """The stored job behind a trace job: its size, demands, deadline and priority, with steps =
    its iterations (rounded up). The scheduler never reads it: `spec_of` gives it the trace's own
    `JobSpec`. Raises ConfigError for what a stored job cannot hold."""
    from pydantic import ValidationError

    from dlsched.live.spec import TrainJob

    ps = spec.arch is Architecture.PS
    try:
        return TrainJob(
            name=spec.job_id[:100], model="mlp", mode="ps" if ps else "ddp", steps=max(1, math.ceil(spec.iterations)),
            workers=spec.num_workers, min_workers=spec.min_workers, max_workers=spec.max_workers,
            ps=spec.num_ps if ps else 1, min_ps=spec.min_ps if ps else None, max_ps=spec.max_ps if ps else None,
            gpus_per_worker=spec.worker_demand[0], cpus_per_worker=spec.worker_demand[1],
            mem_gb_per_worker=spec.worker_demand[2], cpus_per_ps=spec.ps_demand[1], mem_gb_per_ps=spec.ps_demand[2],
            deadline_s=None if spec.deadline is None else max(1e-3, spec.deadline - spec.submit_time),
            priority=int(np.clip(spec.priority, -1000, 1000)), user=(spec.user or "default")[:100],
            work_known=bool(spec.work_known))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(f"trace job {spec.job_id} cannot be replayed: {'.'.join(map(str, first['loc']))}: "
                          f"{first['msg']}") from None


def next_round(clock: SteppedClock, tick: float, round_began: float, t_wall: float, timeout: float,
               events: Iterable[float | None] = ()) -> str:
    """Pace a replay and move its trace clock on: to the earliest of `events` still ahead (an
    arrival, a run's end, a policy timer) if it comes within the clock's step, else by the step.
    The round takes its share of `tick` wall seconds (a whole step, all of it; a 60 s policy timer
    in a 900 s step, a fifteenth), counted from `round_began` (monotonic), so `step / tick` stays
    the speedup however many events fall in between. Returns why the replay must stop instead (""
    to go on): `timeout` wall seconds since `t_wall` (time.time) have passed."""
    if time.time() - t_wall > timeout:
        return f"the replay stopped after its timeout ({timeout:g} s wall)"
    now = clock()
    clock.advance(min((t for t in events if t is not None and now < t < math.inf), default=None))
    share = (clock() - now) / clock.step
    time.sleep(max(0.0, tick * share - (time.monotonic() - round_began)))
    return ""


def _settle_unfinished(states: list[JobState], now: float, reason: str) -> None:
    """Jobs still waiting or running when a replay stops, as the simulator leaves them."""
    for js in states:
        was = js.status
        js.settle(now)
        js.status = JobStatus.UNFINISHED
        js.reason = "still waiting when the run ended" if was is JobStatus.PENDING and not reason else (
            reason or "the run ended first")


def as_trace_rows(states: list[JobState], trace_id: dict[str, str]) -> list[JobState]:
    """The jobs under their trace ids (the controller knew them by store id), so a replay's rows
    line up one to one with the simulation's."""
    for js in states:
        tid = trace_id.get(js.spec.job_id)
        if tid is not None:
            js.spec = dataclasses.replace(js.spec, job_id=tid)
    return states


def pool_cluster(kubeconfig: str | Path, namespace: str, pool: str) -> Cluster:
    """The pool's nodes as dlsched's backend reads them (the same Cluster, in the same order), for
    the runs that do not go through the backend: the simulations and kube-scheduler's replay."""
    from dlsched.live.backends.kubernetes import KubernetesBackend

    probe = KubernetesBackend(kubeconfig=kubeconfig, namespace=namespace, pool=pool, leader_election=False,
                              count_foreign=False)
    try:
        return probe.cluster()
    finally:
        probe.close()


# ---------------------------------------------------------------------------- dlsched's policies
def replay_policy(specs: list[JobSpec], policy: "Policy", throughput: "ThroughputModel", cfg: SimConfig, *,
                  kubeconfig: str | Path, namespace: str, pool: str, speedup: float, work_dir: Path,
                  tick: float = 0.25, timeout: float = 3600.0,
                  on_progress: Callable[[int, int], None] | None = None) -> Replay:
    """`specs` through the live controller and the Kubernetes backend on a `SteppedClock`: the
    controller's time is trace time (jobs arrive at their own `submit_time`), a round at each
    arrival, run end and policy timer, at most `tick * speedup` trace seconds apart, paced at
    `speedup` (`next_round`). Stops when every job has
    ended, or after `timeout` wall seconds (the rest UNFINISHED)."""
    from dlsched.live.backends.kubernetes import KubernetesBackend
    from dlsched.live.controller import Controller
    from dlsched.live.controller.retry import RetryConfig
    from dlsched.live.store import Store

    if not specs:
        raise ConfigError("nothing to replay: the workload has no jobs")
    specs = sorted(specs, key=lambda s: s.submit_time)
    jobs = [stand_in(s) for s in specs]  # every job checked before anything starts
    clock = SteppedClock(tick * speedup, origin=specs[0].submit_time)
    by_id: dict[str, JobSpec] = {}
    holder: dict[str, Cluster] = {}

    def rate(launch) -> float:
        return throughput.rate(by_id[launch.job_id], launch.allocation, holder["cluster"])

    backend = KubernetesBackend(kubeconfig=kubeconfig, namespace=namespace, pool=pool, mode="sim",
                                startup=cfg.startup_overhead, restart_startup=cfg.restart_overhead,
                                leader_election=False, clock=clock, rate=rate)
    cluster = holder["cluster"] = backend.cluster()
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    store = Store(f"sqlite:///{work_dir / 'dlsched.db'}")
    ended: dict[str, JobState] = {}
    trace_id: dict[str, str] = {}
    timeline = Timeline()
    t_wall = time.time()
    try:
        store.set_meta("epoch", "0.0")  # controller time == trace time

        def spec_of(view, submit: float) -> JobSpec:
            spec = by_id[view.id]
            shift = submit - spec.submit_time
            return dataclasses.replace(spec, job_id=view.id, submit_time=submit,
                                       deadline=None if spec.deadline is None else spec.deadline + shift)

        ctl = Controller(store, backend, policy, work_dir=work_dir, tick=tick * speedup, clock=clock,
                         seed=cfg.seed, restart_overhead=cfg.restart_overhead, spec_of=spec_of, profile=throughput,
                         retry=RetryConfig(backoff_initial=0, backoff_max=0))
        ctl.on_ended = lambda js: ended.__setitem__(js.job_id, js)
        nxt = 0
        while True:
            t0 = time.monotonic()
            now = clock()
            while nxt < len(specs) and specs[nxt].submit_time <= now:
                view = store.add(jobs[nxt], now=specs[nxt].submit_time)
                by_id[view.id], trace_id[view.id] = specs[nxt], specs[nxt].job_id
                nxt += 1
            ctl.step()
            s = ctl.state
            timeline.record(ctl.now(), s.busy_gpus + s.held_gpus, s.busy_gpus, s.held_gpus, len(s.pending),
                            len(s.running))
            if on_progress is not None:
                on_progress(len(ended), len(specs))
            if nxt == len(specs) and len(ended) == len(specs):
                stop_reason = ""
                break
            # the next round at the next arrival, run end or policy timer, as the simulator decides
            stop_reason = next_round(clock, tick, t0, t_wall, timeout,
                                     (specs[nxt].submit_time if nxt < len(specs) else None, backend.next_sim_end(),
                                      ctl.triggers.next_time()))
            if stop_reason:
                break
        end = ctl.now()
        left = list(ctl.state.jobs.values())
        ctl.shutdown(stop_jobs=True)
        _settle_unfinished(left, end, stop_reason)
        states = as_trace_rows(list(ended.values()) + left, trace_id)
        res = SimResult.build(policy.name + REPLAY_SUFFIX, cluster, sorted(states, key=lambda j: j.spec.submit_time),
                              timeline, end, ctl.decisions, cfg, throughput=throughput)
        rep = Replay(res, time.time() - t_wall, speedup, tick, list(ctl.decision_times), list(ctl.decision_to_bound),
                     pods_created=backend.pods_created, launch_seconds=list(backend.launch_seconds))
        res.summary.update(rep.figures())
        return rep
    finally:
        backend.close()
        store.close()


def describe(replays: list[Replay]) -> list[str]:
    """One line per replay for the report's notes: what ran where, and how fast the API kept up."""
    out = []
    for r in replays:
        f = r.figures()
        out.append(f"{r.result.policy}: replayed on a real kube-apiserver with kwok nodes, a round at each arrival, "
                   f"job end and policy timer, at most {r.tick * r.speedup:g} s of trace apart, paced at "
                   f"{r.speedup:g}x, {r.wall_seconds:.0f} s "
                   f"wall, {r.pods_created} pods created; decision p99 {f['decision_p99_ms']} ms, decision to "
                   f"bound p99 {f['decision_to_bound_p99_ms']} ms" + (f"; {'; '.join(r.notes)}" if r.notes else ""))
    return out
