"""Where a job runs: per node, how many of its workers and parameter servers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class _once:
    """`functools.cached_property` without the lock Python 3.11 takes on each first read (3.12
    dropped it): the core reads the sizes of every allocation it starts once at least."""

    def __init__(self, fn):
        self.fn, self.name = fn, fn.__name__

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.fn(obj)
        return value


@dataclass(frozen=True)
class Allocation:
    """Nodes (indices into the cluster arrays) with the workers and PSs placed on each.

    Kept as three parallel tuples sorted by node so that two allocations compare equal exactly
    when they place the same tasks on the same nodes: the engine restarts a job only then.
    """

    nodes: tuple[int, ...]
    workers: tuple[int, ...]
    ps: tuple[int, ...]

    @classmethod
    def of(cls, placement: dict[int, tuple[int, int]]) -> "Allocation":
        """Build from {node: (workers, ps)}; nodes with nothing on them are dropped."""
        items = sorted((int(n), int(w), int(p)) for n, (w, p) in placement.items() if w or p)
        return cls(
            tuple(i[0] for i in items), tuple(i[1] for i in items), tuple(i[2] for i in items)
        )

    @classmethod
    def single_node(cls, node: int, workers: int, ps: int = 0) -> "Allocation":
        return cls((int(node),), (int(workers),), (int(ps),))

    @classmethod
    def from_counts(cls, workers: np.ndarray, ps: np.ndarray | None = None) -> "Allocation":
        """Build from dense per-node count vectors (what vectorised placement produces)."""
        ps = np.zeros_like(workers) if ps is None else ps
        nodes = np.flatnonzero((workers > 0) | (ps > 0))
        return cls(
            tuple(nodes.tolist()), tuple(workers[nodes].tolist()), tuple(ps[nodes].tolist())
        )

    # cached: a realiser compares every running job's size on every decision (tens of millions of
    # reads on a full trace); the tuples never change, and the cache is not part of equality
    @_once
    def num_workers(self) -> int:
        return sum(self.workers)

    @_once
    def num_ps(self) -> int:
        return sum(self.ps)

    @property
    def num_nodes(self) -> int:
        return len(self.nodes)

    def as_dict(self) -> dict[int, tuple[int, int]]:
        return {n: (w, p) for n, w, p in zip(self.nodes, self.workers, self.ps)}

    def usage(self, worker_demand: np.ndarray, ps_demand: np.ndarray) -> np.ndarray:
        """(len(nodes), 3) resource use on each node of this allocation."""
        w = np.asarray(self.workers, dtype=float)[:, None]
        p = np.asarray(self.ps, dtype=float)[:, None]
        return w * worker_demand + p * ps_demand
