"""The Policy protocol, the wrappers that say when a policy is asked, and the phased composition.

A policy is `reset` + `schedule(snapshot) -> Plan`. When it is asked, what it is called and
whether it may see ground truth are not flags every policy restates but wrappers around it (as
Gymnasium wraps an Env): `Every`, `OnEvents`, `Named`, `Oracle`. The engine and the live
controller read `name`, `on_events`, `interval` and `oracle` on the outermost object; a bare
policy is asked on arrivals and completions and never sees the truth.

Most published schedulers decompose into admission → ordering → sizing → placement (as in Blox
and the kube-scheduler framework): the phase protocols are here, each phase is written once in
`dlsched.policies.phases`, and `dlsched.policies.phased.PhasedPolicy` composes them over the one
realiser. Policies that plan over time (OASiS) or act step by step (DL2) implement `schedule`
directly.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from dlsched.core.allocation import Allocation
from dlsched.core.cluster import Cluster
from dlsched.core.job import JobSpec
from dlsched.core.plan import Plan
from dlsched.core.snapshot import JobState, Snapshot



class Policy:
    """Base class: implement `schedule` (and `reset` if the policy keeps state across calls).

    The trigger/identity attributes have the defaults of a plain policy; wrappers change them.
    """

    name: str = "policy"
    on_events: bool = True  # ask me on every arrival and completion
    interval: float | None = None  # also ask me every `interval` seconds
    oracle: bool = False  # hand me ground truth (`snap.oracle`): only through `Oracle`
    offline_only: str = ""  # why I cannot schedule real jobs ("" when I can): said at `serve` start-up

    def reset(self, cluster: Cluster, seed: int) -> None:
        """Called once before a run; stateful policies clear their state here."""

    def schedule(self, snap: Snapshot) -> Plan:  # pragma: no cover - abstract
        raise NotImplementedError

    def waiting_reasons(self, snap: Snapshot, plan: Plan) -> dict[str, str]:
        """Optional: why jobs of `snap.pending` that `plan` leaves waiting were not started, by job
        id, in words for the job's owner (the live service shows them). Asked right after
        `schedule`; a job left out gets the service's generic reason (which resource blocks it)."""
        return {}


class Wrapper(Policy):
    """A policy around another: everything it does not set is the inner policy's (read-through,
    so `wrapped.demotions` or `wrapped.sizing` still reach the policy inside)."""

    def __init__(self, inner: Policy):
        self.inner = inner

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.inner.name

    @property
    def on_events(self) -> bool:  # type: ignore[override]
        return self.inner.on_events

    @property
    def interval(self) -> float | None:  # type: ignore[override]
        return self.inner.interval

    @property
    def oracle(self) -> bool:  # type: ignore[override]
        return self.inner.oracle

    @property
    def offline_only(self) -> str:  # type: ignore[override]
        return self.inner.offline_only

    def reset(self, cluster: Cluster, seed: int) -> None:
        self.inner.reset(cluster, seed)

    def schedule(self, snap: Snapshot) -> Plan:
        return self.inner.schedule(snap)

    def waiting_reasons(self, snap: Snapshot, plan: Plan) -> dict[str, str]:
        return self.inner.waiting_reasons(snap, plan)

    def __getattr__(self, attr: str) -> Any:
        if attr == "inner":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(attr)
        return getattr(self.inner, attr)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


class Every(Wrapper):
    """Also ask the policy every `seconds` (slots, rounds); `events=False`: only then."""

    def __init__(self, inner: Policy, seconds: float, events: bool = True):
        if not seconds > 0:
            raise ValueError(f"Every: seconds must be > 0, got {seconds}")
        super().__init__(inner)
        self._interval, self._events = float(seconds), events

    @property
    def interval(self) -> float | None:  # type: ignore[override]
        return self._interval

    @property
    def on_events(self) -> bool:  # type: ignore[override]
        return self._events


class OnEvents(Wrapper):
    """Ask the policy on every arrival and completion (what a bare policy gets anyway; wrap to
    say so, or to turn events back on around an `Every(..., events=False)`)."""

    @property
    def on_events(self) -> bool:  # type: ignore[override]
        return True


class Named(Wrapper):
    """The policy under another name: two configurations of one policy stay two rows in a
    comparison. The inner policy is not changed."""

    def __init__(self, inner: Policy, name: str):
        super().__init__(inner)
        self._name = name

    @property
    def name(self) -> str:  # type: ignore[override]
        return self._name


class Oracle(Wrapper):
    """The policy sees ground truth: the engine sets `snap.oracle` (true throughput model, true
    remaining work through `snap.remaining_iterations`) only for a policy wrapped so, and reports say so."""

    @property
    def oracle(self) -> bool:  # type: ignore[override]
        return True


# --- the four phases -----------------------------------------------------------------------


@runtime_checkable
class Admission(Protocol):
    def admit(self, snap: Snapshot, jobs: list[JobState]) -> tuple[list[JobState], dict[str, str]]:
        """Return the jobs that may be scheduled now, and {job_id: reason} for jobs refused for good."""


@runtime_checkable
class Ordering(Protocol):
    def order(self, snap: Snapshot, jobs: list[JobState]) -> list[JobState]:
        """Return the jobs in the order they should get resources (highest priority first)."""


@runtime_checkable
class Keyed(Protocol):
    """An ordering by a key that does not change while a job waits and never grows while it
    runs (arrival order, a remaining time): a `PhasedPolicy` can then keep its waiting line
    across calls instead of re-sorting it, and rank only the running jobs that may rank below."""

    def key(self, snap: Snapshot, job: JobState) -> Any: ...


@runtime_checkable
class Sizing(Protocol):
    def size(self, snap: Snapshot, jobs: list[JobState]) -> list[tuple[JobState, int, int]]:
        """Given ordered jobs, return (job, workers, ps) for those that should run, in order."""


@runtime_checkable
class Placement(Protocol):
    def place(
        self, cluster: Cluster, free: np.ndarray, spec: JobSpec, workers: int, ps: int
    ) -> Allocation | None:
        """Choose nodes for `workers` workers and `ps` PSs within `free`, or None. Must not mutate `free`."""


@runtime_checkable
class SizeOne(Protocol):
    """A sizing that decides job by job: asked lazily, so strict FIFO sizes only up to its head."""

    def size_one(self, snap: Snapshot, job: JobState) -> tuple[int, int]:
        """(workers, ps) for `job`."""


@runtime_checkable
class Observer(Protocol):
    """A phase or a shared estimator that learns from what it sees: told once per call, before
    any phase runs (so phases read one consistent state instead of feeding each other)."""

    def observe(self, snap: Snapshot) -> None: ...


@runtime_checkable
class Resets(Protocol):
    """A phase or estimator with state to clear before a run."""

    def reset(self) -> None: ...


@runtime_checkable
class Wakes(Protocol):
    """A phase that wants the policy asked again at a time of its choosing (`Plan.wake_at`)."""

    def wake_at(self, snap: Snapshot) -> float | None: ...
