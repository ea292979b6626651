"""With a long queue, which waiting pods does the real kube-scheduler give freed GPUs to?

The second mechanism check behind the gap between the real kube-scheduler and dlsched's FIFO
`kube-default` (the first: benchmarks/k8s_queue_order.py). kube-scheduler orders its active queue
by each pod's last attempt, and a room-freeing event sends every waiting pod back to it. If the
next event comes before it has tried every waiting pod since the last one, the pods it has not
reached keep their older stamp and move ahead of the ones it just tried: the queue rotates, and
freed room goes to pods far back in creation order. Whether that happens depends on the queue's
length times the cost of one attempt against the time between events, so this script sets both:

- `--nodes` kwok nodes of 8 GPUs are filled by 8-pod jobs (one a node);
- `--queue` one-pod jobs are created one after another (all wait: no room);
- one running job's 8 pods are deleted one at a time, `--gap` seconds apart (each gap in turn);
- reported: the creation ranks (0 = oldest) of the waiting pods that got the 8 GPUs. A FIFO gives
  0..7 every time.

    python benchmarks/k8s_queue_rotation.py --queue 400 --gaps 1.1,5 --trials 2
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
    ap.add_argument("--queue", type=int, default=400, help="waiting one-pod jobs (default 400)")
    ap.add_argument("--gaps", default="1.1,5", help="seconds between two deletes, comma-separated (default 1.1,5)")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--bin-dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    gaps = [float(g) for g in args.gaps.split(",")]

    out: dict = {"queue": args.queue, "nodes": args.nodes, "runs": []}
    with pod_lab("qrot", args.nodes, args.bin_dir) as lab:
        k = 0
        for trial in range(args.trials):
            for gap in gaps:
                k += 1
                running = [lab.pods_of(8, f"r{k}n{i}") for i in range(args.nodes)]
                for ms in running:
                    lab.api.map(lab.api.create, ms)
                lab.wait(lambda: len(lab.bound_names(f"r{k}n")) == 8 * args.nodes, 120)
                waiting = [lab.pods_of(1, f"w{k}q{i:04d}")[0] for i in range(args.queue)]
                for m in waiting:  # one after another: kube-scheduler's queue holds them in creation order
                    lab.api.create(m)
                time.sleep(5.0)  # every waiting pod tried and failed once, its backoff over
                for m in running[0]:
                    lab.delete([m])
                    time.sleep(gap)
                t_end = time.monotonic() + 30
                while time.monotonic() < t_end and len(lab.bound_names(f"w{k}q")) < 8:
                    time.sleep(0.1)
                time.sleep(1.0)
                ranks = sorted(int(n.split("q")[1][:4]) for n in lab.bound_names(f"w{k}q"))
                out["runs"].append({"trial": trial, "gap_s": gap, "ranks_bound": ranks,
                                    "all_to_oldest_8": ranks == list(range(8))})
                print(out["runs"][-1], file=sys.stderr)
                lab.clear([m for ms in running[1:] for m in ms] + waiting)
    report(out, args.out)


if __name__ == "__main__":
    main()
