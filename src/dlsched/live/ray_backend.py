"""Run trainer jobs on a Ray cluster: one placement group per run (the gang), one actor per task.

Why placement groups: a distributed job is useless until all of its ranks run, so the backend
reserves every task's resources at once (`placement_group(...).ready()`) before anything is
launched; a run either gets its whole gang or fails cleanly, never half of it. Each bundle is
pinned to the node the scheduler chose through a per-node resource (see "Labelling nodes"), so
the Ray placement is exactly the policy's `Allocation`. Each task is a small Ray actor living in
its bundle; the actor starts the trainer (`python -m dlsched.trainer ...`) as a subprocess on its
node with the torch.distributed environment of its rank, and answers liveness / exit-code polls.

Labelling nodes. The scheduler needs stable node names and the backend needs to pin bundles to
nodes. Give each Ray node a custom resource `dlsched_node_<name>` (value 1), and GPU slots either
as Ray's `GPU` resource or, on CPU machines, as a custom resource named by `slot_resource`::

    ray start --head --node-ip-address=10.0.0.1 --resources '{"gpu_slot": 4, "dlsched_node_a": 1}'
    ray start --address=10.0.0.1:6379 --resources '{"gpu_slot": 4, "dlsched_node_b": 1}'

Unlabelled nodes are named `ray-<node id prefix>` and pinned through Ray's built-in
`node:<ip>` resource, which only works when each node has its own IP (one raylet per machine);
several unlabelled raylets on one IP cannot be told apart and an allocation on them is refused
with a `ConfigError`. Node order (the indices of `Allocation`) is fixed when the backend
connects: labelled nodes sorted by name, then unlabelled ones by id (`refresh_nodes` re-reads).

Shared filesystem. The trainer writes `progress.jsonl`, `checkpoint.pt` and `done.json` into the
job directory, and the backend reads progress there (`ProgressReader`), so the job directory must
be the same path on every node and on the controller's machine (NFS or similar); on a local
multi-node cluster it trivially is. Each rank's stdout/stderr goes to `<job_dir>/logs/`.

Lifecycle. `start` blocks only for the gang reservation (`pg_timeout`); a run whose placement is
impossible (the nodes are too small) or not granted in time is reported by `observe` as "failed"
with the reason, never a hang. `stop` SIGTERMs every rank (they checkpoint), waits, SIGKILLs
leftovers, then kills the actors and removes the placement group. One rank failing kills the
rest of its run (they would block in collectives). The actors belong to the controller's Ray
driver, so if the controller dies Ray kills them and their trainers (the trainer is started with
a parent-death signal); therefore `adopt` returns False and the controller restarts such jobs
from their checkpoints.

Warm starts. With `standby=k` every node keeps k warm trainer interpreters (`StandbyPool`, the
trainer's `--standby` mode) and a run's ranks are handed those instead of paying the torch import
again, which is most of a resize pause. Without it (the default) every rank is a cold process.

Loopback. `address=None` starts a private one-node Ray whose GCS, raylet and agents listen on
127.0.0.1 only (through `ray.cluster_utils.Cluster`: in Ray 2.60 `ray.init(_node_ip_address=
"127.0.0.1")` still listens on every interface), labelled `dlsched_node_local`. Ray also rewrites
a `127.0.0.1` address into the machine's public IP before connecting, which fails for a cluster
bound to loopback (`ray start --node-ip-address=127.0.0.1`); the backend connects to such
addresses (or with `node_ip_address="127.0.0.1"`) without that rewrite (`_keep_loopback`).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import ray
from ray.exceptions import GetTimeoutError, RayError
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from dlsched.core.cluster import Cluster
from dlsched.core.errors import ConfigError
from dlsched.live.backend import Backend, Launch, Observation, RunState
from dlsched.live.progress_log import ProgressReader, is_done, log_tail
from dlsched.live.standby_pool import says_ready

GIB = 2**30
#: A bundle takes this much of its node's label resource: enough to pin it, never a limit.
PIN_AMOUNT = 0.001
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
#: The custom resource standing for GPU slots on CPU machines (when `slot_resource` is not given).
DEFAULT_SLOT = "gpu_slot"


# ---------------------------------------------------------------------------------------- actor
def _die_with_parent() -> None:
    """Runs in the trainer child before exec: if its actor dies, the kernel kills the trainer, so
    no rank outlives the Ray actor that owns it (Linux only; a no-op elsewhere)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


try:  # resolved before any fork: the pre-exec hook must not load libraries
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
except (OSError, AttributeError):
    _PRCTL = None


def _clean_env() -> dict[str, str]:
    """The actor's environment without Ray's own settings (the trainer is no Ray worker)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}


class StandbyPool:
    """The Ray actor keeping warm trainer interpreters (`--standby`) on one node.

    Why: a resize restarts every rank, and a cold `python -m dlsched.trainer` spends seconds
    importing torch. A standby has done that already and waits for its command line on stdin, so
    a run started from one reaches its first step about that much sooner. The pool is the parent
    of the processes it hands out, so it also answers for their exit codes; it lives as long as
    the backend (outside any placement group, taking no CPU), and its children die with it."""

    def __init__(self, size: int, cmd: list[str] | None):
        self.size = size
        self.cmd = list(cmd) if cmd else [sys.executable, "-m", "dlsched.trainer"]
        self.dir = tempfile.mkdtemp(prefix="dlsched-standby-")
        self.idle: list[tuple[subprocess.Popen, str]] = []
        self.busy: dict[int, subprocess.Popen] = {}
        self._fill()

    def _fill(self) -> None:
        self.idle = [(p, log) for p, log in self.idle if p.poll() is None]
        while len(self.idle) < self.size:
            log = os.path.join(self.dir, f"standby-{uuid.uuid4().hex[:8]}.log")
            with open(log, "ab") as out:
                proc = subprocess.Popen(
                    [*self.cmd, "--standby"], env=_clean_env(), cwd=self.dir, stdin=subprocess.PIPE,
                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent)
            self.idle.append((proc, log))

    def take(self, argv: list[str], env: dict[str, str]) -> dict:
        """Hand the oldest standby its command line; start a replacement."""
        self._fill()
        proc, log = self.idle.pop(0)
        warm = says_ready(log)
        proc.stdin.write((json.dumps({"argv": argv, "env": env}) + "\n").encode())
        proc.stdin.close()
        self.busy[proc.pid] = proc
        self._fill()
        return {"pid": proc.pid, "log": log, "warm": warm}

    def ready(self) -> int:
        """Idle standbys that have finished importing (said "ready")."""
        return sum(1 for p, log in self.idle if p.poll() is None and says_ready(log))

    def poll(self, pid: int) -> int | None:
        proc = self.busy.get(pid)
        return proc.poll() if proc is not None else -1

    def signal(self, pid: int, sig: int) -> None:
        proc = self.busy.get(pid)
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        for proc, _ in self.idle:
            proc.kill()
            proc.wait()
        self.idle = []
        shutil.rmtree(self.dir, ignore_errors=True)


class TaskRunner:
    """The Ray actor of one task: starts one trainer process on its node and reports on it.

    The trainer is either this actor's own child or a warm standby of the node's `StandbyPool`
    (then the pool answers for its exit code). Methods run on the actor's main thread (a plain,
    non-threaded actor), which keeps the child's parent-death signal tied to this process."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.pool: Any = None
        self.pid: int | None = None
        self.warm = False
        self.error: str | None = None
        self.log_path: str | None = None

    def where(self) -> dict:
        ctx = ray.get_runtime_context()
        return {"node_id": ctx.get_node_id(), "ip": ray.util.get_node_ip_address(),
                "host": socket.gethostname(), "actor_pid": os.getpid()}

    def master(self) -> tuple[str, int]:
        """This node's address and a port free on it now, for rank 0's rendezvous."""
        ip = ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((ip, 0))
            return ip, s.getsockname()[1]

    def launch(self, cmd: list[str] | None, argv: list[str], env: dict[str, str], cwd: str, log_path: str,
               master: tuple[str, int], pool: Any = None) -> int | None:
        try:
            env = dict(env)
            env["MASTER_ADDR"], env["MASTER_PORT"] = master[0], str(master[1])
            for key in ("CUDA_VISIBLE_DEVICES",):  # what Ray assigned to this task, not to the pool
                if key in os.environ:
                    env.setdefault(key, os.environ[key])
            Path(log_path).parent.mkdir(parents=True, exist_ok=True)
            if pool is not None:
                got = ray.get(pool.take.remote(argv, env))
                self.pool, self.pid, self.warm, self.log_path = pool, got["pid"], got["warm"], got["log"]
                try:
                    os.symlink(got["log"], log_path)
                except OSError:
                    pass
                return self.pid
            full_cmd = [*(cmd or [sys.executable, "-m", "dlsched.trainer"]), *argv]
            self.log_path = log_path
            with open(log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    full_cmd, env={**_clean_env(), **env}, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_die_with_parent)
            self.pid = self.proc.pid
            return self.pid
        except Exception as e:  # reported through poll(): the backend turns it into a failed run
            self.error = f"{type(e).__name__}: {e}"
            return None

    def _code(self) -> int | None:
        if self.pool is not None:
            return ray.get(self.pool.poll.remote(self.pid))
        return self.proc.poll() if self.proc is not None else None

    def poll(self) -> dict:
        code = self._code()
        out: dict[str, Any] = {"pid": self.pid, "code": code, "error": self.error, "warm": self.warm}
        if (code not in (None, 0)) or self.error:
            out["tail"] = log_tail(self.log_path, 2000)
        return out

    def signal(self, sig: int) -> None:
        """Signal the trainer's whole process group (it may have children of its own)."""
        if self.pool is not None:
            ray.get(self.pool.signal.remote(self.pid, sig))
        elif self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float) -> int | None:
        if self.pool is None:
            if self.proc is None:
                return None
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                return None
        deadline = time.monotonic() + timeout
        while True:
            code = self._code()
            if code is not None or time.monotonic() >= deadline:
                return code
            time.sleep(0.05)


_TaskActor = ray.remote(max_restarts=0, max_concurrency=1)(TaskRunner)
_PoolActor = ray.remote(max_restarts=0, max_concurrency=1)(StandbyPool)


# ---------------------------------------------------------------------------------------- state
@dataclass(frozen=True)
class RayNode:
    """One Ray node as the scheduler sees it."""

    name: str
    node_id: str
    ip: str
    resources: dict[str, float]
    pin: str | None  # the resource a bundle takes a sliver of to land on this node


@dataclass
class _Task:
    rank: int
    role: str  # "ps" or "worker"
    node: int  # index into the backend's nodes
    actor: Any = None
    status: dict = field(default_factory=dict)  # last poll() answer
    dead: str | None = None  # why the actor is gone, if it is
    poll_ref: Any = None


@dataclass
class _Run:
    launch: Launch
    run_id: str
    started: float
    tasks: list[_Task] = field(default_factory=list)
    pg: PlacementGroup | None = None
    where_refs: list = field(default_factory=list)
    where: list[dict | None] = field(default_factory=list)
    stopping: bool = False
    final: RunState | None = None  # set once the run is over and its Ray resources released
    message: str = ""
    released: bool = False


@dataclass
class _Job:
    reader: ProgressReader
    run: _Run


# ---------------------------------------------------------------------------------------- backend
class RayBackend(Backend):
    """Gang-scheduled trainer runs on a Ray cluster (placement group per run, actor per task)."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        slot_resource: str | None = None,
        node_resource_prefix: str = "dlsched_node_",
        trainer_cmd: list[str] | None = None,
        *,
        env: dict[str, str] | None = None,
        node_ip_address: str | None = None,
        pg_timeout: float = 30.0,
        cluster_name: str = "ray",
        local_num_cpus: int | None = None,
        local_resources: dict[str, float] | None = None,
        object_store_memory: int = 80 * 2**20,
        standby: int = 0,
    ):
        """`address`: None starts a private single-node Ray on 127.0.0.1 (shut down by `close`),
        labelled `<prefix>local` and given `local_resources` (default {"gpu_slot": CPU count}, so
        a CPU machine has one slot per core); "auto", "host:port" or "ray://host:port" connect to
        a running cluster. `slot_resource`: the Ray resource counted as GPU slots; None picks
        "GPU" when any node has GPUs, else "gpu_slot". `trainer_cmd` replaces
        `python -m dlsched.trainer` (the job's arguments are appended); `env` is added to every
        trainer's environment (e.g. DLSCHED_THREADS). `standby`: warm trainer interpreters
        kept per node (`StandbyPool`; the trainer command must accept `--standby`), 0 for cold
        starts; they are started on every node at once and refilled as runs take them."""
        if slot_resource is not None and not slot_resource.strip():
            raise ConfigError("slot_resource must name a Ray resource (GPU or a custom one)")
        if pg_timeout <= 0:
            raise ConfigError(f"pg_timeout must be > 0, got {pg_timeout}")
        self.slot_resource = slot_resource
        self.prefix = node_resource_prefix
        self.trainer_cmd = list(trainer_cmd) if trainer_cmd else None
        self.env = dict(env or {})
        self.pg_timeout = pg_timeout
        if standby < 0:
            raise ConfigError(f"standby must be >= 0, got {standby}")
        self.standby = standby
        self._pools: dict[tuple, Any] = {}
        self.cluster_name = cluster_name
        self._jobs: dict[str, _Job] = {}
        self._owns_ray = False
        self._local_ray = None  # the Ray head this backend started (address=None)
        self._connect(address, node_ip_address, local_num_cpus, local_resources, object_store_memory)
        self._nodes: list[RayNode] = []
        self._cluster: Cluster | None = None
        try:
            self.refresh_nodes()
            if self.slot_resource is None:
                has_gpu = any(n.resources.get("GPU", 0) > 0 for n in self._nodes)
                self.slot_resource = "GPU" if has_gpu else DEFAULT_SLOT
            self.warm()
        except BaseException:
            self.close()  # leave no Ray behind when the cluster is unusable
            raise

    # ------------------------------------------------------------------ connection and nodes
    def _connect(self, address, node_ip_address, num_cpus, resources, object_store_memory) -> None:
        if ray.is_initialized():
            return  # the caller's connection: use it, leave it open on close()
        if address is None:
            res = dict(resources if resources is not None else {DEFAULT_SLOT: float(num_cpus or os.cpu_count() or 1)})
            res.setdefault(f"{self.prefix}local", 1.0)
            # ray.init() would listen on every interface whatever _node_ip_address says (Ray 2.60);
            # a head started this way binds its GCS, raylet and agents to the given IP only.
            from ray.cluster_utils import Cluster as _LocalRay

            ip = node_ip_address or "127.0.0.1"
            self._local_ray = _LocalRay(initialize_head=True, head_node_args=dict(
                node_ip_address=ip, include_dashboard=False, num_cpus=num_cpus or os.cpu_count() or 1,
                num_gpus=_count_gpus(), resources=res, object_store_memory=object_store_memory))
            try:
                with _keep_loopback(ip in LOOPBACK):
                    ray.init(address=self._local_ray.address, _node_ip_address=ip, log_to_driver=False)
            except BaseException:
                self._local_ray.shutdown()
                self._local_ray = None
                raise
        elif address.startswith("ray://"):
            ray.init(address=address, log_to_driver=False)
        else:
            host = address.rsplit(":", 1)[0] if ":" in address else address
            ip = node_ip_address or ("127.0.0.1" if host in LOOPBACK else None)
            with _keep_loopback(ip in LOOPBACK if ip else False):
                ray.init(address=address, _node_ip_address=ip, log_to_driver=False)
        self._owns_ray = True

    def refresh_nodes(self) -> list[RayNode]:
        """Re-read the alive Ray nodes (changes the node indices if nodes came or went)."""
        alive = [n for n in ray.nodes() if n.get("Alive")]
        ips = [n["NodeManagerAddress"] for n in alive]
        labelled, unlabelled, seen = [], [], {}
        for n in alive:
            res = {k: float(v) for k, v in n["Resources"].items()}
            labels = [k[len(self.prefix):] for k in res if k.startswith(self.prefix)]
            if len(labels) > 1:
                raise ConfigError(f"Ray node {n['NodeID'][:8]} has several {self.prefix}* resources: {labels}")
            if labels:
                name = labels[0]
                if name in seen:
                    raise ConfigError(f"two Ray nodes are labelled {self.prefix}{name} "
                                      f"({seen[name][:8]} and {n['NodeID'][:8]}); labels must be unique")
                seen[name] = n["NodeID"]
                labelled.append(RayNode(name, n["NodeID"], n["NodeManagerAddress"], res, f"{self.prefix}{name}"))
            else:
                unique_ip = ips.count(n["NodeManagerAddress"]) == 1
                pin = f"node:{n['NodeManagerAddress']}" if unique_ip else None
                unlabelled.append(RayNode(f"ray-{n['NodeID'][:8]}", n["NodeID"], n["NodeManagerAddress"], res, pin))
        if not alive:
            raise ConfigError("the Ray cluster has no alive nodes")
        self._nodes = sorted(labelled, key=lambda x: x.name) + sorted(unlabelled, key=lambda x: x.node_id)
        self._cluster = None
        return list(self._nodes)

    @property
    def nodes(self) -> list[RayNode]:
        return list(self._nodes)

    def cluster(self) -> Cluster:
        if self._cluster is None:
            caps, types = [], []
            for n in self._nodes:
                r = n.resources
                caps.append([r.get(self.slot_resource, 0.0), r.get("CPU", 0.0), r.get("memory", 0.0) / GIB])
                acc = [k.split(":", 1)[1] for k in r if k.startswith("accelerator_type:")]
                types.append(acc[0] if acc else "generic")
            k = len(self._nodes)
            self._cluster = Cluster(
                name=self.cluster_name, capacity=np.array(caps, dtype=float),
                gpu_type=np.array(types, dtype=object), rack=np.zeros(k, dtype=int),
                speed=np.ones(k), node_names=tuple(n.name for n in self._nodes))
        return self._cluster

    # ------------------------------------------------------------------ start
    def _tasks(self, launch: Launch) -> list[_Task]:
        """Ranks per the trainer contract: parameter servers first, then workers, in node order."""
        alloc = launch.allocation
        ps_mode = launch.job.mode == "ps"
        if alloc.num_workers < 1:
            raise ConfigError(f"job {launch.job_id}: an allocation needs at least one worker")
        if not ps_mode and alloc.num_ps:
            raise ConfigError(f"job {launch.job_id}: mode 'ddp' takes no parameter servers, got {alloc.num_ps}")
        if ps_mode and alloc.num_ps < 1:
            raise ConfigError(f"job {launch.job_id}: mode 'ps' needs at least one parameter server")
        for i in alloc.nodes:
            if not 0 <= i < len(self._nodes):
                raise ConfigError(f"job {launch.job_id}: node index {i} is not in the cluster "
                                  f"({len(self._nodes)} nodes)")
            if self._nodes[i].pin is None:
                raise ConfigError(
                    f"Ray node {self._nodes[i].name} cannot be targeted: it shares its IP with another "
                    f"node and has no {self.prefix}<name> resource; start it with "
                    f"--resources '{{\"{self.prefix}<name>\": 1}}'")
        tasks: list[_Task] = []
        for node, _w, p in zip(alloc.nodes, alloc.workers, alloc.ps):
            tasks += [_Task(0, "ps", node) for _ in range(p)]
        for node, w, _p in zip(alloc.nodes, alloc.workers, alloc.ps):
            tasks += [_Task(0, "worker", node) for _ in range(w)]
        for r, t in enumerate(tasks):
            t.rank = r
        return tasks

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

    def _infeasible(self, tasks: list[_Task], demands: list[dict[str, float]]) -> str | None:
        """Why the gang can never fit on its nodes' total resources (None if it can)."""
        per_node: dict[int, dict[str, float]] = {}
        for t, d in zip(tasks, demands):
            acc = per_node.setdefault(t.node, {})
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

    def start(self, launch: Launch) -> None:
        job_id = launch.job_id
        old = self._jobs.get(job_id)
        if old is not None and old.run.final is None and not old.run.released:
            raise RuntimeError(f"job {job_id} is still running on Ray; stop it before starting it again")
        tasks = self._tasks(launch)
        job = launch.job
        job_dir = Path(launch.job_dir)
        job_dir.mkdir(parents=True, exist_ok=True)
        run = _Run(launch, f"{job_id}-a{launch.attempt}-{uuid.uuid4().hex[:6]}", time.time(), tasks)
        reader = old.reader if old is not None else ProgressReader(job_dir)
        self._jobs[job_id] = _Job(reader, run)

        demands = [self._demand(job, t.role) for t in tasks]
        why = self._infeasible(tasks, demands)
        if why:
            self._fail(run, f"placement infeasible: {why}")
            return
        bundles = [{**d, self._nodes[t.node].pin: PIN_AMOUNT} for t, d in zip(tasks, demands)]
        strategy = "STRICT_PACK" if len(set(t.node for t in tasks)) == 1 else "PACK"
        pg = placement_group(bundles, strategy=strategy, name=f"dlsched-{run.run_id}")
        run.pg = pg
        try:
            ray.get(pg.ready(), timeout=self.pg_timeout)
        except GetTimeoutError:
            names = sorted({self._nodes[t.node].name for t in tasks})
            self._fail(run, f"placement not granted within {self.pg_timeout:g} s on nodes {names} "
                            f"(resources held by other runs or nodes gone); asked {bundles}")
            return

        argv = job.trainer_argv(job_dir, launch.allocation.num_ps)
        for i, (t, d) in enumerate(zip(tasks, demands)):
            opts: dict[str, Any] = {
                "num_cpus": d.get("CPU", 0.0),
                "memory": d.get("memory"),
                "scheduling_strategy": PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i),
            }
            slots = d.get(self.slot_resource, 0.0)
            if self.slot_resource == "GPU":
                opts["num_gpus"] = slots
            elif slots:
                opts["resources"] = {self.slot_resource: slots}
            t.actor = _TaskActor.options(**{k: v for k, v in opts.items() if v is not None}).remote()
        master = tasks[0].actor.master.remote()
        world = len(tasks)
        for t in tasks:
            env = {**self.env, "RANK": str(t.rank), "WORLD_SIZE": str(world),
                   "DLSCHED_RUN_ID": run.run_id, "DLSCHED_NODE": self._nodes[t.node].name,
                   "DLSCHED_ROLE": t.role}
            log = str(job_dir / "logs" / f"{run.run_id}-rank{t.rank}.log")
            t.actor.launch.remote(self.trainer_cmd, argv, env, str(job_dir), log, master, self._pool(t.node))
        run.where_refs = [t.actor.where.remote() for t in tasks]
        run.where = [None] * world

    # ------------------------------------------------------------------ stop / cleanup
    def _fail(self, run: _Run, message: str) -> None:
        run.message = message
        self._release(run, sig=signal.SIGKILL, timeout=5.0)
        run.final = "failed"

    def _release(self, run: _Run, sig: int, timeout: float) -> None:
        """Signal every live rank, wait up to `timeout`, SIGKILL what is left, then free the
        actors and the placement group."""
        if run.released:
            return
        live = [t for t in run.tasks if t.actor is not None and t.dead is None]
        if live:
            for t in live:
                t.actor.signal.remote(int(sig))
            waits = {t.rank: t.actor.wait.remote(timeout) for t in live}
            leftovers = []
            for t in live:
                try:
                    code = ray.get(waits[t.rank], timeout=timeout + 30)
                    if code is None:
                        leftovers.append(t)
                    else:
                        t.status = {**t.status, "code": code}
                except RayError as e:  # the actor died: its trainer died with it
                    t.dead = t.dead or _short(e)
            for t in leftovers:
                try:
                    t.actor.signal.remote(int(signal.SIGKILL))
                    t.status = {**t.status, "code": ray.get(t.actor.wait.remote(10.0), timeout=40)}
                except RayError as e:
                    t.dead = t.dead or _short(e)
        for t in run.tasks:  # a standby's trainer is the pool's child: it outlives a dead task actor
            pool = self._pool(t.node) if t.dead and t.status.get("pid") else None
            if pool is not None:
                pool.signal.remote(int(t.status["pid"]), int(signal.SIGKILL))
        for t in run.tasks:
            if t.actor is not None:
                try:
                    ray.kill(t.actor, no_restart=True)
                except RayError:
                    pass
        if run.pg is not None:
            try:
                remove_placement_group(run.pg)
            except RayError:
                pass
        run.released = True

    def stop(self, job_id: str, timeout: float = 30.0) -> None:
        job = self._jobs.get(job_id)
        if job is None or job.run.released:
            return
        run = job.run
        run.stopping = True
        self._release(run, signal.SIGTERM, timeout)
        run.final = "done" if is_done(run.launch.job_dir) else "stopped"

    def forget(self, job_id: str) -> None:
        job = self._jobs.pop(job_id, None)
        if job is not None and not job.run.released:
            job.run.stopping = True
            self._release(job.run, signal.SIGTERM, 10.0)

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
            self._pools[key] = _PoolActor.options(
                num_cpus=0, resources={self._nodes[node].pin: PIN_AMOUNT}).remote(self.standby, self.trainer_cmd)
        return self._pools[key]

    def close(self) -> None:
        for job_id in list(self._jobs):
            self.stop(job_id)
        self._jobs.clear()
        for pool in self._pools.values():
            try:
                ray.get(pool.close.remote(), timeout=30)
            except RayError:
                pass
            try:
                ray.kill(pool, no_restart=True)
            except RayError:
                pass
        self._pools.clear()
        if self._owns_ray and ray.is_initialized():
            ray.shutdown()
        self._owns_ray = False
        if self._local_ray is not None:
            self._local_ray.shutdown()
            self._local_ray = None

    # ------------------------------------------------------------------ observe
    def _poll(self, run: _Run) -> None:
        """Collect the answers of the polls issued last time and issue new ones (never blocks)."""
        pending = [t.poll_ref for t in run.tasks if t.poll_ref is not None and t.dead is None]
        ready = set()
        if pending:
            done, _ = ray.wait(pending, num_returns=len(pending), timeout=0)
            ready = set(done)
        for t in run.tasks:
            if t.dead is not None or t.actor is None:
                continue
            if t.poll_ref is not None and t.poll_ref in ready:
                try:
                    t.status = ray.get(t.poll_ref)
                except RayError as e:
                    t.dead = _short(e)
                t.poll_ref = None
            if t.poll_ref is None and t.dead is None:
                t.poll_ref = t.actor.poll.remote()
        if run.where_refs:
            done, _ = ray.wait(run.where_refs, num_returns=len(run.where_refs), timeout=0)
            for ref in done:
                i = run.where_refs.index(ref)
                try:
                    run.where[i] = ray.get(ref)
                except RayError:
                    pass

    def _judge(self, run: _Run) -> None:
        """Turn the ranks' states into the run's state; end the run when it is over."""
        if run.released:
            return
        self._poll(run)
        job_dir = run.launch.job_dir
        broken = []
        for t in run.tasks:
            s = t.status
            if t.dead:
                broken.append(f"rank {t.rank} ({t.role} on {self._nodes[t.node].name}): actor died: {t.dead}")
            elif s.get("error"):
                broken.append(f"rank {t.rank} ({t.role} on {self._nodes[t.node].name}): "
                              f"could not start the trainer: {s['error']}")
            elif s.get("code") not in (None, 0):
                tail = (s.get("tail") or "").strip().splitlines()[-5:]
                broken.append(f"rank {t.rank} ({t.role} on {self._nodes[t.node].name}) exited with code "
                              f"{s['code']}" + (": " + " | ".join(tail) if tail else ""))
        exited = all(t.dead or t.status.get("error") or t.status.get("code") is not None for t in run.tasks)
        if is_done(job_dir):
            if exited:
                self._release(run, signal.SIGKILL, 5.0)
                run.final = "done"
            return  # done even while the ranks are still exiting; forget() cleans up
        if broken:
            self._fail(run, "; ".join(broken))
        elif exited:
            self._fail(run, "every rank exited 0 but the trainer wrote no done.json")

    def observe(self) -> dict[str, Observation]:
        out = {}
        for job_id, job in self._jobs.items():
            run = job.run
            job.reader.poll()
            self._judge(run)
            state: RunState = run.final or ("done" if is_done(run.launch.job_dir) else "running")
            first = next((s.get("time") for s in job.reader.starts if s.get("run") == run.run_id), None)
            r = job.reader
            out[job_id] = Observation(
                job_id=job_id, state=state, step=r.step, loss=r.loss,
                steps_per_s=r.steps_per_s if first is not None and state == "running" else None,
                samples=list(r.samples), run_started=run.started,
                first_step_at=float(first) if first is not None else None,
                message=run.message)
        return out

    def adopt(self, launch: Launch) -> bool:
        """Always False: a run's actors die with the Ray driver that created them."""
        return False

    # ------------------------------------------------------------------ introspection
    def placements(self, job_id: str) -> list[dict]:
        """Where each rank of the job's current run was meant to go and where its actor runs."""
        job = self._jobs.get(job_id)
        if job is None:
            return []
        run = job.run
        if run.where_refs and any(w is None for w in run.where):
            try:
                run.where = ray.get(run.where_refs, timeout=30)
            except RayError:
                pass
        by_id = {n.node_id: n.name for n in self._nodes}
        out = []
        for i, t in enumerate(run.tasks):
            w = run.where[i] if i < len(run.where) else None
            out.append({"rank": t.rank, "role": t.role, "node": self._nodes[t.node].name,
                        "ray_node": by_id.get(w["node_id"]) if w else None,
                        "pid": t.status.get("pid"), "warm": bool(t.status.get("warm")), "run": run.run_id})
        return out


def _count_gpus() -> int:
    """NVIDIA GPUs on this machine (for the private local Ray), without importing torch."""
    import shutil

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def _short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


@contextmanager
def _keep_loopback(on: bool) -> Iterator[None]:
    """While connecting, make Ray resolve "127.0.0.1" to itself instead of the public IP.

    Ray (as of 2.x) canonicalises a loopback bootstrap address to the node's routable IP,
    which nothing listens on when the cluster was started with --node-ip-address=127.0.0.1;
    its own switch for single-machine use (ENABLE_RAY_CLUSTER, normally for macOS/Windows)
    turns that off. Only the connection step is affected."""
    if not on:
        yield
        return
    from ray._private import ray_constants

    old = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = old
