"""A real, local Kubernetes control plane for dlsched's Kubernetes backend and its tests.

`ControlPlane` starts etcd, kube-apiserver and kwok (optionally kube-scheduler) as processes on
127.0.0.1, with kwok playing the kubelets of fake GPU nodes (`add_nodes`). The binaries are built
from their published Go modules by `deploy/k8s/bins.sh` (`find_binaries` / `build_binaries`).
"""

from dlsched.k8s.controlplane import (
    ADMIN_USER,
    RESTRICTED_USER,
    ControlPlane,
    bind_pod,
    build_binaries,
    find_binaries,
    stop_recorded,
)

__all__ = ["ADMIN_USER", "RESTRICTED_USER", "ControlPlane", "bind_pod", "build_binaries", "find_binaries", "stop_recorded"]
