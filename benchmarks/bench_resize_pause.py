"""Resize pause on the local backend: from the stop request (SIGTERM, the trainer checkpoints) to
the first step at the new size, for a ~10M-parameter model on CPU.

The goal (issue 6) is a median of at most 2 s; the seed systems' checkpoint-restart took 11–16 s.
One job (mlp, width 3150: 10.1M parameters, Adam, so the checkpoint holds ~120 MB of tensors)
alternates between 2 workers and 1 worker, `--repeats` times. The same resizes run twice, side by
side in one process: with the warm standby pool the local backend uses by default (a rank is
handed to an interpreter that has already imported torch) and cold (a fresh `python -m
dlsched.trainer` per rank). Each pause is split into its two halves: stop (SIGTERM until every
process of the old run is gone, which includes writing the checkpoint) and start (launch until
the first step finished, which includes loading it). The medians of the parts: `save` (writing
the checkpoint), `exit` (checkpoint written until the old processes are gone), `spawn` (launch
until the trainer's own clock starts: interpreter start-up or hand-off, imports), `init`
(process-group rendezvous), `load` (building the model, reading the checkpoint), `step1` (the
first step).

    python benchmarks/bench_resize_pause.py [--repeats 8] [--width 3150] [--skip-cold]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

from dlsched.core.allocation import Allocation
from dlsched.live.backends.base import Launch, Observation
from dlsched.live.backends.local import LocalBackend
from dlsched.live.backends.nodes import parse_nodes
from dlsched.trainer.protocol import PROGRESS
from dlsched.live.spec import TrainJob

NODES = {"name": "bench", "nodes": [{"name": "n0", "gpus": 2, "cpus": 2, "mem_gb": 16}]}
JOB_ID = "resize"


def _wait(backend: LocalBackend, cond, timeout: float) -> Observation:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        o = backend.observe().get(JOB_ID)
        if o is not None and cond(o):
            return o
        time.sleep(0.01)
    raise TimeoutError(f"no progress within {timeout:.0f} s; last observation: {o}")


def _records(job_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (job_dir / PROGRESS).read_text().splitlines() if line.strip()]


def measure(width: int, repeats: int, standby: bool, work: Path) -> list[dict]:
    """Start at 2 workers, then resize 2 -> 1 -> 2 ... `repeats` times; one row per resize."""
    job = TrainJob(model="mlp", width=width, steps=10_000_000, batch_size=64, workers=2, min_workers=1,
                   max_workers=2, checkpoint_every_s=3600)
    job_dir = work / ("warm" if standby else "cold")
    backend = LocalBackend(nodes=parse_nodes(NODES), standby=2 if standby else 0, log_dir=job_dir / "standby")
    rows = []
    try:
        if backend.pool is not None:  # both ranks warm before the first launch, as in a running service
            backend.pool.wait_ready(2, timeout=120)
        backend.start(Launch(JOB_ID, job, Allocation.of({0: (2, 0)}), job_dir, 0))
        _wait(backend, lambda o: o.first_step_at is not None, 300)
        for attempt in range(1, repeats + 1):
            workers = 1 if attempt % 2 else 2
            time.sleep(2.0)  # let it train (and the pool refill) between resizes
            if backend.pool is not None:
                backend.pool.wait_ready(workers, timeout=120)
            asked = time.time()
            backend.stop(JOB_ID, timeout=60)
            stopped = time.time()
            backend.start(Launch(JOB_ID, job, Allocation.of({0: (workers, 0)}), job_dir, attempt))
            o = _wait(backend, lambda o: o.first_step_at is not None and o.first_step_at >= stopped, 300)
            if o.state != "running":
                raise RuntimeError(f"the run at {workers} workers ended: {o.state} {o.message}")
            recs = _records(job_dir)
            stop = next(r for r in reversed(recs) if r.get("event") == "stop")
            ckpt = next(r for r in reversed(recs) if r.get("event") == "checkpoint" and r["time"] <= stop["time"])
            first = next(r for r in reversed(recs) if r.get("event") == "start")
            rows.append({"to_workers": workers, "pause": o.first_step_at - asked, "stop": stopped - asked,
                         "start": o.first_step_at - stopped, "save": ckpt["seconds"],
                         "exit": stopped - stop["time"], "init": first["init_s"], "load": first["load_s"],
                         "step1": first["first_step_s"],
                         "spawn": o.first_step_at - stopped - first["init_s"] - first["load_s"] - first["first_step_s"]})
    finally:
        backend.close()
    return rows


def _summary(rows: list[dict], key: str) -> str:
    xs = [r[key] for r in rows]
    return f"{statistics.median(xs):6.2f} (min {min(xs):.2f}, max {max(xs):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=8, help="resizes per setting (default 8)")
    ap.add_argument("--width", type=int, default=3150, help="mlp hidden units (3150: 10.1M parameters)")
    ap.add_argument("--skip-cold", action="store_true", help="measure only the warm standby pool")
    args = ap.parse_args()

    from dlsched.trainer.models import build_model, param_count

    params = param_count(build_model("mlp", args.width, 0))
    print(f"# {platform.machine()}, CPython {platform.python_version()}, {args.repeats} resizes, "
          f"mlp width {args.width} = {params / 1e6:.1f}M parameters, {time.strftime('%Y-%m-%d')}")
    results = {}
    with tempfile.TemporaryDirectory(prefix="dlsched-bench-") as d:
        for standby in ([True] if args.skip_cold else [True, False]):
            name = "warm standby" if standby else "cold start"
            results[name] = rows = measure(args.width, args.repeats, standby, Path(d))
            print(f"{name:<13} pause s {_summary(rows, 'pause')}   stop s {_summary(rows, 'stop')}   "
                  f"start s {_summary(rows, 'start')}")
            parts = ", ".join(f"{k} {statistics.median(r[k] for r in rows):.2f}"
                              for k in ("save", "exit", "spawn", "init", "load", "step1"))
            print(f"{'':<13} medians s: {parts}")
    if len(results) == 2:
        warm = statistics.median(r["pause"] for r in results["warm standby"])
        cold = statistics.median(r["pause"] for r in results["cold start"])
        print(f"cold / warm median pause: {cold / warm:.2f}x")
    warm = statistics.median(r["pause"] for r in results["warm standby"])
    print(f"goal: median pause <= 2 s -> {'met' if warm <= 2.0 else 'NOT met'} ({warm:.2f} s)")


if __name__ == "__main__":
    main()
