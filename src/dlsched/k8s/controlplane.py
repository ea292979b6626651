"""A local Kubernetes control plane: etcd + kube-apiserver + kwok (+ kube-scheduler), loopback only.

Why a real control plane and not a mock: the Kubernetes backend must behave against the API server's
real semantics (admission, RBAC, the Binding subresource, graceful deletion, watches and resource
versions), and kwok gives it fake GPU nodes whose kubelet behaviour is scripted by
`deploy/k8s/kwok-stages.yaml`. No kube-controller-manager runs (see docs/kubernetes.md §4.4): there is
no garbage collector, namespace finalisation or node-lifecycle eviction, which is why tests never
delete namespaces and the backend deletes its own pods.

Safety rules this module keeps, because the machines it runs on must send nothing off-host:
- every listener is on 127.0.0.1 and a free port (etcd client, peer and metrics; the API server;
  kube-scheduler's health port); kwok starts no server at all;
- kwok reports 127.0.0.1 as every fake node's InternalIP, so even an accidental `pods/log` or `exec`
  would dial this machine (the API server's proxy also refuses loopback targets);
- child processes get an environment without proxy variables and an isolated kwok work dir (kwok
  otherwise also loads ~/.kwok/kwok.yaml, whatever --config says);
- every process is stopped by its own PID (never by name), and its PID and start time are recorded
  in `state.json` so that `dlsched k8s down` can stop a detached control plane and refuse to signal a
  PID that now belongs to another process.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import psutil
import yaml

from dlsched.core.errors import ConfigError, DlschedError

if TYPE_CHECKING:  # lightkube is the optional `k8s` extra; imported where used
    from lightkube import Client

#: The four programs `deploy/k8s/bins.sh` builds; kube-scheduler is only started when asked for.
BINARIES = ("etcd", "kube-apiserver", "kwok", "kube-scheduler")
#: The token user in group system:masters (bypasses RBAC): what kwok, kube-scheduler and tests use.
ADMIN_USER = "dlsched-admin"
#: A second token user with no groups, so that the backend's RBAC (ClusterRole + bindings) can be
#: tested for real. Named as a service account's user, so a binding whose subject is
#: `{kind: ServiceAccount, namespace: dlsched, name: dlsched}` applies to it, as in production.
RESTRICTED_USER = "system:serviceaccount:dlsched:dlsched"
#: Annotation that tells kwok (started with --manage-nodes-with-annotation-selector) to manage a node.
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
#: The IP kwok writes as each fake node's InternalIP (and pods' hostIP): loopback, never a 10.x.
NODE_IP = "127.0.0.1"
STATE_FILE = "state.json"
#: Environment variables that could send a child's HTTP traffic through a proxy (off this machine).
_PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
               "NO_PROXY", "KUBECONFIG")
_BINS_HINT = "build them with `bash deploy/k8s/bins.sh` (needs Go; 20-40 min the first time) or set DLSCHED_K8S_BIN"


# --------------------------------------------------------------------------- binaries


def checkout_root() -> Path | None:
    """The source checkout this package runs from (the folder with deploy/k8s/bins.sh above
    src/dlsched), or None for an installed wheel, which has no build script."""
    here = Path(__file__).resolve()
    root = here.parents[3]
    if here.parents[1].name != "dlsched" or here.parents[2].name != "src":
        return None
    return root if (root / "deploy" / "k8s" / "bins.sh").is_file() else None


def _bins_script() -> Path:
    root = checkout_root()
    if root is None:
        raise ConfigError("deploy/k8s/bins.sh is not there (dlsched is not running from a source checkout): "
                          "set DLSCHED_K8S_BIN to a folder holding etcd, kube-apiserver, kwok and kube-scheduler")
    return root / "deploy" / "k8s" / "bins.sh"


def _missing(folder: Path, names: Iterable[str] = BINARIES) -> list[str]:
    return [n for n in names if not os.access(folder / n, os.X_OK)]


def find_binaries() -> Path | None:
    """The folder holding etcd, kube-apiserver, kwok and kube-scheduler, without building anything:
    $DLSCHED_K8S_BIN when set (a ConfigError if it lacks one: an explicit setting that is wrong must
    not be silently replaced), else `bash deploy/k8s/bins.sh --print-dir` when that folder is
    complete, else None (no Go, no checkout, or not built yet)."""
    env = os.environ.get("DLSCHED_K8S_BIN")
    if env:
        folder = Path(env).expanduser()
        miss = _missing(folder)
        if miss:
            raise ConfigError(f"DLSCHED_K8S_BIN={folder} lacks {', '.join(miss)}: {_BINS_HINT}")
        return folder
    root = checkout_root()
    if root is None or shutil.which("go") is None:
        return None
    try:
        out = subprocess.run(["bash", str(root / "deploy/k8s/bins.sh"), "--print-dir"], capture_output=True,
                             text=True, timeout=60, check=True).stdout.strip()
    except (subprocess.SubprocessError, OSError):
        return None
    folder = Path(out) if out else None
    return folder if folder is not None and not _missing(folder) else None


def build_binaries(*, timeout: float = 45 * 60, log: Path | None = None, echo: bool = False) -> Path:
    """Build (or reuse, in seconds, when already built) the binaries with `bash deploy/k8s/bins.sh`
    and return their folder. The cold build takes 20-40 minutes on two cores, so a caller should say
    so first. Its progress goes to `log` (a file), to our stderr when `echo`, else is captured and
    only its tail shown on failure."""
    script = _bins_script()
    if shutil.which("go") is None:
        raise ConfigError(f"`go` is not on PATH, so the Kubernetes binaries cannot be built: {_BINS_HINT}")
    env = {**os.environ, "GOTOOLCHAIN": "local"}
    stderr: Any = None if echo else subprocess.PIPE
    handle = None
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        handle = stderr = open(log, "w")  # noqa: SIM115 - closed below
    try:
        # bins.sh itself serialises builds (flock on its cache), so two pytest-xdist workers, a
        # test run and `dlsched k8s up` never build into the same folder at once
        res = subprocess.run(["bash", str(script)], stdout=subprocess.PIPE, stderr=stderr, text=True,
                             timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise DlschedError(f"`bash deploy/k8s/bins.sh` did not finish in {timeout:.0f} s") from None
    finally:
        if handle is not None:
            handle.close()
    if res.returncode != 0:
        tail = (res.stderr or "") if log is None else log.read_text(errors="replace")
        raise DlschedError(f"`bash deploy/k8s/bins.sh` failed (exit {res.returncode}):\n{_tail_text(tail, 25)}")
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    folder = Path(lines[-1]) if lines else None
    if folder is None or _missing(folder):
        raise DlschedError(f"`bash deploy/k8s/bins.sh` printed {res.stdout.strip()!r}, not a folder with {', '.join(BINARIES)}")
    return folder


def default_stages() -> Path:
    """deploy/k8s/kwok-stages.yaml of this checkout: kwok v0.8 refuses to start without stages."""
    root = checkout_root()
    if root is None or not (root / "deploy/k8s/kwok-stages.yaml").is_file():
        raise ConfigError("deploy/k8s/kwok-stages.yaml is not there (not a source checkout): pass stages=PATH")
    return root / "deploy/k8s/kwok-stages.yaml"


# --------------------------------------------------------------------------- small helpers


def _free_ports(n: int) -> list[int]:
    """`n` distinct free TCP ports on 127.0.0.1 (all held open until all are chosen, so distinct; a
    process may still take one before our child binds it, which `start` detects and retries)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _tail_text(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _tail(path: Path, lines: int = 30) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64 * 1024))
            return _tail_text(fh.read().decode(errors="replace"), lines)
    except OSError:
        return "(no log)"


def _child_env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _PROXY_VARS}
    env["KWOK_WORKDIR"] = str(workdir / "kwok-home")  # else kwok also loads ~/.kwok/kwok.yaml
    return env


_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str, *, ctx: ssl.SSLContext | None = None, token: str | None = None, timeout: float = 2.0) -> tuple[int, str]:
    """GET without any proxy (urllib would honour $https_proxy): (status, body); (0, error) when
    nothing answers."""
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    handlers: list[Any] = [urllib.request.ProxyHandler({})]
    if ctx is not None:
        handlers.append(urllib.request.HTTPSHandler(context=ctx))
    opener = urllib.request.build_opener(*handlers) if ctx is not None else _NO_PROXY_OPENER
    try:
        with opener.open(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError, ssl.SSLError) as exc:
        return 0, str(exc)


def _same_process(pid: int, create_time: float) -> psutil.Process | None:
    """The process `pid` if it is still the one started at `create_time` (a recycled PID is not)."""
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) > 1.0 or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def _terminate(pid: int, create_time: float, popen: subprocess.Popen | None, grace: float = 10.0) -> str:
    """SIGTERM one process by PID, wait `grace` s, then SIGKILL; the outcome in a word ("stopped",
    "killed", "gone" when it had already ended or its PID is another process's now, "survived").
    With our own Popen the PID cannot have been recycled (an unreaped child stays a zombie), and
    waiting on it reaps it; without one (a detached control plane) the recorded start time must
    match before anything is signalled."""
    if popen is not None:
        if popen.poll() is not None:
            return "gone"
        signal_fn: Callable[[int], None] = popen.send_signal

        def wait(t: float) -> bool:
            try:
                popen.wait(timeout=t)
                return True
            except subprocess.TimeoutExpired:
                return False
    else:
        proc = _same_process(pid, create_time)
        if proc is None:
            return "gone"
        signal_fn = proc.send_signal

        def wait(t: float) -> bool:
            try:
                proc.wait(timeout=t)
                return True
            except psutil.TimeoutExpired:
                return False
            except psutil.NoSuchProcess:
                return True

    try:
        signal_fn(signal.SIGTERM)
    except (ProcessLookupError, psutil.NoSuchProcess):
        return "gone"
    if wait(grace):
        return "stopped"
    try:
        signal_fn(signal.SIGKILL)
    except (ProcessLookupError, psutil.NoSuchProcess):
        return "stopped"
    return "killed" if wait(5.0) else "survived"


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


# --------------------------------------------------------------------------- the control plane


class _PortClash(DlschedError):
    """A component lost its chosen port to another process between choosing and binding."""


@dataclass
class _Proc:
    name: str
    popen: subprocess.Popen
    log: Path
    launched: float  # time.monotonic() at Popen
    create_time: float = 0.0

    @property
    def pid(self) -> int:
        return self.popen.pid


@dataclass
class ControlPlane:
    """etcd, kube-apiserver and kwok (and kube-scheduler when `with_scheduler`) on 127.0.0.1.

    Use as a context manager, or `start()` / `stop()`. `workdir` holds the certificates, tokens,
    kubeconfigs, etcd data, logs and `state.json`; when not given, a temporary folder is made and
    removed by `stop()`. `start_seconds` records, per component, the seconds from launching it to
    it answering ready (kwok: to a probe node turning Ready), so start-up cost can be tracked.
    """

    workdir: Path | str | None = None
    bin_dir: Path | str | None = None
    with_scheduler: bool = False
    #: kube-scheduler's pod backoff (podInitialBackoffSeconds = podMaxBackoffSeconds), None for its
    #: defaults (1 s doubling to 10 s). Its queue backs off in wall seconds: a replay that runs an
    #: hour of trace a second would make a 10 s backoff ten hours long, so it asks for the least.
    scheduler_backoff_s: int | None = None
    stages: Path | str | None = None
    ready_timeout: float = 60.0
    node_lease_seconds: int = 40
    #: extra token users: name -> groups (RESTRICTED_USER, with no groups, is always there)
    users: Mapping[str, Sequence[str]] = field(default_factory=dict)
    start_seconds: dict[str, float] = field(default_factory=dict, init=False)
    ports: dict[str, int] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._own_dir = self.workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix="dlsched-k8s-")) if self.workdir is None else Path(self.workdir).expanduser().resolve()
        if self.bin_dir is None:
            found = find_binaries()
            if found is None:
                raise ConfigError(f"no Kubernetes binaries (etcd, kube-apiserver, kwok, kube-scheduler): {_BINS_HINT}")
            self.bin_dir = found
        self.bin_dir = Path(self.bin_dir)
        need = [b for b in BINARIES if b != "kube-scheduler" or self.with_scheduler]
        miss = _missing(self.bin_dir, need)
        if miss:
            raise ConfigError(f"{self.bin_dir} lacks {', '.join(miss)}: {_BINS_HINT}")
        self.stages = Path(self.stages) if self.stages is not None else default_stages()
        self._procs: list[_Proc] = []
        self._tokens: dict[str, str] = {}
        self._started_wall = 0.0

    # ---------------------------------------------------------------- paths and clients

    @property
    def dir(self) -> Path:
        assert isinstance(self.workdir, Path)
        return self.workdir

    @property
    def server(self) -> str:
        """https://127.0.0.1:PORT of the API server."""
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def ca_file(self) -> Path:
        """The API server's self-signed serving certificate followed by its CA (client-go writes
        both into apiserver.crt), which clients use as their CA bundle."""
        return self.dir / "pki" / "apiserver.crt"

    def kubeconfig(self) -> Path:
        """The admin kubeconfig (group system:masters)."""
        return self.kubeconfig_for(ADMIN_USER)

    def scheduler_queue(self) -> dict[str, float]:
        """kube-scheduler's pending pods by queue ("active", "backoff", "unschedulable", "gated"),
        from its `scheduler_pending_pods` metric; empty when it is not running or did not answer.
        A replay waits on it: with "active" and "backoff" at 0, every waiting pod has been tried
        since the last change (`k8s/default_scheduler.py`)."""
        port = self.ports.get("scheduler")
        if not port:
            return {}
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # its serving certificate is self-signed in memory
        status, body = _get(f"https://127.0.0.1:{port}/metrics", ctx=insecure, token=self._tokens[ADMIN_USER])
        if status != 200:
            return {}
        out: dict[str, float] = {}
        for line in body.splitlines():
            if line.startswith("scheduler_pending_pods{"):
                labels, _, value = line.rpartition(" ")
                queue = labels.split('queue="', 1)[1].split('"', 1)[0]
                out[queue] = float(value)
        return out

    def kubeconfig_for(self, user: str) -> Path:
        """The kubeconfig of a token user: ADMIN_USER, RESTRICTED_USER or one of `users`."""
        if user not in self._tokens:
            raise ConfigError(f"no token user {user!r} in this control plane (have: {', '.join(self._tokens)})")
        return self.dir / f"kubeconfig-{_slug(user)}"

    def client(self, user: str = ADMIN_USER, **kw: Any) -> "Client":
        """A lightkube Client for `user`, ignoring proxy variables (trust_env=False): every request
        goes straight to 127.0.0.1."""
        from lightkube import Client, KubeConfig

        kw.setdefault("trust_env", False)
        return Client(config=KubeConfig.from_file(self.kubeconfig_for(user)), **kw)

    def pids(self) -> dict[str, int]:
        """The PID of each started component, by name."""
        return {p.name: p.pid for p in self._procs}

    def logs(self) -> dict[str, Path]:
        return {p.name: p.log for p in self._procs}

    # ---------------------------------------------------------------- lifecycle

    def __enter__(self) -> "ControlPlane":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, *, attempts: int = 3) -> "ControlPlane":
        """Start every component and wait until each is ready (each bounded by `ready_timeout`).
        A port taken by another process between choosing it and binding it restarts the whole
        start on fresh ports (up to `attempts` times); any other failure stops what was started and
        raises with the failing component's log tail."""
        for attempt in range(attempts):
            try:
                self._start_once()
                return self
            except _PortClash:
                self.stop(remove_dir=False)
                if attempt == attempts - 1:
                    raise
            except BaseException:
                self.stop(remove_dir=False)
                raise
        return self  # unreachable

    def _start_once(self) -> None:
        d = self.dir
        for sub in ("etcd-data", "pki", "logs", "kwok-home"):
            shutil.rmtree(d / sub, ignore_errors=True)
        (d / STATE_FILE).unlink(missing_ok=True)
        for sub in ("pki", "logs", "kwok-home"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        self.start_seconds.clear()
        self._started_wall = time.time()
        ep, pp, ap, sp = _free_ports(4)
        self.ports = {"etcd": ep, "etcd-peer": pp, "apiserver": ap}
        if self.with_scheduler:
            self.ports["scheduler"] = sp
        self._write_credentials()
        b = self.bin_dir
        assert isinstance(b, Path)

        # etcd: client, peer and (default) metrics all on loopback; no fsync (test data only).
        self._launch("etcd", [
            str(b / "etcd"), "--name=dlsched", f"--data-dir={d / 'etcd-data'}",
            f"--listen-client-urls=http://127.0.0.1:{ep}", f"--advertise-client-urls=http://127.0.0.1:{ep}",
            f"--listen-peer-urls=http://127.0.0.1:{pp}", f"--initial-advertise-peer-urls=http://127.0.0.1:{pp}",
            f"--initial-cluster=dlsched=http://127.0.0.1:{pp}", "--initial-cluster-state=new",
            "--unsafe-no-fsync", "--log-level=warn",
        ])
        self._wait_ready("etcd", lambda: _get(f"http://127.0.0.1:{ep}/health")[0] == 200)

        self._launch("kube-apiserver", [
            str(b / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{ep}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={ap}",
            f"--cert-dir={d / 'pki'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={d / 'pki/sa.key'}", f"--service-account-signing-key-file={d / 'pki/sa.key'}",
            f"--token-auth-file={d / 'pki/tokens.csv'}", "--authorization-mode=RBAC",
            # no kube-controller-manager: no ServiceAccount would ever exist, and the not-ready
            # taint that TaintNodesByCondition puts on new nodes would never be lifted
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--endpoint-reconciler-type=none",  # else it writes a `kubernetes` Endpoints (loopback is invalid there)
            "--service-cluster-ip-range=10.0.0.0/24",  # bookkeeping only: nothing dials a service IP
            "--allow-privileged=true",
        ])
        self._wait_ready("kube-apiserver", self._apiserver_ready)
        self._write_kubeconfigs()

        if self.with_scheduler:
            admin = self.kubeconfig()
            argv = [str(b / "kube-scheduler"), f"--kubeconfig={admin}", f"--authentication-kubeconfig={admin}",
                    f"--authorization-kubeconfig={admin}", "--bind-address=127.0.0.1", f"--secure-port={sp}",
                    "--leader-elect=false"]
            if self.scheduler_backoff_s is not None:
                # with --config, kube-scheduler ignores --kubeconfig and --leader-elect: both go in the file;
                # the default profile (its plugins and weights) is kept as it is
                cfg = d / "kube-scheduler.yaml"
                cfg.write_text(json.dumps({
                    "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                    "clientConnection": {"kubeconfig": str(admin)}, "leaderElection": {"leaderElect": False},
                    "podInitialBackoffSeconds": self.scheduler_backoff_s,
                    "podMaxBackoffSeconds": self.scheduler_backoff_s}))
                argv.append(f"--config={cfg}")
            self._launch("kube-scheduler", argv)
            # /healthz is in the scheduler's always-allowed paths; its cert is self-signed in memory
            insecure = ssl.create_default_context()
            insecure.check_hostname = False
            insecure.verify_mode = ssl.CERT_NONE
            self._wait_ready("kube-scheduler", lambda: _get(f"https://127.0.0.1:{sp}/healthz", ctx=insecure)[0] == 200)

        self._launch("kwok", [
            str(b / "kwok"), f"--kubeconfig={self.kubeconfig()}", f"--config={self.stages}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION[0]}={KWOK_NODE_ANNOTATION[1]}",
            f"--node-ip={NODE_IP}", f"--node-lease-duration-seconds={self.node_lease_seconds}",
        ])
        self._probe_kwok()
        self._write_state()

    def _launch(self, name: str, argv: list[str]) -> None:
        log = self.dir / "logs" / f"{name}.log"
        with open(log, "ab") as fh:
            popen = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     cwd=self.dir, env=_child_env(self.dir), start_new_session=True)
        proc = _Proc(name, popen, log, time.monotonic())
        try:
            proc.create_time = psutil.Process(popen.pid).create_time()
        except psutil.NoSuchProcess:
            pass
        self._procs.append(proc)
        self._write_state()

    def _wait_ready(self, name: str, check: Callable[[], bool], timeout: float | None = None) -> None:
        """Poll `check` until true; raise with the log tail when the process exits or time runs out."""
        proc = next(p for p in self._procs if p.name == name)
        deadline = time.monotonic() + (timeout or self.ready_timeout)
        delay = 0.05
        while True:
            if check():
                self.start_seconds[name] = round(time.monotonic() - proc.launched, 3)
                return
            if proc.popen.poll() is not None:
                tail = _tail(proc.log)
                if "address already in use" in tail:
                    raise _PortClash(f"{name} lost its port to another process:\n{tail}")
                raise DlschedError(f"{name} exited with code {proc.popen.returncode} while starting "
                                   f"(log {proc.log}):\n{tail}")
            if time.monotonic() > deadline:
                raise DlschedError(f"{name} was not ready after {timeout or self.ready_timeout:.0f} s "
                                   f"(log {proc.log}):\n{_tail(proc.log)}")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    def _apiserver_ready(self) -> bool:
        if not self.ca_file.is_file():
            return False
        try:
            ctx = ssl.create_default_context(cafile=str(self.ca_file))
        except ssl.SSLError:
            return False  # the file is being written
        return _get(f"{self.server}/readyz", ctx=ctx, token=self._tokens[ADMIN_USER])[0] == 200

    def _probe_kwok(self) -> None:
        """kwok has no health endpoint without a server (which we keep off), so readiness is shown
        the way that matters: a probe node turns Ready with InternalIP 127.0.0.1 (which also proves
        the API server accepts a loopback node address). The probe node is then deleted."""
        from lightkube.resources.core_v1 import Node

        name = f"dlsched-kwok-probe-{secrets.token_hex(3)}"
        with self.client() as c:
            c.create(_node_object(name, gpus=0, cpus=1, mem="1Gi", labels={"dlsched.io/probe": "true"}))
            try:
                self._wait_ready("kwok", lambda: _node_ready(c.get(Node, name)))
                node = c.get(Node, name)
                ips = [a.address for a in (node.status.addresses or []) if a.type == "InternalIP"]
                if ips != [NODE_IP]:
                    raise DlschedError(f"kwok reported InternalIP {ips} for a fake node, not [{NODE_IP}]")
            finally:
                c.delete(Node, name)

    def _write_credentials(self) -> None:
        """Service-account signing key, bearer tokens and the token file the API server reads."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption()).decode()
        _write_private(self.dir / "pki" / "sa.key", pem)
        users: dict[str, Sequence[str]] = {ADMIN_USER: ("system:masters",), RESTRICTED_USER: ()}
        users.update(self.users)
        self._tokens = {u: secrets.token_urlsafe(32) for u in users}
        rows = []
        for user, groups in users.items():
            if any(c in user + "".join(groups) for c in ',"\n'):
                raise ConfigError(f"token user {user!r} or its groups contain a comma, quote or newline")
            rows.append(f'{self._tokens[user]},{user},{user}' + (f',"{",".join(groups)}"' if groups else ""))
        _write_private(self.dir / "pki" / "tokens.csv", "\n".join(rows) + "\n")

    def _write_kubeconfigs(self) -> None:
        for user, token in self._tokens.items():
            conf = {
                "apiVersion": "v1", "kind": "Config",
                "clusters": [{"name": "dlsched-local", "cluster": {"server": self.server,
                                                                   "certificate-authority": str(self.ca_file)}}],
                "users": [{"name": user, "user": {"token": token}}],
                "contexts": [{"name": "dlsched-local", "context": {"cluster": "dlsched-local", "user": user}}],
                "current-context": "dlsched-local",
            }
            _write_private(self.dir / f"kubeconfig-{_slug(user)}", yaml.safe_dump(conf, sort_keys=False))

    def _write_state(self) -> None:
        state = {
            "version": 1,
            "workdir": str(self.dir),
            "started_at": self._started_wall,
            "server": self.server if "apiserver" in self.ports else None,
            "kubeconfig": str(self.dir / f"kubeconfig-{_slug(ADMIN_USER)}"),
            "ports": self.ports,
            "start_seconds": self.start_seconds,
            "processes": [{"name": p.name, "pid": p.pid, "create_time": p.create_time,
                           "exe": str(Path(p.popen.args[0]))} for p in self._procs],  # type: ignore[index]
        }
        tmp = self.dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.dir / STATE_FILE)

    def restart_apiserver(self, *, down_s: float = 0.0, grace: float = 2.0) -> float:
        """Stop kube-apiserver by its PID (SIGTERM, then SIGKILL after `grace` s: it stops listening
        at once, but then waits more than 10 s for open watches to end), wait `down_s`, and start
        it again with the same arguments: the same port, etcd, certificates (reused from
        --cert-dir) and tokens, so clients and watches reconnect to it unchanged. Returns once it
        answers /readyz: the seconds it was away. A fault for the chaos tests and benchmarks."""
        i, old = next((i, p) for i, p in enumerate(self._procs) if p.name == "kube-apiserver")
        took = self.start_seconds.get("kube-apiserver")
        t0 = time.monotonic()
        _terminate(old.pid, old.create_time, old.popen, grace)
        time.sleep(down_s)
        del self._procs[i]
        self._launch("kube-apiserver", list(old.popen.args))  # type: ignore[arg-type]
        self._procs.insert(i, self._procs.pop())  # keep the stop order: kwok, (scheduler,) API server, etcd
        self._wait_ready("kube-apiserver", self._apiserver_ready)
        if took is not None:  # start_seconds keeps the first start's figure
            self.start_seconds["kube-apiserver"] = took
        self._write_state()
        return time.monotonic() - t0

    def alive(self) -> dict[str, bool]:
        """Whether each started component is still running."""
        return {p.name: p.popen.poll() is None for p in self._procs}

    def stop(self, *, remove_dir: bool | None = None) -> dict[str, str]:
        """Stop every component by its own PID, newest first (SIGTERM, 10 s, SIGKILL); returns the
        outcome per component. Removes the work dir when this object made it (or `remove_dir`)."""
        out: dict[str, str] = {}
        for proc in reversed(self._procs):
            out[proc.name] = _terminate(proc.pid, proc.create_time, proc.popen)
        self._procs = []
        (self.dir / STATE_FILE).unlink(missing_ok=True)
        if remove_dir if remove_dir is not None else self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        return out

    def detach(self) -> None:
        """Forget the processes without stopping them (`dlsched k8s up --detach`); state.json keeps
        their PIDs for `stop_recorded`."""
        self._write_state()
        for p in self._procs:
            p.popen.returncode = 0  # keeps Popen.__del__ from warning about a running child
        self._procs = []

    def ensure_namespace(self, name: str) -> None:
        """Create namespace `name` unless it exists."""
        from lightkube import ApiError
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Namespace

        with self.client() as client:
            try:
                client.create(Namespace(metadata=ObjectMeta(name=name)))
            except ApiError as exc:
                if exc.status.code != 409:
                    raise

    # ---------------------------------------------------------------- fake GPU nodes

    def add_nodes(self, count: int, gpus_per_node: int = 8, racks: int = 2, zones: int = 1,
                  gpu_type: str = "NVIDIA-A100-SXM4-80GB", pool: str = "default", cpus: int = 96,
                  mem: str = "1Ti", prefix: str = "gpu-", timeout: float | None = None) -> list[str]:
        """Create `count` kwok fake GPU nodes and wait until all are Ready (bounded by `timeout`,
        default `ready_timeout`). Nodes are spread over racks in blocks (ceil(count/racks) per
        rack), racks over zones round-robin. Names are `{prefix}r{rack}-n{i}`; the rack label is
        `{prefix}r{rack}` and zones are `zone-a`, `zone-b`, ... Returns the node names."""
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Node

        if count < 0 or gpus_per_node < 0 or racks < 1 or zones < 1 or cpus < 1:
            raise ConfigError("add_nodes needs count >= 0, gpus_per_node >= 0, racks >= 1, zones >= 1, cpus >= 1")
        per_rack = max(1, math.ceil(count / racks))
        names: list[str] = []
        t0 = time.monotonic()
        with self.client() as c:
            for i in range(count):
                rack = i // per_rack
                name = f"{prefix}r{rack}-n{i % per_rack}"
                labels = {
                    "topology.kubernetes.io/zone": f"zone-{chr(ord('a') + rack % zones)}" if zones <= 26 else f"zone-{rack % zones}",
                    "dlsched.io/rack": f"{prefix}r{rack}",
                    "dlsched.io/pool": pool,
                    "nvidia.com/gpu.product": gpu_type,
                }
                try:
                    c.create(_node_object(name, gpus=gpus_per_node, cpus=cpus, mem=mem, labels=labels))
                except ApiError as exc:
                    raise DlschedError(f"cannot create node {name}: {exc.status.message}") from None
                names.append(name)
            want = set(names)
            deadline = time.monotonic() + (timeout or self.ready_timeout)
            while True:
                ready = {n.metadata.name for n in c.list(Node, labels={"type": "kwok"}) if n.metadata.name in want
                         and _node_ready(n)}
                if ready == want:
                    break
                if time.monotonic() > deadline:
                    kwok = next((p for p in self._procs if p.name == "kwok"), None)
                    raise DlschedError(f"{len(want - ready)} of {count} fake nodes not Ready after "
                                       f"{timeout or self.ready_timeout:.0f} s (e.g. {sorted(want - ready)[:3]}); "
                                       f"kwok log:\n{_tail(kwok.log) if kwok else '(kwok not started here)'}")
                time.sleep(0.2)
        self.start_seconds["add_nodes"] = round(time.monotonic() - t0, 3)
        return names

    def memory_rss(self) -> dict[str, int]:
        """Resident memory (bytes) of each running component, for the benchmarks."""
        out = {}
        for p in self._procs:
            try:
                out[p.name] = psutil.Process(p.pid).memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return out


def _slug(user: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in user)


def _node_ready(node: Any) -> bool:
    conds = (node.status.conditions or []) if node.status is not None else []
    return any(cd.type == "Ready" and cd.status == "True" for cd in conds)


def _node_object(name: str, *, gpus: int, cpus: int, mem: str, labels: Mapping[str, str]) -> Any:
    """A kwok fake node (docs/kubernetes.md §3.3), status included in the create: the API server
    keeps a node's status on create, as kubelet registration relies on. The kwok taint keeps any
    default scheduler's pods off; dlsched binds its pods itself."""
    from lightkube.models.core_v1 import NodeAddress, NodeSpec, NodeStatus, Taint
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Node

    res = {"cpu": str(cpus), "memory": mem, "pods": "110", "nvidia.com/gpu": str(gpus)}
    return Node(
        metadata=ObjectMeta(
            name=name,
            annotations={KWOK_NODE_ANNOTATION[0]: KWOK_NODE_ANNOTATION[1], "node.alpha.kubernetes.io/ttl": "0"},
            labels={"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                    "type": "kwok", **labels},
        ),
        spec=NodeSpec(taints=[Taint(key=KWOK_NODE_ANNOTATION[0], value=KWOK_NODE_ANNOTATION[1], effect="NoSchedule")]),
        status=NodeStatus(capacity=dict(res), allocatable=dict(res),
                          addresses=[NodeAddress(type="InternalIP", address=NODE_IP),
                                     NodeAddress(type="Hostname", address=name)]),
    )


def bind_pod(client: "Client", namespace: str, pod: str, node: str) -> None:
    """Bind `pod` to `node` through the Binding subresource (POST pods/{pod}/binding), as a
    scheduler does; the API server refuses it (409) if the pod is already bound.

    Why not just `client.create(Pod.Binding(...), pod, namespace=ns)`: the API server answers a
    binding with a `Status` (201 Success), not the Binding, and lightkube 1.0.1 decodes the answer
    as a PodBinding, raising msgspec.ValidationError ("missing required field `target`") after the
    binding has succeeded. lightkube raises ApiError for every non-2xx answer before decoding, so
    that ValidationError can only mean success and is swallowed here (and only here).
    """
    import msgspec
    from lightkube.models.core_v1 import ObjectReference
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import Pod

    binding = Pod.Binding(metadata=ObjectMeta(name=pod, namespace=namespace),
                          target=ObjectReference(apiVersion="v1", kind="Node", name=node))
    try:
        client.create(binding, pod, namespace=namespace)
    except msgspec.ValidationError:
        pass  # 2xx with a Status body: bound


# --------------------------------------------------------------------------- detached control planes


def read_state(workdir: Path | str) -> dict[str, Any] | None:
    """The state.json a started control plane left in `workdir`, or None."""
    path = Path(workdir).expanduser() / STATE_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise DlschedError(f"cannot read {path}: {exc}") from None


def running_recorded(workdir: Path | str) -> dict[str, int]:
    """The recorded components still running as the very processes that were started (PID and
    start time both match), by name."""
    state = read_state(workdir) or {}
    return {p["name"]: p["pid"] for p in state.get("processes", [])
            if _same_process(int(p["pid"]), float(p.get("create_time", 0.0))) is not None}


def stop_recorded(workdir: Path | str) -> dict[str, str]:
    """Stop a (detached) control plane by the PIDs recorded in `workdir`/state.json, newest first.
    A PID whose start time no longer matches belongs to another process now and is left alone
    ("gone"). Returns the outcome per component and removes state.json."""
    state = read_state(workdir)
    if state is None:
        raise DlschedError(f"no control plane recorded in {Path(workdir).expanduser()} (no {STATE_FILE})")
    out: dict[str, str] = {}
    for p in reversed(state.get("processes", [])):
        out[p["name"]] = _terminate(int(p["pid"]), float(p.get("create_time", 0.0)), None)
    (Path(workdir).expanduser() / STATE_FILE).unlink(missing_ok=True)
    return out
