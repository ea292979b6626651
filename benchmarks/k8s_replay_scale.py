"""dlsched and kube-scheduler at a real cluster's size on one real API server, in one run.

Starts one control plane (etcd, kube-apiserver, kwok, kube-scheduler; all on 127.0.0.1) with
`--nodes` kwok nodes of 8 GPUs, then, on that same API server:

1. burst, kube-scheduler: `--burst` one-GPU pods created at once with the default scheduler name;
   the time until kube-scheduler has bound them all gives its binding throughput (pods/s);
   each burst also reports the CPU seconds each process spent until all were bound;
2. burst, dlsched: the same number of pods as gangs of `--gang` one-GPU workers, one node each
   pod, handed to `KubernetesBackend.apply` in one decision: pods created and bound per second;
   with the backend's default 16 API threads, again with 32 (the count of the client that creates
   kube-scheduler's pods), then with the backend's `bind="create"` (each pod's node set at
   creation; 16 threads);
3. replay, kube-scheduler, then dlsched's `--policy`: `--jobs` jobs of an ITP trace (rigid,
   measured curves) whose arrivals are compressed so the offered load on this cluster is
   `--load`, each replayed at `--speedup`; reports decision p50/p99 (policy call),
   decision-to-bound p99 (policy call to every pod of its launches bound), pods bound per second
   of launch work, the controller process's RSS growth, the control plane's RSS, and the mean JCT.

Prints a JSON summary and writes it with `--out`.

    python benchmarks/k8s_replay_scale.py [--nodes 1000] [--jobs 2000] [--policy dragon]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path


#: Client threads of the Python side that creates kube-scheduler's pods; dlsched's backend is run
#: once more at this count beside its default 16, for a burst at the same client concurrency.
CLIENT_THREADS = 32


def rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def cpu_seconds(cp) -> dict[str, float]:
    """CPU seconds (user + system) so far of each control-plane process and of this one."""
    import psutil

    def used(proc: psutil.Process) -> float:
        t = proc.cpu_times()
        return t.user + t.system

    out = {name: used(psutil.Process(pid)) for name, pid in cp.pids().items()}
    out["this process (python)"] = used(psutil.Process())
    return out


def spent(cp, before: dict[str, float]) -> dict[str, float]:
    """CPU seconds each process used since `before` (where a burst's time went)."""
    return {k: round(v - before.get(k, 0.0), 1) for k, v in cpu_seconds(cp).items()}


def kube_scheduler_burst(cp, namespace: str, pool: str, n: int) -> dict:
    """`n` one-GPU pods created at once with the default scheduler; time until all are bound."""
    from lightkube.resources.core_v1 import Pod

    from dlsched.core.job import JobSpec
    from dlsched.k8s.default_scheduler import job_pods
    from dlsched.live.backends.k8s_api import KubeApi, load_config
    from dlsched.live.backends.k8s_watch import Reflector, pod_info, warm_decoders

    warm_decoders()
    api = KubeApi(load_config(cp.kubeconfig(), None), namespace, workers=CLIENT_THREADS)
    cond = threading.Condition(threading.RLock())
    watch = Reflector("burst", api.watch_client, Pod, cond=cond, namespace=namespace,
                      key=lambda o: o.metadata.name, transform=pod_info).start()
    watch.synced.wait(30)
    manifests = [m for i in range(n) for m in job_pods(JobSpec(job_id=f"b{i}", submit_time=0, iterations=1), i,
                                                       namespace, pool)]
    cpu, t0 = cpu_seconds(cp), time.perf_counter()
    errs = [e for _, e in api.map(api.create, manifests) if e]
    created = time.perf_counter() - t0
    with cond:
        cond.wait_for(lambda: sum(1 for p in watch.items.values() if p.node) >= n, timeout=600)
        bound = sum(1 for p in watch.items.values() if p.node)
    took, cpu = time.perf_counter() - t0, spent(cp, cpu)
    api.delete_pods([(m["metadata"]["name"], "") for m in manifests], 0)
    with cond:
        cond.wait_for(lambda: not watch.items, timeout=120)
    watch.stop()
    api.close()
    return {"pods": n, "bound": bound, "create_errors": len(errs), "created_s": round(created, 2),
            "all_bound_s": round(took, 2), "pods_bound_per_s": round(bound / took, 1), "cpu_s": cpu}


def dlsched_burst(cp, namespace: str, pool: str, n: int, gang: int, bind: str = "binding",
                  api_workers: int = 16) -> dict:
    """`n` pods as gangs of `gang` one-GPU workers (one pod per node) in one `apply`, placed by
    `bind` (the backend's option: "binding" creates then binds each pod, "create" sets its node
    at creation), with `api_workers` API threads (the backend's default is 16)."""
    from dlsched.core.allocation import Allocation
    from dlsched.live.backends.base import Launch
    from dlsched.live.backends.kubernetes import KubernetesBackend
    from dlsched.live.spec import TrainJob

    work = Path(tempfile.mkdtemp(prefix="dlsched-burst-"))
    backend = KubernetesBackend(kubeconfig=cp.kubeconfig(), namespace=namespace, pool=pool, mode="sim",
                                leader_election=False, rate_per_worker=1e-3, bind=bind, api_workers=api_workers)
    nodes = backend.cluster().num_nodes
    job = TrainJob(model="mlp", steps=10**6, workers=gang, cpus_per_worker=1, mem_gb_per_worker=1)
    launches, k = [], 0
    for g in range(n // gang):
        placement = {(k + i) % nodes: (1, 0) for i in range(gang)}
        k += gang
        (work / f"g{g}").mkdir()
        launches.append(Launch(f"g{g:05d}", job, Allocation.of(placement), work / f"g{g}"))
    cpu, t0 = cpu_seconds(cp), time.perf_counter()
    backend.apply([], launches)
    took, cpu = time.perf_counter() - t0, spent(cp, cpu)
    bound = backend.pods_created
    t1 = time.perf_counter()
    backend.apply([l.job_id for l in launches], [], 60)
    stop = time.perf_counter() - t1
    backend.close()
    return {"bind": bind, "pods": len(launches) * gang, "gangs": len(launches), "bound": bound, "all_bound_s": round(took, 2),
            "pods_bound_per_s": round(bound / took, 1), "cpu_s": cpu, "stop_all_s": round(stop, 2)}


def workload(jobs: int, cluster, load: float, traces: Path):
    """The first `jobs` of ITP cluster04 (rigid, measured curves), arrivals compressed to `load`."""
    from dlsched.throughput.registry import default_throughput
    from dlsched.traces import load_trace
    from dlsched.traces.load import offered_load

    wl = load_trace(str(traces / "elasticflow-itp/elasticflow/cluster04.csv"), None, limit=jobs, elastic=False,
                    seed=0, traces=traces)
    tp = default_throughput(traces)
    now = offered_load(wl.jobs, cluster, tp)
    factor = now.load / load  # the arrival span times this gives `load` on this cluster
    t0 = min(j.submit_time for j in wl.jobs)
    specs = [replace(j, submit_time=t0 + (j.submit_time - t0) * factor,
                     deadline=None if j.deadline is None else j.deadline + (j.submit_time - t0) * (factor - 1))
             for j in wl.jobs]
    return specs, tp, offered_load(specs, cluster, tp)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=2000)
    ap.add_argument("--burst", type=int, default=2000, help="pods in each burst (default 2000)")
    ap.add_argument("--gang", type=int, default=8, help="workers per gang in dlsched's burst (default 8)")
    ap.add_argument("--policy", default="dragon", help="dlsched's policy in the replay (default dragon)")
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--speedup", type=float, default=3600.0)
    ap.add_argument("--tick", type=float, default=0.5)
    ap.add_argument("--skip-replay", action="store_true", help="bursts only")
    ap.add_argument("--traces", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "traces")
    ap.add_argument("--bin-dir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    from dlsched.core.cluster import Cluster
    from dlsched.k8s.controlplane import ControlPlane
    from dlsched.k8s.default_scheduler import replay_kube_scheduler
    from dlsched.k8s.replay import mirror_nodes, replay_policy
    from dlsched.k8s.replay_compare import SCHEDULER_BACKOFF_S
    from dlsched.policies.registry import make_policy
    from dlsched.sim.config import SimConfig

    pool = "scale"
    cluster = Cluster.homogeneous("scale", nodes=args.nodes, gpus=8, cpus=96, mem=1024, nodes_per_rack=40)
    out: dict = {"machine": f"{platform.node()} ({platform.machine()}, {__import__('os').cpu_count()} CPUs)",
                 "nodes": args.nodes, "gpus": cluster.total_gpus, "command": " ".join(sys.argv)}
    with ControlPlane(workdir=Path(tempfile.mkdtemp(prefix="dlsched-scale-")), bin_dir=args.bin_dir,
                      with_scheduler=True, scheduler_backoff_s=SCHEDULER_BACKOFF_S) as cp:
        t0 = time.perf_counter()
        mirror_nodes(cp, cluster, pool)
        out["nodes_ready_s"] = round(time.perf_counter() - t0, 1)
        print(f"{args.nodes} nodes Ready in {out['nodes_ready_s']} s", file=sys.stderr)
        for ns in ("burst-ks", "burst-dl", "burst-dl32", "burst-dl2", "replay-ks", "replay-dl"):
            cp.ensure_namespace(ns)
        out["burst_kube_scheduler"] = kube_scheduler_burst(cp, "burst-ks", pool, args.burst)
        print("kube-scheduler burst", out["burst_kube_scheduler"], file=sys.stderr)
        out["burst_dlsched"] = dlsched_burst(cp, "burst-dl", pool, args.burst, args.gang)
        print("dlsched burst", out["burst_dlsched"], file=sys.stderr)
        out["burst_dlsched_32_threads"] = dlsched_burst(cp, "burst-dl32", pool, args.burst, args.gang,
                                                        api_workers=CLIENT_THREADS)
        print("dlsched burst, 32 API threads", out["burst_dlsched_32_threads"], file=sys.stderr)
        out["burst_dlsched_bind_create"] = dlsched_burst(cp, "burst-dl2", pool, args.burst, args.gang, "create")
        print("dlsched burst, bind=create", out["burst_dlsched_bind_create"], file=sys.stderr)
        if not args.skip_replay:
            specs, tp, offered = workload(args.jobs, cluster, args.load, args.traces)
            out["workload"] = {"jobs": len(specs), "offered_load": round(offered.load, 3),
                               "arrival_span_h": round(offered.window_seconds / 3600, 2)}
            cfg = SimConfig()
            ks = replay_kube_scheduler(specs, tp, cfg, kubeconfig=cp.kubeconfig(), namespace="replay-ks", pool=pool,
                                       speedup=args.speedup, tick=args.tick, timeout=3000)
            out["replay_kube_scheduler"] = {**ks.figures(), "mean_jct_h": round(ks.result.summary["mean_jct"] / 3600, 3),
                                            "finished": ks.result.summary["finished"], "notes": ks.notes}
            print("kube-scheduler replay", out["replay_kube_scheduler"], file=sys.stderr)
            before = rss_mib()
            dl = replay_policy(specs, make_policy(args.policy), tp, cfg, kubeconfig=cp.kubeconfig(),
                               namespace="replay-dl", pool=pool, speedup=args.speedup, tick=args.tick, timeout=3000,
                               work_dir=Path(tempfile.mkdtemp(prefix="dlsched-scale-replay-")))
            out["replay_dlsched"] = {"policy": args.policy, **dl.figures(),
                                     "mean_jct_h": round(dl.result.summary["mean_jct"] / 3600, 3),
                                     "finished": dl.result.summary["finished"],
                                     "controller_rss_mib": round(rss_mib(), 1),
                                     "controller_rss_growth_mib": round(rss_mib() - before, 1)}
            print("dlsched replay", out["replay_dlsched"], file=sys.stderr)
        out["control_plane_rss_mib"] = {k: round(v / 2**20, 1) for k, v in cp.memory_rss().items()}
    text = json.dumps(out, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
