"""Simulator and policy speed: prints the figures that BENCHMARKS.md records.

    python benchmarks/run_benchmarks.py                 # everything (several minutes)
    python benchmarks/run_benchmarks.py --only philly   # one part: philly | scaling | round

1. philly:  simulated wall time of each policy over the full Philly trace (82,247 jobs) on the
            `philly` preset (640 GPUs).
2. scaling: Tiresias and FIFO at the first 10k/20k/40k/80k Philly jobs; ratios of successive
            sizes, measured in the same run (cost should grow about linearly: <= 2.2x for 2x).
3. round:   latency of single scheduling rounds on a 10,000-GPU cluster while >= 1,800 jobs run
            or wait (about 1,000 of each for FIFO), measured inside a real simulation (each round sees a changed state),
            p50/p99 per policy.

Absolute times on a shared 2-core machine are noisy; compare ratios measured in one run.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from dlsched.core import Cluster, JobSpec, Policy
from dlsched.policies.registry import make_policy
from dlsched.presets import load_cluster
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.throughput.duration_only import DurationOnly
from dlsched.traces import load_trace
from dlsched.paths import traces_dir


def philly_jobs(limit: int | None = None) -> list[JobSpec]:
    root = traces_dir()
    if root is None:
        raise SystemExit("the Philly benchmark needs ../shared/traces (set DLSCHED_TRACES)")
    return load_trace(root / "philly-pollux" / "philly.csv", "philly", limit=limit).jobs


def timed_run(jobs: list[JobSpec], cluster: Cluster, name: str) -> tuple[float, dict]:
    policy = make_policy(name)
    start = time.perf_counter()
    result = simulate(jobs, cluster, policy, DurationOnly(), SimConfig())
    return time.perf_counter() - start, result.summary


def bench_philly(policies: list[str]) -> None:
    t0 = time.perf_counter()
    jobs = philly_jobs()
    load = time.perf_counter() - t0
    cluster = load_cluster("philly")
    print(f"\n## Full Philly trace: {len(jobs)} jobs on {cluster.describe()} (trace load {load:.1f} s)")
    print("| policy | wall s | finished | mean JCT h | policy calls |")
    print("|---|---|---|---|---|")
    for name in policies:
        wall, s = timed_run(jobs, cluster, name)
        print(f"| {name} | {wall:.1f} | {s['finished']} | {s['mean_jct'] / 3600:.2f} | {s['policy_calls']} |")


def bench_scaling(policies: list[str]) -> None:
    jobs = philly_jobs()
    cluster = load_cluster("philly")
    sizes = [10_000, 20_000, 40_000, 80_000]
    print("\n## Cost growth on Philly prefixes (wall seconds; ratio to the previous size)")
    print("| policy | " + " | ".join(f"{n // 1000}k" for n in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for name in policies:
        walls = []
        for n in sizes:
            wall, _ = timed_run(jobs[:n], cluster, name)
            walls.append(wall)
        cells = [f"{walls[0]:.2f}"] + [f"{w:.2f} ({w / p:.2f}x)" for p, w in zip(walls, walls[1:])]
        print(f"| {name} | " + " | ".join(cells) + " |")


class RoundTimer(Policy):
    """Wraps a policy and times each `schedule` call, with the queue sizes it saw."""

    def __init__(self, inner: Policy):
        self.inner = inner
        self.name, self.on_events, self.interval, self.oracle = inner.name, inner.on_events, inner.interval, inner.oracle
        self.samples: list[tuple[float, int, int]] = []

    def reset(self, cluster, seed):
        self.inner.reset(cluster, seed)

    def schedule(self, snap):
        start = time.perf_counter()
        plan = self.inner.schedule(snap)
        self.samples.append((time.perf_counter() - start, len(snap.running), len(snap.pending)))
        return plan


def round_workload(seed: int = 0) -> list[JobSpec]:
    """~1,000 jobs fill 10,000 GPUs, 1,000 more wait, then a steady stream keeps both queues full."""
    rng = np.random.default_rng(seed)
    jobs = []
    sizes = rng.choice([1, 2, 4, 8, 16, 32], size=4000, p=[0.3, 0.15, 0.2, 0.2, 0.1, 0.05])
    for i, g in enumerate(sizes):
        submit = 0.0 if i < 2200 else float(i - 2200) * 2.0
        jobs.append(JobSpec(job_id=f"r{i}", submit_time=submit, iterations=float(rng.uniform(600, 7200)),
                            duration=None, num_workers=int(g), arch="single" if g == 1 else "allreduce",
                            worker_demand=(1.0, 4.0, 16.0)))
    return jobs


def bench_round(policies: list[str]) -> None:
    cluster = Cluster.homogeneous("bench-10k", nodes=1250, gpus=8, cpus=64, mem=512, nodes_per_rack=50)
    jobs = round_workload()
    print(f"\n## One scheduling round at {cluster.total_gpus} GPUs with >= 1,800 jobs running or waiting")
    print("| policy | rounds | mean running | mean pending | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|---|---|")
    for name in policies:
        timer = RoundTimer(make_policy(name))
        simulate(jobs, cluster, timer, DurationOnly(), SimConfig(max_time=3000.0))
        # rounds with ~2,000 jobs in the system (preemptive policies run more, smaller jobs, so the
        # running/pending split differs per policy: the table shows the mix each one saw)
        s = np.array([x for x in timer.samples if x[1] + x[2] >= 1800])
        if len(s) == 0:
            print(f"| {name} | 0 | - | - | - | - | - |")
            continue
        ms = s[:, 0] * 1000
        print(f"| {name} | {len(s)} | {s[:, 1].mean():.0f} | {s[:, 2].mean():.0f} | "
              f"{np.percentile(ms, 50):.2f} | {np.percentile(ms, 99):.2f} | {ms.max():.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["philly", "scaling", "round"], help="run one part")
    ap.add_argument("--policies", default="fifo,srtf,drf,tiresias,optimus,kube-default")
    ap.add_argument("--scaling-policies", default="tiresias,fifo")
    args = ap.parse_args()
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    print(f"machine: {platform.machine()}, {platform.python_implementation()} {platform.python_version()}, "
          f"{__import__('os').cpu_count()} cores")
    if args.only in (None, "round"):
        bench_round(policies)
    if args.only in (None, "philly"):
        bench_philly(policies)
    if args.only in (None, "scaling"):
        bench_scaling([p.strip() for p in args.scaling_policies.split(",")])


if __name__ == "__main__":
    main()
