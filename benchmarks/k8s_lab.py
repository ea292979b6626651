"""The pod lab shared by the kube-scheduler mechanism checks (k8s_queue_order.py, k8s_queue_rotation.py).

One control plane on 127.0.0.1 (etcd, kube-apiserver, kwok, the real kube-scheduler with its pod
backoff at 1 s, as the replay runs it), `nodes` kwok nodes of 8 GPUs in one pool, one namespace,
an API client and a pod watch. The checks create pods with the default scheduler name (no
dlsched placement) and read which ones kube-scheduler bound.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


@dataclass
class Lab:
    """What a check needs: the API client, and pods by name as the watch last saw them."""

    api: object
    cond: threading.Condition
    watch: object
    ns: str
    pool: str

    def pods_of(self, workers: int, name: str) -> list[dict]:
        """The manifests of one job of `workers` one-GPU pods named `name-…`, for kube-scheduler."""
        from dlsched.core.job import JobSpec
        from dlsched.k8s.default_scheduler import job_pods

        ms = job_pods(JobSpec(job_id="j", submit_time=0, iterations=1, num_workers=workers), 0, self.ns, self.pool)
        for m in ms:
            m["metadata"]["name"] = m["metadata"]["name"].replace("rj0", name)
        return ms

    def bound_names(self, prefix: str) -> list[str]:
        """Names starting with `prefix` of the pods bound to a node."""
        with self.cond:
            return [n for n, p in self.watch.items.items() if n.startswith(prefix) and p.node]

    def wait(self, pred: Callable[[], bool], timeout: float = 60.0) -> bool:
        with self.cond:
            return self.cond.wait_for(pred, timeout=timeout)

    def delete(self, manifests: list[dict]) -> None:
        self.api.delete_pods([(m["metadata"]["name"], "") for m in manifests], 0)

    def clear(self, manifests: list[dict], timeout: float = 120.0) -> None:
        """Delete these pods and wait until the watch sees no pod left, for the next trial."""
        self.delete(manifests)
        self.wait(lambda: not self.watch.items, timeout)


@contextlib.contextmanager
def pod_lab(name: str, nodes: int, bin_dir: Path | None) -> Iterator[Lab]:
    from lightkube.resources.core_v1 import Pod

    from dlsched.k8s.controlplane import ControlPlane
    from dlsched.live.backends.k8s_api import KubeApi, load_config
    from dlsched.live.backends.k8s_watch import Reflector, pod_info, warm_decoders

    with ControlPlane(workdir=Path(tempfile.mkdtemp(prefix=f"dlsched-{name}-")), bin_dir=bin_dir,
                      with_scheduler=True, scheduler_backoff_s=1) as cp:
        cp.add_nodes(nodes, gpus_per_node=8, pool=name, cpus=64, mem="512Gi", prefix=f"{name}-")
        cp.ensure_namespace(name)
        warm_decoders()
        api = KubeApi(load_config(cp.kubeconfig(), None), name, workers=16)
        cond = threading.Condition(threading.RLock())
        watch = Reflector(name, api.watch_client, Pod, cond=cond, namespace=name,
                          key=lambda o: o.metadata.name, transform=pod_info).start()
        watch.synced.wait(30)
        try:
            yield Lab(api=api, cond=cond, watch=watch, ns=name, pool=name)
        finally:
            watch.stop()
            api.close()


def report(out: dict, path: Path | None) -> None:
    """Print a check's result as JSON, and write it to `path` (its `--out`) when given."""
    text = json.dumps(out, indent=1)
    print(text)
    if path:
        path.write_text(text)
