"""Decision-to-all-bound latency of the Kubernetes backend on a real local control plane.

Starts its own control plane (etcd, kube-apiserver, kwok; `dlsched.k8s.controlplane`, all on
127.0.0.1) with `--nodes` kwok fake GPU nodes, then hands `KubernetesBackend` (sim mode) one
decision per gang, `--gangs` times: a gang of `--min-pods`..`--max-pods` worker pods (one GPU
each) spread over nodes with room, as a policy's plan would. For each gang it measures

  bound:   from the `apply` call (the decision handed over) to its return, when every pod of the
           gang has been created (`schedulerName: dlsched`) and bound through the Binding
           subresource: the gang is placed on the API;
  running: from the same instant until the backend's pod watch sees every pod Running (kwok plays
           the kubelet here, so this adds the watch and kwok's latency, not a container start).

Gangs stay up (the cluster holds them all), so later decisions see a fuller cluster, as in
a real run; at the end one batched stop of every gang is timed too. Prints p50/p99/max per
measure and writes the samples as JSON with `--out`.

    python benchmarks/k8s_bind_latency.py [--nodes 64] [--gangs 50] [--min-pods 4] [--max-pods 8]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summary(name: str, xs: list[float]) -> str:
    ms = [x * 1000 for x in xs]
    return (f"{name:<8} n={len(ms):3d}  p50 {percentile(ms, 50):7.1f} ms  p99 {percentile(ms, 99):7.1f} ms  "
            f"max {max(ms):7.1f} ms  mean {statistics.fmean(ms):7.1f} ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--nodes", type=int, default=64, help="kwok fake nodes (default 64)")
    ap.add_argument("--gpus-per-node", type=int, default=8, help="nvidia.com/gpu of each node (default 8)")
    ap.add_argument("--gangs", type=int, default=50, help="decisions, one gang each (default 50)")
    ap.add_argument("--min-pods", type=int, default=4, help="smallest gang (default 4)")
    ap.add_argument("--max-pods", type=int, default=8, help="largest gang (default 8)")
    ap.add_argument("--spread", type=int, default=4, help="at most this many pods of a gang per node (default 4)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bin-dir", type=Path, default=None, help="folder with etcd, kube-apiserver, kwok "
                    "(default: DLSCHED_K8S_BIN or what deploy/k8s/bins.sh built)")
    ap.add_argument("--out", type=Path, default=None, help="write the samples and the summary as JSON here")
    args = ap.parse_args(argv)
    if not 1 <= args.min_pods <= args.max_pods or args.nodes < 1 or args.spread < 1:
        ap.error("need 1 <= --min-pods <= --max-pods, --nodes >= 1 and --spread >= 1")
    need = args.gangs * args.max_pods
    if need > args.nodes * args.gpus_per_node:
        ap.error(f"{args.gangs} gangs of up to {args.max_pods} pods may need {need} GPUs; the cluster has "
                 f"{args.nodes * args.gpus_per_node}")

    import numpy as np

    from dlsched.core.allocation import Allocation
    from dlsched.k8s.controlplane import ControlPlane
    from dlsched.live.backends.base import Launch
    from dlsched.live.backends.kubernetes import KubernetesBackend
    from dlsched.live.spec import TrainJob

    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="dlsched-k8s-bench-"))
    t0 = time.monotonic()
    with ControlPlane(bin_dir=args.bin_dir) as cp:
        cp.add_nodes(args.nodes, gpus_per_node=args.gpus_per_node, racks=max(1, args.nodes // 16), prefix="b-")
        print(f"control plane up with {args.nodes} nodes in {time.monotonic() - t0:.1f} s "
              f"({cp.start_seconds})", flush=True)
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Namespace

        with cp.client() as c:
            c.create(Namespace(metadata=ObjectMeta(name="bench")))
        b = KubernetesBackend(kubeconfig=cp.kubeconfig(), namespace="bench", rate_per_worker=1.0, startup=0.0)
        try:
            free = b.cluster().capacity[:, 0].copy()
            bound, running, sizes = [], [], []
            for g in range(args.gangs):
                size = rng.randint(args.min_pods, args.max_pods)
                placement: dict[int, tuple[int, int]] = {}
                order = list(np.flatnonzero(free > 0))
                rng.shuffle(order)
                left = size
                for n in order:
                    k = int(min(left, free[n], args.spread))
                    if k:
                        placement[int(n)] = (k, 0)
                        free[n] -= k
                        left -= k
                    if not left:
                        break
                jid = f"gang-{g:03d}"
                job = TrainJob(model="mlp", steps=10_000_000, workers=size, cpus_per_worker=1, mem_gb_per_worker=1)
                (work / jid).mkdir()
                ln = Launch(jid, job, Allocation.of(placement), work / jid, attempt=0)
                start = time.perf_counter()
                b.apply([], [ln])
                bound.append(time.perf_counter() - start)
                o = b.observe()[jid]
                if o.state != "running":
                    print(f"{jid}: {o.state}: {o.message}", file=sys.stderr)
                    return 1
                def all_running() -> bool:  # as the backend's own pod watch shows them
                    return all(phase == "Running" for phase in b.pod_phases(jid).values())

                if not b.wait_for(all_running, timeout=30):
                    print(f"{jid}: pods not Running after 30 s", file=sys.stderr)
                    return 1
                running.append(time.perf_counter() - start)
                sizes.append(size)
            deletes: list[float] = []
            real_delete = b.api.delete_pods

            def timed_delete(pods, grace):  # the first call is the graceful delete of every pod
                t = time.perf_counter()
                real_delete(pods, grace)
                deletes.append(time.perf_counter() - t)

            b.api.delete_pods = timed_delete
            start = time.perf_counter()
            b.apply([f"gang-{g:03d}" for g in range(args.gangs)], [])
            stop_all = time.perf_counter() - start
            delete_calls = deletes[0] if deletes else 0.0
        finally:
            b.close()
    print(summary("bound", bound))
    print(summary("running", running))
    print(f"stop    all {args.gangs} gangs ({sum(sizes)} pods) in one batch: {stop_all * 1000:.0f} ms "
          f"(delete calls {delete_calls * 1000:.0f} ms, then until the watch saw every pod gone)")
    per_pod = [t / s for t, s in zip(bound, sizes)]
    print(f"bound per pod: p50 {percentile(per_pod, 50) * 1000:.1f} ms")
    if args.out is not None:
        args.out.write_text(json.dumps({
            "machine": platform.platform(), "python": platform.python_version(), "args": {
                k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "sizes": sizes, "bound_s": bound, "running_s": running, "stop_all_s": stop_all, "stop_delete_calls_s": delete_calls,
            "bound_p50_ms": percentile(bound, 50) * 1000, "bound_p99_ms": percentile(bound, 99) * 1000,
            "running_p50_ms": percentile(running, 50) * 1000, "running_p99_ms": percentile(running, 99) * 1000,
        }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
