"""A seeded fault injector against the live controller on Kubernetes (kwok nodes, sim mode).

Why it exists: the Kubernetes backend has one test per fault (a pod deleted behind its back, a
node NotReady, a leader failover, a dropped watch), but faults compound: a leader killed while a
node is down, an API server restart in the middle of a resize, a pod deleted while nobody leads.
This drives them together from one seed, as `tests/chaos.py` does for the local backend, and then
checks the promises on what the API server recorded (a watch of every pod of the namespace, kept
by the harness itself) and on what the store says, not on what a controller believes.

The controllers: `candidates` processes (`python -m tests.k8s_chaos controller CONF`), each the
store, the Kubernetes backend (with leader election) and the controller that `dlsched serve
--backend kubernetes` builds, stepping every `tick` seconds. All but the leader wait in the
backend's constructor for the Lease. They share one SQLite store and one work dir, as replicas
share a database and a volume; unlike `dlsched serve` they take no store lease, which would keep a
standby from starting at all (the Deployment runs one replica for that reason, `Recreate`): here
the Kubernetes Lease alone decides who acts, which is what is under test. A supervisor (the
harness, as a kubelet would) starts a new candidate whenever one exits, so there is always one
waiting.

Faults, by kind:
- `kill-leader`: SIGKILL (by PID) the candidate that holds the Lease: no clean-up, no hand-over;
  another takes over when the lease expires and adopts the running pods.
- `node-notready`: label a pool node `dlsched.test/node-down=true` (kwok's stage turns it
  NotReady); wait until no live pod of ours is bound to it (at most `node_clear_s`: pods still
  there then are "left on a dead node"), keep it down a little longer, then heal it.
- `delete-pod`: delete a Running pod of a job (gracefully or with grace 0, seeded) behind
  dlsched's back.
- `restart-apiserver`: stop kube-apiserver by PID and start it again on the same port, etcd and
  certificates (`ControlPlane.restart_apiserver`).

`run_k8s_chaos` returns a `K8sChaosReport`; `tests/test_k8s_chaos.py` runs a small one in CI and
`benchmarks/k8s_faults.py` a larger one (figures in BENCHMARKS.md and docs/KUBERNETES.md).
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

KINDS = ("kill-leader", "node-notready", "delete-pod", "restart-apiserver")
DOWN_LABEL = "dlsched.test/node-down"
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class K8sChaosConfig:
    jobs: int = 14
    faults: int = 6
    seed: int = 0
    nodes: int = 4
    gpus_per_node: int = 4
    steps: tuple[int, int] = (60, 160)  # each job's steps, drawn uniformly
    workers: tuple[int, int] = (1, 3)  # requested workers, drawn uniformly
    elastic_share: float = 0.5  # jobs that may grow to 4 workers (resizes under DRF)
    arrivals_s: float = 10.0  # jobs arrive over the first this-many seconds
    first_fault_s: float = 3.0  # after the first controller leads
    gap_s: tuple[float, float] = (1.0, 3.0)  # pause between two faults
    weights: dict[str, float] = field(default_factory=lambda: {"kill-leader": 1, "node-notready": 2,
                                                               "delete-pod": 3, "restart-apiserver": 1})
    policy: str = "drf"
    tick: float = 0.25
    rate_per_worker: float = 10.0
    startup: float = 0.5
    # a short lease keeps a failover within seconds; the renew deadline outlasts most API server
    # restarts (about 8 s here), so a leader usually keeps its lease through one
    lease: dict[str, float] = field(default_factory=lambda: {"lease_duration": 10, "renew_period": 1.0,
                                                             "renew_deadline": 8.0, "retry_period": 0.5})
    retry: dict[str, float] = field(default_factory=lambda: {"attempts": 5, "backoff_initial": 1.0,
                                                             "backoff_max": 4.0})
    candidates: int = 2
    apiserver_grace_s: float = 2.0  # SIGTERM, then SIGKILL: it stops listening at once but waits for watches
    node_down_s: tuple[float, float] = (0.5, 2.0)  # kept down this much longer once its pods are gone
    node_clear_s: float = 30.0  # a NotReady node must be free of our pods within this (a failover included)
    timeout_s: float = 300.0


@dataclass
class K8sFault:
    time: float
    kind: str
    target: str = ""
    outcome: str = ""
    seconds: float | None = None  # takeover after a kill, downtime of an API restart, time to clear a node


@dataclass
class K8sChaosReport:
    cfg: K8sChaosConfig
    faults: list[K8sFault]
    jobs: dict[str, dict]  # job id -> {status, reason, steps_done, steps, done_events}
    succeeded_attempts: dict[str, list[int]]  # job id -> attempts that trained it to the end (analyse_pods)
    overlaps: list[str]  # two attempts of one job Running at once, as sentences
    left_on_dead_nodes: list[str]  # pods still bound to a NotReady node after node_clear_s
    pods_left_running: list[str]  # live pods of ours at the end (every job ended)
    leaders: list[str]  # Lease holders in the order they led
    candidate_exits: Counter  # exit reason -> count
    pod_events: int
    elapsed_s: float

    @property
    def faults_by_kind(self) -> Counter:
        return Counter(f.kind for f in self.faults if f.outcome == "injected")

    @property
    def finished_once(self) -> list[str]:
        return sorted(j for j, r in self.jobs.items() if r["status"] == "done" and r["done_events"] == 1
                      and len(self.succeeded_attempts.get(j, [])) <= 1 and r["steps_done"] == r["steps"])

    @property
    def failed(self) -> dict[str, str]:
        return {j: r["reason"] for j, r in self.jobs.items() if r["status"] == "failed"}

    @property
    def run_twice(self) -> list[str]:
        twice = {j for j, a in self.succeeded_attempts.items() if len(a) > 1}
        twice |= {j for j, r in self.jobs.items() if r["done_events"] > 1}
        twice |= {s.split(":")[0] for s in self.overlaps}
        return sorted(twice)

    def problems(self) -> list[str]:
        out = []
        for j, r in sorted(self.jobs.items()):
            if r["status"] == "done":
                if r["steps_done"] != r["steps"]:
                    out.append(f"{j}: done with {r['steps_done']} of {r['steps']} steps")
                if r["done_events"] != 1:
                    out.append(f"{j}: {r['done_events']} 'done' events")
                if len(self.succeeded_attempts.get(j, [])) > 1:
                    out.append(f"{j}: attempts {self.succeeded_attempts[j]} each trained it to the end")
            elif r["status"] == "failed":
                if not r["reason"].strip():
                    out.append(f"{j}: failed without a reason")
            else:
                out.append(f"{j}: still {r['status']} at the end")
        out += self.overlaps
        out += [f"left on a dead node: {p}" for p in self.left_on_dead_nodes]
        out += [f"still running after every job ended: {p}" for p in self.pods_left_running]
        return out

    def summary(self) -> dict:
        secs: dict[str, list[float]] = defaultdict(list)
        for f in self.faults:
            if f.outcome == "injected" and f.seconds is not None:
                secs[f.kind].append(f.seconds)
        return {
            "elapsed_s": round(self.elapsed_s, 1),
            "seed": self.cfg.seed,
            "faults_injected": dict(sorted(self.faults_by_kind.items())),
            "faults_not_injected": sum(f.outcome != "injected" for f in self.faults),
            "fault_seconds_max": {k: round(max(v), 2) for k, v in sorted(secs.items())},
            "fault_seconds_mean": {k: round(sum(v) / len(v), 2) for k, v in sorted(secs.items())},
            "jobs": len(self.jobs),
            "finished_once": len(self.finished_once),
            "failed_with_reason": sum(bool(r.strip()) for r in self.failed.values()),
            "failed_reasons": self.failed,
            "jobs_run_twice": len(self.run_twice),
            "pods_left_on_dead_nodes": len(self.left_on_dead_nodes),
            "pods_left_running": len(self.pods_left_running),
            "leaders": len(self.leaders),
            "candidate_exits": dict(self.candidate_exits),
            "pod_events_recorded": self.pod_events,
            "problems": self.problems(),
        }


# ====================================================================== the controller process


def controller_main(conf_path: str) -> int:
    """One candidate: store + Kubernetes backend (waits for the Lease) + controller, stepping until
    SIGTERM (then it leaves the jobs running and hands the Lease over) or until it loses the
    Lease (exit 3: the jobs are the new leader's)."""
    conf = json.loads(Path(conf_path).read_text())
    logging.basicConfig(filename=conf["log"], level=logging.INFO,
                        format="%(asctime)s.%(msecs)03d %(process)d %(threadName)s %(name)s %(levelname)s %(message)s",
                        datefmt="%H:%M:%S")
    log = logging.getLogger("k8s-chaos")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    from dlsched.live.backends.kubernetes import KubernetesBackend
    from dlsched.live.controller import Controller
    from dlsched.live.controller.retry import RetryConfig
    from dlsched.live.store import Store
    from dlsched.policies.registry import make_policy

    backend = KubernetesBackend(kubeconfig=conf["kubeconfig"], namespace=conf["namespace"], pool=conf["pool"],
                                rate_per_worker=conf["rate_per_worker"], startup=conf["startup"],
                                leader_wait_s=None, lease_options=conf["lease"])
    log.info("leading as %s", backend.lease.identity)
    store = Store(conf["db"])
    ctl = Controller(store, backend, make_policy(conf["policy"]), work_dir=Path(conf["work"]), tick=conf["tick"],
                     retry=RetryConfig(**conf["retry"]))
    while not stop.is_set() and not backend.lost():
        try:
            ctl.step()
        except Exception:  # noqa: BLE001 - as Controller.run: the next round may succeed
            log.exception("controller round failed")
        stop.wait(conf["tick"])
    if backend.lost():
        log.error("lost the Lease (%s): leaving the jobs to the new leader", backend.lost())
        backend.detach()
        return 3
    ctl.shutdown(stop_jobs=False)
    backend.detach()
    store.close()
    log.info("stopped; jobs left running for the next leader")
    return 0


# ====================================================================== the harness


class _Candidate:
    def __init__(self, n: int, conf: dict, work: Path):
        self.n = n
        self.log = work / "logs" / f"controller-{n}.log"
        path = work / "logs" / f"controller-{n}.json"
        path.write_text(json.dumps({**conf, "log": str(self.log)}))
        env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy",
                                                                          "kubeconfig")}
        self.err = open(work / "logs" / f"controller-{n}.err", "wb")  # noqa: SIM115 - closed when it is reaped
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.k8s_chaos", "controller", str(path)], cwd=ROOT,
                                     env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.err,
                                     start_new_session=True)
        self.killed = False

    @property
    def pid(self) -> int:
        return self.proc.pid


class _PodRecorder:
    """Every change to the namespace's dlsched pods, in the API server's order (one watch, relisted
    after every break: deletions in a gap come first, as DELETED)."""

    def __init__(self, kubeconfig: Path, namespace: str):
        from dlsched.live.backends import k8s_pods as kp
        from dlsched.live.backends.k8s_api import KubeApi, load_config
        from dlsched.live.backends.k8s_watch import Reflector, pod_info, warm_decoders
        from lightkube.resources.core_v1 import Pod

        warm_decoders()
        self.cond = threading.Condition(threading.RLock())
        self.events: list[tuple[float, str, str, Any]] = []  # (time, kind, uid, PodInfo: new, or old if DELETED)
        self.api = KubeApi(load_config(str(kubeconfig), None), namespace, workers=2)
        self.reflector = Reflector("chaos-pods", self.api.watch_client, Pod, cond=self.cond, namespace=namespace,
                                   labels={kp.MANAGED_BY[0]: kp.MANAGED_BY[1]}, transform=pod_info,
                                   on_change=self._changed)

    def _changed(self, kind: str, uid: str, new: Any, old: Any) -> None:
        if kind == "MODIFIED" and new == old:
            return  # a relist that found nothing new
        self.events.append((time.time(), kind, uid, new if new is not None else old))

    def start(self) -> None:
        self.reflector.start()
        if not self.reflector.synced.wait(30):
            raise RuntimeError("the pod recorder's first list did not come")

    def live(self) -> list[Any]:
        """Pods of ours the API has now (as last seen) that are not terminated."""
        with self.cond:
            return [p for p in self.reflector.items.values() if p.phase not in ("Succeeded", "Failed")]

    def stop(self) -> None:
        self.reflector.stop()
        self.api.close()


def _job_of(info: Any) -> tuple[str, int]:
    from dlsched.live.backends import k8s_pods as kp

    return info.annotations.get(kp.A_JOB_ID) or info.labels.get(kp.L_JOB, "?"), int(info.labels.get(kp.L_ATTEMPT, -1))


def analyse_pods(events: list[tuple[float, str, str, Any]],
                 steps: dict[str, int]) -> tuple[dict[str, list[int]], list[str]]:
    """(job -> attempts that trained it to the end, overlaps).

    An attempt trained its job to the end when a pod of it turned Succeeded while nobody was
    deleting it (kwok's stage at `dlsched.io/sim-end`) and it started below the job's last step
    (the annotation `dlsched.io/sim-base`: an attempt that resumed from a checkpoint at the last
    step, taken by a stop that raced the end, only confirms it). A pod that turned Succeeded while
    being deleted is a stop, not an end: kwok fires a completion it had already scheduled even
    after the pod got its deletionTimestamp, when its delete comes later (seen after an API server
    restart and on a busy machine), where a real trainer would have checkpointed on SIGTERM.

    A pod is running from the first event that shows it Running and bound until it is gone or
    terminated (a pod being deleted gracefully still runs: its container exits at the end of the
    grace period); two attempts of one job with pods running at once overlap."""
    from dlsched.live.backends import k8s_pods as kp

    active: dict[str, tuple[str, int, str]] = {}  # uid -> (job, attempt, name)
    phase: dict[str, str] = {}  # uid -> last phase seen
    trained: dict[str, list[int]] = defaultdict(list)
    overlaps: list[str] = []
    for t, kind, uid, info in events:
        job, attempt = _job_of(info)
        if kind != "DELETED":
            if info.phase == "Succeeded" and phase.get(uid) != "Succeeded" and not info.deleting \
                    and int(info.annotations.get(kp.A_SIM_BASE, 0)) < steps.get(job, 1 << 62) \
                    and attempt not in trained[job]:
                trained[job].append(attempt)
            phase[uid] = info.phase
        running = kind != "DELETED" and info.phase == "Running" and info.node
        if running and uid not in active:
            others = sorted({(a, n) for u, (j, a, n) in active.items() if j == job and a != attempt})
            if others:
                overlaps.append(f"{job}: pod {info.name} (attempt {attempt}) Running at {t:.3f} while "
                                f"{', '.join(n for _, n in others)} of attempt(s) {sorted({a for a, _ in others})} ran")
            active[uid] = (job, attempt, info.name)
        elif kind == "DELETED" or info.phase in ("Succeeded", "Failed"):
            active.pop(uid, None)
    return {j: sorted(a) for j, a in trained.items() if a}, overlaps


def dump_pods(events: list[tuple[float, str, str, Any]], path: Path) -> None:
    """The recorded pod events, one JSON line each (for a second look after a failed run)."""
    from dlsched.live.backends import k8s_pods as kp

    with open(path, "w") as fh:
        for t, kind, uid, info in events:
            fh.write(json.dumps({"t": round(t, 3), "kind": kind, "name": info.name, "phase": info.phase,
                                 "node": info.node, "deleting": info.deleting,
                                 "base": info.annotations.get(kp.A_SIM_BASE)}) + "\n")


class _Harness:
    def __init__(self, cp: Any, work: Path, cfg: K8sChaosConfig, progress: Callable[[K8sFault], None] | None):
        from dlsched.live.store import Store

        self.cp, self.work, self.cfg, self.progress = cp, Path(work), cfg, progress
        self.rng = random.Random(cfg.seed)
        (self.work / "logs").mkdir(parents=True, exist_ok=True)
        (self.work / "jobs").mkdir(exist_ok=True)
        tag = uuid.uuid4().hex[:6]
        self.namespace, self.pool = f"dlsched-chaos-{tag}", f"chaos{tag}"
        cp.ensure_namespace(self.namespace)
        self.nodes = cp.add_nodes(cfg.nodes, gpus_per_node=cfg.gpus_per_node, racks=2, pool=self.pool,
                                  prefix=f"chaos{tag}-")
        self.db = f"sqlite:///{self.work / 'dlsched.db'}"
        self.store = Store(self.db)
        self.client = cp.client()
        self.conf = {"kubeconfig": str(cp.kubeconfig()), "namespace": self.namespace, "pool": self.pool,
                     "db": self.db, "work": str(self.work / "jobs"), "policy": cfg.policy, "tick": cfg.tick,
                     "rate_per_worker": cfg.rate_per_worker, "startup": cfg.startup, "lease": cfg.lease,
                     "retry": cfg.retry}
        self.candidates: list[_Candidate] = []
        self.exits: Counter = Counter()
        self.started = 0
        self.last_start = 0.0
        self.leaders: list[str] = []
        self.faults: list[K8sFault] = []
        self.left_on_dead: list[str] = []
        self.recorder = _PodRecorder(cp.kubeconfig(), self.namespace)

    # -- the controllers
    def supervise(self) -> None:
        for c in list(self.candidates):
            code = c.proc.poll()
            if code is None:
                continue
            self.candidates.remove(c)
            c.err.close()
            why = "killed by the injector" if c.killed else {0: "stopped", 3: "lost the Lease"}.get(code,
                                                                                                 f"exit {code}")
            self.exits[why] += 1
        if len(self.candidates) < self.cfg.candidates and time.monotonic() - self.last_start > 1.0:
            self.candidates.append(_Candidate(self.started, self.conf, self.work))
            self.started += 1
            self.last_start = time.monotonic()

    def holder(self) -> str | None:
        from lightkube.resources.coordination_v1 import Lease

        try:
            lease = self.client.get(Lease, "dlsched-controller", namespace=self.namespace)
        except Exception:  # noqa: BLE001 - no Lease yet, or the API server is away
            return None
        who = lease.spec.holderIdentity if lease.spec is not None else None
        if who and (not self.leaders or self.leaders[-1] != who):
            self.leaders.append(who)
        return who

    def leader(self) -> _Candidate | None:
        who = self.holder()
        if not who:
            return None
        try:
            pid = int(who.rsplit("-", 2)[1])
        except (IndexError, ValueError):
            return None
        return next((c for c in self.candidates if c.pid == pid and c.proc.poll() is None), None)

    def stop_candidates(self) -> None:
        for c in self.candidates:
            if c.proc.poll() is None:
                c.proc.send_signal(signal.SIGTERM)
        for c in self.candidates:
            try:
                c.proc.wait(30)
            except subprocess.TimeoutExpired:
                c.proc.kill()
                c.proc.wait(10)
            self.exits["stopped at the end" if c.proc.returncode == 0 else f"exit {c.proc.returncode} at the end"] += 1
            c.err.close()
        self.candidates = []

    # -- faults
    def inject(self, kind: str) -> K8sFault:
        fault = K8sFault(time.time(), kind)
        try:
            getattr(self, "_" + kind.replace("-", "_"))(fault)
        except Exception as exc:  # noqa: BLE001 - the API server was away: not injected, tried again later
            fault.outcome = f"skipped: {type(exc).__name__}: {exc}"
        self.faults.append(fault)
        if self.progress is not None:
            self.progress(fault)
        return fault

    def _kill_leader(self, fault: K8sFault) -> None:
        lead = self.leader()
        if lead is None:
            fault.outcome = "skipped: nobody leads right now"
            return
        before = self.holder()
        os.kill(lead.pid, signal.SIGKILL)
        lead.killed = True
        fault.target, fault.outcome = f"pid {lead.pid}", "injected"
        t0 = time.monotonic()
        while time.monotonic() - t0 < 60:  # the takeover, for the record (other faults wait meanwhile)
            self.supervise()
            who = self.holder()
            if who and who != before:
                fault.seconds = round(time.monotonic() - t0, 2)
                return
            time.sleep(0.2)

    def _busy_nodes(self) -> list[str]:
        mine = set(self.nodes)
        return sorted({p.node for p in self.recorder.live() if p.node in mine and p.phase == "Running"})

    def _node_notready(self, fault: K8sFault) -> None:
        from lightkube.resources.core_v1 import Node

        busy = self._busy_nodes()
        if not busy:
            fault.outcome = "skipped: no node runs a pod of ours"
            return
        name = self.rng.choice(busy)
        self.client.patch(Node, name, {"metadata": {"labels": {DOWN_LABEL: "true"}}})
        fault.target, fault.outcome = name, "injected"
        t0 = time.monotonic()
        try:
            while True:
                self.supervise()
                left = [p.name for p in self.recorder.live() if p.node == name]
                if not left:
                    fault.seconds = round(time.monotonic() - t0, 2)
                    break
                if time.monotonic() - t0 > self.cfg.node_clear_s:
                    self.left_on_dead += [f"{p} on {name} ({self.cfg.node_clear_s:g} s after it went NotReady)"
                                          for p in left]
                    break
                time.sleep(0.1)
            time.sleep(self.rng.uniform(*self.cfg.node_down_s))
        finally:
            for _ in range(100):  # heal it whatever happened (the API server may be away a moment)
                try:
                    self.client.patch(Node, name, {"metadata": {"labels": {DOWN_LABEL: None}}})
                    break
                except Exception:  # noqa: BLE001
                    time.sleep(0.2)

    def _delete_pod(self, fault: K8sFault) -> None:
        from lightkube.resources.core_v1 import Pod

        running = sorted((p for p in self.recorder.live() if p.phase == "Running" and p.node and not p.deleting),
                         key=lambda p: p.name)
        if not running:
            fault.outcome = "skipped: no Running pod"
            return
        pod = self.rng.choice(running)
        grace = self.rng.choice([None, 0])
        self.client.delete(Pod, pod.name, namespace=self.namespace, grace_period=grace)
        fault.target = f"{pod.name} ({'grace 0' if grace == 0 else 'graceful'})"
        fault.outcome = "injected"

    def _restart_apiserver(self, fault: K8sFault) -> None:
        fault.seconds = round(self.cp.restart_apiserver(grace=self.cfg.apiserver_grace_s), 2)
        fault.outcome = "injected"

    # -- the run
    def draw_jobs(self) -> list[tuple[float, Any]]:
        from dlsched.live.spec import TrainJob

        out = []
        for i in range(self.cfg.jobs):
            steps = self.rng.randint(*self.cfg.steps)
            workers = self.rng.randint(*self.cfg.workers)
            elastic = self.rng.random() < self.cfg.elastic_share
            at = self.rng.uniform(0, self.cfg.arrivals_s) if i else 0.0
            out.append((at, TrainJob(model="mlp", name=f"chaos-{i}", steps=steps, workers=workers, min_workers=1,
                                     max_workers=max(workers, 4) if elastic else workers)))
        return sorted(out, key=lambda x: x[0])

    def schedule(self) -> list[str]:
        """`cfg.faults` kinds in a seeded order: every kind with a weight once first (in a seeded
        order, so that a short run sees each), then the rest drawn by weight."""
        kinds = [k for k, w in self.cfg.weights.items() if w > 0]
        first = self.rng.sample(kinds, len(kinds))[: self.cfg.faults]
        return first + self.rng.choices(kinds, [self.cfg.weights[k] for k in kinds], k=self.cfg.faults - len(first))

    def ended(self, ids: list[str]) -> bool:
        try:
            return all(self.store.get(j).status in ("done", "failed", "cancelled", "rejected") for j in ids)
        except Exception:  # noqa: BLE001 - a busy database: not yet
            return False


def run_k8s_chaos(cp: Any, work: Path, cfg: K8sChaosConfig,
                  progress: Callable[[K8sFault], None] | None = None) -> K8sChaosReport:
    """Submit `cfg.jobs` jobs to controllers on their own pool and namespace of `cp`, inject
    `cfg.faults` faults while they run, wait for every job to end, and check what happened."""
    from dlsched.live.backends import k8s_pods as kp

    h = _Harness(cp, work, cfg, progress)
    jobs = h.draw_jobs()
    todo = h.schedule()
    ids: list[str] = []
    t0 = time.time()
    h.recorder.start()
    try:
        while h.leader() is None:  # the first controller up (imports take seconds)
            h.supervise()
            if time.time() - t0 > 120:
                raise RuntimeError(f"no controller led within 120 s; see {h.work / 'logs'}")
            time.sleep(0.2)
        begin = time.time()
        next_fault = begin + cfg.first_fault_s
        deadline = begin + cfg.timeout_s
        while time.time() < deadline:
            h.supervise()
            while jobs and jobs[0][0] <= time.time() - begin:
                ids.append(h.store.add(jobs.pop(0)[1]).id)
            if not jobs and h.ended(ids):
                break
            if todo and time.time() >= next_fault:
                fault = h.inject(todo.pop(0))
                if fault.outcome != "injected" and sum(f.kind == fault.kind for f in h.faults) < 20:
                    # nothing to hit right now: that kind again later — next, if it never landed yet
                    # (a run under load can end before a kind retried last gets its turn)
                    missing = not any(f.kind == fault.kind and f.outcome == "injected" for f in h.faults)
                    todo.insert(0, fault.kind) if missing else todo.append(fault.kind)
                next_fault = time.time() + h.rng.uniform(*cfg.gap_s)
            time.sleep(0.1)
        h.faults += [K8sFault(time.time(), k, outcome="not injected: every job had ended") for k in todo]
        h.holder()
    finally:
        h.stop_candidates()
        h.recorder.stop()
    elapsed = time.time() - t0
    from lightkube.resources.core_v1 import Pod

    left = [p for p in h.client.list(Pod, namespace=h.namespace, labels={kp.MANAGED_BY[0]: kp.MANAGED_BY[1]})
            if (p.status.phase if p.status else "") not in ("Succeeded", "Failed")]
    final = {}
    for jid in ids:
        v = h.store.get(jid)
        final[jid] = {"status": v.status, "reason": v.reason, "steps_done": v.steps_done, "steps": v.spec.steps,
                      "done_events": sum(e.kind == "done" for e in h.store.events(jid))}
    succeeded, overlaps = analyse_pods(h.recorder.events, {j: r["steps"] for j, r in final.items()})
    dump_pods(h.recorder.events, h.work / "pods.jsonl")
    report = K8sChaosReport(cfg=cfg, faults=h.faults, jobs=final, succeeded_attempts=succeeded, overlaps=overlaps,
                            left_on_dead_nodes=h.left_on_dead,
                            pods_left_running=[f"{p.metadata.name} ({p.status.phase if p.status else '?'})" for p in left],
                            leaders=h.leaders, candidate_exits=h.exits, pod_events=len(h.recorder.events),
                            elapsed_s=elapsed)
    (h.work / "report.json").write_text(json.dumps({**report.summary(), "config": asdict(cfg),
                                                    "faults": [asdict(f) for f in h.faults]}, indent=1, default=str))
    h.store.close()
    h.client.close()
    return report


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "controller":
        sys.exit(controller_main(sys.argv[2]))
    sys.exit("usage: python -m tests.k8s_chaos controller CONF.json")
