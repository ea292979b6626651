"""Credit assignment, measured: train DL2 with its slot reward and with the per-job reward on the
same budget, seeds and workloads, and print the two learning curves side by side.

DL2 credits every action of a slot with the slot's reward; `reward: job` credits an action with the
progress of the job it touched (docs/DL2.md). The two runs differ in that key only; each writes
its own folder (OUT/slot, OUT/job) with model.pt and validation.csv, whose rows give, per
validation point, the validation and train JCT, the seconds and the environment steps so far.
Re-running with the same OUT resumes or just reprints finished runs.

    python benchmarks/dl2/compare_rewards.py --config benchmarks/dl2/teacher_optimus.yaml --out rewards [--workers 2]
    python benchmarks/dl2/compare_rewards.py --tiny --out /tmp/rewards        # a minute: proves the command works
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from dlsched.config import read_yaml_model
from dlsched.paths import traces_dir
from dlsched.policies.dl2 import DL2Policy
from dlsched.policies.registry import make_policy
from dlsched.rl.train_dl2 import DL2TrainConfig, train_dl2

TINY = dict(num_jobs=8, window=4, warmup_traces=2, warmup_epochs=3, rl_episodes=8, validate_every=2,
            validation_traces=2, batch=16, replay=128)
VARIANTS = ("slot", "job")


def curve(folder: Path) -> list[dict]:
    with open(folder / "validation.csv") as f:
        return list(csv.DictReader(f))


def fmt(row: dict | None, slot_s: float) -> str:
    if row is None:
        return f"{'':>30}"
    mean = row.get("train_jct_mean_s") or "nan"
    return (f"{float(row['validation_jct_s']) / slot_s:>7.2f} {float(mean) / slot_s:>7.2f} "
            f"{row.get('env_steps') or '':>8} {row.get('seconds') or '':>6}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, help="DL2TrainConfig YAML shared by both runs (its `reward` is ignored)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workers", type=int, help="rollout workers (default: the config's)")
    ap.add_argument("--rl-episodes", type=int)
    ap.add_argument("--tiny", action="store_true", help="a tiny budget and workloads, to check the command")
    args = ap.parse_args()
    base = read_yaml_model(args.config, DL2TrainConfig, "DL2 training config").model_dump() if args.config else {}
    if args.tiny:
        base.update(TINY)
    if args.workers is not None:
        base["rollout_workers"] = args.workers
    if args.rl_episodes is not None:
        base["rl_episodes"] = args.rl_episodes
    roles = dict(teacher=lambda: make_policy(cfg.teacher), student=DL2Policy, traces=traces_dir())
    for reward in VARIANTS:
        cfg = DL2TrainConfig(**{**base, "reward": reward})
        out = args.out / reward
        print(f"training reward={reward} in {out} ...", flush=True)
        train_dl2(cfg, out, **roles, resume=(out / "checkpoint.pt").exists())
    slot_s = cfg.slot_seconds
    curves = {r: {int(row["episode"]): row for row in curve(args.out / r)} for r in VARIANTS}
    print(f"\nlearning curves (JCT in {slot_s:.0f}-s slots; val: validation mean JCT, train: mean train JCT since the "
          "previous point, steps: env steps so far, s: seconds so far)")
    head = f"{'val':>7} {'train':>7} {'steps':>8} {'s':>6}"
    print(f"{'':>8} | {'reward: slot (DL2)':^30} | {'reward: job':^30}")
    print(f"{'episode':>8} | {head} | {head}")
    for ep in sorted(set(curves["slot"]) | set(curves["job"])):
        print(f"{ep:>8} | {fmt(curves['slot'].get(ep), slot_s)} | {fmt(curves['job'].get(ep), slot_s)}")
    best = {r: min(float(row["validation_jct_s"]) for row in curves[r].values()) / slot_s for r in VARIANTS}
    print(f"best validation: slot {best['slot']:.2f}, job {best['job']:.2f} slots")


if __name__ == "__main__":
    main()
