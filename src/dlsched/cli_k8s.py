"""`dlsched k8s up | down | crd`: a real local Kubernetes control plane with fake GPU nodes, for trying
the Kubernetes backend by hand (the tests start their own through tests/k8s_control_plane.py).

`up` builds or reuses the binaries (deploy/k8s/bins.sh), starts etcd, kube-apiserver and kwok (and
kube-scheduler with --with-scheduler) on 127.0.0.1 only, adds kwok fake GPU nodes, the namespace
`dlsched` (the Kubernetes backend's default) and the DLJob CRD (`crd` prints it), and prints the admin kubeconfig. In the foreground it stops everything on Ctrl-C; with --detach it leaves the
processes running, their PIDs and start times recorded in DIR/state.json, for `down`.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any, Optional

import typer

from dlsched.cli_support import console, err_console, friendly, safe
from dlsched.core.errors import ConfigError

k8s_app = typer.Typer(help="A local Kubernetes control plane (etcd, kube-apiserver, kwok fake GPU nodes) on 127.0.0.1.",
                      add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True)


def default_dir() -> Path:
    """Where `up` and `down` keep a control plane when --dir is not given: beside the binaries'
    cache ($DLSCHED_K8S_CACHE, default ~/.cache/dlsched-k8s), so `down` finds what `up` left."""
    cache = os.environ.get("DLSCHED_K8S_CACHE")
    return (Path(cache).expanduser() if cache else Path.home() / ".cache" / "dlsched-k8s") / "cluster"


_DIR = typer.Option(None, "--dir", help="Folder for certificates, kubeconfigs, etcd data, logs and the "
                    "recorded PIDs (default ~/.cache/dlsched-k8s/cluster, or $DLSCHED_K8S_CACHE/cluster).")


def _binaries() -> Path:
    import shutil

    from dlsched.k8s.controlplane import build_binaries, find_binaries

    found = find_binaries()
    if found is not None:
        return found
    if shutil.which("go") is None:
        raise ConfigError("no Kubernetes binaries and no `go` to build them: run `bash deploy/k8s/bins.sh` on a "
                          "machine with Go, or set DLSCHED_K8S_BIN to a folder holding etcd, kube-apiserver, kwok "
                          "and kube-scheduler")
    err_console.print("building etcd, kube-apiserver, kube-scheduler and kwok with `bash deploy/k8s/bins.sh` "
                      "(20-40 min the first time; reused afterwards) ...", highlight=False)
    return build_binaries(echo=True)


def _seconds(start: dict[str, float]) -> str:
    parts = [f"{name} {sec:.1f} s" for name, sec in start.items() if name != "add_nodes"]
    return ", ".join(parts)


@k8s_app.command("up")
@friendly
def up(
    nodes: int = typer.Option(16, "--nodes", help="kwok fake GPU nodes to add."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", help="nvidia.com/gpu on each node."),
    racks: int = typer.Option(2, "--racks", help="Racks the nodes are spread over (label dlsched.io/rack)."),
    zones: int = typer.Option(1, "--zones", help="Zones the racks are spread over (topology.kubernetes.io/zone)."),
    gpu_type: str = typer.Option("NVIDIA-A100-SXM4-80GB", "--gpu-type", help="Label nvidia.com/gpu.product."),
    pool: str = typer.Option("default", "--pool", help="Label dlsched.io/pool."),
    workdir: Optional[Path] = _DIR,
    detach: bool = typer.Option(False, "--detach", help="Leave it running and return; stop it with `dlsched k8s down`."),
    with_scheduler: bool = typer.Option(False, "--with-scheduler", help="Also run kube-scheduler (default profile)."),
) -> None:
    """Start a local control plane with fake GPU nodes; print its kubeconfig. Ctrl-C stops it."""
    from dlsched.k8s.controlplane import RESTRICTED_USER, ControlPlane, running_recorded

    if nodes < 0 or gpus_per_node < 0 or racks < 1 or zones < 1:
        raise ConfigError("--nodes and --gpus-per-node must be >= 0, --racks and --zones >= 1")
    folder = (workdir or default_dir()).expanduser().resolve()
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"--dir {folder} is a file, not a folder")
    running = running_recorded(folder) if folder.is_dir() else {}
    if running:
        pids = ", ".join(f"{n} {p}" for n, p in running.items())
        raise ConfigError(f"a control plane recorded in {folder} is still running ({pids}): "
                          f"stop it with `dlsched k8s down --dir {folder}`")
    folder.mkdir(parents=True, exist_ok=True)
    bins = _binaries()
    t0 = time.monotonic()
    cp = ControlPlane(workdir=folder, bin_dir=bins, with_scheduler=with_scheduler)
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)  # `kill` of the foreground command stops the children too
    try:
        cp.start()
        try:
            cp.add_nodes(nodes, gpus_per_node=gpus_per_node, racks=racks, zones=zones, gpu_type=gpu_type, pool=pool)
            cp.ensure_namespace("dlsched")  # where `dlsched serve --backend kubernetes` puts its pods by default
            _install_crd(cp)
        except BaseException:
            cp.stop()
            raise
        total = time.monotonic() - t0
        kube = cp.kubeconfig()
        console.print(f"control plane up at {safe(cp.server)} in {total:.1f} s ({safe(_seconds(cp.start_seconds))}; "
                      f"{nodes} nodes Ready in {cp.start_seconds.get('add_nodes', 0.0):.1f} s)", highlight=False)
        console.print(f"kubeconfig: {safe(kube)}", highlight=False)
        console.print(f"export KUBECONFIG={safe(kube)}", highlight=False, soft_wrap=True)
        console.print(f"kubeconfig of {safe(RESTRICTED_USER)} (no groups, for RBAC): "
                      f"{safe(cp.kubeconfig_for(RESTRICTED_USER))}", highlight=False)
        if detach:
            cp.detach()
            pids = ", ".join(f"{n} {p}" for n, p in running_recorded(folder).items())
            console.print(f"running detached ({pids}); stop it with `dlsched k8s down --dir {safe(folder)}`",
                          highlight=False)
            return
        console.print("running; Ctrl-C stops it", highlight=False)
        try:
            while True:
                dead = [name for name, ok in cp.alive().items() if not ok]
                if dead:
                    err_console.print(f"[bold red]error:[/] {safe(', '.join(dead))} exited; logs in "
                                      f"{safe(folder / 'logs')}", highlight=False)
                    raise typer.Exit(1)
                time.sleep(1.0)
        except KeyboardInterrupt:
            pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        if cp.pids():  # not detached (or failed before detaching): stop what runs
            outcome = cp.stop()
            console.print("stopped: " + ", ".join(f"{n} {o}" for n, o in outcome.items()), highlight=False)


def _install_crd(cp: Any) -> None:
    """The DLJob CRD, so that `kubectl apply` of a DLJob works on this control plane at once."""
    from dlsched.live.api.dljob_crd import install_crd

    with cp.client() as client:
        install_crd(client)


@k8s_app.command("crd")
@friendly
def crd() -> None:
    """Print the DLJob CustomResourceDefinition (YAML), e.g. `dlsched k8s crd | kubectl apply -f -`."""
    from dlsched.live.api.dljob_crd import crd_yaml

    print(crd_yaml(), end="")


@k8s_app.command("down")
@friendly
def down(workdir: Optional[Path] = _DIR) -> None:
    """Stop a control plane left running by `dlsched k8s up --detach`, by its recorded PIDs."""
    from dlsched.k8s.controlplane import stop_recorded

    folder = (workdir or default_dir()).expanduser().resolve()
    outcome = stop_recorded(folder)
    console.print("stopped: " + ", ".join(f"{safe(n)} {o}" for n, o in outcome.items()), highlight=False)
