"""The real kube-scheduler as a baseline: a trace replayed with pods that only it places.

This is the comparison every published system dlsched implements makes ("the default Kubernetes
scheduler"), and the ground truth for dlsched's imitation of it (`policies/kube_default.py`). The
job controller here does what tf-operator does and nothing more: when a job arrives it creates all
of the job's pods at once (its PSs, then its workers), with the default scheduler name, no node and
no gang; kube-scheduler binds them one by one, by its own default profile. A job runs once every
pod is bound; bound pods of a job whose other pods still wait hold their resources and do no work
(the deadlock the DRAGON paper describes can happen, and then the replay ends with the rest
unfinished, as the simulator does). When the job's throughput model says its work is done on the
nodes kube-scheduler chose, the controller deletes its pods. It never resizes, moves or preempts.

The bookkeeping (held, running, ended, GPU-seconds) is the simulator's `ClusterState`, so the
result is a `SimResult` with the same rows as a simulated `kube-default` run.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.core.snapshot import Clock, JobState, JobStatus
from dlsched.framework.state import ClusterState
from dlsched.k8s.replay import (KUBE_SCHEDULER, REPLAY_SUFFIX, Replay, SteppedClock, _settle_unfinished, next_round,
                               pool_cluster)
from dlsched.live.backends import k8s_pods as kp
from dlsched.sim.config import SimConfig
from dlsched.sim.results import SimResult, Timeline

if TYPE_CHECKING:
    from dlsched.throughput.base import ThroughputModel

#: The label that ties a pod to its replayed job (the job's index in the replay).
JOB_LABEL = "dlsched.io/replay-job"
#: Wall seconds with pods waiting, nothing running, every job arrived and nothing bound, after
#: which the replay calls it a deadlock (kube-scheduler retries unschedulable pods within seconds).
DEADLOCK_WALL_S = 10.0
#: Within a round, after pods were created or deleted: kube-scheduler has had its say once the
#: pods have not changed for QUIET_S wall seconds (at most SETTLE_S), as its binding takes
#: milliseconds on a real cluster — a round's trace time must not depend on this machine's speed.
QUIET_S, SETTLE_S = 0.25, 3.0
#: Wall seconds past a pod's backoff before the round frees room (see `backoff_wait`).
BACKOFF_MARGIN_S = 0.1
#: Wall seconds a round waits at most for kube-scheduler's pass over its waiting pods (`pass_over`).
PASS_S = 60.0


def job_pods(spec: JobSpec, index: int, namespace: str, pool: str, slot: str = "nvidia.com/gpu",
             scheduler: str = "default-scheduler") -> list[dict]:
    """The pods tf-operator would create for `spec`: PSs first, then workers, unbound, with the
    pool (and GPU type, if the job asks one) as a node selector and kwok's taint tolerated."""
    selector = {kp.POOL_LABEL: pool}
    if spec.gpu_type:
        selector[kp.PRODUCT_LABEL] = spec.gpu_type
    pods = []
    roles = [("ps", spec.ps_demand)] * spec.num_ps + [("worker", spec.worker_demand)] * spec.num_workers
    for rank, (role, (gpus, cpus, mem)) in enumerate(roles):
        if gpus != int(gpus):
            raise ConfigError(f"job {spec.job_id} asks for {gpus:g} GPU per {role}: a pod takes whole GPUs")
        res: dict[str, Any] = {"requests": {"cpu": kp.cpu_quantity(cpus), "memory": kp.mem_quantity(mem)}}
        if gpus:
            res["limits"] = {slot: str(int(gpus))}
        pods.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"rj{index}-{role}{rank}", "namespace": namespace,
                         "labels": {JOB_LABEL: str(index), "app.kubernetes.io/managed-by": "dlsched-replay"}},
            "spec": {"schedulerName": scheduler, "restartPolicy": "Never", "nodeSelector": dict(selector),
                     "tolerations": [dict(kp.KWOK_TOLERATION)], "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "trainer", "image": "dlsched/replay:none", "resources": res}]},
        })
    return pods


def backoff_wait(tried_at: float, backoff_s: float) -> None:
    """Sleep until `backoff_s` wall seconds (and a margin) have passed since `tried_at`, when
    kube-scheduler last tried the waiting pods.

    Why: kube-scheduler backs a failed pod off in wall seconds, and room freed while a pod is in
    its backoff moves it to the backoff queue, which is popped only when no other pod is active;
    a pod that never failed goes to the active queue at once. A replay at 3,600x compresses an hour
    of trace into a second, so without this wait the room freed in the round after a failure went
    to whichever pods had failed longer ago (or to the round's arrivals), not to the oldest waiting
    pods — what kube-scheduler would never do in real time, where its events are minutes apart and
    a 1 s backoff has always ended. The wait costs wall time only; the trace clock is stepped.
    """
    if backoff_s > 0:
        left = tried_at + backoff_s + BACKOFF_MARGIN_S - time.monotonic()
        if left > 0:
            time.sleep(left)


def pass_over(queue: Callable[[], dict[str, float]], limit_s: float = PASS_S) -> bool:
    """Wait until kube-scheduler's active and backoff queues are empty (every waiting pod tried
    since the last change and parked as unschedulable), at most `limit_s`; False when its queue
    cannot be read.

    Why: a room-freeing event sends every waiting pod back to kube-scheduler's active queue, which
    it orders by each pod's last attempt. If the next event comes before it has tried them all,
    the pods it has not reached keep their older stamp and move ahead of the ones it just tried:
    the queue rotates and the next freed GPU goes to a pod far back in creation order
    (`benchmarks/k8s_queue_rotation.py`: 800 waiting pods and deletes 1.1 s apart on this machine
    gave the 8 freed GPUs to pods ranked 0 and 494-500; 5 s apart, to 0-7). At 3,600x two rounds
    are an hour of trace apart, which in real time gives kube-scheduler its whole pass; the
    replay's rounds are a second apart, so each waits for the pass. (The events of one round, a
    job's pods ending together, stay as close together as they are in real time.)
    """
    t_end = time.monotonic() + limit_s
    while True:
        q = queue()
        if not q:
            return False
        if q.get("active", 0) + q.get("backoff", 0) == 0 or time.monotonic() >= t_end:
            return True
        time.sleep(0.1)


class _Job:
    __slots__ = ("js", "pods", "role_of", "end_at")

    def __init__(self, js: JobState, pods: list[dict]):
        self.js = js
        self.pods = [p["metadata"]["name"] for p in pods]
        self.role_of = {p["metadata"]["name"]: ("ps" if "-ps" in p["metadata"]["name"] else "worker") for p in pods}
        self.end_at: float | None = None


def replay_kube_scheduler(specs: list[JobSpec], throughput: "ThroughputModel", cfg: SimConfig, *,
                          kubeconfig: str | Path, namespace: str, pool: str, speedup: float, tick: float = 0.25,
                          timeout: float = 3600.0, backoff_s: float = 0.0,
                          queue: Callable[[], dict[str, float]] | None = None,
                          on_progress: Callable[[int, int], None] | None = None) -> Replay:
    """`specs` on the real kube-scheduler (see the module docstring). The control plane must run
    kube-scheduler (`ControlPlane(with_scheduler=True)`) and have the pool's nodes.

    `backoff_s` is kube-scheduler's pod backoff (`ControlPlane.scheduler_backoff_s`): a round that
    frees room first waits until the pods that failed in an earlier round are out of their backoff
    (see `backoff_wait`). `queue` reads kube-scheduler's queue lengths
    (`ControlPlane.scheduler_queue`): with it, a round ends only once kube-scheduler has tried every
    waiting pod (see `pass_over`)."""
    from lightkube.resources.core_v1 import Pod

    from dlsched.live.backends.k8s_api import KubeApi, load_config
    from dlsched.live.backends.k8s_watch import Reflector, pod_info, warm_decoders

    if not specs:
        raise ConfigError("nothing to replay: the workload has no jobs")
    specs = sorted(specs, key=lambda s: s.submit_time)
    cluster: Cluster = pool_cluster(kubeconfig, namespace, pool)
    index = {n: i for i, n in enumerate(cluster.node_names)}
    clock = SteppedClock(tick * speedup, origin=specs[0].submit_time)
    time_ = Clock(clock())
    state = ClusterState(cluster, time_, cfg.startup_overhead, cfg.restart_overhead)
    warm_decoders()
    api = KubeApi(load_config(kubeconfig, None), namespace)
    cond = threading.Condition(threading.RLock())
    changed = [time.monotonic()]  # when the pod watch last saw a change
    pods = Reflector("replay-pods", api.watch_client, Pod, cond=cond, namespace=namespace,
                     labels={"app.kubernetes.io/managed-by": "dlsched-replay"},
                     key=lambda o: o.metadata.name, transform=pod_info,
                     on_change=lambda *_: changed.__setitem__(0, time.monotonic())).start()

    def quiet() -> None:
        """Wait until the pods have not changed for QUIET_S (at most SETTLE_S)."""
        t_end = time.monotonic() + SETTLE_S
        while time.monotonic() < t_end:
            with cond:
                still = time.monotonic() - changed[0]
            if still >= QUIET_S:
                return
            time.sleep(QUIET_S - still)

    tried_at = 0.0  # when kube-scheduler last had its say (monotonic): its failed pods' backoff began

    def settle() -> None:
        """kube-scheduler's turn, from our change (now) until it has placed what it can: the pods
        are quiet and, with `queue`, its pass over the waiting pods is over (see `pass_over`)."""
        nonlocal tried_at
        changed[0] = time.monotonic()
        quiet()
        if queue is not None and pass_over(queue):
            quiet()  # the bindings of its last attempts
        tried_at = time.monotonic()

    timeline = Timeline()
    waiting: dict[int, _Job] = {}
    running: dict[int, _Job] = {}
    ended: list[JobState] = []
    created = 0
    t_wall, last_bind_wall, bound_before = time.time(), time.time(), 0
    stop_reason = ""
    try:
        if not pods.synced.wait(30):
            raise ConfigError("the Kubernetes API did not answer the first list of pods within 30 s")
        nxt = 0
        while True:
            t0 = time.monotonic()
            now = time_.now = clock()
            # completions first (they free nodes), then arrivals, then kube-scheduler's turn
            done = [i for i, j in running.items() if j.end_at is not None and now >= j.end_at]
            finished = [running.pop(i) for i in done]
            for j in finished:
                state.end(j.js, j.end_at, JobStatus.DONE)  # when its work was done, as dlsched's runs
                ended.append(j.js)
            if finished and waiting:
                backoff_wait(tried_at, backoff_s)
            api.delete_pods([(n, "") for j in finished for n in j.pods], 0)
            if done and waiting:  # kube-scheduler gives the freed room to the pods already waiting,
                settle()  # as it would in the hour before this round's arrivals
            # arrivals: every pod of a job at once, as tf-operator creates them, job after job (at
            # once for all, kube-scheduler's queue would interleave the pods of jobs that arrived
            # minutes apart in the trace, and bind some of each)
            arrived = False
            while nxt < len(specs) and specs[nxt].submit_time <= now:
                spec = specs[nxt]
                js = JobState(spec=spec, index=nxt, clock=time_, rank=nxt)
                if state.arrive(js, spec.submit_time):
                    ended.append(js)  # can never fit: rejected, as the simulator does
                else:
                    manifests = job_pods(spec, nxt, namespace, pool)
                    waiting[nxt] = _Job(js, manifests)
                    for _, err in api.map(api.create, manifests):
                        if err:
                            raise ConfigError(f"replay could not create a pod of job {spec.job_id}: {err}")
                        created += 1
                    arrived = True
                nxt += 1
            if arrived or (done and not waiting):
                settle()
            with cond:
                seen = {name: (p.node, p.phase) for name, p in pods.items.items()}
            bound_now = 0
            for i, j in list(waiting.items()):
                placement: dict[int, list[int]] = {}
                for name in j.pods:
                    node = seen.get(name, (None, ""))[0]
                    if node:
                        w, p = placement.setdefault(index[node], [0, 0])
                        placement[index[node]] = [w + (j.role_of[name] == "worker"), p + (j.role_of[name] == "ps")]
                        bound_now += 1
                alloc = Allocation.of({n: (w, p) for n, (w, p) in placement.items()})
                count = sum(alloc.workers) + sum(alloc.ps)
                if count == len(j.pods):
                    waiting.pop(i)
                    state.hold(j.js, None, now)
                    state.start(j.js, alloc, now)
                    rate = throughput.rate(j.js.spec, alloc, cluster)
                    j.js.rate = rate
                    j.end_at = (j.js.resume_at + j.js.spec.iterations / rate) if rate > 0 else None
                    running[i] = j
                elif count and (j.js.held is None or j.js.held != alloc):
                    state.hold(j.js, alloc, now)
            bound_total = created - sum(len(j.pods) for j in waiting.values()) + bound_now
            if bound_total != bound_before:
                bound_before, last_bind_wall = bound_total, time.time()
            timeline.record(now, state.busy_gpus + state.held_gpus, state.busy_gpus, state.held_gpus,
                            len(state.pending), len(state.running))
            if on_progress is not None:
                on_progress(len(ended), len(specs))
            if nxt == len(specs) and not waiting and not running:
                break
            if nxt == len(specs) and waiting and not running and time.time() - last_bind_wall > DEADLOCK_WALL_S:
                stop_reason = (f"deadlock: {len(waiting)} job(s) wait with some pods bound and nothing runs "
                               f"(kube-scheduler binds pod by pod, no gang)")
                break
            stop_reason = next_round(clock, tick, t0, t_wall, timeout,  # at the next arrival or end
                                     [specs[nxt].submit_time if nxt < len(specs) else None]
                                     + [j.end_at for j in running.values()])
            if stop_reason:
                break
        end = time_.now = clock()
        left = [j.js for j in list(waiting.values()) + list(running.values())]
        _settle_unfinished(left, end, stop_reason)
        api.delete_pods([(n, "") for j in list(waiting.values()) + list(running.values()) for n in j.pods], 0)
        res = SimResult.build(KUBE_SCHEDULER + REPLAY_SUFFIX, cluster,
                              sorted(ended + left, key=lambda j: j.index), timeline, end, 0, cfg,
                              throughput=throughput)
        rep = Replay(res, time.time() - t_wall, speedup, tick, pods_created=created,
                     notes=[stop_reason] if stop_reason else [])
        res.summary.update(rep.figures())
        return rep
    finally:
        pods.stop()
        api.close()
