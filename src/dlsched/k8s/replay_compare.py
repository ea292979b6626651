"""Simulated and replayed runs of the same workload side by side: what `dlsched replay` runs.

One control plane (etcd, kube-apiserver, kwok, and kube-scheduler when it is asked for) is
started for the whole comparison, with kwok nodes mirroring the simulated cluster; each replay
gets a namespace of its own and leaves the nodes empty for the next. The simulations run on the
cluster as the API describes it (`KubernetesBackend.cluster()`: the same nodes, in the same
order), so a simulated and a replayed run of one policy differ only in what the replay adds:
the real API, the controller's tick, and (for kube-scheduler) the real scheduler's choices.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from dlsched.core.errors import ConfigError
from dlsched.core.job import JobSpec
from dlsched.k8s.replay import (KUBE_SCHEDULER, Replay, check_replayable, mirror_nodes, pool_cluster,
                               replay_policy)
from dlsched.sim.config import SimConfig
from dlsched.sim.results import SimResult

if TYPE_CHECKING:
    from dlsched.core.cluster import Cluster
    from dlsched.throughput.base import ThroughputModel

#: The pool (node label) a replay's mirrored nodes carry.
REPLAY_POOL = "replay"
#: kube-scheduler's pod backoff in a replay: its least (1 s), since its queue backs off in wall
#: seconds and a replay compresses time (`ControlPlane.scheduler_backoff_s`).
SCHEDULER_BACKOFF_S = 1
#: The simulated twin of each replayed policy: kube-scheduler's is dlsched's imitation of it.
SIM_TWIN = {KUBE_SCHEDULER: "kube-default"}


@dataclass
class ReplayComparison:
    cluster: "Cluster"  # the cluster as the API describes it (what every run used)
    simulated: list[SimResult] = field(default_factory=list)
    replays: list[Replay] = field(default_factory=list)
    start_seconds: dict[str, float] = field(default_factory=dict)  # the control plane's start-up

    @property
    def results(self) -> list[SimResult]:
        """Every run, each simulated one followed by its replay."""
        out: list[SimResult] = []
        for rep in self.replays:
            twin = rep.result.policy.rsplit("@", 1)[0]
            out += [s for s in self.simulated if s.policy == SIM_TWIN.get(twin, twin) and s not in out]
            out.append(rep.result)
        return out + [s for s in self.simulated if s not in out]

    def gaps(self) -> list[dict[str, Any]]:
        """Per replay: its simulated twin's and its own mean JCT and GPU utilization, and the gaps
        (replay / simulation - 1)."""
        sims = {s.policy: s for s in self.simulated}
        out = []
        for rep in self.replays:
            name = rep.result.policy.rsplit("@", 1)[0]
            sim = sims.get(SIM_TWIN.get(name, name))
            r = rep.result.summary
            row = {"replay": rep.result.policy, "simulated": sim.policy if sim else None,
                   "replay_mean_jct_h": _h(r["mean_jct"]), "replay_gpu_utilization": r["gpu_utilization"],
                   "replay_finished": r["finished"]}
            if sim is not None:
                s = sim.summary
                row.update(sim_mean_jct_h=_h(s["mean_jct"]), sim_gpu_utilization=s["gpu_utilization"],
                           sim_finished=s["finished"], jct_gap=_gap(r["mean_jct"], s["mean_jct"]),
                           utilization_gap=_gap(r["gpu_utilization"], s["gpu_utilization"]))
            out.append(row)
        return out


def _h(seconds: float) -> float:
    return round(seconds / 3600.0, 3)


def _gap(a: float, b: float) -> float | None:
    return round(a / b - 1.0, 4) if b else None


def run_replays(specs: list[JobSpec], cluster: "Cluster", names: list[str], throughput: "ThroughputModel",
                cfg: SimConfig, options: dict[str, dict[str, Any]] | None = None, *, speedup: float,
                tick: float = 0.25, simulate: bool = True, work_dir: Path, timeout: float = 3600.0,
                bin_dir: Path | None = None,
                on_progress: Callable[[str, int, int], None] | None = None,
                say: Callable[[str], None] = lambda _: None) -> ReplayComparison:
    """Replay `specs` under each of `names` (dlsched policies, or `kube-scheduler` for the real
    one) on one fresh control plane, and simulate each (kube-scheduler: `kube-default`) on the
    same nodes unless `simulate` is False. `work_dir` keeps the control plane's logs and each
    replay's store."""
    from dlsched.k8s.controlplane import ControlPlane
    from dlsched.k8s.default_scheduler import replay_kube_scheduler
    from dlsched.live.controller import live_refusal
    from dlsched.policies.registry import make_policy
    from dlsched.sim.engine import simulate as run_sim

    options = options or {}
    check_replayable(cluster)
    policies = {n: make_policy(n, **options.get(n, {})) for n in names if n != KUBE_SCHEDULER}
    for n, p in policies.items():  # refused before anything starts, with the reason
        why = live_refusal(p)
        if why:
            raise ConfigError(f"cannot replay {n}: {why}")
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    with ControlPlane(workdir=work_dir / "control-plane", bin_dir=bin_dir, with_scheduler=KUBE_SCHEDULER in names,
                      scheduler_backoff_s=SCHEDULER_BACKOFF_S) as cp:
        say(f"control plane up in {sum(cp.start_seconds.values()):.1f} s; making {cluster.num_nodes} kwok nodes")
        t0 = time.monotonic()
        mirror_nodes(cp, cluster, REPLAY_POOL)
        say(f"{cluster.num_nodes} nodes Ready in {time.monotonic() - t0:.1f} s")
        for k, n in enumerate(names):
            cp.ensure_namespace(_ns(k, n))
        api_cluster = pool_cluster(cp.kubeconfig(), _ns(0, names[0]), REPLAY_POOL)
        out = ReplayComparison(api_cluster, start_seconds=dict(cp.start_seconds))
        for k, n in enumerate(names):
            cb = None if on_progress is None else (lambda e, t, _n=n: on_progress(_n, e, t))
            common = dict(kubeconfig=cp.kubeconfig(), namespace=_ns(k, n), pool=REPLAY_POOL, speedup=speedup,
                          tick=tick, timeout=timeout, on_progress=cb)
            if n == KUBE_SCHEDULER:
                out.replays.append(replay_kube_scheduler(specs, throughput, cfg, backoff_s=SCHEDULER_BACKOFF_S,
                                                         queue=cp.scheduler_queue, **common))
            else:
                out.replays.append(replay_policy(specs, policies[n], throughput, cfg, work_dir=work_dir / _ns(k, n),
                                                 **common))
    if simulate:
        for n in dict.fromkeys(SIM_TWIN.get(n, n) for n in names):
            policy = make_policy(n, **options.get(n, {}))
            out.simulated.append(run_sim(specs, api_cluster, policy, throughput, cfg))
    return out


def _ns(k: int, name: str) -> str:
    return f"replay-{k}-{''.join(c if c.isalnum() else '-' for c in name.lower())}"[:63].rstrip("-")

