"""Atomic, topology-free checkpoints: full parameters and optimizer state keyed by parameter
name, so any number of workers or parameter servers (any sharding) can resume from them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from dlsched.trainer.protocol import CHECKPOINT, DONE

FORMAT = 1


def atomic_write_bytes(path: Path, write) -> None:
    """Write via a temporary file in the same directory and rename, so readers never see half a file."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def save(job_dir: Path, state: dict) -> None:
    state = {"format": FORMAT, **state}
    atomic_write_bytes(Path(job_dir) / CHECKPOINT, lambda p: torch.save(state, p))


def load(job_dir: Path) -> dict | None:
    path = Path(job_dir) / CHECKPOINT
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)


def check_compatible(state: dict, model: str, width: int, seed: int) -> None:
    """A checkpoint of another model would silently train the wrong thing: refuse it."""
    got = (state.get("model"), state.get("width"), state.get("seed"))
    if got != (model, width, seed):
        raise SystemExit(f"dlsched.trainer: checkpoint is for model/width/seed {got}, "
                         f"not {(model, width, seed)}; use a fresh --job-dir")


def write_done(job_dir: Path, info: dict) -> None:
    atomic_write_bytes(Path(job_dir) / DONE, lambda p: p.write_text(json.dumps(info)))


def opt_state_by_name(opt: torch.optim.Optimizer, named: dict[str, torch.Tensor]) -> dict[str, dict]:
    """Per-parameter optimizer state (Adam moments and step) keyed by parameter name."""
    out = {}
    for name, p in named.items():
        st = opt.state.get(p)
        if st:
            out[name] = {k: (v.detach().clone() if torch.is_tensor(v) else v) for k, v in st.items()}
    return out


def load_opt_state(opt: torch.optim.Optimizer, named: dict[str, torch.Tensor], states: dict[str, dict]) -> None:
    for name, p in named.items():
        if name in states:
            opt.state[p] = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in states[name].items()}
