"""Scheduler overhead on the live path: how long a controller round and a policy decision take.

The controller runs with the dry backend (no training; steps grow with a fake clock) so that only
the scheduling path is timed: reading the store, observing, building the snapshot, the policy's
decision, validating the plan, diffing and writing back. Policies are asked on every event, and
the elastic ones every 10 s; the fake clock moves 2 s per round.

    python benchmarks/bench_live_decision.py [--jobs 50 200] [--policies fifo,drf,optimus]

Prints, per policy and queue size, the median and p95 of the policy's decision time, of a whole
controller round with a decision in it, and the median round without one (observe, publish).
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from dlsched.core import Cluster
from dlsched.live.controller import Controller
from dlsched.live.backends.dry import DryBackend, FakeClock
from dlsched.live.spec import TrainJob
from dlsched.live.store import Store
from dlsched.policies.registry import make_policy

OPTIONS = {"optimus": {"interval": 10.0}, "qos": {"interval": 10.0}, "dl2": {"slot_seconds": 10.0}}


def run(policy_name: str, jobs: int, rounds: int = 150) -> dict:
    clock = FakeClock()
    cluster = Cluster.homogeneous("bench", nodes=16, gpus=4, cpus=32, mem=128)
    backend = DryBackend(cluster, clock, rate_per_worker=0.5)
    with tempfile.TemporaryDirectory() as d:
        store = Store(f"sqlite:///{Path(d) / 'db.sqlite'}")
        ctl = Controller(store, backend, make_policy(policy_name, **OPTIONS.get(policy_name, {})),
                         work_dir=Path(d), clock=clock)
        rng = np.random.default_rng(0)
        models = ["mlp", "cnn", "transformer"]
        for i in range(jobs):
            w = int(rng.integers(1, 5))
            store.add(TrainJob(model=models[i % 3], steps=int(rng.integers(200, 2000)), workers=w,
                               min_workers=1, max_workers=2 * w), now=clock())
        round_times, quiet_times = [], []
        for _ in range(rounds):
            clock.advance(2.0)
            before = ctl.decisions
            t0 = time.perf_counter()
            ctl.step()
            (round_times if ctl.decisions > before else quiet_times).append(time.perf_counter() - t0)
        running = sum(1 for j in ctl.jobs.values() if j.status.name == "RUNNING")
        store.close()
    dec = np.array(ctl.decision_times) * 1000
    rnd = np.array(round_times) * 1000
    quiet = np.array(quiet_times or [float("nan")]) * 1000
    return {"policy": policy_name, "jobs": jobs, "decisions": len(dec),
            "decision_ms_p50": float(np.median(dec)), "decision_ms_p95": float(np.percentile(dec, 95)),
            "round_ms_p50": float(np.median(rnd)), "round_ms_p95": float(np.percentile(rnd, 95)),
            "quiet_ms_p50": float(np.median(quiet)), "running": running}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, nargs="+", default=[50, 200])
    ap.add_argument("--policies", default="fifo,drf,tiresias,optimus,dl2")
    args = ap.parse_args()
    print(f"machine: {platform.machine()} {platform.processor() or ''}, Python {platform.python_version()}")
    print("| policy | jobs | running at end | decisions | decision ms p50 / p95 | round with a decision ms p50 / p95 "
          "| round without ms p50 |")
    print("|---|---|---|---|---|---|---|")
    for name in args.policies.split(","):
        for n in args.jobs:
            r = run(name.strip(), n)
            print(f"| {r['policy']} | {r['jobs']} | {r['running']} | {r['decisions']} | {r['decision_ms_p50']:.2f} / "
                  f"{r['decision_ms_p95']:.2f} | {r['round_ms_p50']:.2f} / {r['round_ms_p95']:.2f} "
                  f"| {r['quiet_ms_p50']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
