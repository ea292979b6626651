"""Run trainer jobs on a Ray cluster: one placement group per run (the gang), one actor per rank.

Why placement groups: a distributed job is useless until all of its ranks run, so the backend
reserves every rank's resources at once (`placement_group(...).ready()`) before anything is
launched; a run either gets its whole gang or fails cleanly, never half of it. Each bundle is
pinned to the node the scheduler chose through a per-node resource (see "Labelling nodes" in
`ray_cluster`), so the Ray placement is exactly the policy's `Allocation`. Each rank is a small
Ray actor living in its bundle (`ray_actors.RankActor`); the actor starts the trainer (`python -m
dlsched.trainer ...`) as a subprocess on its node with the torch.distributed environment of its
rank, and answers liveness / exit-code polls. Runs are judged and observed by
`ranks.RankBackend`, exactly as the local backend's are.

Shared filesystem. The trainer writes `progress.jsonl`, `checkpoint.pt` and `done.json` into the
job directory, and the backend reads progress there (`ProgressReader`), so the job directory must
be the same path on every node and on the controller's machine (NFS or similar); on a local
multi-node cluster it trivially is. Each rank's stdout/stderr goes to `<job_dir>/logs/`.

Lifecycle. `start` blocks only for the gang reservation (`pg_timeout`); a run whose placement is
impossible (the nodes are too small) or not granted in time is reported by `observe` as "failed"
with the reason, never a hang. Polls are non-blocking: `observe` collects the answers to the
polls it sent last time and sends new ones. `stop` SIGTERMs every rank (they checkpoint), waits,
SIGKILLs leftovers; once a run has ended its actors are killed and its placement group removed.
The actors belong to the controller's Ray driver, so if the controller dies Ray kills them and
their trainers (the trainer is started with a parent-death signal); therefore `adopt` returns
False and the controller restarts such jobs from their checkpoints.

Warm starts. With `standby=k` every node keeps k warm trainer interpreters (`RayStandbyPool`, the
trainer's `--standby` mode) and a run's ranks are handed those instead of paying the torch import
again, which is most of a resize pause. Without it (the default) every rank is a cold process.
"""

from __future__ import annotations

import signal
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.core.events import NodeEvent
from dlsched.live.backends.base import Launch
from dlsched.live.backends.ray_actors import RankActorRemote, RayStandbyPoolRemote
from dlsched.live.backends.ray_cluster import DEFAULT_SLOT, GIB, RayNode, connect, discover_nodes, to_cluster
from dlsched.live.backends.ranks import Rank, RankBackend, Run, rank_layout
from dlsched.trainer.protocol import new_run_id, rank_env

#: A bundle takes this much of its node's label resource: enough to pin it, never a limit.
PIN_AMOUNT = 0.001
#: How often `node_events` asks Ray which nodes are alive (a GCS call).
NODE_CHECK_S = 2.0


@dataclass
class RayRank(Rank):
    node_index: int = 0
    actor: Any = None
    pool: Any = None  # the node's standby pool it may be handed to (the parent of a warm trainer)
    poll_ref: Any = None  # a poll sent, not yet collected
    where_ref: Any = None
    where: dict | None = None  # where the actor really runs


@dataclass
class RayRun(Run):
    pg: PlacementGroup | None = None
    released: bool = False


class RayBackend(RankBackend):
    """Gang-scheduled trainer runs on a Ray cluster (placement group per run, actor per rank)."""

    name = "ray"
    #: the per-node label resources' prefix (see "Labelling nodes" in `ray_cluster`), and the cluster's name
    prefix, cluster_name = "dlsched_node_", "ray"

    def __init__(self, address: str | None = None, slot_resource: str | None = None,
                 trainer_cmd: list[str] | None = None, *, env: dict[str, str] | None = None,
                 pg_timeout: float = 30.0, local_num_cpus: int | None = None, standby: int = 0):
        """`address`: None starts a private single-node Ray on 127.0.0.1 (shut down by `close`),
        labelled `<prefix>local` with one GPU slot per CPU (`local_num_cpus`, default all);
        "auto", "host:port" or "ray://host:port" connect to a running cluster. `slot_resource`:
        the Ray resource counted as GPU slots; None picks "GPU" when any node has GPUs, else
        "gpu_slot". `trainer_cmd` replaces `python -m dlsched.trainer` (the job's arguments are
        appended); `env` is added to every trainer's environment (e.g. DLSCHED_THREADS).
        `standby`: warm trainer interpreters kept per node (`RayStandbyPool`; the trainer command
        must accept `--standby`), 0 for cold starts; they are started on every node at once and
        refilled as runs take them."""
        super().__init__()
        if slot_resource is not None and not slot_resource.strip():
            raise ConfigError("slot_resource must name a Ray resource (GPU or a custom one)")
        if pg_timeout <= 0:
            raise ConfigError(f"pg_timeout must be > 0, got {pg_timeout}")
        if standby < 0:
            raise ConfigError(f"standby must be >= 0, got {standby}")
        self.slot_resource = slot_resource
        self.trainer_cmd = list(trainer_cmd) if trainer_cmd else None
        self.env = dict(env or {})
        self.pg_timeout = pg_timeout
        self.standby = standby
        self._pools: dict[tuple, Any] = {}
        self._down: set[int] = set()  # nodes seen dead (`node_events`)
        self._node_check = 0.0
        self._nodes: list[RayNode] = []
        self._cluster: Cluster | None = None
        self._owns_ray = not ray.is_initialized()  # else: the caller's connection, left open on close()
        self._local_ray = None  # the Ray head this backend started (address=None)
        if self._owns_ray:
            self._local_ray = connect(address, self.prefix, local_num_cpus)
        try:
            self.refresh_nodes()
            if self.slot_resource is None:
                has_gpu = any(n.resources.get("GPU", 0) > 0 for n in self._nodes)
                self.slot_resource = "GPU" if has_gpu else DEFAULT_SLOT
            self.warm()
        except BaseException:
            self.close()  # leave no Ray behind when the cluster is unusable
            raise

    # ------------------------------------------------------------------ nodes
    def refresh_nodes(self) -> list[RayNode]:
        """Re-read the alive Ray nodes (changes the node indices if nodes came or went)."""
        self._nodes = discover_nodes(self.prefix)
        self._cluster = None
        return list(self._nodes)

    @property
    def nodes(self) -> list[RayNode]:
        return list(self._nodes)

    def node_events(self) -> list[NodeEvent]:
        """Injected events (`fail_node`) and, at most every `NODE_CHECK_S`, the Ray nodes that
        died or came back: a node is known by its label resource (its name), so a raylet that
        restarts with the same label is the same node back."""
        out = super().node_events()
        now = time.time()
        if now - self._node_check < NODE_CHECK_S:
            return out
        self._node_check = now
        alive = {k for n in ray.nodes() if n.get("Alive") for k in n.get("Resources", {})}
        alive |= {f"node:{n['NodeManagerAddress']}" for n in ray.nodes() if n.get("Alive")}
        for i, node in enumerate(self._nodes):
            up = node.pin is None or node.pin in alive
            if not up and i not in self._down:
                self._down.add(i)
                out.append(NodeEvent(now, i, "fail"))
            elif up and i in self._down:
                self._down.discard(i)
                out.append(NodeEvent(now, i, "join"))
        return out

    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = to_cluster(self._nodes, self.slot_resource, self.cluster_name)
        return self._cluster

    # ------------------------------------------------------------------ start
    def _launch(self, launch: Launch) -> None:
        layout = rank_layout(launch, [n.name for n in self._nodes])
        for _, i in layout:
            if self._nodes[i].pin is None:
                raise ConfigError(
                    f"Ray node {self._nodes[i].name} cannot be targeted: it shares its IP with another "
                    f"node and has no {self.prefix}<name> resource; start it with "
                    f"--resources '{{\"{self.prefix}<name>\": 1}}'")
        self._check_restartable(launch.job_id)
        job, job_dir = launch.job, Path(launch.job_dir)
        job_dir.mkdir(parents=True, exist_ok=True)
        run_id = new_run_id(launch.job_id, launch.attempt)
        ranks = [RayRank(r, role, self._nodes[i].name, log=job_dir / "logs" / f"{run_id}-rank{r}.log",
                         node_index=i) for r, (role, i) in enumerate(layout)]
        run = RayRun(launch, run_id, time.time(), ranks)
        self._install(run)

        demands = [self._demand(job, rk.role) for rk in ranks]
        why = self._infeasible(ranks, demands)
        if why:
            self._end(run, "failed", f"placement infeasible: {why}")
            return
        bundles = [{**d, self._nodes[rk.node_index].pin: PIN_AMOUNT} for rk, d in zip(ranks, demands)]
        strategy = "STRICT_PACK" if len({rk.node_index for rk in ranks}) == 1 else "PACK"
        run.pg = placement_group(bundles, strategy=strategy, name=f"dlsched-{run_id}")
        try:
            ray.get(run.pg.ready(), timeout=self.pg_timeout)
        except GetTimeoutError:
            names = sorted({rk.node for rk in ranks})
            self._end(run, "failed", f"placement not granted within {self.pg_timeout:g} s on nodes {names} "
                                     f"(resources held by other runs or nodes gone); asked {bundles}")
            return

        argv = job.trainer_argv(job_dir, launch.allocation.num_ps)
        for i, (rk, d) in enumerate(zip(ranks, demands)):
            opts: dict[str, Any] = {
                "num_cpus": d.get("CPU", 0.0),
                "memory": d.get("memory"),
                "scheduling_strategy": PlacementGroupSchedulingStrategy(run.pg, placement_group_bundle_index=i),
            }
            slots = d.get(self.slot_resource, 0.0)
            if self.slot_resource == "GPU":
                opts["num_gpus"] = slots
            elif slots:
                opts["resources"] = {self.slot_resource: slots}
            rk.actor = RankActorRemote.options(**{k: v for k, v in opts.items() if v is not None}).remote()
        master = ranks[0].actor.master.remote()
        names = [(rk.role, rk.node) for rk in ranks]
        for rk in ranks:  # the rendezvous address and this node's address are set on the node (`RankActor.launch`)
            env = {**self.env, **rank_env(run_id, names, rk.rank, local_ranks=False)}
            rk.pool = self._pool(rk.node_index)
            rk.actor.launch.remote(self.trainer_cmd, argv, env, str(job_dir), str(rk.log), master, rk.pool)
            rk.where_ref = rk.actor.where.remote()

    def _demand(self, job, role: str) -> dict[str, float]:
        if role == "ps":
            d = {"CPU": job.cpus_per_ps, "memory": job.mem_gb_per_ps * GIB}
        else:
            d = {self.slot_resource: job.gpus_per_worker, "CPU": job.cpus_per_worker,
                 "memory": job.mem_gb_per_worker * GIB}
        out = {k: float(v) for k, v in d.items() if v > 0}
        if "memory" in out:  # Ray accounts memory in whole bytes
            out["memory"] = float(int(out["memory"]))
        return out

    def _infeasible(self, ranks: list[RayRank], demands: list[dict[str, float]]) -> str | None:
        """Why the gang can never fit on its nodes' total resources (None if it can)."""
        per_node: dict[int, dict[str, float]] = {}
        for rk, d in zip(ranks, demands):
            acc = per_node.setdefault(rk.node_index, {})
            for k, v in d.items():
                acc[k] = acc.get(k, 0.0) + v
        problems = []
        for i, need in per_node.items():
            node = self._nodes[i]
            for k, v in need.items():
                have = node.resources.get(k, 0.0)
                if v > have + 1e-9:
                    unit = (lambda x: f"{x / GIB:.1f} GiB") if k == "memory" else (lambda x: f"{x:g}")
                    problems.append(f"node {node.name} has {unit(have)} {k}, the allocation needs {unit(v)}")
        return "; ".join(problems) or None

    # ------------------------------------------------------------------ standby pools
    def warm(self, nodes: list[int] | None = None) -> None:
        """Start the standby pools of these nodes (default: all) now, so that even the first run
        on a node finds warm interpreters (no-op when `standby` is 0)."""
        for i in range(len(self._nodes)) if nodes is None else nodes:
            self._pool(i)

    def _pool(self, node: int) -> Any:
        """The node's standby pool for the current trainer command (None without standbys)."""
        if self.standby <= 0 or not 0 <= node < len(self._nodes) or self._nodes[node].pin is None:
            return None
        key = (self._nodes[node].node_id, tuple(self.trainer_cmd or ()))
        if key not in self._pools:
            self._pools[key] = RayStandbyPoolRemote.options(
                num_cpus=0, resources={self._nodes[node].pin: PIN_AMOUNT}).remote(self.standby, self.trainer_cmd)
        return self._pools[key]

    # ------------------------------------------------------------------ mechanism
    def _poll_ranks(self, ranks: list[RayRank], now: float) -> None:
        """Collect the answers of the polls sent last time and send new ones (never blocks)."""
        pending = [rk.poll_ref for rk in ranks if rk.poll_ref is not None and not rk.exited]
        ready = set(ray.wait(pending, num_returns=len(pending), timeout=0)[0]) if pending else set()
        for rk in ranks:
            if rk.exited or rk.actor is None:
                continue
            if rk.poll_ref is not None and rk.poll_ref in ready:
                try:
                    s = ray.get(rk.poll_ref)
                    rk.pid, rk.warm, rk.tail = s.get("pid") or rk.pid, bool(s.get("warm")), s.get("tail") or ""
                    if s.get("error"):
                        rk.ended(now, error=f"could not start the trainer: {s['error']}")
                    elif s.get("code") is not None:
                        rk.ended(now, int(s["code"]))
                except RayError as e:
                    rk.ended(now, error=f"actor died: {_short(e)}")
                rk.poll_ref = None
            if rk.poll_ref is None and not rk.exited:
                rk.poll_ref = rk.actor.poll.remote()

    def _signal(self, ranks: list[RayRank], sig: int) -> None:
        for rk in ranks:
            if rk.actor is not None and not rk.exited:
                rk.actor.signal.remote(int(sig))

    def _wait(self, ranks: list[RayRank], timeout: float) -> None:
        waits = [(rk, rk.actor.wait.remote(timeout)) for rk in ranks if rk.actor is not None and not rk.exited]
        for rk, ref in waits:
            try:
                code = ray.get(ref, timeout=timeout + 30)
                if code is not None:
                    rk.ended(time.time(), int(code))
            except RayError as e:  # the actor died: its trainer died with it
                rk.ended(time.time(), error=f"actor died: {_short(e)}")

    def _release(self, run: RayRun) -> None:
        """Kill what is left of a warm rank's trainer (the pool's child: it outlives a dead rank
        actor), then free the actors and the placement group."""
        if run.released:
            return
        for rk in run.ranks:
            if rk.warm and rk.pool is not None and rk.pid:
                rk.pool.signal.remote(int(rk.pid), int(signal.SIGKILL))
        for rk in run.ranks:
            if rk.actor is not None:
                with suppress(RayError):
                    ray.kill(rk.actor, no_restart=True)
        if run.pg is not None:
            with suppress(RayError):
                remove_placement_group(run.pg)
        run.released = True

    # ------------------------------------------------------------------ close
    def close(self) -> None:
        self._stop_runs([j.run for j in self.jobs.values()], 30.0)
        self.jobs.clear()
        for pool in self._pools.values():
            with suppress(RayError):
                ray.get(pool.close.remote(), timeout=30)
            with suppress(RayError):
                ray.kill(pool, no_restart=True)
        self._pools.clear()
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False
        if self._local_ray is not None:
            self._local_ray.shutdown()
            self._local_ray = None

    # ------------------------------------------------------------------ introspection
    def placements(self, job_id: str) -> list[dict]:
        """Where each rank of the job's current run was meant to go and where its actor runs."""
        job = self.jobs.get(job_id)
        if job is None:
            return []
        for rk in job.run.ranks:
            if rk.where is None and rk.where_ref is not None:
                with suppress(RayError):
                    rk.where = ray.get(rk.where_ref, timeout=30)
        by_id = {n.node_id: n.name for n in self._nodes}
        return [{"rank": rk.rank, "role": rk.role, "node": rk.node,
                 "ray_node": by_id.get(rk.where["node_id"]) if rk.where else None,
                 "pid": rk.pid, "warm": rk.warm, "run": job.run.run_id} for rk in job.run.ranks]


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]
