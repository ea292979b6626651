"""Built-in (model size, compute time) pairs for the ring all-reduce model.

Why a table: a job named "ring:<name>" (or a "gavel:<job type>" job when Gavel's measured matrix is
not available) needs a gradient size and a per-step compute time without the user spelling them out.

Sources, and how sure each number is:
- compute_s = 1 / (isolated steps/s on one V100) from Gavel's measured throughput matrix
  (stanford-futuredata/gavel, scheduler/simulation_throughputs.json, MIT License, Copyright 2020
  Stanford Future Data Systems), rounded to 4 significant digits.
- model_size_mb = fp32 parameter bytes (1 MB = 10^6 B) of the reference architecture:
  ResNet-18 (CIFAR variant, 11.2 M parameters) and ResNet-50 (25.6 M) are exact public counts;
  Transformer (~55 M: the 6+6-layer d_model 512 base model with a Multi30k-sized vocabulary),
  LM (~14 M: 2-layer LSTM, 200 units, WikiText-2 vocabulary of 33,278) and CycleGAN (28.3 M: two
  ResNet generators + two PatchGAN discriminators) are APPROXIMATE, since Gavel does not record them.
  A3C and Recommendation are left out: their sizes are not known well enough to guess.
DL2's models are not in this table: DL2's constants have no license and are read from the shared
traces folder at run time instead (see `dl2_constants`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RingProfile:
    model_size_mb: float
    compute_s: float  # one step of one worker at its batch size
    batch: str  # "local": batch size is per worker (Gavel's job types); "global": split among workers


_SIZE_MB = {"ResNet-18": 44.7, "ResNet-50": 102.2, "Transformer": 220.0, "LM": 56.0, "CycleGAN": 113.2}

_V100_STEP_S = {
    "ResNet-18 (batch size 16)": 0.03091,
    "ResNet-18 (batch size 32)": 0.03339,
    "ResNet-18 (batch size 64)": 0.04151,
    "ResNet-18 (batch size 128)": 0.05557,
    "ResNet-18 (batch size 256)": 0.09708,
    "ResNet-50 (batch size 16)": 0.08775,
    "ResNet-50 (batch size 32)": 0.1284,
    "ResNet-50 (batch size 64)": 0.2275,
    "ResNet-50 (batch size 128)": 0.4005,
    "Transformer (batch size 16)": 0.09038,
    "Transformer (batch size 32)": 0.09415,
    "Transformer (batch size 64)": 0.116,
    "Transformer (batch size 128)": 0.1836,
    "Transformer (batch size 256)": 0.6269,
    "LM (batch size 5)": 0.00916,
    "LM (batch size 10)": 0.01225,
    "LM (batch size 20)": 0.01545,
    "LM (batch size 40)": 0.02211,
    "LM (batch size 80)": 0.03541,
    "CycleGAN": 0.2259,
}

RING_PROFILES: dict[str, RingProfile] = {
    job_type: RingProfile(_SIZE_MB[job_type.split(" (")[0]], step, "local")
    for job_type, step in _V100_STEP_S.items()
}
