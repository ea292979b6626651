"""What both distribution modes share: the run's settings, model/optimizer set-up from a
checkpoint or from the seed, and the end-of-run bookkeeping."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch

from dlsched.trainer import checkpoint
from dlsched.trainer.models import build_model


@dataclass
class Run:
    job_dir: Path
    model: str
    mode: str
    steps: int
    batch_size: int
    seed: int
    num_ps: int
    checkpoint_every: float
    lr: float
    report_every: float
    width: int
    rank: int
    world_size: int
    master_addr: str
    master_port: int
    run_id: str
    comm_timeout: float

    @property
    def workers(self) -> int:
        return self.world_size - self.num_ps

    @property
    def reporting(self) -> bool:
        return self.rank == self.num_ps

    @property
    def timeout(self) -> timedelta:
        return timedelta(seconds=self.comm_timeout)


def loopback_hints(addr: str) -> None:
    """On one machine gloo/TensorPipe must use the loopback interface, whatever the hostname resolves to."""
    if addr in ("127.0.0.1", "localhost"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        os.environ.setdefault("TP_SOCKET_IFNAME", "lo")


def initial_state(run: Run) -> tuple[torch.nn.Module, dict | None]:
    """The model at the resume point: the checkpoint's parameters, or the seed's initialisation."""
    model = build_model(run.model, run.width, run.seed)
    state = checkpoint.load(run.job_dir)
    if state is not None:
        checkpoint.check_compatible(state, run.model, run.width, run.seed)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(state["params"][name])
    return model, state


def checkpoint_state(run: Run, step: int, params: dict, opt_state: dict) -> dict:
    return {"model": run.model, "width": run.width, "seed": run.seed, "step": step, "lr": run.lr,
            "params": params, "opt": opt_state, "rng": torch.random.get_rng_state()}


class Clock:
    """When the next periodic checkpoint is due."""

    def __init__(self, every: float):
        self.every = every
        self.next = time.monotonic() + every

    def due(self) -> bool:
        if time.monotonic() >= self.next:
            self.next = time.monotonic() + self.every
            return True
        return False
