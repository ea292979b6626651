"""The DL2 "Ali_Trace" workload generator (Peng et al., DL2, TPDS 2021), rebuilt from its constants.

DL2's simulator does not replay a job list; it generates one (dev repo `scheduler/trace.py`):
- arrivals: the 72 hourly Alibaba counts scaled so the maximum equals MAX_ARRVS_PER_TS
  (count -> ceil(count / (max / cap))), read from a random offset 0-4, each slot capped at
  the cap; jobs arrive at slot starts (slot = TS_DURATION, 1,200 s) until TOT_NUM_JOBS exist.
  DL2 stops after one pass of the pattern; we wrap around so more jobs can be asked for.
- length class k drawn with the Alibaba class probabilities; model = job_length_class_to_model_index[k];
  epochs = int(class mean minutes / 1155 * MAX_NUM_EPOCHS) (FIX_JOB_LEN); iterations = epochs *
  epoch_size of that model (steps per epoch).
Jobs: arch `ps`, model "dl2:<name>", elastic 1..16 workers and 1..16 PSs (MAX_NUM_WORKERS of the
public release), starting at 1 worker + 1 PS. Demands from per_model_task_resource_demand
(public repo): worker [1 GPU, 2 CPU] (cnn-text-classification and dssm: [0 GPU, 2 CPU]; 4 GPU
slots = 1 GPU), PS [0 GPU, 2 CPU]; DL2 has no memory dimension, so every task asks 4 GiB.
work_known = True: DL2 jobs declare their epochs.

The DL2 data has no license: it is read from $DLSCHED_TRACES/dl2 at run time, never shipped.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field, ValidationError, model_validator

from dlsched.config import validation_problems
from dlsched.core.errors import ConfigError, TraceError
from dlsched.paths import missing_traces_hint, traces_dir
from dlsched.traces.frame import build_jobs, finalize
from dlsched.traces.problems import ProblemLog
from dlsched.traces.workload import Workload

ATTRIBUTION = (
    "DL2 workload constants (Peng et al., DL2, IEEE TPDS 2021), pengyanghua/DL2 and yxd886/scheduler; "
    "no license: research reproduction only, read from the shared traces, not redistributed"
)
TASK_MEM_GIB = 4.0
GPU_SLOTS_PER_GPU = 4.0


def constants_path(where: str | Path | None = None) -> Path:
    """workload_constants.json from `where` (file or folder) or $DLSCHED_TRACES/dl2."""
    if where is not None:
        p = Path(where)
        p = p / "workload_constants.json" if p.is_dir() else p
    else:
        root = traces_dir()
        p = root / "dl2" / "workload_constants.json" if root is not None else None
    if p is None or not p.is_file():
        raise TraceError(
            "the DL2 workload needs dl2/workload_constants.json from the shared traces "
            f"({'not found: ' + str(p) if p is not None else 'no traces folder found'}); "
            f"{missing_traces_hint('dl2/')}. The DL2 data has no license, so dlsched does not ship it."
        )
    return p


_Count = Annotated[int, Field(ge=0)]
_Amount = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _PerModel(BaseModel):
    epoch_size_steps_per_epoch: list[Annotated[int, Field(ge=1, le=10**9)]]


class _Demands(BaseModel):
    worker_public_DL2_repo: list[tuple[_Amount, _Amount]]
    ps_public_DL2_repo: list[tuple[_Amount, _Amount]]


class _AliTrace(BaseModel):
    arrival_count_per_hour_slot_72: list[_Count] = Field(min_length=1)
    job_length_class_mean_minutes: list[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(min_length=1)
    job_length_class_probability: list[_Amount]
    job_length_class_to_model_index: list[_Count]


class _Constants(BaseModel):
    """The parts of workload_constants.json the generator reads, checked (shapes included) so a
    damaged file is one TraceError instead of an IndexError deep in the generator; the rest of
    the file is kept as is for the modules that read other parts."""

    model_names_index_order: list[str] = Field(min_length=1)
    per_model_constants: _PerModel
    per_model_task_resource_demand_cpu_gpu_slots: _Demands
    ali_trace: _AliTrace
    google_trace_arrival_patterns_75_slots_by_max_arrivals_per_slot: dict[str, Annotated[list[_Count], Field(min_length=1)]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> "_Constants":
        models = len(self.model_names_index_order)
        d, a = self.per_model_task_resource_demand_cpu_gpu_slots, self.ali_trace
        for name, table in (("epoch_size_steps_per_epoch", self.per_model_constants.epoch_size_steps_per_epoch),
                            ("worker_public_DL2_repo", d.worker_public_DL2_repo), ("ps_public_DL2_repo", d.ps_public_DL2_repo)):
            if len(table) != models:
                raise ValueError(f"{name} has {len(table)} entries for {models} models")
        classes = len(a.job_length_class_mean_minutes)
        if len(a.job_length_class_probability) != classes or len(a.job_length_class_to_model_index) != classes:
            raise ValueError(f"the job length classes' tables differ in length (means: {classes})")
        if any(m >= models for m in a.job_length_class_to_model_index):
            raise ValueError(f"job_length_class_to_model_index names a model beyond the {models} models")
        if max(a.arrival_count_per_hour_slot_72) == 0:
            raise ValueError("arrival_count_per_hour_slot_72 has no arrivals")
        return self


def load_constants(where: str | Path | None = None) -> dict:
    """DL2's constants as a dict, checked against the shapes the generator needs."""
    p = constants_path(where)
    try:
        c = json.loads(p.read_text(encoding="utf-8"))
        _Constants.model_validate(c)
    except UnicodeDecodeError:
        raise TraceError(f"{p}: not DL2's workload_constants.json (not UTF-8 text)") from None
    except OSError as e:
        raise TraceError(f"cannot read {p}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise TraceError(f"{p}: not DL2's workload_constants.json (not JSON: {e})") from None
    except ValidationError as e:
        raise TraceError(f"{p}: not DL2's workload_constants.json ({'; '.join(validation_problems(e)[:3])})") from None
    return c


def arrival_counts(c: dict, max_arrivals_per_slot: int, pattern: str = "ali") -> list[int]:
    """Per-slot arrival counts before the offset and the cap (DL2's _get_pattern)."""
    if pattern == "ali":
        raw = c["ali_trace"]["arrival_count_per_hour_slot_72"]
        ratio = max(raw) / float(max_arrivals_per_slot)
        return [int(math.ceil(a / ratio)) for a in raw]
    if pattern == "google":
        table = c["google_trace_arrival_patterns_75_slots_by_max_arrivals_per_slot"]
        if str(max_arrivals_per_slot) not in table:
            raise ConfigError(
                f"DL2's Google pattern exists for max_arrivals_per_slot in {', '.join(table)}, not {max_arrivals_per_slot}"
            )
        return list(table[str(max_arrivals_per_slot)])
    raise ConfigError(f"unknown DL2 arrival pattern {pattern!r}; use 'ali' or 'google'")


def dl2_workload(
    num_jobs: int = 60,
    max_arrivals_per_slot: int = 3,
    seed: int = 0,
    *,
    pattern: str = "ali",
    slot_seconds: float = 1200.0,
    max_num_epochs: int = 30000,
    max_workers: int = 16,
    constants: str | Path | None = None,
) -> Workload:
    """DL2's Alibaba-pattern workload (defaults: DL2's 60 jobs, 3 arrivals per 20-min slot)."""
    if num_jobs < 1 or max_arrivals_per_slot < 1:
        raise ConfigError("dl2 workload: num_jobs and max_arrivals_per_slot must be >= 1")
    if slot_seconds <= 0 or max_num_epochs < 1 or max_workers < 1:
        raise ConfigError("dl2 workload: slot_seconds, max_num_epochs and max_workers must be positive")
    c = load_constants(constants)
    counts = arrival_counts(c, max_arrivals_per_slot, pattern)
    if max(counts) == 0:
        raise ConfigError("dl2 workload: the arrival pattern has no arrivals")
    ali = c["ali_trace"]
    names = c["model_names_index_order"]
    epoch_size = c["per_model_constants"]["epoch_size_steps_per_epoch"]
    w_dem = c["per_model_task_resource_demand_cpu_gpu_slots"]["worker_public_DL2_repo"]
    p_dem = c["per_model_task_resource_demand_cpu_gpu_slots"]["ps_public_DL2_repo"]
    means = np.asarray(ali["job_length_class_mean_minutes"], dtype=float)
    cum = np.cumsum(ali["job_length_class_probability"])
    to_model = ali["job_length_class_to_model_index"]

    rng = np.random.default_rng(seed)
    offset = int(rng.integers(0, 5))
    slots: list[int] = []
    ts = 0
    while len(slots) < num_jobs:
        k = min(max_arrivals_per_slot, counts[(ts + offset) % len(counts)])
        slots.extend([ts] * min(k, num_jobs - len(slots)))
        ts += 1
    cls = np.minimum(np.searchsorted(cum, rng.random(num_jobs), side="right"), len(cum) - 1)
    model = np.asarray(to_model)[cls]
    epochs = (means[cls] / means.max() * max_num_epochs).astype(int)
    epochs = np.maximum(epochs, 1)
    iters = epochs * np.asarray(epoch_size)[model]
    wd = np.asarray(w_dem, dtype=float)[model]  # [cpu, gpu slots]
    pdm = np.asarray(p_dem, dtype=float)[model]
    frame = pd.DataFrame(
        {
            "_line": np.arange(1, num_jobs + 1),
            "job_id": [f"dl2-{i:03d}" for i in range(1, num_jobs + 1)],
            "submit_time": np.asarray(slots, dtype=float) * slot_seconds,
            "iterations": iters.astype(float),
            "model": ["dl2:" + names[m] for m in model],
            "arch": "ps",
            "num_workers": 1,
            "min_workers": 1,
            "max_workers": max_workers,
            "num_ps": 1,
            "min_ps": 1,
            "max_ps": max_workers,
            "worker_gpu": wd[:, 1] / GPU_SLOTS_PER_GPU,
            "worker_cpu": wd[:, 0],
            "worker_mem": TASK_MEM_GIB,
            "ps_gpu": pdm[:, 1] / GPU_SLOTS_PER_GPU,
            "ps_cpu": pdm[:, 0],
            "ps_mem": TASK_MEM_GIB,
            "work_known": True,
            "extra": [
                {"epochs": int(e), "length_class": int(k), "slot": int(s)} for e, k, s in zip(epochs, cls, slots)
            ],
        }
    )
    log = ProblemLog("dl2-ali")
    frame = finalize(frame, log)
    jobs = build_jobs(frame, log)
    log.raise_if_any("dl2 workload")  # only an inconsistent constants file gets here
    return Workload(
        name="dl2-ali",
        jobs=jobs,
        source=str(constants_path(constants)),
        cluster="dl2",
        attribution=ATTRIBUTION,
        notes=[f"DL2 generator: pattern={pattern}, cap {max_arrivals_per_slot}/slot, offset {offset}, seed {seed}"],
    )
