"""Faults on Kubernetes, the long run: many small sim-mode jobs through the live controller on kwok
nodes (two controllers competing for the Lease) while a seeded injector kills the leader (SIGKILL),
turns nodes NotReady and back, deletes Running pods behind dlsched's back and restarts
kube-apiserver (the injector and the checks: `tests/k8s_chaos.py`; a small run of it is
`tests/test_k8s_chaos.py`, in CI).

Starts a control plane of its own (the API server restarts would disturb any other user of a
shared one), prints each fault as it lands and, at the end, the counts BENCHMARKS.md and
docs/KUBERNETES.md record: faults by kind (and how long a takeover, an API server restart and
clearing a NotReady node took), jobs finished exactly once, jobs failed with a reason, jobs that
ran twice (trained to the end by two attempts, or two attempts' pods Running at once: must be 0),
pods left on NotReady nodes (must be 0), wall time. `--json` also writes them, with every fault.
Exit code 1 when any promise was broken.

    python benchmarks/k8s_faults.py [--jobs 60] [--faults 30] [--seed 0] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/k8s_chaos.py is the harness

from tests.k8s_chaos import K8sChaosConfig, K8sFault, run_k8s_chaos  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=60, help="jobs submitted (default 60)")
    ap.add_argument("--faults", type=int, default=30, help="faults to inject (default 30)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--nodes", type=int, default=4, help="kwok nodes of the pool (default 4, 4 GPUs each)")
    ap.add_argument("--min-steps", type=int, default=150)
    ap.add_argument("--max-steps", type=int, default=400)
    ap.add_argument("--arrivals", type=float, default=200.0, help="jobs arrive over this many seconds (default 200)")
    ap.add_argument("--gap", type=float, nargs=2, default=(1.0, 3.0), metavar=("MIN", "MAX"),
                    help="seconds between two faults (default 1 3)")
    ap.add_argument("--policy", default="drf")
    ap.add_argument("--timeout", type=float, default=1800, help="give up after this many seconds")
    ap.add_argument("--json", type=Path, help="also write the summary here")
    ap.add_argument("--work", type=Path, help="keep the control plane's and the controllers' folders here")
    args = ap.parse_args()
    if args.jobs < 1 or args.faults < 0 or not 0 < args.min_steps <= args.max_steps:
        ap.error("need --jobs >= 1, --faults >= 0 and 0 < --min-steps <= --max-steps")

    from dlsched.k8s.controlplane import ControlPlane, find_binaries

    bins = find_binaries()
    if bins is None:
        sys.exit("no Kubernetes binaries: run `bash deploy/k8s/bins.sh` or set DLSCHED_K8S_BIN")
    cfg = K8sChaosConfig(jobs=args.jobs, faults=args.faults, seed=args.seed, nodes=args.nodes,
                         steps=(args.min_steps, args.max_steps), arrivals_s=args.arrivals, gap_s=tuple(args.gap),
                         policy=args.policy, timeout_s=args.timeout)
    work = args.work or Path(tempfile.mkdtemp(prefix="dlsched-k8s-faults-"))
    t0 = time.time()

    def show(f: K8sFault) -> None:
        took = f"{f.seconds:6.2f} s" if f.seconds is not None else ""
        print(f"{time.time() - t0:8.1f} s  {f.kind:<18} {f.target:<40} {took:>9}  {f.outcome}", flush=True)

    with ControlPlane(workdir=work / "control-plane", bin_dir=bins) as cp:
        report = run_k8s_chaos(cp, work / "run", cfg, progress=show)
    summary = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_implementation()} "
                          f"{platform.python_version()}",
               "date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv), "work": str(work),
               "wall_s": round(time.time() - t0, 1), **report.summary()}
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps({**summary, "config": asdict(cfg),
                                         "faults": [{**asdict(f), "t": round(f.time - t0, 2)} for f in report.faults]},
                                        indent=1, default=str))
    if args.work is None and not summary["problems"]:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if summary["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
