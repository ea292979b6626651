"""What a user submits to the live runtime, and how it becomes a scheduler `JobSpec`.

One pydantic model serves the REST API (request body and OpenAPI schema), `dlsched submit
job.yaml` and the trainer's command line, so a field means the same thing everywhere. A live job
declares its total work in steps of its global batch; the global batch stays the same whatever
the number of workers (each worker takes `batch_size / workers` samples per step, rounded up), so
progress in steps is comparable across resizes and is exactly the simulator's "iterations".
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from dlsched.core.job import Architecture, JobSpec

#: The field types that are JSON numbers (`TrainJob._json_types`).
_NUMBERS = (int, float, int | None, float | None)


class TrainJob(BaseModel):
    """A training job as a user submits it (YAML or JSON). Unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(None, max_length=100, description="a label for people; ids are assigned")
    # the names of dlsched.trainer.cli.MODELS, spelled out so the OpenAPI schema lists them
    model: Literal["mlp", "cnn", "transformer"] = Field(description="which network to train")
    mode: Literal["ddp", "ps"] = Field("ddp", description="data-parallel all-reduce or parameter servers")
    steps: int = Field(gt=0, le=10_000_000, description="total training steps of the global batch")
    batch_size: int = Field(32, gt=0, le=65_536, description="global batch, split over the workers")
    lr: float | None = Field(None, gt=0, le=10, description="learning rate (None: the model's default)")
    width: int | None = Field(None, gt=0, le=8192, description="model size: MLP hidden units, CNN channels or "
                              "transformer d_model, a multiple of 4 (None: the model's default; "
                              "mlp 3150 is ~10M parameters)")
    seed: int = Field(0, ge=0, le=2**31 - 1, description="data and initialisation seed")
    workers: int = Field(1, ge=1, le=256, description="requested workers")
    min_workers: int | None = Field(None, ge=1, le=256, description="elastic lower bound (default: workers)")
    max_workers: int | None = Field(None, ge=1, le=256, description="elastic upper bound (default: workers)")
    ps: int = Field(1, ge=1, le=64, description="parameter servers (mode 'ps' only)")
    min_ps: int | None = Field(None, ge=1, le=64)
    max_ps: int | None = Field(None, ge=1, le=64)
    gpus_per_worker: float = Field(1.0, ge=0, le=64, description="GPU slots each worker takes")
    cpus_per_worker: float = Field(1.0, ge=0, le=1024)
    mem_gb_per_worker: float = Field(1.0, ge=0, le=4096)
    cpus_per_ps: float = Field(1.0, ge=0, le=1024)
    mem_gb_per_ps: float = Field(1.0, ge=0, le=4096)
    deadline_s: float | None = Field(None, gt=0, le=1e9, description="seconds after submission")
    priority: int = Field(0, ge=-1000, le=1000)
    user: str = Field("default", min_length=1, max_length=100)
    work_known: bool = Field(True, description="whether the scheduler may read `steps` as the job's total work")
    checkpoint_every_s: float = Field(10.0, gt=0, le=86_400, description="periodic checkpoint interval")

    @field_validator("*", mode="before")
    @classmethod
    def _json_types(cls, value: object, info: ValidationInfo) -> object:
        """true/false is not a number and a number is not true/false, as the schema says: pydantic's
        lax mode read `"width": true` as width 1 and `"work_known": 1` as true, and the API
        accepted a body its own OpenAPI schema refuses (found by schemathesis)."""
        kind = cls.model_fields[info.field_name].annotation
        if kind in _NUMBERS and isinstance(value, bool):
            raise ValueError("must be a number, not true or false")
        if kind is bool and not isinstance(value, bool):
            raise ValueError("must be true or false")
        return value

    @model_validator(mode="after")
    def _bounds(self) -> "TrainJob":
        lo = self.min_workers if self.min_workers is not None else self.workers
        hi = self.max_workers if self.max_workers is not None else self.workers
        if not lo <= self.workers <= hi:
            raise ValueError(f"need min_workers ({lo}) <= workers ({self.workers}) <= max_workers ({hi})")
        if self.model == "transformer" and self.width is not None and self.width % 4:
            raise ValueError(f"width of the transformer must be a multiple of 4, got {self.width}")
        if self.mode == "ps":
            plo = self.min_ps if self.min_ps is not None else 1
            phi = self.max_ps if self.max_ps is not None else max(self.ps, hi)
            if not plo <= self.ps <= phi:
                raise ValueError(f"need min_ps ({plo}) <= ps ({self.ps}) <= max_ps ({phi})")
        elif self.min_ps is not None or self.max_ps is not None:
            raise ValueError("min_ps/max_ps only apply to mode 'ps'")
        return self

    def demand_problems(self) -> list[tuple[str, str]]:
        """Why this job may not run at all, as (key, problem) pairs ([] when it may).

        Admission counts what a job declares: a worker that declares neither a whole GPU slot
        nor a whole CPU takes (almost) nothing from the cluster, so any number of them would fit
        at once (30 zero-demand jobs once ran together on 8 slots). Kept out of the field
        constraints on purpose: a job stored before this rule must still be readable, so that
        the controller can reject it with this reason instead of the store failing to load it."""
        if self.gpus_per_worker >= 1 or self.cpus_per_worker >= 1:
            return []
        return [("gpus_per_worker", f"each worker must take at least 1 GPU slot or 1 CPU, so that the cluster "
                 f"bounds how many run at once; this job declares {self.gpus_per_worker:g} GPU and "
                 f"{self.cpus_per_worker:g} CPU per worker")]

    def job_spec(self, job_id: str, submit_time: float) -> JobSpec:
        """The scheduler's view of this job (`submit_time` on the controller's clock)."""
        ps_mode = self.mode == "ps"
        return JobSpec(
            job_id=job_id,
            submit_time=submit_time,
            iterations=float(self.steps),
            num_workers=self.workers,
            min_workers=self.min_workers,
            max_workers=self.max_workers,
            arch=Architecture.PS if ps_mode else Architecture.ALLREDUCE,
            model=f"live-{self.model}" if self.width is None else f"live-{self.model}-w{self.width}",
            worker_demand=(self.gpus_per_worker, self.cpus_per_worker, self.mem_gb_per_worker),
            ps_demand=(0.0, self.cpus_per_ps, self.mem_gb_per_ps),
            num_ps=self.ps if ps_mode else 0,
            min_ps=self.min_ps if ps_mode else None,
            max_ps=self.max_ps if ps_mode else None,
            work_known=self.work_known,
            deadline=submit_time + self.deadline_s if self.deadline_s is not None else None,
            priority=self.priority,
            user=self.user,
            batch_size=self.batch_size,
            extra={"live": True, "mode": self.mode},
        )

    def trainer_argv(self, job_dir: Path, num_ps: int) -> list[str]:
        """Arguments of `python -m dlsched.trainer` for one run of this job (every rank gets the
        same; RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT come from the environment)."""
        argv = [
            "--job-dir", str(job_dir),
            "--model", self.model,
            "--mode", self.mode,
            "--steps", str(self.steps),
            "--batch-size", str(self.batch_size),
            "--seed", str(self.seed),
            "--num-ps", str(num_ps if self.mode == "ps" else 0),
            "--checkpoint-every", f"{self.checkpoint_every_s:g}",
        ]
        if self.lr is not None:
            argv += ["--lr", f"{self.lr:g}"]
        if self.width is not None:
            argv += ["--width", str(self.width)]
        return argv
