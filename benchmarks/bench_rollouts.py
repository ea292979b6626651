"""RL rollout throughput: environment steps per second that rollout workers play with a fixed
network, with 1 worker (in this process: the serial learner's case) and with N Ray actors on a
private local Ray, side by side in one run, on the same episodes.

The network is the shipped DL2 model (its actions, and so its episodes, are those of a trained
agent), on DL2's default training workloads (60 jobs, J = 20). Each setting first warms its
workers up (built, then one episode each, discarded), then plays `--episodes` episodes with every
worker kept busy: the steady-state figure. The figure including start-up counts from before the
pool exists (Ray start, actor and environment construction, the warm-up episodes) to the last
episode. The goal (issue 16) is at least 1.7x with 2 workers on a 2-core machine.

    python benchmarks/bench_rollouts.py [--episodes 24] [--workers 2] [--backend ray|process] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

from dlsched.paths import traces_dir
from dlsched.policies.dl2 import SHIPPED_MODEL, DL2Policy
from dlsched.rl.dl2_config import DL2TrainConfig, worker_spec
from dlsched.models.model_io import load_model
from dlsched.rl.pools import open_pool
from dlsched.rl.rollouts import Task, weights_of


def measure(backend: str, workers: int, episodes: int, weights: dict, cfg: DL2TrainConfig) -> dict:
    """Steady-state and start-up-inclusive throughput of `workers` workers on `backend`."""
    started = time.perf_counter()
    seeds = cfg.seeds("train", episodes + workers)  # the timed episodes first: the same in every setting
    with open_pool(worker_spec(cfg, DL2Policy, traces_dir()), backend, workers) as pool:
        pool.warm()
        for i in range(workers):  # one episode each: imports, caches and the first simulation paid
            pool.submit(("warm", i), Task("episode", weights, seeds[episodes + i], rng_seed=[1, i]))
        warm_steps = sum(pool.next_result()[1].steps for _ in range(workers))
        t0 = time.perf_counter()
        for i in range(episodes):
            pool.submit(("ep", i), Task("episode", weights, seeds[i], rng_seed=[0, i]))
        steps = sum(pool.next_result()[1].steps for _ in range(episodes))
        steady = time.perf_counter() - t0
        total = time.perf_counter() - started
    return {"backend": backend, "workers": workers, "episodes": episodes, "steps": steps,
            "steady_s": round(steady, 3), "steady_steps_per_s": round(steps / steady, 1),
            "total_s": round(total, 3), "total_steps_per_s": round((steps + warm_steps) / total, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=24, help="timed episodes per setting (after the warm-up)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--backend", default="ray", choices=["ray", "process"])
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    net, _ = load_model(SHIPPED_MODEL)
    cfg = DL2TrainConfig()
    one = measure("inline", 1, args.episodes, weights_of(net), cfg)
    many = measure(args.backend, args.workers, args.episodes, weights_of(net), cfg)
    assert one["steps"] == many["steps"], "the same episodes must give the same steps"
    print(f"{'setting':<18} {'steps':>7} {'steady s':>9} {'steps/s':>9} {'total s':>8} {'steps/s incl. start-up':>23}")
    for r in (one, many):
        name = f"{r['workers']} x {r['backend']}"
        print(f"{name:<18} {r['steps']:>7} {r['steady_s']:>9.2f} {r['steady_steps_per_s']:>9.1f} {r['total_s']:>8.2f} "
              f"{r['total_steps_per_s']:>23.1f}")
    ratio = many["steady_steps_per_s"] / one["steady_steps_per_s"]
    ratio_total = many["total_steps_per_s"] / one["total_steps_per_s"]
    print(f"ratio {args.workers} workers / 1: {ratio:.2f}x steady state, {ratio_total:.2f}x including start-up "
          f"({os.cpu_count()} cores, {platform.python_version()})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"one": one, "many": many, "ratio_steady": round(ratio, 3), "ratio_total": round(ratio_total, 3),
                       "cores": os.cpu_count()}, f, indent=1)


if __name__ == "__main__":
    main()
