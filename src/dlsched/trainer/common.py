"""What both distribution modes share: the run's settings, model/optimizer set-up from a
checkpoint or from the seed, and the reporting rank's bookkeeping (records, checkpoints, the end)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch

from dlsched.trainer import checkpoint
from dlsched.trainer.models import build_model
from dlsched.trainer.protocol import RESUME
from dlsched.trainer.report import Reporter, append_record


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
    node_addr: str = "127.0.0.1"  # where this rank's sockets listen (`trainer.rendezvous`)

    @property
    def workers(self) -> int:
        return self.world_size - self.num_ps

    @property
    def reporting(self) -> bool:
        return self.rank == self.num_ps

    @property
    def timeout(self) -> timedelta:
        return timedelta(seconds=self.comm_timeout)


def initial_state(run: Run) -> tuple[torch.nn.Module, dict | None]:
    """The model at the resume point: the newest good checkpoint's parameters, or the seed's
    initialisation. Rank 0 (the reporting worker in ddp, the first server in ps mode: a rank that
    loads) sets bad checkpoints aside and tells the runtime what the run resumes from."""
    model = build_model(run.model, run.width, run.seed)
    loaded = checkpoint.load(run.job_dir, quarantine=run.rank == 0)
    state = loaded.state
    if run.rank == 0:
        report_resume(run, loaded)
    if state is not None:
        checkpoint.check_compatible(state, run.model, run.width, run.seed)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(state["params"][name])
    return model, state


def report_resume(run: Run, loaded: checkpoint.Loaded) -> None:
    """The "resume" record (`protocol.RESUME`): the step and checkpoint this run starts from, and
    every newer checkpoint it skipped with why; on stderr too, for the rank's log."""
    if loaded.problems:
        what = f"resuming from {loaded.path.name}" if loaded.path is not None else "starting from step 0"
        print(f"dlsched.trainer: skipped bad checkpoint(s): {'; '.join(loaded.problems)}; {what}",
              file=sys.stderr, flush=True)
    append_record(run.job_dir, {"time": time.time(), "event": RESUME, "step": loaded.step,
                                "checkpoint": loaded.path.name if loaded.path is not None else None,
                                "problems": loaded.problems, "run": run.run_id})


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


def save_checkpoint(run: Run, rep: Reporter, step: int, params: dict, opt_state: dict, since: float) -> None:
    """Write the checkpoint of `step` and record how long it took since `since` (gathering included)."""
    checkpoint.save(run.job_dir, {"model": run.model, "width": run.width, "seed": run.seed, "step": step, "lr": run.lr,
                                  "params": params, "opt": opt_state, "rng": torch.random.get_rng_state()})
    rep.emit("checkpoint", step, seconds=time.time() - since)


def after_step(run: Run, rep: Reporter, clock: Clock, step: int, start: int, loss: float, stop_now: bool,
               marks: tuple[float, float, float], save) -> None:
    """After each step: the "start" record once the run's first step is done (with how long the
    rendezvous, loading and that step took, from `marks` = process start, rendezvous done, state
    loaded), progress records, and the periodic checkpoint (`save(step)`)."""
    if step == start + 1:
        t0, t_init, t_load = marks
        rep.start(step, resumed_from=start, loss=loss, init_s=t_init - t0, load_s=t_load - t_init,
                  first_step_s=time.time() - t_load)
    rep.maybe_progress(step, loss)
    if clock.due() and step < run.steps and not stop_now:
        save(step)


def end_of_run(run: Run, rep: Reporter, step: int, start: int, loss: float, save) -> None:
    """All steps trained: final checkpoint, then `done.json`; else stopped: checkpoint and say so."""
    if step >= run.steps:
        if step > start:
            save(step)
        checkpoint.write_done(run.job_dir, {"step": step, "loss": loss, "time": time.time(), "run": run.run_id})
        rep.emit("done", step, loss=loss)
    else:
        save(step)
        rep.emit("stop", step, loss=loss)
