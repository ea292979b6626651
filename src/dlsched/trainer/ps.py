"""Synchronous parameter servers over `torch.distributed.rpc` (TensorPipe).

Ranks 0..K-1 are servers, each owning the parameters whose index in `named_parameters()` is
congruent to its rank mod K (round-robin by tensor), with their own Adam state. Each step every
worker pushes its gradients (sum-loss over its share / global batch) to every server in one RPC
per server; a server answers all the step's pushes at once, after it has the gradients of all
workers and has applied the update, with its new parameters. So push and pull are one round-trip
and training is exactly synchronous SGD on the global batch (the seed systems' default). The
push also carries the loss and the stop flag, which the servers sum/OR and return, so all
workers stop after the same step. The reporting worker checkpoints by gathering every shard.
"""

from __future__ import annotations

import threading
import time

import torch
import torch.distributed.rpc as rpc

from dlsched.trainer import checkpoint, rendezvous
from dlsched.trainer.common import Clock, Run, after_step, end_of_run, initial_state, save_checkpoint
from dlsched.trainer.models import Task, build_model, share
from dlsched.trainer.report import Reporter
from dlsched.trainer.signals import STOP

_SERVER: "ShardServer | None" = None


def ps_name(i: int) -> str:
    return f"ps{i}"


def worker_name(j: int) -> str:
    return f"worker{j}"


def shard_names(names: list[str], k: int, i: int) -> list[str]:
    return [n for idx, n in enumerate(names) if idx % k == i]


class ShardServer:
    def __init__(self, params: dict[str, torch.Tensor], opt_states: dict, lr: float, workers: int, step: int):
        self.params = {n: torch.nn.Parameter(t.detach().clone()) for n, t in params.items()}
        self.opt = torch.optim.Adam(list(self.params.values()), lr=lr) if self.params else None
        if self.opt is not None:
            checkpoint.load_opt_state(self.opt, self.params, opt_states)
        self.workers = workers
        self.step = step
        self.lock = threading.Lock()
        self.finished = threading.Event()
        self.last_activity = time.monotonic()
        self._reset()

    def _reset(self) -> None:
        self.acc: dict[str, torch.Tensor] = {}
        self.count = 0
        self.loss = 0.0
        self.stop = False
        self.fut: torch.futures.Future = torch.futures.Future()

    def push(self, step: int, grads: dict[str, torch.Tensor], loss: float, stop: bool) -> torch.futures.Future:
        with self.lock:
            self.last_activity = time.monotonic()
            if step != self.step:
                raise RuntimeError(f"push for step {step} but server is at step {self.step}")
            for n, g in grads.items():
                if n in self.acc:
                    self.acc[n] += g
                else:
                    self.acc[n] = g.clone()
            self.count += 1
            self.loss += loss
            self.stop = self.stop or stop
            fut = self.fut
            if self.count < self.workers:
                return fut
            if self.opt is not None:
                for n, p in self.params.items():
                    p.grad = self.acc.get(n, torch.zeros_like(p))
                self.opt.step()
            self.step += 1
            result = ({n: p.detach().clone() for n, p in self.params.items()}, self.loss,
                      self.stop or STOP.requested)
            self._reset()
        fut.set_result(result)
        return fut

    def state(self) -> tuple[int, dict, dict]:
        with self.lock:
            self.last_activity = time.monotonic()
            params = {n: p.detach().clone() for n, p in self.params.items()}
            opt = checkpoint.opt_state_by_name(self.opt, self.params) if self.opt is not None else {}
            return self.step, params, opt


@rpc.functions.async_execution
def _rpc_push(step: int, grads: dict, loss: float, stop: bool) -> torch.futures.Future:
    return _SERVER.push(step, grads, loss, stop)


def _rpc_pull() -> tuple[int, dict]:
    _SERVER.last_activity = time.monotonic()
    return _SERVER.step, {n: p.detach().clone() for n, p in _SERVER.params.items()}


def _rpc_state() -> tuple[int, dict, dict]:
    return _SERVER.state()


def _rpc_finish() -> None:
    _SERVER.finished.set()


def _init_rpc(run: Run, name: str) -> None:
    """Join the RPC group: the rendezvous store on MASTER_ADDR, TensorPipe and gloo on this node's
    address only (`trainer.rendezvous`)."""
    rendezvous.pin_interfaces(run.node_addr)
    rendezvous.register()
    opts = rpc.TensorPipeRpcBackendOptions(init_method=rendezvous.store_url(run.master_addr, run.master_port),
                                           rpc_timeout=run.comm_timeout, num_worker_threads=max(8, 2 * run.workers))
    rpc.init_rpc(name, rank=run.rank, world_size=run.world_size, rpc_backend_options=opts)


def run_ps(run: Run) -> int:
    """Returns the exit code (non-zero when a peer vanished and the watchdog gave up)."""
    if run.rank < run.num_ps:
        return _serve(run)
    return _work(run)


def _serve(run: Run) -> int:
    global _SERVER
    model, state = initial_state(run)  # before init_rpc: workers may call us as soon as it returns
    names = [n for n, _ in model.named_parameters()]
    mine = shard_names(names, run.num_ps, run.rank)
    named = dict(model.named_parameters())
    opt_states = state["opt"] if state is not None else {}
    _SERVER = ShardServer({n: named[n] for n in mine}, {n: opt_states[n] for n in mine if n in opt_states},
                          run.lr, run.workers, int(state["step"]) if state is not None else 0)
    _init_rpc(run, ps_name(run.rank))
    STOP.training = True
    while not _SERVER.finished.wait(1.0):
        if time.monotonic() - _SERVER.last_activity > run.comm_timeout:
            print(f"dlsched.trainer: parameter server {run.rank}: no worker contact for "
                  f"{run.comm_timeout:g} s, giving up", flush=True)
            return 1
    rpc.shutdown(graceful=True)
    return 0


def _work(run: Run) -> int:
    t0 = time.time()
    j = run.rank - run.num_ps
    model = build_model(run.model, run.width, run.seed)
    named = dict(model.named_parameters())
    names = list(named)
    _init_rpc(run, worker_name(j))
    t_init = time.time()
    start = None
    for i in range(run.num_ps):
        s, shard = rpc.rpc_sync(ps_name(i), _rpc_pull)
        if start is not None and s != start:
            raise RuntimeError(f"parameter servers disagree on the step ({start} vs {s})")
        start = s
        _assign(named, shard)
    t_load = time.time()
    task = Task(run.model, run.seed)
    lo, hi = share(run.batch_size, run.workers, j)
    shards = [shard_names(names, run.num_ps, i) for i in range(run.num_ps)]
    rep = Reporter(run.job_dir, run.run_id, run.workers, run.num_ps, run.batch_size, run.report_every) if run.reporting else None
    clock = Clock(run.checkpoint_every)
    step, loss, stop_now = start, float("nan"), False
    STOP.training = True
    while step < run.steps and not stop_now:
        for p in named.values():
            p.grad = None
        local = 0.0
        if hi > lo:
            x, y = task.batch(step, run.batch_size, lo, hi)
            out = task.loss(model, x, y, run.batch_size)
            out.backward()
            local = out.item()
        grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p)) for n, p in named.items()}
        futs = [rpc.rpc_async(ps_name(i), _rpc_push, args=(step, {n: grads[n] for n in shards[i]}, local, STOP.requested))
                for i in range(run.num_ps)]
        stop_now = False
        for f in futs:
            shard, loss, stop = f.wait()
            _assign(named, shard)
            stop_now = stop_now or stop
        step += 1
        if rep is not None:
            after_step(run, rep, clock, step, start, loss, stop_now, (t0, t_init, t_load), lambda at: _save(run, rep, at))
    if rep is not None:
        end_of_run(run, rep, step, start, loss, lambda at: _save(run, rep, at))
        for i in range(run.num_ps):
            rpc.rpc_sync(ps_name(i), _rpc_finish)
    _leave()
    return 0


def _leave() -> None:
    """A worker's graceful RPC shutdown, whose last round may find the rendezvous store gone.

    Why: parameter server 0 hosts the store and its process exits as soon as its own graceful
    shutdown returns, while a worker may still be reading the store's final call count; that read
    then fails with "Connection reset by peer" (1 of 60 stops of a 1-PS, 1-worker job, SIGTERM to
    both). By then every RPC of this worker has returned and the checkpoint and progress are on
    disk, so the stop is complete: a worker that sees only that error exits 0. Any other error
    is raised (and exits non-zero).
    """
    try:
        rpc.shutdown(graceful=True)
    except torch.distributed.DistNetworkError as e:
        print(f"dlsched.trainer: the RPC group was gone at the end of shutdown ({e}); nothing was lost",
              flush=True)


def _assign(named: dict[str, torch.Tensor], shard: dict[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for n, t in shard.items():
            named[n].copy_(t)


def _save(run: Run, rep: Reporter, step: int) -> None:
    t = time.time()
    params, opt = {}, {}
    for i in range(run.num_ps):
        s, p, o = rpc.rpc_sync(ps_name(i), _rpc_state)
        if s != step:
            raise RuntimeError(f"parameter server {i} is at step {s}, expected {step}")
        params.update(p)
        opt.update(o)
    save_checkpoint(run, rep, step, params, opt, t)
