"""What the Kubernetes backend writes to the API: names, labels, pod and Service manifests.

Pure functions over plain dicts (the JSON the API server takes), so they are tested without a
cluster; `kubernetes.py` sends them with lightkube. One run (attempt `n` of a job) is:

- a headless Service `<job>-a<n>` (clusterIP None, publishNotReadyAddresses, selecting the run's
  pods by job and attempt labels): the rendezvous name. Rank 0's pod has hostname `<role>0` and
  subdomain `<job>-a<n>`, so MASTER_ADDR is `<role>0.<job>-a<n>.<namespace>.svc`, resolvable as soon
  as the pod exists (never 0.0.0.0, never a pod IP learnt later);
- one pod per rank, `<job>-a<n>-<role><rank>` (rank order of the trainer contract: parameter servers
  first, then workers, in node order), `schedulerName: dlsched` and no nodeName (the backend binds
  it), `restartPolicy: Never`, the GPU slots as an integer limit of the slot resource, CPU and
  memory as requests, and the rank environment of `dlsched.trainer.protocol.rank_env`.

Labels: `app.kubernetes.io/managed-by=dlsched`, `dlsched.io/job`, `dlsched.io/attempt`,
`dlsched.io/role`, `dlsched.io/rank`. Annotations: the exact job id and run id, world size, the
allocation as JSON ({node name: [workers, ps]}), the lease holder, and in sim mode the made-up run's
start, base step, rate and end (`dlsched.io/sim-end`, RFC 3339: kwok completes the pod then).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Mapping, Sequence

from dlsched.live.backends.base import Launch
from dlsched.trainer.protocol import ENV_LOCAL_RANK, ENV_LOCAL_WORLD_SIZE, ENV_NODE_ADDR, rank_env

MANAGED_BY = ("app.kubernetes.io/managed-by", "dlsched")
L_JOB, L_ATTEMPT, L_ROLE, L_RANK = "dlsched.io/job", "dlsched.io/attempt", "dlsched.io/role", "dlsched.io/rank"
A_JOB_ID, A_RUN_ID, A_WORLD, A_ALLOC, A_HOLDER = ("dlsched.io/job-id", "dlsched.io/run-id", "dlsched.io/world-size",
                                                 "dlsched.io/allocation", "dlsched.io/holder")
A_SIM_START, A_SIM_BASE, A_SIM_RATE, A_SIM_END = ("dlsched.io/sim-start", "dlsched.io/sim-base-step",
                                                  "dlsched.io/sim-rate", "dlsched.io/sim-end")
POOL_LABEL, RACK_LABEL, ZONE_LABEL, PRODUCT_LABEL = ("dlsched.io/pool", "dlsched.io/rack", "topology.kubernetes.io/zone",
                                                     "nvidia.com/gpu.product")
ENV_ATTEMPT = "DLSCHED_ATTEMPT"
SCHEDULER_NAME = "dlsched"
CONTAINER = "trainer"
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}
DEFAULT_COMMAND = ("python", "-m", "dlsched.trainer")

_LABEL_OK = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_MAX_BASE = 40  # leaves room for "-a<attempt>-worker<rank>" within a 63-character DNS label


def dns_base(job_id: str) -> str:
    """A DNS-1035 label prefix for `job_id` (lowercase letters, digits and '-', starting with a
    letter, at most 40 characters): the id itself when it already is one, else a cleaned form
    with a short hash of the id, so two ids never share a name."""
    clean = re.sub(r"[^a-z0-9-]+", "-", job_id.lower()).strip("-")
    if clean == job_id and clean[:1].isalpha() and len(clean) <= _MAX_BASE:
        return clean
    digest = hashlib.sha256(job_id.encode()).hexdigest()[:8]
    clean = clean if clean[:1].isalpha() else f"j-{clean}".rstrip("-")
    return f"{clean[:_MAX_BASE - 9].rstrip('-')}-{digest}"


def job_label(job_id: str) -> str:
    """The `dlsched.io/job` label value of `job_id`: the id when it is a valid label value, else
    its `dns_base` (the exact id is always in the `dlsched.io/job-id` annotation)."""
    return job_id if _LABEL_OK.match(job_id) else dns_base(job_id)


def service_name(job_id: str, attempt: int) -> str:
    return f"{dns_base(job_id)}-a{attempt}"


def pod_name(job_id: str, attempt: int, role: str, rank: int) -> str:
    return f"{service_name(job_id, attempt)}-{role}{rank}"


def job_selector(job_id: str, attempt: int | None = None) -> dict[str, str]:
    sel = {MANAGED_BY[0]: MANAGED_BY[1], L_JOB: job_label(job_id)}
    if attempt is not None:
        sel[L_ATTEMPT] = str(attempt)
    return sel


# ------------------------------------------------------------------ quantities and demands

_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
           "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
           "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def parse_quantity(q: Any) -> float:
    """A Kubernetes resource quantity ("8", "500m", "1Ti", "2.5Gi", "1e3") as a float; 0 for None."""
    if q is None:
        return 0.0
    if isinstance(q, (int, float)):
        return float(q)
    m = _QUANTITY.match(str(q).strip())
    if not m or m.group(2) not in _SUFFIX or (m.group(2) and "e" in m.group(1).lower()):
        raise ValueError(f"not a Kubernetes quantity: {q!r}")
    try:
        return float(Decimal(m.group(1)) * Decimal(_SUFFIX[m.group(2)]))
    except InvalidOperation:
        raise ValueError(f"not a Kubernetes quantity: {q!r}") from None


def cpu_quantity(cores: float) -> str:
    """CPU cores as a quantity in millicores ("1500m")."""
    return f"{max(0, round(cores * 1000))}m"


def mem_quantity(gib: float) -> str:
    """GiB as a quantity in MiB ("1536Mi"), rounded up."""
    return f"{max(0, math.ceil(gib * 1024))}Mi"


def resource_vector(resources: Mapping[str, Any] | None, slot_resource: str) -> tuple[float, float, float]:
    """(GPU slots, CPU cores, memory GiB) of a resource list (allocatable, requests or limits)."""
    r = resources or {}
    return (parse_quantity(r.get(slot_resource)), parse_quantity(r.get("cpu")), parse_quantity(r.get("memory")) / 2**30)


def pod_request(spec: Mapping[str, Any] | None, slot_resource: str) -> tuple[float, float, float]:
    """What a pod takes from its node, as kube-scheduler counts it: the larger of the sum over its
    containers and the largest init container, per resource, plus the pod overhead. A container's
    extended resource (GPUs) may be given as a limit only; its request is then the limit."""
    spec = spec or {}

    def one(c: Mapping[str, Any]) -> tuple[float, float, float]:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        merged = {**{k: v for k, v in lim.items() if k not in req}, **req}
        return resource_vector(merged, slot_resource)

    total = [0.0, 0.0, 0.0]
    for c in spec.get("containers") or []:
        total = [a + b for a, b in zip(total, one(c))]
    for c in spec.get("initContainers") or []:
        total = [max(a, b) for a, b in zip(total, one(c))]
    over = resource_vector(spec.get("overhead"), slot_resource)
    return total[0] + over[0], total[1] + over[1], total[2] + over[2]


def task_resources(launch: Launch, role: str, slot_resource: str) -> dict[str, dict[str, str]]:
    """The container resources of one task: GPU slots as an integer limit of `slot_resource`
    (extended resources take whole units, limits only), CPU and memory as requests. Raises
    ValueError for a fractional GPU demand, which no pod can express."""
    job = launch.job
    if role == "ps":
        gpus, cpus, mem = 0.0, job.cpus_per_ps, job.mem_gb_per_ps
    else:
        gpus, cpus, mem = job.gpus_per_worker, job.cpus_per_worker, job.mem_gb_per_worker
    if gpus != int(gpus):
        raise ValueError(f"job {launch.job_id} asks for {gpus:g} GPU per worker: a pod can only take whole "
                         f"{slot_resource} units (use a whole number, or 0 and CPUs)")
    out: dict[str, dict[str, str]] = {"requests": {"cpu": cpu_quantity(cpus), "memory": mem_quantity(mem)}}
    if gpus:
        out["limits"] = {slot_resource: str(int(gpus))}
    return out


def rfc3339(t: float) -> str:
    """Unix time `t` as RFC 3339 UTC with milliseconds (what kwok's durationFrom parses)."""
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ------------------------------------------------------------------ the pod template


@dataclass(frozen=True)
class PodTemplate:
    """What every pod of the backend has in common (options of `dlsched serve --backend kubernetes`).

    `job_pvc`: a PersistentVolumeClaim (ReadWriteMany) holding the job directories, mounted in every
    pod at the parent of the launch's job directory, so the trainer sees the same paths as the
    service (which must mount the same volume there). `volumes`/`volume_mounts` are added as given
    (Kubernetes JSON)."""

    image: str = "dlsched:latest"
    command: tuple[str, ...] = DEFAULT_COMMAND
    service_account: str | None = None
    image_pull_policy: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    volumes: Sequence[Mapping[str, Any]] = ()
    volume_mounts: Sequence[Mapping[str, Any]] = ()
    job_pvc: str | None = None
    tolerations: Sequence[Mapping[str, Any]] = (KWOK_TOLERATION,)
    slot_resource: str = "nvidia.com/gpu"
    grace_s: int = 30
    master_port: int = 29500
    cluster_domain: str | None = None  # e.g. "cluster.local": appended to MASTER_ADDR when set


@dataclass(frozen=True)
class RunManifest:
    """The manifests of one run: its Service, and its pods with the node each goes to."""

    service: dict
    pods: list[tuple[dict, str]]  # (pod manifest, node name)
    master_addr: str


def build_run(launch: Launch, layout: Sequence[tuple[str, int]], node_names: Sequence[str], namespace: str,
              tpl: PodTemplate, run_id: str, *, holder: str = "", sim: Mapping[str, str] | None = None) -> RunManifest:
    """The Service and pods of `launch` (attempt `launch.attempt`). `layout` is `rank_layout`'s
    (role, node index) per rank; `sim` the sim-mode annotations (None in real mode). Raises
    ValueError for a demand no pod can express (a fractional GPU)."""
    jid, attempt = launch.job_id, launch.attempt
    svc = service_name(jid, attempt)
    ranks = [(role, node_names[n]) for role, n in layout]
    hostnames = [f"{role}{r}" for r, (role, _) in enumerate(ranks)]
    master = f"{hostnames[0]}.{svc}.{namespace}.svc" + (f".{tpl.cluster_domain}" if tpl.cluster_domain else "")
    alloc = {node_names[n]: [w, p] for n, w, p in zip(launch.allocation.nodes, launch.allocation.workers,
                                                      launch.allocation.ps)}
    num_ps = launch.allocation.num_ps
    argv = launch.job.trainer_argv(Path(launch.job_dir), num_ps)
    resources = {role: task_resources(launch, role, tpl.slot_resource) for role in {r for r, _ in ranks}}
    base_labels = job_selector(jid, attempt)
    annotations = {A_JOB_ID: jid, A_RUN_ID: run_id, A_WORLD: str(len(ranks)),
                   A_ALLOC: json.dumps(alloc, separators=(",", ":"), sort_keys=True)}
    if holder:
        annotations[A_HOLDER] = holder
    if sim:
        annotations.update(sim)
    volumes = [dict(v) for v in tpl.volumes]
    mounts = [dict(m) for m in tpl.volume_mounts]
    if tpl.job_pvc:
        volumes.append({"name": "dlsched-jobs", "persistentVolumeClaim": {"claimName": tpl.job_pvc}})
        mounts.append({"name": "dlsched-jobs", "mountPath": str(Path(launch.job_dir).parent)})
    pods = []
    for r, (role, node) in enumerate(ranks):
        env = {**tpl.env, **rank_env(run_id, ranks, r, master_addr=master, master_port=tpl.master_port,
                                     local_ranks=False),
               ENV_LOCAL_RANK: "0", ENV_LOCAL_WORLD_SIZE: "1",  # each pod sees only its own GPUs
               ENV_ATTEMPT: str(attempt)}
        env_list: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in env.items()]
        env_list.append({"name": ENV_NODE_ADDR, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
        container: dict[str, Any] = {"name": CONTAINER, "image": tpl.image, "command": list(tpl.command),
                                     "args": argv, "env": env_list, "resources": resources[role]}
        if tpl.image_pull_policy:
            container["imagePullPolicy"] = tpl.image_pull_policy
        if mounts:
            container["volumeMounts"] = mounts
        spec: dict[str, Any] = {
            "schedulerName": SCHEDULER_NAME, "restartPolicy": "Never", "terminationGracePeriodSeconds": tpl.grace_s,
            "hostname": hostnames[r], "subdomain": svc, "containers": [container],
            "tolerations": [dict(t) for t in tpl.tolerations],
        }
        if tpl.service_account:
            spec["serviceAccountName"] = tpl.service_account
        if volumes:
            spec["volumes"] = volumes
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": pod_name(jid, attempt, role, r), "namespace": namespace,
                            "labels": {**base_labels, L_ROLE: role, L_RANK: str(r)}, "annotations": dict(annotations)},
               "spec": spec}
        pods.append((pod, node))
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": svc, "namespace": namespace, "labels": dict(base_labels),
                            "annotations": {A_JOB_ID: jid, A_RUN_ID: run_id}},
               "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": dict(base_labels),
                        "ports": [{"name": "rendezvous", "port": tpl.master_port, "protocol": "TCP"}]}}
    return RunManifest(service, pods, master)
