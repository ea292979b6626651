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
from typing import Any, Callable

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
