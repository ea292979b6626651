"""Does a DL2 network depend on how long jobs have been in the system? Run one model on one trace
with state row 1 (slots in the system / 10) saturated at each cap (`DL2Net.stay_cap`; "none": as
trained), nothing else changed, next to DRF; prints the mean JCT of each.

    python benchmarks/dl2/stay_cap_probe.py --trace ../shared/traces/elasticflow-itp/elasticflow/cluster03.csv \\
        --cluster benchmarks/dl2/itp-22.yaml --caps none,5,3,0

(docs/DL2.md, "cluster03 fixed": 13.18 / 11.25 / 10.97 / 10.79 h with the issue 14 ITP model, DRF 12.07 h.)
Default model: the ITP model `dl2` ships for all-reduce jobs. Each run is one simulation on one core.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from dlsched.paths import traces_dir
from dlsched.policies.dl2 import SHIPPED_TRACE_MODEL, DL2Policy
from dlsched.policies.registry import make_policy
from dlsched.presets import load_cluster
from dlsched.models.model_io import load_model
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.throughput.registry import default_throughput
from dlsched.traces.registry import load_trace


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=SHIPPED_TRACE_MODEL)
    ap.add_argument("--trace", required=True)
    ap.add_argument("--cluster", required=True, help="preset name or cluster YAML")
    ap.add_argument("--caps", default="none,5,3,0", help="comma-separated caps; none: row 1 as trained")
    ap.add_argument("--limit", type=int, default=None, help="first N jobs of the trace")
    args = ap.parse_args()
    torch.set_num_threads(1)
    jobs = load_trace(args.trace).jobs[: args.limit]
    cluster, tp = load_cluster(args.cluster), default_throughput(traces_dir())
    drf = simulate(jobs, cluster, make_policy("drf"), tp, SimConfig()).summary["mean_jct"]
    print(f"drf: mean JCT {drf / 3600:.3f} h", flush=True)
    for cap in args.caps.split(","):
        net, _ = load_model(args.model)
        net.stay_cap = None if cap == "none" else float(cap)
        s = simulate(jobs, cluster, DL2Policy(net), tp, SimConfig()).summary
        print(f"dl2, stay_cap {cap}: mean JCT {s['mean_jct'] / 3600:.3f} h ({s['mean_jct'] / drf:.3f} x DRF)", flush=True)


if __name__ == "__main__":
    main()
