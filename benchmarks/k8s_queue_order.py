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
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--bin-dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    from lightkube.resources.core_v1 import Pod

    from dlsched.core.job import JobSpec
    from dlsched.k8s.controlplane import ControlPlane
    from dlsched.k8s.default_scheduler import job_pods
    from dlsched.live.backends.k8s_api import KubeApi, load_config
    from dlsched.live.backends.k8s_watch import Reflector, pod_info, warm_decoders

    pool, ns = "qorder", "qorder"
    spec = JobSpec(job_id="j", submit_time=0, iterations=1, num_workers=8)
    results: dict[str, list[dict]] = {"at_once": [], "one_by_one": []}
    with ControlPlane(workdir=Path(tempfile.mkdtemp(prefix="dlsched-qorder-")), bin_dir=args.bin_dir,
                      with_scheduler=True, scheduler_backoff_s=1) as cp:
        cp.add_nodes(args.nodes, gpus_per_node=8, pool=pool, cpus=64, mem="512Gi", prefix=f"{pool}-")
        cp.ensure_namespace(ns)
        warm_decoders()
        api = KubeApi(load_config(cp.kubeconfig(), None), ns, workers=16)
        cond = threading.Condition(threading.RLock())
        watch = Reflector("qorder", api.watch_client, Pod, cond=cond, namespace=ns,
                          key=lambda o: o.metadata.name, transform=pod_info).start()
        watch.synced.wait(30)

        def bound(prefix: str) -> int:
            with cond:
                return sum(1 for n, p in watch.items.items() if n.startswith(prefix) and p.node)

        def wait(pred, timeout=60.0) -> None:
            with cond:
                cond.wait_for(pred, timeout=timeout)

        def quiet(s: float = 1.5) -> None:
            time.sleep(s)  # longer than the 1 s backoff: every waiting pod's backoff has ended

        k = 0
        for trial in range(args.trials):
            for mode in results:
                k += 1
                run = [f"rj{k}{c}" for c in "abcdefghijklmnop"[:args.nodes]]
                pods = {}
                for i, name in enumerate(run):  # fill every node, one job a node
                    pods[name] = job_pods(spec, 0, ns, pool)
                    for p in pods[name]:
                        p["metadata"]["name"] = p["metadata"]["name"].replace("rj0", name)
                    api.map(api.create, pods[name])
                    wait(lambda n=name: bound(n + "-") == 8)
                waiting = {}
                for tag in ("old", "new"):
                    waiting[tag] = job_pods(spec, 0, ns, pool)
                    for p in waiting[tag]:
                        p["metadata"]["name"] = p["metadata"]["name"].replace("rj0", f"q{k}{tag}")
                    api.map(api.create, waiting[tag])
                    quiet()  # OLD is tried (and fails) before NEW exists, as a trace's arrivals
                gone = [(p["metadata"]["name"], "") for p in pods[run[0]]]
                if mode == "at_once":
                    api.delete_pods(gone, 0)
                else:
                    for g in gone:
                        api.delete_pods([g], 0)
                        quiet()
                wait(lambda: bound(f"q{k}old") + bound(f"q{k}new") == 8, 30)
                quiet()
                got = {"old": bound(f"q{k}old"), "new": bound(f"q{k}new")}
                results[mode].append(got)
                print(trial, mode, got, file=sys.stderr)
                api.delete_pods([(p["metadata"]["name"], "") for name in run[1:] for p in pods[name]]
                                + [(p["metadata"]["name"], "") for t in waiting for p in waiting[t]], 0)
                with cond:
                    cond.wait_for(lambda: not watch.items, timeout=60)
        watch.stop()
        api.close()
    out = {mode: {"trials": len(r), "freed_gpus_to_old_mean": sum(x["old"] for x in r) / len(r),
                  "freed_gpus_to_new_mean": sum(x["new"] for x in r) / len(r),
                  "trials_all_to_old": sum(x["old"] == 8 for x in r)} for mode, r in results.items()}
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
