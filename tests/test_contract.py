"""One scheduling core, two drivers: the same scripted timeline — arrivals, completions, a failed
run — driven through the simulator and through the live controller (dry backend, fake clock) gives
the very same Actions at the very same times, for every policy that runs live; every other policy
is refused when the service starts, with its reason. The same timeline through the Kubernetes
backend, on a real API server with kwok nodes, gives the same Actions too, and after every round
the pods bound on the API are the plan's, node by node.

The two sides are made to see the same world: the dry backend steps at 10 steps/s per worker
(linear), the simulator's throughput model says the same; both pause a job 1 s on every (re)start;
jobs declare their work; the failed run is a run that had made no progress yet (so the dry
backend's lost-since-checkpoint and the simulator's node failure lose the same nothing).
"""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.framework.state import ClusterState
from dlsched.live.controller import Controller, live_refusal
from dlsched.live.backends.dry import DryBackend, FakeClock
from dlsched.live.controller.retry import RetryConfig
from dlsched.live.service import Service, ServiceConfig
from dlsched.live.spec import TrainJob
from dlsched.live.store import Store
from dlsched.policies.registry import POLICIES, make_policy
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import NodeEvent, simulate
from dlsched.throughput.base import ThroughputModel
from tests.k8s_control_plane import control_plane, k8s_namespace  # noqa: F401

RATE, PAUSE, NODES, HORIZON = 10.0, 1.0, 4, 400

#: (submit second, job): elastic and rigid, one and two workers, one with a deadline
TIMELINE = [
    (0, TrainJob(model="mlp", steps=400, workers=1, min_workers=1, max_workers=2)),
    (0, TrainJob(model="cnn", steps=240, workers=2, min_workers=1, max_workers=2)),
    (2, TrainJob(model="mlp", steps=60, workers=1)),
    (3, TrainJob(model="transformer", steps=300, workers=2, min_workers=1, max_workers=2, deadline_s=120)),
    (5, TrainJob(model="cnn", steps=100, workers=1, min_workers=1, max_workers=2)),
    (9, TrainJob(model="mlp", steps=40, workers=1)),
]
FAIL_AFTER = 6  # the first run started at or after this second fails at the end of its start-up

#: options that put the slot-based policies on the test's time scale
OPTIONS = {"optimus": {"interval": 10.0}, "qos": {"interval": 10.0}, "kube-autoscale": {"interval": 10.0},
           "dl2": {"slot_seconds": 10.0}}


class Linear(ThroughputModel):
    """What the dry backend does: RATE steps/s per worker."""

    name = "linear"

    def supports(self, spec: JobSpec) -> bool:
        return True

    def rate(self, spec: JobSpec, alloc: Allocation, cluster: Cluster) -> float:
        return RATE * alloc.num_workers


def _cluster() -> Cluster:
    return Cluster.homogeneous("contract", nodes=NODES, gpus=1, cpus=8, mem=32)


@pytest.fixture
def actions(monkeypatch):
    """Every non-empty list of Actions a ClusterState produced, by state, with its time."""
    log: dict[int, list] = defaultdict(list)
    alive: list[ClusterState] = []  # keeps each state alive, so no two share an id()
    diff = ClusterState.diff

    def recording(self, plan, now, policy):
        if not alive or alive[-1] is not self:
            alive.append(self)
        out = diff(self, plan, now, policy)
        if out:
            log[id(self)].append((round(now, 6), [str(a) for a in out]))
        return out

    monkeypatch.setattr(ClusterState, "diff", recording)
    return log


def _live(name: str, tmp_path, log, backend=None, clock=None, crash=None, check=None,
          ) -> tuple[list, list[NodeEvent], dict[str, str]]:
    """The timeline through the controller: the dry backend, or `backend` on `clock` with
    `crash(job_id)` failing a run and `check(controller)` called after every round."""
    if backend is None:
        clock = FakeClock(0.0)
        backend = DryBackend(_cluster(), clock, rate_per_worker=RATE, startup=PAUSE, scaling=1.0)
        crash = backend.crash
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    ctl = Controller(store, backend, make_policy(name, **OPTIONS.get(name, {})), work_dir=tmp_path, tick=1.0,
                     clock=clock, restart_overhead=PAUSE,
                     retry=RetryConfig(backoff_initial=0, backoff_max=0))  # the simulator retries at once
    failure: list[NodeEvent] = []
    ids = []
    for second in range(HORIZON):
        for at, job in TIMELINE:
            if at == second:
                ids.append(store.add(job, now=clock()).id)
        if not failure:  # crash the first run started since FAIL_AFTER as its start-up ends
            for js in list(ctl.state.running.values()):
                a = js.allocation
                if js.last_start >= FAIL_AFTER and ctl.now() == js.last_start + PAUSE and a.num_nodes == 1:
                    crash(js.job_id)
                    failure = [NodeEvent(ctl.now(), a.nodes[0], "fail"), NodeEvent(ctl.now(), a.nodes[0], "join")]
                    break
        ctl.step()
        if check is not None:
            check(ctl)
        if ctl.idle() and len(ids) == len(TIMELINE):
            break
        clock.advance(1.0)
    statuses = {i: store.get(i).status for i in ids}
    store.close()
    (live_log,) = [v for k, v in log.items() if k == id(ctl.state)]
    return live_log, failure, statuses


def _sim(name: str, failure: list[NodeEvent], ids: list[str], log, cluster: Cluster | None = None,
         ) -> tuple[list, dict[str, str]]:
    specs = [job.job_spec(jid, float(at)) for jid, (at, job) in zip(ids, TIMELINE)]
    cfg = SimConfig(restart_overhead=PAUSE, startup_overhead=PAUSE)
    before = set(log)
    res = simulate(specs, cluster or _cluster(), make_policy(name, **OPTIONS.get(name, {})), Linear(), cfg,
                   node_events=failure)
    (key,) = set(log) - before
    return log[key], dict(zip(res.jobs.job_id, res.jobs.status))


LIVE = [n for n in POLICIES if not live_refusal(make_policy(n, **OPTIONS.get(n, {})))]
REFUSED = [n for n in POLICIES if n not in LIVE]


def check_contract(name: str, tmp_path, actions) -> None:
    """The contract: the scripted timeline through the live controller (dry backend) and through
    the simulator gives the same actions at the same times, every job done (also run on plugins)."""
    live_log, failure, statuses = _live(name, tmp_path, actions)
    assert set(statuses.values()) == {"done"}, statuses
    assert failure, "the timeline's failed run never happened"
    sim_log, sim_status = _sim(name, failure, list(statuses), actions)
    assert set(sim_status.values()) == {"done"}
    assert sim_log == live_log


@pytest.mark.parametrize("name", LIVE)
def test_simulator_and_controller_give_the_same_actions(name, tmp_path, actions):
    check_contract(name, tmp_path, actions)


def test_every_policy_runs_live_or_is_refused_at_start_up_with_its_reason(tmp_path):
    assert "fifo" in LIVE and {"srtf", "oasis"} <= set(REFUSED)
    for name in REFUSED:
        reason = live_refusal(make_policy(name, **OPTIONS.get(name, {})))
        assert ("oracle" in reason) or ("cannot schedule real jobs" in reason)
        cfg = ServiceConfig(policy=name, backend="dry", work_dir=tmp_path / name)
        with pytest.raises(ConfigError, match="cannot schedule real jobs"):
            Service(cfg)
        assert not (tmp_path / name).exists()  # refused before anything was made


# ------------------------------------------------------------------ the same, on Kubernetes
CONTRACT_POOL, CONTRACT_PREFIX = "contract", "c-"


@pytest.fixture(scope="module")
def contract_nodes(control_plane):
    """NODES kwok nodes of one GPU, 8 CPUs and 32 GiB in a pool of their own (the contract's
    cluster), made once per session."""
    from lightkube.resources.core_v1 import Node

    with control_plane.client() as c:
        have = [n.metadata.name for n in c.list(Node, labels={"dlsched.io/pool": CONTRACT_POOL})]
    if len(have) < NODES:
        control_plane.add_nodes(NODES, gpus_per_node=1, racks=1, cpus=8, mem="32Gi", pool=CONTRACT_POOL,
                                prefix=CONTRACT_PREFIX)
    return control_plane


def _pods_match_the_plan(client, namespace: str):
    """After every round: the pods dlsched bound are exactly the running jobs' allocations."""
    from lightkube.resources.core_v1 import Pod

    def check(ctl) -> None:
        bound: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for pod in client.list(Pod, namespace=namespace, labels={"app.kubernetes.io/managed-by": "dlsched"}):
            if pod.metadata.deletionTimestamp is None and pod.status.phase in ("Pending", "Running"):
                bound[pod.metadata.labels["dlsched.io/job"]][pod.spec.nodeName] += 1
        names = ctl.cluster.node_names
        planned = {jid: {names[n]: w + p for n, w, p in zip(js.allocation.nodes, js.allocation.workers,
                                                             js.allocation.ps)}
                   for jid, js in ctl.state.running.items()}
        assert {j: dict(v) for j, v in bound.items()} == planned, f"at t={ctl.now():g}"

    return check


@pytest.mark.k8s
@pytest.mark.xdist_group("k8s")
@pytest.mark.parametrize("name", LIVE)
def test_the_kubernetes_backend_gives_the_simulators_actions_and_binds_the_plan(name, tmp_path, actions,
                                                                                contract_nodes, k8s_namespace):
    from lightkube.resources.core_v1 import Pod

    from dlsched.live.backends.kubernetes import KubernetesBackend

    cp = contract_nodes
    clock = FakeClock(0.0)
    backend = KubernetesBackend(kubeconfig=cp.kubeconfig(), namespace=k8s_namespace, pool=CONTRACT_POOL, mode="sim",
                                rate_per_worker=RATE, startup=PAUSE, scaling=1.0, clock=clock)
    client = cp.client()

    def crash(job_id: str) -> None:  # kwok fails a pod of the run now; the round sees it failed
        import datetime as dt

        pod = sorted(backend.pods_of(job_id))[0]
        now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        client.patch(Pod, pod, {"metadata": {"annotations": {"dlsched.io/sim-fail-at": now}}},
                     namespace=k8s_namespace)
        deadline = time.monotonic() + 30
        while backend.observe()[job_id].state != "failed":
            assert time.monotonic() < deadline, "kwok never failed the pod"
            time.sleep(0.05)

    try:
        assert backend.cluster().capacity.tolist() == _cluster().capacity.tolist()
        live_log, failure, statuses = _live(name, tmp_path, actions, backend=backend, clock=clock, crash=crash,
                                            check=_pods_match_the_plan(client, k8s_namespace))
    finally:
        backend.close()
        client.close()
    assert set(statuses.values()) == {"done"}, statuses
    assert failure, "the timeline's failed run never happened"
    sim_log, sim_status = _sim(name, failure, list(statuses), actions, cluster=backend.cluster())
    assert set(sim_status.values()) == {"done"}
    assert sim_log == live_log
