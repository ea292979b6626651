"""How long the project's own Kubernetes control plane takes to build (warm) and to start.

Starts etcd, kube-apiserver and kwok on 127.0.0.1 (`dlsched.k8s.controlplane.ControlPlane`)
`--runs` times, adds `--nodes` kwok GPU nodes each time and waits until they are Ready, and
prints the median seconds per component, the resident memory after start, and the time of a
warm `bash deploy/k8s/bins.sh` (binaries already built: a no-op). The cold build is measured by
`/usr/bin/time -v bash deploy/k8s/bins.sh` on an empty cache (BENCHMARKS.md).

    python benchmarks/k8s_control_plane.py [--runs 3] [--nodes 16]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="control-plane starts to take the median of")
    ap.add_argument("--nodes", type=int, default=16, help="kwok fake GPU nodes added at each start")
    args = ap.parse_args()
    from dlsched.k8s.controlplane import ControlPlane, build_binaries

    t0 = time.perf_counter()
    bins = build_binaries()
    warm = time.perf_counter() - t0
    version = subprocess.run([str(bins / "kube-apiserver"), "--version"], capture_output=True, text=True).stdout.strip()
    runs: list[dict[str, float]] = []
    rss: dict[str, int] = {}
    for _ in range(args.runs):
        t0 = time.perf_counter()
        with ControlPlane(bin_dir=bins) as cp:
            cp.add_nodes(args.nodes)
            total = time.perf_counter() - t0
            runs.append({**cp.start_seconds, "total": total})
            rss = cp.memory_rss()
    print(f"binaries: {bins} ({version}); warm bins.sh {warm:.2f} s")
    print(f"start, median of {args.runs} ({args.nodes} nodes):")
    for key in runs[0]:
        print(f"  {key:<16} {statistics.median(r[key] for r in runs):7.2f} s")
    print("resident memory after start: " + ", ".join(f"{k} {v / 2**20:.0f} MiB" for k, v in rss.items())
          + f"; {sum(rss.values()) / 2**20:.0f} MiB in all")


if __name__ == "__main__":
    main()
