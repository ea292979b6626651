"""Data-parallel training: every worker holds the full model; gradients are summed with one
gloo all-reduce per step (a flat buffer, like DDP's buckets but one bucket), which also carries
the global loss and the stop flag so all ranks stop at the same step boundary for free."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from dlsched.trainer import checkpoint
from dlsched.trainer.common import Clock, Run, after_step, end_of_run, initial_state, loopback_hints, save_checkpoint
from dlsched.trainer.models import Task, share
from dlsched.trainer.report import Reporter
from dlsched.trainer.signals import STOP


def run_ddp(run: Run) -> None:
    t0 = time.time()
    if run.world_size > 1:
        loopback_hints(run.master_addr)
        dist.init_process_group("gloo", init_method=f"tcp://{run.master_addr}:{run.master_port}",
                                rank=run.rank, world_size=run.world_size, timeout=run.timeout)
    t_init = time.time()
    model, state = initial_state(run)
    params = list(model.parameters())
    named = dict(model.named_parameters())
    opt = torch.optim.Adam(params, lr=run.lr)
    start = 0
    if state is not None:
        checkpoint.load_opt_state(opt, named, state["opt"])
        start = int(state["step"])
    t_load = time.time()
    task = Task(run.model, run.seed)
    lo, hi = share(run.batch_size, run.workers, run.rank)
    rep = Reporter(run.job_dir, run.run_id, run.workers, 0, run.batch_size, run.report_every) if run.reporting else None
    n = sum(p.numel() for p in params)
    buf = torch.zeros(n + 2)
    clock = Clock(run.checkpoint_every)

    def save(at: int) -> None:
        t = time.time()
        save_checkpoint(run, rep, at, {k: v.detach().clone() for k, v in named.items()},
                        checkpoint.opt_state_by_name(opt, named), t)

    step, loss = start, float("nan")
    STOP.training = True
    stop_now = start >= run.steps
    while step < run.steps and not stop_now:
        for p in params:
            p.grad = None
        if hi > lo:
            x, y = task.batch(step, run.batch_size, lo, hi)
            local = task.loss(model, x, y, run.batch_size)
            local.backward()
            torch.cat([p.grad.reshape(-1) if p.grad is not None else torch.zeros(p.numel()) for p in params], out=buf[:n])
            buf[n] = local.item()
        else:
            buf.zero_()
        buf[n + 1] = 1.0 if STOP.requested else 0.0
        if run.world_size > 1:
            dist.all_reduce(buf)
        off = 0
        for p in params:
            p.grad = buf[off: off + p.numel()].view_as(p)
            off += p.numel()
        opt.step()
        step += 1
        loss = float(buf[n])
        stop_now = buf[n + 1].item() > 0
        if rep is not None:
            after_step(run, rep, clock, step, start, loss, stop_now, (t0, t_init, t_load), save)
    if rep is not None:
        end_of_run(run, rep, step, start, loss, save)
