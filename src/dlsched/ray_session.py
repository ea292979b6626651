"""One Ray session for the offline work that fans out (sweeps, RL rollouts): local by default,
a cluster by address, the same way the live Ray backend connects (`live.ray_cluster.connect`).

Local means a private one-node Ray that dlsched starts bound to 127.0.0.1 and stops when the work
ends, sized to the workers asked for, so that `workers` tasks run at once and no more. With an
address ("auto", "host:port", "ray://host:port") dlsched joins that cluster and leaves it running;
`workers` then only caps how many tasks the caller keeps in flight.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from dlsched.core.errors import ConfigError

#: The prefix of node labels (`live.ray_cluster`: "Labelling nodes"); offline work never pins to nodes.
PREFIX = "dlsched_node_"


@contextmanager
def ray_session(address: str | None = None, workers: int = 1) -> Iterator[None]:
    """Connected to Ray inside the block: a private local Ray with `workers` CPUs when `address`
    is None (stopped on exit, also on error or Ctrl-C), otherwise the cluster at `address` (left
    running; only this process disconnects)."""
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, not {workers}")
    try:
        import ray
    except ImportError:  # pragma: no cover - ray is a dependency of the test and ray extras
        raise ConfigError("this needs Ray: pip install 'dlsched[ray]'") from None
    from dlsched.live.backends.ray_cluster import connect

    if ray.is_initialized():
        raise ConfigError("Ray is already connected in this process; run one sweep or training at a time")
    head = connect(address, PREFIX, num_cpus=workers if address is None else None)
    try:
        yield
    finally:
        ray.shutdown()
        if head is not None:
            head.shutdown()
