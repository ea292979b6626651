"""Data-parallel training on `torch.nn.parallel.DistributedDataParallel`.

Every worker holds the full model; DDP all-reduces the gradients in buckets, overlapped with the
backward pass. The backend is chosen by what the node has (`pick_backend`): NCCL with one GPU per
rank when there are enough GPUs, else gloo on the CPU.

Three things DDP does not do for us, all in its communication hook (`Agreement.hook`):
- **The global batch is split unevenly** (`models.share`: the last worker may get fewer samples,
  or none), and `Task.loss` is already the worker's share of the global mean (sum over its
  samples / global batch). So gradients are summed, not averaged as DDP does by default: the sum
  is exactly the gradient of the global batch's mean loss, whatever the split.
- **All ranks stop at the same step boundary**: the last gradient bucket of each step carries two
  more numbers, this rank's loss and whether it was asked to stop; summed, every rank gets the
  global loss and the stop decision with the gradients. Measured against a separate all-reduce of
  [loss, stop] after each step (docs/DECISIONS.md): that costs ~0.9 ms of CPU per step on two
  gloo ranks, the piggyback ~0.1 ms, which matters to small models on a few shared cores.
- **Every rank must run backward** (DDP's reducer waits for all ranks' buckets): a worker with an
  empty share runs the model on an empty batch, which contributes zero gradients.

The checkpoint stays topology-free: it is written from the unwrapped module (`ddp.module`), so
parameter names carry no `module.` prefix and any world size, DDP or not, resumes from it.
"""

from __future__ import annotations

import inspect
import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from dlsched.trainer import checkpoint, rendezvous
from dlsched.trainer.common import Clock, Run, after_step, end_of_run, initial_state, save_checkpoint
from dlsched.trainer.models import Task, share
from dlsched.trainer.report import Reporter
from dlsched.trainer.signals import STOP


@dataclass(frozen=True)
class Placement:
    """Which torch.distributed backend this rank uses and where its tensors live."""

    backend: str  # "nccl" or "gloo"
    device: torch.device


def pick_backend(cuda_devices: int, local_rank: int, local_world: int) -> Placement:
    """NCCL on `cuda:local_rank` when this node has a GPU for each of its ranks; else gloo on the
    CPU (NCCL refuses two ranks on one GPU, and a CPU tensor cannot go through NCCL)."""
    if cuda_devices >= max(1, local_world) and 0 <= local_rank < cuda_devices:
        return Placement("nccl", torch.device("cuda", local_rank))
    return Placement("gloo", torch.device("cpu"))


def placement(run: Run) -> Placement:
    """`pick_backend` for this process: LOCAL_RANK / LOCAL_WORLD_SIZE (torchrun's convention, set
    by the backends) say which of the node's GPUs is ours; without them, every rank counts."""
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    local_rank = int(os.environ.get("LOCAL_RANK", run.rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", run.world_size))
    return pick_backend(cuda, local_rank, local_world)


def init_group(run: Run, where: Placement) -> None:
    """Join the job's process group: the store on MASTER_ADDR, every socket on this node's address."""
    rendezvous.pin_interfaces(run.node_addr)
    store = rendezvous.tcp_store(run.master_addr, run.master_port, run.rank, run.world_size, run.timeout)
    if where.device.type == "cuda":
        torch.cuda.set_device(where.device)
    dist.init_process_group(where.backend, store=store, rank=run.rank, world_size=run.world_size,
                            timeout=run.timeout)


#: Buffers are not broadcast before each forward: the only one (the transformer's causal mask) is
#: a constant every rank builds itself. Torch 2.13 renamed the option; older ones know the old name.
_NO_BUFFER_SYNC = ({"forward_sync_buffers": False}
                   if "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
                   else {"broadcast_buffers": False})


def wrap(model: torch.nn.Module, where: Placement) -> DistributedDataParallel:
    """The DDP module on this rank's device."""
    ids = [where.device.index] if where.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, **_NO_BUFFER_SYNC)


class Agreement:
    """DDP comm hook state: sums each gradient bucket over the ranks, and with the step's last
    bucket the [loss, stop] pair `send` (set before backward) into `got` (read after it)."""

    def __init__(self, device: torch.device):
        self.send = torch.zeros(2, device=device)
        self.got = torch.zeros(2, device=device)

    @staticmethod
    def hook(state, bucket):  # no annotations: DDP checks them, and this module's are strings
        """(Agreement, dist.GradBucket) -> Future of the bucket's summed gradients."""
        buf = bucket.buffer()
        if not bucket.is_last():
            return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])
        n = buf.numel()

        def split(f: torch.futures.Future) -> torch.Tensor:
            out = f.value()[0]
            state.got.copy_(out[n:])
            return out[:n]

        return dist.all_reduce(torch.cat([buf, state.send]), async_op=True).get_future().then(split)


def _opt_state_to(opt: torch.optim.Optimizer, device: torch.device) -> None:
    """Checkpoints hold CPU tensors; Adam's moments must sit with their parameter (its `step`
    counter stays on the CPU, as Adam keeps it)."""
    if device.type == "cpu":
        return
    for st in opt.state.values():
        for k, v in st.items():
            if torch.is_tensor(v) and k != "step":
                st[k] = v.to(device)


def _cpu(states: dict[str, dict]) -> dict[str, dict]:
    return {n: {k: (v.cpu() if torch.is_tensor(v) else v) for k, v in st.items()} for n, st in states.items()}


def run_ddp(run: Run) -> None:
    t0 = time.time()
    where = placement(run) if run.world_size > 1 else Placement("none", torch.device("cpu"))
    if run.world_size > 1:
        init_group(run, where)
    t_init = time.time()
    model, state = initial_state(run)  # on the CPU, parameters named as in the checkpoint
    model.to(where.device)
    named = dict(model.named_parameters())
    opt = torch.optim.Adam(model.parameters(), lr=run.lr)
    start = 0
    if state is not None:
        checkpoint.load_opt_state(opt, named, state["opt"])
        _opt_state_to(opt, where.device)
        start = int(state["step"])
    # A world of one has nothing to reduce: no process group, no wrapper, the same arithmetic.
    agreement = Agreement(where.device)
    net = model
    if run.world_size > 1:
        net = wrap(model, where)
        net.register_comm_hook(agreement, Agreement.hook)
        if run.rank == 0:
            print(f"dlsched.trainer: DistributedDataParallel over {where.backend} on {where.device}, "
                  f"{run.world_size} ranks", flush=True)
    t_load = time.time()
    task = Task(run.model, run.seed)
    lo, hi = share(run.batch_size, run.workers, run.rank)
    rep = Reporter(run.job_dir, run.run_id, run.workers, 0, run.batch_size, run.report_every) if run.reporting else None
    clock = Clock(run.checkpoint_every)

    def save(at: int) -> None:
        t = time.time()
        save_checkpoint(run, rep, at, {k: v.detach().cpu().clone() for k, v in named.items()},
                        _cpu(checkpoint.opt_state_by_name(opt, named)), t)

    step, loss = start, float("nan")
    STOP.training = True
    stop_now = start >= run.steps
    while step < run.steps and not stop_now:
        opt.zero_grad(set_to_none=True)
        x, y = task.batch(step, run.batch_size, lo, hi)  # empty when this worker's share is
        local = task.loss(net, x.to(where.device), y.to(where.device), run.batch_size)
        agreement.send[0] = local.detach()
        agreement.send[1] = 1.0 if STOP.requested else 0.0
        local.backward()
        opt.step()
        loss, stop = (agreement.got if run.world_size > 1 else agreement.send).tolist()
        stop_now = stop > 0
        step += 1
        if rep is not None:
            after_step(run, rep, clock, step, start, loss, stop_now, (t0, t_init, t_load), save)
    if rep is not None:
        end_of_run(run, rep, step, start, loss, save)
