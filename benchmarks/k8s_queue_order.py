"""Does the real kube-scheduler give freed room to the oldest waiting pods? A mechanism check.

Why this exists: dlsched's `kube-default` imitates kube-scheduler as a pod-by-pod FIFO (pods in
creation order, each bound where it fits). In a 500-job replay the real kube-scheduler started
jobs out of submission order tens of thousands of times where the imitation never did. This
script isolates the one situation that differs, on a real API server with kwok nodes and the real
kube-scheduler (default profile, pod backoff 1 s):

- `--nodes` nodes of 8 GPUs are filled by jobs of 8 one-GPU pods (one job per node), then two
  more such jobs are created, OLD then NEW (all 16 pods wait: no room);
- one running job ends: its 8 pods are deleted either all at once (as a job controller does,
  and as pods of a job that ends together leave) or one by one, each after kube-scheduler has
  settled and every waiting pod's backoff has expired;
- a pod-by-pod FIFO puts all 8 freed GPUs to OLD's pods. The script counts how many went to OLD
  and how many to NEW, per mode, over `--trials` trials.

    python benchmarks/k8s_queue_order.py --trials 10
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from k8s_lab import pod_lab, report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--bin-dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    def quiet(s: float = 1.5) -> None:
        time.sleep(s)  # longer than the 1 s backoff: every waiting pod's backoff has ended

    results: dict[str, list[dict]] = {"at_once": [], "one_by_one": []}
    with pod_lab("qorder", args.nodes, args.bin_dir) as lab:
        k = 0
        for trial in range(args.trials):
            for mode in results:
                k += 1
                names = [f"rj{k}{c}-" for c in "abcdefghijklmnop"[:args.nodes]]
                running = [lab.pods_of(8, n[:-1]) for n in names]
                for n, ms in zip(names, running):  # fill every node, one job a node
                    lab.api.map(lab.api.create, ms)
                    lab.wait(lambda n=n: len(lab.bound_names(n)) == 8)
                waiting = {}
                for tag in ("old", "new"):
                    waiting[tag] = lab.pods_of(8, f"q{k}{tag}")
                    lab.api.map(lab.api.create, waiting[tag])
                    quiet()  # OLD is tried (and fails) before NEW exists, as a trace's arrivals
                if mode == "at_once":
                    lab.delete(running[0])
                else:
                    for m in running[0]:
                        lab.delete([m])
                        quiet()
                lab.wait(lambda: len(lab.bound_names(f"q{k}")) == 8, 30)
                quiet()
                got = {tag: len(lab.bound_names(f"q{k}{tag}")) for tag in waiting}
                results[mode].append(got)
                print(trial, mode, got, file=sys.stderr)
                lab.clear([m for ms in running[1:] for m in ms] + [m for t in waiting for m in waiting[t]])
    out = {mode: {"trials": len(r), "freed_gpus_to_old_mean": sum(x["old"] for x in r) / len(r),
                  "freed_gpus_to_new_mean": sum(x["new"] for x in r) / len(r),
                  "trials_all_to_old": sum(x["old"] == 8 for x in r)} for mode, r in results.items()}
    report(out, args.out)


if __name__ == "__main__":
    main()
