"""The backends `dlsched serve --backend NAME` can run, each with its own options.

As policies are registered with their options (`policies/registry.py`), a backend is a name, a
line for `--help`, a pydantic model of its options (unknown keys are errors, with the key named)
and a factory that builds it. The backend's module is imported only when it is built, so Ray or
lightkube is needed only by the service that uses it. Adding a backend is one module and one
entry here; the service, the CLI's help and `dlsched backends` read this table.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dlsched.core.errors import ConfigError
from dlsched.live.backends.base import Backend


class _Options(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DryOptions(_Options):
    nodes: Path | None = Field(None, description="cluster YAML or preset name (default: 2 nodes of 4 GPUs)")
    rate_per_worker: float = Field(10.0, gt=0, description="made-up steps/s of one worker")
    startup: float = Field(1.0, ge=0, description="seconds a run makes no progress after a (re)start")


class LocalOptions(_Options):
    nodes: Path | None = Field(None, description="virtual-node YAML (default: this machine as one node)")
    standby: int = Field(4, ge=0, description="warm trainer interpreters kept (0: cold starts)")


class RayOptions(_Options):
    address: str | None = Field(None, description="Ray cluster address (default: start a private one on 127.0.0.1)")
    slot_resource: str | None = Field(None, description="Ray resource counted as GPU slots (default: GPU if any)")
    pg_timeout: float = Field(30.0, gt=0, description="seconds to wait for a run's placement group")
    standby: int = Field(0, ge=0, description="warm trainer interpreters kept per node")


class KubernetesOptions(_Options):
    kubeconfig: Path | None = Field(None, description="kubeconfig file (default: $KUBECONFIG, else the in-cluster "
                                    "service account, else ~/.kube/config)")
    context: str | None = Field(None, description="kubeconfig context (default: its current context)")
    namespace: str = Field("dlsched", min_length=1, max_length=63, description="namespace of the pods, Services and Lease")
    pool: str = Field("default", min_length=1, max_length=63, description="schedule the nodes labelled dlsched.io/pool=POOL")
    mode: Literal["sim", "real"] = Field("sim", description="sim: pods run nothing (kwok), progress is made up and "
                                         "pods complete at dlsched.io/sim-end; real: pods run the trainer")
    slot_resource: str = Field("nvidia.com/gpu", min_length=1, description="node resource counted as GPU slots")
    image: str = Field("dlsched:latest", min_length=1, description="trainer image (real mode)")
    command: list[str] = Field(["python", "-m", "dlsched.trainer"], min_length=1,
                               description="container command; the trainer's arguments follow")
    service_account: str | None = Field(None, description="service account of the trainer pods")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    env: dict[str, str] = Field(default_factory=dict, description="extra environment of every pod")
    job_pvc: str | None = Field(None, description="ReadWriteMany claim holding the job directories, mounted at their "
                                "parent in every pod (real mode; the service must mount it at the same path)")
    volumes: list[dict[str, Any]] = Field(default_factory=list, description="extra pod volumes (Kubernetes JSON)")
    volume_mounts: list[dict[str, Any]] = Field(default_factory=list, description="extra container volumeMounts")
    tolerate_kwok: bool = Field(True, description="tolerate kwok's fake-node taint kwok.x-k8s.io/node")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description="extra pod tolerations")
    stop_grace_s: int = Field(30, ge=0, le=3600, description="pod termination grace period: the trainer's time "
                              "to checkpoint after SIGTERM")
    master_port: int = Field(29500, ge=1, le=65535, description="rendezvous port of rank 0")
    cluster_domain: str | None = Field(None, description="appended to MASTER_ADDR (<pod>.<service>.<ns>.svc) when set")
    rate_per_worker: float = Field(10.0, gt=0, description="sim: made-up steps/s of one worker")
    startup: float = Field(1.0, ge=0, description="sim: seconds a run makes no progress after a (re)start")
    scaling: float = Field(0.8, gt=0, le=1.5, description="sim: speed-up exponent (rate = rate_per_worker * w**scaling)")
    leader_election: bool = Field(True, description="hold the coordination.k8s.io Lease dlsched-controller while "
                                  "running (a second controller waits)")
    lease_name: str = Field("dlsched-controller", min_length=1)
    leader_wait_s: float | None = Field(None, gt=0, description="give up starting after waiting this long to lead "
                                        "(default: wait forever)")
    count_foreign: bool = Field(True, description="watch every bound pod of the cluster, so capacity other pods use "
                                "is not offered (needs cluster-wide pods list/watch)")
    bind: Literal["binding", "create"] = Field("binding", description="binding: pods are created unbound, then bound "
                                               "through pods/binding (a pod binds once; shared clusters); create: "
                                               "spec.nodeName set at creation, one API call a pod instead of two "
                                               "(nodes only dlsched places pods on)")


def _dry(o: DryOptions) -> Backend:
    from dlsched.core.cluster import Cluster
    from dlsched.live.backends.dry import DryBackend
    from dlsched.presets import load_cluster

    cluster = load_cluster(o.nodes) if o.nodes is not None else Cluster.homogeneous("dry", nodes=2, gpus=4, cpus=16,
                                                                                     mem=64)
    return DryBackend(cluster, rate_per_worker=o.rate_per_worker, startup=o.startup)


def _local(o: LocalOptions) -> Backend:
    from dlsched.live.backends.local import LocalBackend

    return LocalBackend(nodes=o.nodes, standby=o.standby)


def _ray(o: RayOptions) -> Backend:
    try:
        from dlsched.live.backends.ray_backend import RayBackend
    except ImportError as exc:
        raise ConfigError(f"the Ray backend cannot be loaded ({exc}); install it with `pip install 'dlsched[ray]'`") from None
    return RayBackend(address=o.address, slot_resource=o.slot_resource, pg_timeout=o.pg_timeout, standby=o.standby)


def _kubernetes(o: KubernetesOptions) -> Backend:
    try:
        from dlsched.live.backends.k8s_pods import KWOK_TOLERATION, PodTemplate
        from dlsched.live.backends.kubernetes import KubernetesBackend
    except ImportError as exc:
        raise ConfigError(f"the Kubernetes backend cannot be loaded ({exc}); install it with "
                          "`pip install 'dlsched[k8s]'`") from None
    tpl = PodTemplate(image=o.image, command=tuple(o.command), service_account=o.service_account,
                      image_pull_policy=o.image_pull_policy, env=dict(o.env), volumes=tuple(o.volumes),
                      volume_mounts=tuple(o.volume_mounts), job_pvc=o.job_pvc,
                      tolerations=((KWOK_TOLERATION,) if o.tolerate_kwok else ()) + tuple(o.tolerations),
                      slot_resource=o.slot_resource, grace_s=o.stop_grace_s, master_port=o.master_port,
                      cluster_domain=o.cluster_domain)
    return KubernetesBackend(kubeconfig=o.kubeconfig, context=o.context, namespace=o.namespace, pool=o.pool,
                             mode=o.mode, template=tpl, rate_per_worker=o.rate_per_worker, startup=o.startup,
                             scaling=o.scaling, leader_election=o.leader_election, lease_name=o.lease_name,
                             leader_wait_s=o.leader_wait_s, count_foreign=o.count_foreign, bind=o.bind)


@dataclass(frozen=True)
class BackendEntry:
    name: str
    summary: str  # one line for --help and `dlsched backends`
    options: type[BaseModel]
    factory: Callable[[Any], Backend]


BACKENDS: dict[str, BackendEntry] = {e.name: e for e in [
    BackendEntry("local", "trainer processes on this machine, on virtual nodes", LocalOptions, _local),
    BackendEntry("ray", "trainer actors on a Ray cluster, one placement group per run", RayOptions, _ray),
    BackendEntry("dry", "no training: made-up progress (try the API and the status page anywhere)", DryOptions, _dry),
    BackendEntry("kubernetes", "pods bound by dlsched (custom scheduler) on a Kubernetes node pool; sim mode on kwok",
                 KubernetesOptions, _kubernetes),
]}


def backend_entry(name: str) -> BackendEntry:
    entry = BACKENDS.get(name)
    if entry is None:
        close = difflib.get_close_matches(name, BACKENDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"unknown backend {name!r}{hint}; known: {', '.join(BACKENDS)}")
    return entry


def backend_options(name: str, options: dict[str, Any]) -> BaseModel:
    """`options` checked against backend `name`'s model: a `ConfigError` naming the key otherwise."""
    from dlsched.config import describe_validation_error

    entry = backend_entry(name)
    try:
        return entry.options.model_validate(options)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, f"backend_options of {name!r}")) from None


def make_backend(name: str, options: dict[str, Any] | None = None) -> Backend:
    """Backend `name` built with `options` (its registry entry's model says which keys exist)."""
    return backend_entry(name).factory(backend_options(name, options or {}))


def backends_help() -> str:
    return "; ".join(f"'{e.name}': {e.summary}" for e in BACKENDS.values())
