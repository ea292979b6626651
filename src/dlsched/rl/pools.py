"""Where rollout workers run: in this process, in OS processes, or as Ray actors — one interface.

A pool takes tagged tasks (`submit`) and hands back results as they complete (`next_result`),
first come first served, so a learner can keep every worker busy and react to whichever episode
ends first (A3C-style). Tasks queue in submission order and go to the first idle worker.

- `inline`: runs each task when its result is asked for; one worker, no concurrency (tests, the
  1-worker baseline of `benchmarks/bench_rollouts.py`).
- `process`: `workers` spawned processes (no Ray needed), each building its `RolloutWorker` once.
- `ray`: `workers` Ray actors of one CPU each, on the private local Ray or the cluster `address`
  joined through `ray_session`.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import ExitStack, contextmanager
from typing import Any, Hashable, Iterator, Protocol

from dlsched.core.errors import ConfigError
from dlsched.rl.rollouts import RolloutWorker, Task, WorkerSpec

BACKENDS = ("ray", "process", "inline")


class Pool(Protocol):
    workers: int

    def submit(self, tag: Hashable, task: Task) -> None: ...

    def next_result(self) -> tuple[Hashable, Any]:
        """The tag and result of the next task to complete (blocks)."""
        ...

    def warm(self) -> None:
        """Return once every worker has built its environment and network."""
        ...


class InlinePool:
    workers = 1

    def __init__(self, spec: WorkerSpec):
        self.worker = RolloutWorker(spec)
        self.queue: deque[tuple[Hashable, Task]] = deque()

    def submit(self, tag: Hashable, task: Task) -> None:
        self.queue.append((tag, task))

    def next_result(self) -> tuple[Hashable, Any]:
        tag, task = self.queue.popleft()
        return tag, self.worker.run(task)

    def warm(self) -> None:
        pass


_WORKER: RolloutWorker | None = None  # the worker of a pool process


def _start_worker(spec: WorkerSpec, parent: int) -> None:
    global _WORKER
    threading.Thread(target=_exit_with, args=(parent,), daemon=True, name="exit-with-learner").start()
    _WORKER = RolloutWorker(spec)


def _exit_with(parent: int, every: float = 1.0) -> None:
    """End this pool process once the learner that spawned it is gone. A learner stopped by
    SIGTERM or SIGKILL runs no cleanup, and a spawned worker waiting for its next task would
    otherwise live on, orphaned, holding a core's worth of memory (seen in a stopped training)."""
    while os.getppid() == parent:
        time.sleep(every)
    os._exit(1)


def _run(task: Task) -> Any:
    return _WORKER.run(task)


def _ping(_: int) -> bool:
    return _WORKER is not None


class ProcessPool:
    def __init__(self, spec: WorkerSpec, workers: int):
        self.workers = workers
        # spawn, not fork: a forked child would inherit torch's and the learner's threads mid-state
        self.executor = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                            initializer=_start_worker, initargs=(spec, os.getpid()))
        self.futures: dict[Future, Hashable] = {}

    def submit(self, tag: Hashable, task: Task) -> None:
        self.futures[self.executor.submit(_run, task)] = tag

    def next_result(self) -> tuple[Hashable, Any]:
        done, _ = wait(self.futures, return_when=FIRST_COMPLETED)
        fut = next(iter(done))
        return self.futures.pop(fut), fut.result()

    def warm(self) -> None:
        list(self.executor.map(_ping, range(self.workers)))

    def close(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=True)


class RayPool:
    def __init__(self, spec: WorkerSpec, workers: int):
        import ray

        self.ray = ray
        actor = ray.remote(num_cpus=1)(RolloutWorker)
        self.actors = [actor.remote(spec) for _ in range(workers)]
        self.workers = workers
        self.idle = list(self.actors)
        self.queue: deque[tuple[Hashable, Task]] = deque()
        self.running: dict[Any, tuple[Hashable, Any]] = {}  # object ref -> (tag, actor)

    def _dispatch(self) -> None:
        while self.idle and self.queue:
            tag, task = self.queue.popleft()
            actor = self.idle.pop(0)
            self.running[actor.run.remote(task)] = (tag, actor)

    def submit(self, tag: Hashable, task: Task) -> None:
        self.queue.append((tag, task))
        self._dispatch()

    def next_result(self) -> tuple[Hashable, Any]:
        if not self.running:
            raise RuntimeError("next_result() with nothing submitted")
        [ref], _ = self.ray.wait(list(self.running), num_returns=1)
        tag, actor = self.running.pop(ref)
        self.idle.append(actor)
        result = self.ray.get(ref)
        self._dispatch()
        return tag, result

    def warm(self) -> None:
        self.ray.get([a.ping.remote() for a in self.actors])

    def close(self) -> None:
        for a in self.actors:
            self.ray.kill(a)


@contextmanager
def open_pool(spec: WorkerSpec, backend: str = "ray", workers: int = 1, address: str | None = None) -> Iterator[Pool]:
    """A pool of `workers` rollout workers on `backend`, stopped on exit (with Ray: the private
    local Ray too; a cluster given by `address` is left running)."""
    if backend not in BACKENDS:
        raise ConfigError(f"rollout backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if workers < 1:
        raise ConfigError(f"rollout workers must be at least 1, not {workers}")
    if address is not None and backend != "ray":
        raise ConfigError(f"a Ray address ({address}) needs rollout_backend: ray, not {backend}")
    with ExitStack() as stack:
        if backend == "inline":
            if workers != 1:
                raise ConfigError("the inline rollout backend has exactly one worker")
            yield InlinePool(spec)
            return
        if backend == "process":
            pool: Any = ProcessPool(spec, workers)
        else:
            from dlsched.ray_session import ray_session

            try:
                stack.enter_context(ray_session(address, workers))
            except ConnectionError as exc:
                raise ConfigError(f"cannot join the Ray cluster at {address}: {' '.join(str(exc).split())}") from None
            pool = RayPool(spec, workers)
        stack.callback(pool.close)
        yield pool
