"""`dlsched replay` against the real kube-scheduler, but each finished job's pods deleted one at a time.

A measurement, not the replay's behaviour: it asks how much of the gap between the real
kube-scheduler and dlsched's `kube-default` imitation comes from the pods of a job that ends
leaving together (see benchmarks/k8s_queue_order.py for the mechanism). Every multi-pod delete of
the replay is issued pod by pod, `--gap` wall seconds apart (longer than kube-scheduler's 1 s pod
backoff in a replay), so each freed GPU reaches kube-scheduler as an event of its own after every
waiting pod's backoff has ended. Arguments after `--` go to `dlsched replay` unchanged, e.g.

    python benchmarks/k8s_replay_one_by_one.py -- --trace ../shared/traces/elasticflow-itp/elasticflow/cluster04.csv \\
        --limit 500 --load 0.8 --rigid --speedup 3600 --policies kube-scheduler --timeout 7200 --out fid6

(47 minutes on the 2-core machine for that slice: 2,002 pods, each delete 1.1 s apart.) With
`--pass` each delete also waits for kube-scheduler's pass over the waiting pods, so every freed GPU
meets the queue as it would in real time with the pods of a job ending minutes apart.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gap", type=float, default=1.1, help="wall seconds between two deletes (default 1.1)")
    ap.add_argument("--pass", dest="full_pass", action="store_true",
                    help="after each delete's gap, also wait until kube-scheduler has tried every waiting pod "
                         "(its active and backoff queues empty, as the replay waits between rounds)")
    ap.add_argument("replay_args", nargs=argparse.REMAINDER, help="arguments of `dlsched replay`, after --")
    args = ap.parse_args()

    from dlsched.cli import app
    from dlsched.k8s import controlplane
    from dlsched.k8s.default_scheduler import pass_over
    from dlsched.live.backends import k8s_api

    whole = k8s_api.KubeApi.delete_pods
    planes: list = []  # the replay's control plane, for its kube-scheduler queue
    enter = controlplane.ControlPlane.__enter__

    def remember(self):
        planes.append(self)
        return enter(self)

    controlplane.ControlPlane.__enter__ = remember

    def one_by_one(self, pods, grace):
        pods = list(pods)
        if len(pods) <= 1:
            return whole(self, pods, grace)
        left = []
        for p in pods:
            left += whole(self, [p], grace)
            time.sleep(args.gap)
            if args.full_pass and planes:
                pass_over(planes[-1].scheduler_queue)
        return left

    k8s_api.KubeApi.delete_pods = one_by_one
    rest = [a for a in args.replay_args if a != "--"]
    sys.argv = ["dlsched", "replay", *rest]
    app()


if __name__ == "__main__":
    main()
