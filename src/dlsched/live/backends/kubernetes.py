"""The Kubernetes backend: a job's workers and parameter servers are pods that dlsched binds.

dlsched runs as a custom scheduler and job controller. Each run (attempt `n` of a job) is a headless
Service and one pod per rank (`k8s_pods.py`), created with `schedulerName: dlsched` and no node, then
bound through the Binding subresource (with the pod's UID as precondition) to the node the policy's
plan says: a gang, all or nothing. If any create or bind of a run fails, or a node of its allocation
cannot hold it (gone, NotReady, cordoned, or its free capacity, counting every other pod bound there,
is short: the API server binds to any node name and checks nothing), every pod of that attempt is
deleted (grace 0) and `observe` reports the run failed; nothing is raised. With `bind="create"`
the pods are created with `spec.nodeName` instead (one API call a pod, not two; no kube-scheduler
can place them first and no Binding precondition guards them), for nodes only dlsched places pods
on; a gang is still created all at once and deleted whole if any create fails.

A stop deletes the pods of the current attempt with a grace period (SIGTERM: the trainer
checkpoints), all stopped jobs' deletes first, then waits (on the watch) until they are gone and
force-deletes (grace 0) what is left after the timeout. A resize is a stop and a new attempt at
the new size: restart-based, as AdaptDL, Volcano and torchrun do.

What the backend knows comes from watches (`k8s_watch.Reflector`, list + watch, relist on 410):
the pool's nodes (`dlsched.io/pool=<pool>`), its own pods (`app.kubernetes.io/managed-by=dlsched`
in its namespace), and every bound, non-terminated pod of the cluster (for the capacity other
schedulers' pods use: `foreign_usage()`). Nodes are read once at construction into a fixed
`Cluster` (GPUs: allocatable `nvidia.com/gpu` or the configured slot resource; CPUs and memory:
allocatable; rack: label `dlsched.io/rack`, else `topology.kubernetes.io/zone`; GPU type: label
`nvidia.com/gpu.product`). A node that turns NotReady or is deleted is a `NodeEvent` "fail": its
pods of ours are deleted at once (grace 0: there may be no kubelet to confirm a graceful delete)
and their runs fail. A cordoned node (spec.unschedulable) is a "fail" too, but its pods are left for
the controller's graceful stop (the node is healthy, the trainer can checkpoint). Ready and
schedulable again: "join". Nodes that appear after the backend started are logged and ignored
(a `Cluster` is fixed for the service's life; restart the service to use them).

Two modes:
- `sim` (kwok fake nodes, where pods run no process): progress is the dry backend's made-up
  arithmetic (`dry.made_up_step`: a `startup` pause, then `rate_per_worker * workers**scaling`
  steps/s; a stop checkpoints the exact step). The backend computes when the run would finish and
  writes it as the pods' `dlsched.io/sim-end` (RFC 3339); kwok completes them then (Succeeded), and
  the run is done only when the API says every pod Succeeded. The run's start, base step and rate
  are pod annotations, so `adopt` after a controller restart continues exactly; the step a stop
  checkpointed is kept in the job directory (`k8s-sim-checkpoint.json`), as the trainer keeps its
  checkpoints there.
- `real`: pods run `python -m dlsched.trainer` with the trainer's argv and rank environment; the job
  directory must be on a ReadWriteMany volume mounted both in the pods (`job_pvc`) and in the
  service; progress, `done.json` and the resume record are read from it as the local backend does.
  No trainer has run in a pod here (the local control plane has no kubelet): the tests write the
  trainer's files by hand next to real, bound pods.

Its parts: `k8s_pods` (names, labels, manifests), `k8s_api` (every API call), `k8s_watch` (the
watches and what they keep), `k8s_runs` (a run's record, judging, observing), `k8s_lease` (leader
election). Never called: pods/log, exec, attach, portforward, proxy (a unit test checks the source).
Leader election (`k8s_lease.LeaderLease`) is acquired at construction when `leader_election` is on:
a second controller waits there; `lease.lost` says when leadership was lost, after which this
backend refuses to create or delete anything.

Threads: the controller thread drives apply/observe/adopt/forget (not thread-safe among
themselves, like every backend); watch threads only update caches under `self._cond`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

import numpy as np

from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.events import NodeEvent
from dlsched.live.backends import k8s_pods as kp
from dlsched.live.backends.base import STOP_TIMEOUT_S, Backend, Launch, Observation, RunState
from dlsched.live.backends.dry import made_up_rate
from dlsched.live.backends.k8s_api import KubeApi, bound_running_fields, load_config
from dlsched.live.backends.k8s_lease import LEASE_NAME, LeaderLease
from dlsched.live.backends.k8s_runs import KRun, observe_run, read_sim_checkpoint, verdict, write_sim_checkpoint
from dlsched.live.backends.k8s_watch import (NodeInfo, PodInfo, Reflector, node_info, pod_info, usage_info,
                                             wait_synced, warm_decoders)
from dlsched.live.backends.ranks import rank_layout
from dlsched.trainer.protocol import ProgressReader, new_run_id

log = logging.getLogger("dlsched.k8s")

#: After a force delete (grace 0), how long to wait for the pods to be gone.
KILL_WAIT_S = 10.0


class KubernetesBackend(Backend):
    """Pods bound by dlsched on the nodes of one pool (see the module docstring)."""

    name = "kubernetes"

    def __init__(self, *, kubeconfig: str | Path | None = None, context: str | None = None,
                 namespace: str = "dlsched", pool: str = "default", mode: str = "sim",
                 template: kp.PodTemplate | None = None, rate_per_worker: float = 10.0, startup: float = 1.0,
                 scaling: float = 0.8, leader_election: bool = True, lease_name: str = LEASE_NAME,
                 leader_wait_s: float | None = None, lease_options: dict | None = None, count_foreign: bool = True,
                 trust_env: bool = False, sync_timeout: float = 30.0, api_workers: int = 16,
                 clock: Callable[[], float] = time.time, rate: Callable[[Launch], float] | None = None,
                 restart_startup: float | None = None, bind: str = "binding"):
        if mode not in ("sim", "real"):
            raise ConfigError(f"mode must be 'sim' or 'real', not {mode!r}")
        if bind not in ("binding", "create"):
            raise ConfigError(f"bind must be 'binding' or 'create', not {bind!r}")
        try:
            import lightkube  # noqa: F401
        except ImportError:
            raise ConfigError("the Kubernetes backend needs lightkube: pip install 'dlsched[k8s]'") from None
        self.namespace, self.pool, self.mode = namespace, pool, mode
        # "binding": created unbound, then bound through pods/binding (module docstring); "create":
        # spec.nodeName at creation, half the API calls, for nodes only dlsched places pods on
        self.bind = bind
        self.tpl = template or kp.PodTemplate()
        self.slot = self.tpl.slot_resource
        self.rate_per_worker, self.startup, self.scaling = rate_per_worker, startup, scaling
        self.rate = rate  # sim: steps per clock second of a launch (None: the made-up rate above)
        self.restart_startup = restart_startup  # sim: the pause of a restart or resize (None: `startup`)
        self.clock = clock
        # kwok completes sim pods at a wall-clock instant: only the wall clock can follow it (the
        # contract test's fake clock and a replay's stepped clock cannot, so their runs end when the
        # made-up step says, and forget deletes their pods)
        self._kwok_completes = clock is time.time
        self._cond = threading.Condition(threading.RLock())  # guards the caches and `KRun.gone`
        self._runs: dict[str, KRun] = {}
        self._uid_job: dict[str, str] = {}  # uid of every pod of a tracked run -> its job
        self._checkpoints: dict[str, int] = {}  # job -> step its last stop checkpointed (sim)
        self._transitions: list[tuple[float, int, str, str, bool]] = []  # (time, node, kind, why, pods lost)
        self._down: dict[int, str] = {}  # node index -> why it is down, as last reported
        self._unknown_nodes: set[str] = set()
        self._reflectors: list[Reflector] = []
        self._usage: Reflector | None = None
        self._closed = False
        self.pods_created = 0  # pods this backend created (a replay's throughput figure)
        self.launch_seconds: list[tuple[int, float]] = []  # (pods created and bound, wall seconds) per apply
        self._leaving: set[str] = set()  # uids of running pods `forget` deleted, until the watches see them go
        self.lease: LeaderLease | None = None
        warm_decoders()  # before any thread decodes: concurrent first decodes crash msgspec (see there)
        self.api = KubeApi(load_config(kubeconfig, context), namespace, trust_env=trust_env, workers=api_workers)
        try:
            self._check_namespace()
            if leader_election:
                self.lease = LeaderLease(self.api.client, namespace, lease_name, **(lease_options or {}))
                if not self.lease.acquire(leader_wait_s):
                    raise ConfigError(f"another dlsched controller leads namespace {namespace} (Lease {lease_name} "
                                      f"held by {self.lease.holder}); waited {leader_wait_s:g} s")
            self._cluster = self._read_cluster()
            self._index = {n: i for i, n in enumerate(self._cluster.node_names)}
            self._start_watches(count_foreign, sync_timeout)
        except BaseException:
            self.detach()
            raise

    # ------------------------------------------------------------------ set-up
    def _check_namespace(self) -> None:
        """A missing namespace is a one-line error now, not failed runs later (not checkable
        without the right to read namespaces, which rbac.yaml does not grant: then the Lease or
        the first pod says so)."""
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Namespace

        try:
            self.api.client.get(Namespace, self.namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                raise ConfigError(f"namespace {self.namespace!r} does not exist: create it (kubectl create namespace "
                                  f"{self.namespace}) or choose another with -o namespace=NAME") from None
            if exc.status.code not in (401, 403):
                raise ConfigError(f"cannot reach the Kubernetes API: {exc.status.code} {exc.status.message}") from None
        except Exception as exc:  # noqa: BLE001 - no answer at all: say where we tried
            raise ConfigError(f"cannot reach the Kubernetes API at {self.api.config.cluster.server}: "
                              f"{type(exc).__name__}: {exc}") from None

    def _read_cluster(self) -> Cluster:
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Node

        try:
            nodes = sorted(self.api.client.list(Node, labels={kp.POOL_LABEL: self.pool}), key=lambda n: n.metadata.name)
        except ApiError as exc:
            raise ConfigError(f"cannot list the nodes of pool {self.pool!r}: {exc.status.code} {exc.status.message}") from None
        if not nodes:
            raise ConfigError(f"no node has the label {kp.POOL_LABEL}={self.pool}: label the nodes dlsched may use")
        infos = [node_info(n, self.slot) for n in nodes]
        racks = [i.labels.get(kp.RACK_LABEL) or i.labels.get(kp.ZONE_LABEL) or "" for i in infos]
        rack_ids = {r: k for k, r in enumerate(sorted(set(racks)))}
        return Cluster(
            name=f"kubernetes-{self.pool}",
            capacity=np.array([i.allocatable for i in infos], dtype=float),
            gpu_type=np.array([i.labels.get(kp.PRODUCT_LABEL) or "generic" for i in infos], dtype=object),
            rack=np.array([rack_ids[r] for r in racks], dtype=int),
            speed=np.ones(len(infos)),
            node_names=tuple(i.name for i in infos),
        )

    def _start_watches(self, count_foreign: bool, sync_timeout: float) -> None:
        from lightkube import ALL_NS
        from lightkube.resources.core_v1 import Node, Pod

        self._nodes = Reflector("nodes", self.api.watch_client, Node, cond=self._cond,
                                labels={kp.POOL_LABEL: self.pool}, key=lambda o: o.metadata.name,
                                transform=lambda o: node_info(o, self.slot), on_change=self._node_changed)
        self._pods = Reflector("pods", self.api.watch_client, Pod, cond=self._cond, namespace=self.namespace,
                               labels={kp.MANAGED_BY[0]: kp.MANAGED_BY[1]}, transform=pod_info,
                               on_change=self._pod_changed)
        self._reflectors = [self._nodes, self._pods]
        if count_foreign:
            self._usage = Reflector("usage", self.api.watch_client, Pod, cond=self._cond, namespace=ALL_NS,
                                    fields=bound_running_fields(), transform=lambda o: usage_info(o, self.slot))
            self._reflectors.append(self._usage)
        for r in self._reflectors:
            r.start()
        missing = wait_synced(self._reflectors, sync_timeout)
        if missing:
            raise ConfigError(f"the Kubernetes API did not answer the first list of {', '.join(missing)} "
                              f"within {sync_timeout:g} s")
        now = self.clock()
        with self._cond:  # nodes already down when we start: the controller hears it first thing
            for name, idx in self._index.items():
                why, hard = self._why_down(self._nodes.items.get(name))
                if why:
                    self._down[idx] = why
                    self._transitions.append((now, idx, "fail", why, hard))

    # ------------------------------------------------------------------ watch callbacks (under self._cond)
    @staticmethod
    def _why_down(info: NodeInfo | None) -> tuple[str, bool]:
        """(why the node cannot take pods, whether the pods on it are lost); ("", False) when usable."""
        if info is None:
            return "deleted", True
        if not info.ready:
            return f"NotReady: {info.why_not_ready}", True
        if info.unschedulable:
            return "cordoned (spec.unschedulable)", False
        return "", False

    def _node_changed(self, kind: str, name: str, new: NodeInfo | None, old: NodeInfo | None) -> None:
        idx = self._index.get(name)
        if idx is None:
            if kind == "ADDED" and name not in self._unknown_nodes:
                self._unknown_nodes.add(name)
                log.warning("node %s joined pool %s after dlsched started: ignored until the service restarts",
                            name, self.pool)
            return
        why, hard = self._why_down(new)
        if why and idx not in self._down:
            self._down[idx] = why
            self._transitions.append((self.clock(), idx, "fail", why, hard))
        elif not why and idx in self._down:
            del self._down[idx]
            self._transitions.append((self.clock(), idx, "join", "", False))
        elif hard and not self._down[idx].startswith(("NotReady", "deleted")):
            # cordoned first, then NotReady or deleted: now its pods are lost too (no second event)
            self._down[idx] = why
            self._transitions.append((self.clock(), idx, "lost", why, True))

    def _pod_changed(self, kind: str, uid: str, new: PodInfo | None, old: PodInfo | None) -> None:
        run = self._runs.get(self._uid_job.get(uid, ""))
        if run is None or uid not in run.pods:
            return
        if kind == "DELETED" or (new is not None and new.deleting):
            run.deletion_seen.setdefault(uid, self.clock())
        if kind == "DELETED":
            run.gone.add(uid)
        elif new is not None and new.phase == "Succeeded" and not new.deleting:
            run.succeeded.add(uid)

    # ------------------------------------------------------------------ Backend
    def cluster(self) -> Cluster:
        return self._cluster

    def foreign_usage(self) -> np.ndarray:
        """(nodes, 3) GPU slots, CPUs and memory (GiB) requested on each node of `cluster()` by bound,
        non-terminated pods that are not part of a run this backend tracks: other schedulers' and
        other namespaces' pods, daemons, and pods of ours no run knows (left by a crashed
        controller, or still there `KILL_WAIT_S` after `forget` deleted them). From the watch, so cheap to call every
        round; what the controller must treat as used. Zeros when `count_foreign` is off."""
        out = np.zeros((self._cluster.num_nodes, 3))
        if self._usage is None:
            return out
        with self._cond:
            for uid, u in self._usage.items.items():
                idx = self._index.get(u.node)
                if idx is not None and uid not in self._uid_job:
                    out[idx] += u.request
        return out

    def node_events(self) -> list[NodeEvent]:
        self._sync()
        return super().node_events()

    def apply(self, stops: Sequence[str], launches: Sequence[Launch], timeout: float = STOP_TIMEOUT_S) -> None:
        self._sync()
        runs = []
        for jid in dict.fromkeys(stops):
            run = self._runs.get(jid)
            if run is not None:
                self._judge(run)
                if run.state == "running":
                    runs.append(run)
        if runs:
            self._stop_runs(runs, timeout)
        if launches:
            self._launch_all(list(launches))

    def observe(self) -> dict[str, Observation]:
        self._sync()
        now = self.clock()
        out = {}
        for jid, run in self._runs.items():
            self._judge(run)
            out[jid] = observe_run(run, now, self.mode, self._pause(run.attempt))
        return out

    def adopt(self, launch: Launch) -> bool:
        """Re-attach to the job's pods after a controller restart. The pods of its highest attempt
        must all exist, be bound to the nodes `launch.allocation` says, on nodes that are up, and
        none have failed or be deleting (or all have Succeeded: a run that finished meanwhile). No
        pod is recreated. Otherwise every pod of the job is deleted (gracefully: the trainer
        checkpoints) and False is returned: the controller restarts it from its checkpoint."""
        self._sync()
        jid = launch.job_id
        pods = [p for p in map(pod_info, self.api.job_pods(jid)) if p.annotations.get(kp.A_JOB_ID, jid) == jid]
        if not pods:
            return False
        attempt = max(int(p.labels.get(kp.L_ATTEMPT, -1)) for p in pods)
        mine = sorted((p for p in pods if int(p.labels.get(kp.L_ATTEMPT, -1)) == attempt),
                      key=lambda p: int(p.labels.get(kp.L_RANK, 0)))
        why = self._unadoptable(launch, mine)
        if why:
            log.warning("not adopting job %s (attempt %d): %s; deleting its pods", jid, attempt, why)
            self._abandon(launch, pods, attempt)
            return False
        ann = mine[0].annotations
        run = KRun(launch, ann.get(kp.A_RUN_ID, new_run_id(jid, attempt)), attempt,
                   started=float(ann.get(kp.A_SIM_START, self.clock())), base=int(ann.get(kp.A_SIM_BASE, 0)),
                   rate=float(ann.get(kp.A_SIM_RATE, 0.0)) or self._rate(launch),
                   service=kp.service_name(jid, attempt), bound_at=self.clock())
        for p in mine:
            role = p.labels.get(kp.L_ROLE, "worker")
            run.pods[p.uid], run.nodes[p.uid] = p.name, p.node or ""
            run.ranks[p.uid] = (int(p.labels.get(kp.L_RANK, -1)), role)
            run.requests[p.uid] = self._role_request(launch, role)
        if self.mode == "real":
            run.reader = ProgressReader(Path(launch.job_dir))
        self._install(run)
        others = [(p.name, p.uid) for p in pods if p.uid not in run.pods and not p.deleting]
        if others:  # older attempts left behind: nothing the controller knows runs in them
            self.api.delete_pods(others, 0)
        return True

    def _unadoptable(self, launch: Launch, pods: list[PodInfo]) -> str:
        """Why these pods (one attempt) cannot be adopted for `launch` ("" when they can)."""
        want = int(pods[0].annotations.get(kp.A_WORLD, len(pods)))
        if len(pods) != want:
            return f"{len(pods)} of its {want} pods exist"
        if all(p.phase == "Succeeded" for p in pods):
            return ""  # finished while no controller watched: adopted to be reported done
        for p in pods:
            if p.node is None:
                return f"pod {p.name} is not bound"
            if p.phase == "Failed":
                return f"pod {p.name} failed ({p.problem or 'no reason given'})"
            if p.deleting:
                return f"pod {p.name} is being deleted"
        names = self._cluster.node_names
        have: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for p in pods:
            have[p.node or ""][1 if p.labels.get(kp.L_ROLE) == "ps" else 0] += 1
        planned = {names[n]: [w, ps] for n, w, ps in zip(launch.allocation.nodes, launch.allocation.workers,
                                                         launch.allocation.ps) if 0 <= n < len(names)}
        if dict(have) != planned:
            return f"its pods are on {dict(have)}, the store says {planned}"
        with self._cond:
            for node in have:
                why, hard = self._why_down(self._nodes.items.get(node))
                if hard:
                    return f"node {node} is {why}"
        return ""

    def _abandon(self, launch: Launch, pods: list[PodInfo], attempt: int) -> None:
        """Delete every pod and Service of a job that cannot be adopted, and wait until they are gone."""
        live = [p for p in pods if p.phase not in ("Succeeded", "Failed") and not p.deleting]
        mine = {p.uid: p for p in pods if int(p.labels.get(kp.L_ATTEMPT, -1)) == attempt}
        done = {u for u, p in mine.items() if p.phase == "Succeeded" and not p.deleting}
        ann = next((p.annotations for p in live if p.uid in mine), None)
        run = None
        if self.mode == "sim" and ann and kp.A_SIM_START in ann:  # it ran until now: checkpointed, as a stop
            run = KRun(launch, "", attempt, started=float(ann[kp.A_SIM_START]), base=int(ann.get(kp.A_SIM_BASE, 0)),
                       rate=float(ann.get(kp.A_SIM_RATE, 0.0)) or self._rate(launch),
                       pods={u: p.name for u, p in mine.items()}, succeeded=done)
            self._checkpoint(launch, run.made_up_step(self.clock(), self._pause(run.attempt)))
        self.api.delete_pods([(p.name, p.uid) for p in pods if p.phase in ("Succeeded", "Failed")], 0)
        self.api.delete_pods([(p.name, p.uid) for p in live], self.tpl.grace_s)
        self.api.delete_services({kp.service_name(launch.job_id, int(p.labels.get(kp.L_ATTEMPT, 0))) for p in pods})
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while self.api.job_pods(launch.job_id) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.api.delete_pods([(p.metadata.name, p.metadata.uid) for p in self.api.job_pods(launch.job_id)], 0)
        if self.mode == "sim" and (done or (run is not None and self._reached_sim_end(run))):
            self._checkpoint(launch, launch.job.steps)  # its pods got to their end before their deletes
        self.api.deletion_taken([p.uid for p in pods], forget=True)

    def forget(self, job_id: str) -> None:
        run = self._runs.get(job_id)
        if run is None:
            return
        self._judge(run)
        if run.state == "running":  # never orphan live pods
            self._stop_runs([run], 10.0)
        left = run.live_pods()
        if left and not run.deleting:  # a done run's pods: Succeeded (sim), or exiting after done.json (real)
            run.deleting = True
            self.api.delete_pods(left, self.tpl.grace_s if self.mode == "real" else 0)
            with self._cond:  # still bound and running (a clock kwok cannot follow, a trainer still
                # exiting): a launch may want their place before the watches see them go (`_launch_all`)
                self._leaving.update(u for _, u in left if u not in self._pods.items
                                     or self._pods.items[u].phase not in ("Succeeded", "Failed"))
        self._delete_service(run)
        self.api.deletion_taken(run.pods, forget=True)
        with self._cond:
            for uid in run.pods:
                self._uid_job.pop(uid, None)
            del self._runs[job_id]

    def close(self) -> None:
        """Stop every running job (checkpointing), then `detach`."""
        if self._closed:
            return
        try:
            running = [r for r in self._runs.values() if r.state == "running"]
            if running and self._may_act():
                self._stop_runs(running, STOP_TIMEOUT_S)
        finally:
            self.detach()

    def lost(self) -> str:
        return (self.lease.lost or "") if self.lease is not None else ""

    def detach(self) -> None:
        """Stop watching and hand the Lease over, leaving every pod as it is, for the next
        controller to adopt: what a service that leaves its jobs running calls instead of `close`."""
        self._closed = True
        for r in self._reflectors:
            r.stop()
        if self.lease is not None:
            self.lease.release()
        api = getattr(self, "api", None)
        if api is not None:
            api.close()

    # ------------------------------------------------------------------ stops
    def _stop_runs(self, runs: list[KRun], timeout: float) -> None:
        """Delete the pods of every run with the grace period at once, wait up to `timeout` until all
        are gone, force-delete (grace 0) the rest."""
        if not self._may_act():
            for run in runs:
                self._end(run, "stopped", f"not stopped: this controller lost leadership ({self.lease.lost})")
            return
        now = self.clock()
        for run in runs:
            run.deleting = True
            if self.mode == "sim":
                run.stop_step = run.made_up_step(now, self._pause(run.attempt))
                self._checkpoint(run.launch, run.stop_step)
        self.api.delete_pods([p for run in runs for p in run.live_pods()], self.tpl.grace_s)
        left = self._wait_gone(runs, timeout)
        still: dict[str, list[str]] = {}
        if left:
            self.api.delete_pods([(run.pods[u], u) for run in runs for u in left.get(run.job_id, [])], 0)
            still = self._wait_gone(runs, KILL_WAIT_S)
        for run in runs:
            self._delete_service(run)
            if self._reached_sim_end(run):
                # its pods reached their sim-end before the delete reached them (the API server was
                # away when the stop was asked): the run finished, so the checkpoint is the last
                # step, not the step it would have stopped at (found by tests/test_k8s_chaos.py)
                run.stop_step = run.launch.job.steps
                self._checkpoint(run.launch, run.stop_step)
            forced = len(left.get(run.job_id, []))
            msg = f"{forced} pod(s) force-deleted after not exiting {timeout:g} s after the delete" if forced else ""
            if still.get(run.job_id):
                msg += f"; {len(still[run.job_id])} pod(s) still there after the force delete"
            self._end(run, "stopped", msg)

    def _wait_gone(self, runs: list[KRun], timeout: float) -> dict[str, list[str]]:
        """Wait until the pods of `runs` are gone (on the watch), at most `timeout`; then ask the API
        which are really left (a pod may go before the watch ever saw it): job -> uids."""
        def left() -> dict[str, list[str]]:
            return {run.job_id: [u for _, u in run.live_pods()] for run in runs if run.live_pods()}

        # in slices of a second, deleting again what the API server did not take meanwhile: a
        # delete sent while it restarted is not waited out for the whole timeout (a controller
        # round blocked 30 s, then raised: tests/test_k8s_chaos.py)
        deadline = time.monotonic() + timeout
        while True:
            with self._cond:
                self._cond.wait_for(lambda: not left(), timeout=max(0.0, min(1.0, deadline - time.monotonic())))
                pending = left()
            if not pending or time.monotonic() >= deadline:
                break
            self.api.retry_deletes(lambda uid: uid in self._pods.items)
        remaining: dict[str, list[str]] = {}
        for run in runs:
            if run.job_id not in pending:
                continue
            try:
                there = {p.metadata.uid for p in self.api.job_pods(run.job_id, run.attempt)}
            except Exception as exc:  # noqa: BLE001 - the API server away: assume they are all still there
                log.warning("listing the pods of %s: %s", run.job_id, exc)
                there = set(pending[run.job_id])
            with self._cond:
                for u in pending[run.job_id]:
                    if u in there:
                        remaining.setdefault(run.job_id, []).append(u)
                    else:
                        run.gone.add(u)
        return remaining

    def _checkpoint(self, launch: Launch, step: int) -> None:
        self._checkpoints[launch.job_id] = step
        write_sim_checkpoint(Path(launch.job_dir), step)

    # ------------------------------------------------------------------ launches
    def _pause(self, attempt: int) -> float:
        """Sim: seconds a run of this attempt makes no progress after its start (a first start
        pays `startup`, a restart or resize `restart_startup`, as the simulator's two overheads)."""
        return self.startup if attempt == 0 or self.restart_startup is None else self.restart_startup

    def _rate(self, launch: Launch) -> float:
        if self.rate is not None:
            return self.rate(launch)
        return made_up_rate(self.rate_per_worker, launch.allocation.num_workers, self.scaling)

    def _role_request(self, launch: Launch, role: str) -> tuple[float, float, float]:
        """What one pod of `role` requests, exactly as its manifest says (0 GPUs if fractional)."""
        try:
            res = kp.task_resources(launch, role, self.slot)
        except ValueError:
            res = {}
        return kp.pod_request({"containers": [{"resources": res}]}, self.slot)

    def _launch_all(self, launches: list[Launch]) -> None:
        """Start every launch at once, each gang created then bound on its own (`_create_and_bind`);
        a launch with any failure is rolled back alone (its pods deleted with grace 0) and reported
        failed. Gangs overlap: with one barrier for all (every create, then every bind) the first
        gang waited for the last gang's creates (on a busy API server the total barely moved: the
        server is the bottleneck; `bind="create"` halves the calls, BENCHMARKS.md issue 28)."""
        now, t0 = self.clock(), time.perf_counter()
        self._wait_left()
        planned: list[tuple[KRun, kp.RunManifest]] = []
        free = self._free()
        for launch in launches:
            got = self._plan_launch(launch, now, free)
            if got is not None:
                planned.append(got)
        if not planned:
            return
        self._clear_orphans([run.job_id for run, _ in planned])
        errors = dict(zip((run.job_id for run, _ in planned), self.api.per_gang(self._create_and_bind, planned)))
        binds = sum(len(run.pods) for run, _ in planned if not errors[run.job_id])
        bound = self.clock()
        self.launch_seconds.append((binds, time.perf_counter() - t0))
        for run, m in planned:
            errs = errors.get(run.job_id)
            if not errs:
                run.bound_at = bound
                continue
            run.deleting = True
            self.api.delete_pods(run.live_pods(), 0)
            self._delete_service(run)
            more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
            self._end(run, "failed", f"gang not started, all {len(m.pods)} pod(s) of attempt {run.attempt} deleted: "
                                     f"{errs[0]}{more}")
            self.api.event(m.pods[0][0]["metadata"]["name"], "GangFailed", run.message)

    def _create_and_bind(self, planned: tuple[KRun, kp.RunManifest]) -> list[str]:
        """Create one launch's Service and pods at once, then, if every create succeeded, bind its
        pods at once: what went wrong (empty: the gang is bound). Launches run side by side
        (`KubeApi.per_gang`), so a gang binds as soon as its own pods exist."""
        run, m = planned
        objs = [(m.service, None)] + list(m.pods)
        errors = []
        for (obj, node), (uid, err) in zip(objs, self.api.map(lambda c: self.api.create(c[0]), objs)):
            if err:
                errors.append(err)
            elif obj["kind"] == "Pod":
                labels = obj["metadata"]["labels"]
                with self._cond:
                    self.pods_created += 1
                    run.pods[uid], run.nodes[uid] = obj["metadata"]["name"], node
                    run.ranks[uid] = (int(labels[kp.L_RANK]), labels[kp.L_ROLE])
                    run.requests[uid] = kp.pod_request(obj["spec"], self.slot)
                    self._uid_job[uid] = run.job_id
        if errors or self.bind == "create":  # created on their nodes (`_plan_launch`): nothing to bind
            return errors
        return [e for e in self.api.map(lambda uid: self.api.bind(run.pods[uid], uid, run.nodes[uid]), list(run.pods))
                if e]

    def _wait_left(self) -> None:
        """Wait (at most KILL_WAIT_S, once for every job forgotten since the last launch) until the
        running pods `forget` deleted are gone from the watches: until then they hold their nodes
        (a forgotten run's pods count as other schedulers' usage), and the controller may already
        have planned a launch in their place."""
        with self._cond:
            def gone() -> bool:
                self._leaving = {u for u in self._leaving if u in self._pods.items
                                 or (self._usage is not None and u in self._usage.items)}
                return not self._leaving
            self._cond.wait_for(gone, timeout=KILL_WAIT_S)

    def _plan_launch(self, launch: Launch, now: float, free: np.ndarray) -> tuple[KRun, kp.RunManifest] | None:
        """The run and manifests of `launch`, its demand taken from `free`; None (and the run
        installed as failed) when it cannot start."""
        old = self._runs.get(launch.job_id)
        if old is not None:
            self._judge(old)
            if old.state == "running":
                raise RuntimeError(f"job {launch.job_id} is still running; stop it before starting it again")
        names = self._cluster.node_names
        layout = rank_layout(launch, names)  # a ConfigError here is a controller bug, as in the other backends
        run = KRun(launch, new_run_id(launch.job_id, launch.attempt), launch.attempt, started=now,
                   service=kp.service_name(launch.job_id, launch.attempt))
        if self.mode == "real":
            reader = old.reader if old is not None else None
            same = reader is not None and Path(reader.job_dir).resolve() == Path(launch.job_dir).resolve()
            run.reader = reader if same else ProgressReader(Path(launch.job_dir))
        self._install(run)
        if not self._may_act():
            self._end(run, "failed", f"not started: this controller lost leadership ({self.lease.lost})")
            return None
        sim = None
        if self.mode == "sim":
            if old is not None:
                if self._reached_sim_end(old):  # e.g. a failed run's survivors deleted after their end
                    self._checkpoint(launch, launch.job.steps)
                self.api.deletion_taken(old.pods, forget=True)
            base = self._checkpoints.get(launch.job_id)
            run.base = read_sim_checkpoint(Path(launch.job_dir)) if base is None else base
            run.rate = self._rate(launch)
            end = run.sim_end(self._pause(launch.attempt))  # inf: an allocation where it makes no progress
            sim = {kp.A_SIM_START: f"{now:.6f}", kp.A_SIM_BASE: str(run.base), kp.A_SIM_RATE: repr(run.rate)}
            if self._kwok_completes and run.rate > 0:  # kwok completes the pods at that wall-clock instant
                sim[kp.A_SIM_END] = kp.rfc3339(end)
        try:
            manifest = kp.build_run(launch, layout, names, self.namespace, self.tpl, run.run_id,
                                    holder=self.lease.identity if self.lease else "", sim=sim)
        except ValueError as exc:
            self._end(run, "failed", f"cannot start: {exc}")
            return None
        need = np.zeros_like(free)
        for pod, node in manifest.pods:
            need[self._index[node]] += kp.pod_request(pod["spec"], self.slot)
        short = self._shortfall(need, free)
        if short:
            self._end(run, "failed", f"cannot start: {short}")
            return None
        free -= need  # later launches of this decision see what this one takes
        if self.bind == "create":
            for pod, node in manifest.pods:
                pod["spec"]["nodeName"] = node
        return run, manifest

    def _free(self) -> np.ndarray:
        """(nodes, 3) free capacity now: allocatable minus every bound, non-terminated pod (those of
        our runs from our records, which the watch may not show yet; the others from the usage
        watch). Nodes that cannot take pods (gone, NotReady, cordoned) have -inf."""
        with self._cond:
            free = np.array([self._nodes.items[n].allocatable if n in self._nodes.items else (0.0, 0.0, 0.0)
                             for n in self._cluster.node_names], dtype=float)
            free -= self.foreign_usage()
            for run in self._runs.values():
                for name, uid in run.live_pods():
                    info = self._pods.items.get(uid)
                    idx = self._index.get(run.nodes.get(uid, ""))
                    if idx is not None and (info is None or info.phase not in ("Succeeded", "Failed")):
                        free[idx] -= run.requests.get(uid, (0.0, 0.0, 0.0))
            for name, idx in self._index.items():
                if self._why_down(self._nodes.items.get(name))[0]:
                    free[idx] = -np.inf
        return free

    def _shortfall(self, need: np.ndarray, free: np.ndarray) -> str:
        """Why `need` (nodes, 3) does not fit `free`: the first node that cannot hold its part ("" if all can)."""
        for idx in np.flatnonzero(need.any(axis=1)):
            name = self._cluster.node_names[idx]
            if np.isneginf(free[idx]).any():
                with self._cond:
                    why = self._why_down(self._nodes.items.get(name))[0]
                return f"node {name} cannot take pods ({why or 'unusable'})"
            over = need[idx] > free[idx] + 1e-9
            if over.any():
                what = ", ".join(f"{r} {need[idx][k]:g} > {max(free[idx][k], 0):g} free"
                                 for k, r in enumerate(("GPU", "CPU", "memory GiB")) if over[k])
                return f"node {name} cannot hold its part of the gang ({what})"
        return ""

    def _clear_orphans(self, job_ids: list[str]) -> None:
        """Pods of these jobs that no run of ours knows (left by a controller that crashed between
        creating pods and recording them) hold resources and names: delete them (grace 0)."""
        wanted = {kp.job_label(j): j for j in job_ids}
        with self._cond:
            orphans = [(p.name, p.uid) for p in self._pods.items.values()
                       if wanted.get(p.labels.get(kp.L_JOB, "")) == p.annotations.get(kp.A_JOB_ID)
                       and p.uid not in self._uid_job and not p.deleting]
        if orphans:
            log.warning("deleting %d pod(s) of jobs %s that no run of this controller knows", len(orphans), job_ids)
            self.api.delete_pods(orphans, 0)

    # ------------------------------------------------------------------ runs
    def _may_act(self) -> bool:
        return self.lease is None or self.lease.lost is None

    def _install(self, run: KRun) -> None:
        with self._cond:
            old = self._runs.get(run.job_id)
            if old is not None:
                for uid in old.pods:
                    self._uid_job.pop(uid, None)
            self._runs[run.job_id] = run
            for uid in run.pods:
                self._uid_job[uid] = run.job_id

    def _end(self, run: KRun, state: RunState, message: str = "") -> None:
        run.state = state
        run.ended_at = self.clock()
        if message:
            run.message = message

    def _delete_service(self, run: KRun) -> None:
        if not run.service_deleted:
            run.service_deleted = True
            self.api.delete_services([run.service])

    def _sync(self) -> None:
        """Act on the node changes the watch saw: report them, and fail the runs on lost nodes.
        First, delete again the pods whose delete the API server did not take (it was away)."""
        self.api.retry_deletes(lambda uid: uid in self._pods.items)
        with self._cond:
            todo, self._transitions = self._transitions, []
        for t, idx, kind, why, hard in todo:
            name = self._cluster.node_names[idx]
            if kind != "lost":
                self._note_node(t, idx, "fail" if kind == "fail" else "join")
                (log.warning if kind == "fail" else log.info)("node %s %s", name, why or "is back")
            if not hard:
                continue
            for run in self._runs.values():
                if run.state == "running" and name in run.nodes.values():
                    # judged first: a run whose pods all Succeeded before the node went is done, not
                    # lost (failing it ran the job to the end a second time: tests/test_k8s_chaos.py)
                    self._judge(run)
                    if run.state == "running":
                        self._fail(run, f"node {name} failed ({why}): its pods are lost")

    def next_sim_end(self) -> float | None:
        """Sim: the earliest clock time at which a running run reaches its last step (None when
        none will), 1 ms late so that its made-up step has got there: a replay moves its trace
        clock there, so the run ends, and its room is given out, when the simulator's would."""
        if self.mode != "sim":
            return None
        with self._cond:
            ends = [run.sim_end(self._pause(run.attempt)) for run in self._runs.values()
                    if run.state == "running" and run.pods and run.rate > 0]
        return min(ends) + 1e-3 if ends else None

    def _reached_sim_end(self, run: KRun) -> bool:
        """Sim: the run may have trained to its end, whatever ended it, so its next attempt resumes
        at the end. Either a pod of it was seen Succeeded before anyone deleted it (one instant for
        all its pods: kwok completes them one by one), or, kwok completing the pods, the deletion of
        one of its pods began (its delete was taken, or a watch saw it go) at or after the run's
        sim-end, or has not begun by then: kwok's completion may have come first, unseen by the
        backend's watch while it listed again (an API server restart), and the next attempt trained
        the job to the end a second time (tests/test_k8s_chaos.py, in CI)."""
        if self.mode != "sim":
            return False
        if run.succeeded:
            return True
        if not self._kwok_completes or not run.pods or run.rate <= 0:
            return False
        end = math.floor(run.sim_end(self._pause(run.attempt)) * 1000) / 1000  # its annotation, to the ms
        taken, now = self.api.deletion_taken(run.pods), self.clock()
        with self._cond:
            seen = dict(run.deletion_seen)
        return any(min(taken.get(u, now), seen.get(u, now)) >= end for u in run.pods)

    def _fail(self, run: KRun, message: str) -> None:
        """The run is dead: delete what is left of it at once (the survivors would wait in a
        collective for the dead rank) and say why."""
        self._end(run, "failed", message)
        if self._reached_sim_end(run):  # ended between two of its pods' completions: resumes at the end
            self._checkpoint(run.launch, run.launch.job.steps)
        run.deleting = True
        self.api.delete_pods(run.live_pods(), 0)
        self._delete_service(run)
        first = next(iter(run.pods.values()), None)
        if first:
            self.api.event(first, "RunFailed", message)

    def _judge(self, run: KRun) -> None:
        if run.state != "running" or not run.pods:
            return
        with self._cond:
            infos = {u: self._pods.items.get(u) for u in run.pods}
            gone = set(run.gone)
        got = verdict(run, infos, gone, self.mode)
        if got is None and self.mode == "sim" and not self._kwok_completes \
                and run.made_up_step(self.clock(), self._pause(run.attempt)) >= run.launch.job.steps:
            # a clock that is not the wall clock (the contract test's): kwok could not follow it, so
            # the pods carry no sim-end and the made-up step says when the run is done
            got = ("done", "")
        if got is None:
            return
        state, message = got
        if state == "failed":
            self._fail(run, message)
        else:
            self._end(run, state, message)
            if state == "done" and self.mode == "sim":
                # a run the controller has not heard of as done yet may be asked to stop and start
                # again (a resize, a node failing right after): the next attempt then resumes at the
                # end instead of training again from the last stop's checkpoint (found by
                # tests/test_k8s_chaos.py: jobs trained to the end two and three times)
                self._checkpoint(run.launch, run.launch.job.steps)

    # ------------------------------------------------------------------ introspection (tests, tools)
    def pods_of(self, job_id: str) -> dict[str, str]:
        """The current run's pods: name -> node name."""
        run = self._runs.get(job_id)
        return {} if run is None else {run.pods[u]: run.nodes[u] for u in run.pods}

    def run_info(self, job_id: str) -> dict[str, Any]:
        run = self._runs.get(job_id)
        if run is None:
            return {}
        return {"run_id": run.run_id, "attempt": run.attempt, "state": run.state, "started": run.started,
                "bound_at": run.bound_at, "service": run.service, "pods": dict(run.pods)}

    def wait_for(self, pred: Callable[[], bool], timeout: float) -> bool:
        """Wait (woken by the watches) until `pred()` holds, at most `timeout` seconds."""
        with self._cond:
            return self._cond.wait_for(pred, timeout=timeout)

    def pod_phases(self, job_id: str) -> dict[str, str]:
        """The current run's pods as the watch shows them: name -> phase ("" when not seen yet)."""
        run = self._runs.get(job_id)
        if run is None:
            return {}
        with self._cond:
            return {n: (self._pods.items[u].phase if u in self._pods.items else "") for u, n in run.pods.items()}
