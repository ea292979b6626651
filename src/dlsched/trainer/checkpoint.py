"""Atomic, verified, topology-free checkpoints: full parameters and optimizer state keyed by
parameter name, so any number of workers or parameter servers (any sharding) can resume from them.

One bad file must not cost a job everything, so a job directory keeps its last two good
checkpoints, each named `checkpoint-<step>-<digest>.pt` (`protocol.checkpoint_name`): the xxh3
digest of the file's bytes is in its name, so a checkpoint and its checksum appear together in one
atomic rename and can never disagree because of a kill between two writes. Loading tries the
newest first and takes the first one that verifies (digest, `torch.load` without pickled code,
the expected keys, the step its name says); what it skipped, and why, comes back with it so the
trainer can tell the runtime (`protocol.RESUME`). A bad file is renamed `*.bad` by rank 0 (kept
to look at, never tried again) so pruning ("keep the two newest") never keeps a bad one in place of
a good one. A `checkpoint.pt` left by an older version is tried last.
"""

from __future__ import annotations

import json
import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
import xxhash

from dlsched.output_folder import atomic_write
from dlsched.trainer.protocol import DONE, LEGACY_CHECKPOINT, checkpoint_name, list_checkpoints, parse_checkpoint_name

FORMAT = 1
#: How many good checkpoints a job directory keeps (the newest and one to fall back to).
KEEP = 2
#: What a checkpoint must hold to resume a run.
KEYS = ("format", "model", "width", "seed", "step", "params", "opt")


def digest(data) -> str:
    """The checksum in a checkpoint's name: xxh3-64 of its bytes, ~0.02 s for the 121 MB
    benchmark checkpoint (sha256: 0.5 s, which would add to every resize pause)."""
    return xxhash.xxh3_64_hexdigest(data)


def file_digest(path: Path) -> str:
    """`digest` of a file, hashed through a read-only memory map (no copy of its bytes)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return digest(b"")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return digest(m)


def save(job_dir: Path, state: dict) -> Path:
    """Write the checkpoint of `state["step"]` under its verified name (to a temporary file, hashed,
    then renamed: readers never see half a file), then keep only the `KEEP` newest. Returns its path."""
    job_dir = Path(job_dir)
    step = int(state["step"])
    tmp = job_dir / f".checkpoint-{step}.pt.tmp{os.getpid()}"
    try:
        torch.save({"format": FORMAT, **state}, tmp)
        path = job_dir / checkpoint_name(step, file_digest(tmp))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    prune(job_dir, keep=path)
    return path


def prune(job_dir: Path, keep: Path) -> None:
    """Delete all but the `KEEP` newest checkpoints (`keep`, just written, always stays), a legacy
    `checkpoint.pt` once there are enough newer ones, and temporary files of killed writers."""
    named = list_checkpoints(job_dir)
    survivors = [keep] + [p for p in named if p != keep][: KEEP - 1]
    doomed = [p for p in named if p not in survivors]
    if len(survivors) >= KEEP:
        doomed.append(job_dir / LEGACY_CHECKPOINT)
    doomed += [p for p in job_dir.glob(".checkpoint*.tmp*") if not p.name.endswith(f".tmp{os.getpid()}")]
    for p in doomed:
        p.unlink(missing_ok=True)


@dataclass
class Loaded:
    """The result of `load`: the state resumed from (None: start at step 0), its file, and one
    line per checkpoint that was skipped, newest first ("checkpoint-...pt: why")."""

    state: dict | None = None
    path: Path | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def step(self) -> int:
        return int(self.state["step"]) if self.state is not None else 0


def verify(path: Path) -> dict:
    """The checkpoint in `path`, or ValueError saying in one line why it cannot be resumed from."""
    named = parse_checkpoint_name(path.name)  # None: a legacy checkpoint.pt, which has no digest
    try:
        if named is not None and named[1] != file_digest(path):
            raise ValueError(f"checksum mismatch ({path.stat().st_size} bytes; changed or truncated after "
                             "it was written)")
    except OSError as e:
        raise ValueError(f"unreadable ({e.strerror or e})") from None
    try:
        # weights_only: a file in a job directory never gets to run pickled code. mmap: tensors are
        # read as they are copied into the model, not copied twice (0.19 s instead of 0.31 s for
        # the 121 MB benchmark checkpoint, checksum included).
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means: not loadable
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise ValueError(f"cannot be loaded ({type(e).__name__}: {first[:200]})") from None
    if not isinstance(state, dict):
        raise ValueError(f"holds a {type(state).__name__}, not a checkpoint")
    missing = [k for k in KEYS if k not in state]
    if missing:
        raise ValueError(f"lacks {', '.join(missing)}")
    if state["format"] != FORMAT:
        raise ValueError(f"format {state['format']!r}, this trainer reads {FORMAT}")
    if not isinstance(state["step"], int) or not isinstance(state["params"], dict):
        raise ValueError("malformed step or parameters")
    if named is not None and named[0] != state["step"]:
        raise ValueError(f"says step {state['step']}, its name {named[0]}")
    return state


def load(job_dir: Path, quarantine: bool = False) -> Loaded:
    """The newest checkpoint that verifies (see the module docstring). With `quarantine` (one
    rank only), each bad file is renamed `<name>.bad`."""
    job_dir = Path(job_dir)
    out = Loaded()
    candidates = list_checkpoints(job_dir)
    legacy = job_dir / LEGACY_CHECKPOINT
    if legacy.is_file():
        candidates.append(legacy)
    for path in candidates:
        try:
            out.state, out.path = verify(path), path
            return out
        except ValueError as e:
            out.problems.append(f"{path.name}: {e}")
            if quarantine:
                try:
                    os.replace(path, path.with_name(path.name + ".bad"))
                except OSError:
                    pass  # another reader renamed it, or it is gone: it is not tried again either way
    return out


def check_compatible(state: dict, model: str, width: int, seed: int) -> None:
    """A checkpoint of another model would silently train the wrong thing: refuse it."""
    got = (state.get("model"), state.get("width"), state.get("seed"))
    if got != (model, width, seed):
        raise SystemExit(f"dlsched.trainer: checkpoint is for model/width/seed {got}, "
                         f"not {(model, width, seed)}; use a fresh --job-dir")


def write_done(job_dir: Path, info: dict) -> None:
    atomic_write(Path(job_dir) / DONE, lambda p: p.write_text(json.dumps(info)))


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
