"""`dlsched serve`: the store, a backend, a policy and the controller behind the REST API.

One process: the controller steps in a daemon thread, uvicorn serves the API in the main thread
(so it owns SIGINT/SIGTERM). When uvicorn returns, the controller thread is stopped first, then
the controller checkpoints and stops the running jobs (or, with `stop_jobs_on_exit: false`,
leaves them running for the next start to adopt).

Start-up order matters, because the controller adopts the store's running jobs as it is built:
the API port is bound first (a second service on a taken port fails before it opens anything),
then the work dir and the store are leased (`live/store/lease.py`: a second service on either refuses,
naming the owner), and only then is the controller made. A service that loses its lease stops
scheduling and leaves the jobs alone: they belong to the new owner.

The API is open unless a token is set (`live/auth.py`), so it binds 127.0.0.1 unless told
otherwise, and says so loudly when told otherwise without a token.
"""

from __future__ import annotations

import ipaddress
import logging
import signal
import socket
import threading
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dlsched.core.errors import ConfigError, DlschedError
from dlsched.live.api.auth import ApiAuth, AuthScope, read_secret_file, resolve_token
from dlsched.live.backends.registry import backend_entry, backend_options, backends_help, make_backend
from dlsched.live.store.lease import DEFAULT_TTL, Owner, StopWhenLost, StoreLease, WorkDirLock
from dlsched.live.controller.retry import RetryConfig

log = logging.getLogger("dlsched.service")


class ServiceConfig(BaseModel):
    """Settings of `dlsched serve` (YAML keys; unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field("127.0.0.1", description="address to bind; without a token the API is open to whoever reaches it")
    port: int = Field(8765, ge=0, le=65535)
    db_url: str | None = Field(None, description="SQLAlchemy URL (default: sqlite file in work_dir)")
    db_url_file: Path | None = Field(None, description="file holding the SQLAlchemy URL (keeps a password out of `ps`)")
    token_file: Path | None = Field(None, description="file holding the API token (else DLSCHED_TOKEN; none: no auth)")
    auth: AuthScope = Field("writes", description="with a token: 'writes' (POST/PUT/PATCH/DELETE need it) or 'all'")
    lease_seconds: float = Field(DEFAULT_TTL, ge=3, le=3600,
                                 description="the store lease's ttl: another host may take a silent store over after it")
    work_dir: Path = Field(Path("dlsched-service"), description="job directories and the default database")
    backend: str = Field("local", description=f"where jobs run: {backends_help()}")
    backend_options: dict[str, Any] = Field(default_factory=dict,
                                            description="the backend's own options (`dlsched backends` lists them)")
    nodes: Path | None = Field(None, description="shorthand for backend_options.nodes (local and dry backends)")
    ray_address: str | None = Field(None, description="shorthand for backend_options.address (ray backend)")
    policy: str = "optimus"
    policy_options: dict[str, Any] = Field(default_factory=dict)
    tick: float = Field(1.0, gt=0, le=3600, description="seconds between controller rounds")
    stop_jobs_on_exit: bool = Field(True, description="checkpoint and stop jobs on exit (else leave them for adoption)")
    retry: RetryConfig = Field(default_factory=RetryConfig, description="backoff between failed runs of a job")
    dljobs: bool = Field(True, description="with the kubernetes backend: keep the DLJobs of its namespace and the "
                         "store in step (kubectl's door, live/api/dljobs.py); by default closed with a warning where the "
                         "CRD is not installed, an error when set to true explicitly")

    @model_validator(mode="after")
    def _one_database(self) -> "ServiceConfig":
        if self.db_url is not None and self.db_url_file is not None:
            raise ValueError("give db_url or db_url_file, not both")
        if self.dljobs and "dljobs" in self.model_fields_set and self.backend != "kubernetes":
            raise ValueError(f"dljobs: true needs backend: kubernetes (DLJobs are a Kubernetes resource), "
                             f"not {self.backend!r}")
        return self

    def backend_settings(self) -> dict[str, Any]:
        """`backend_options` with the shorthands folded in (a shorthand the backend does not take
        is an error, not ignored), checked against the backend's options model."""
        options = dict(self.backend_options)
        for key, target in (("nodes", "nodes"), ("ray_address", "address")):
            value = getattr(self, key)
            if value is None:
                continue
            if target not in backend_entry(self.backend).options.model_fields:
                raise ConfigError(f"{key} does not apply to the {self.backend!r} backend")
            options.setdefault(target, value)
        backend_options(self.backend, options)
        return options

    def database_url(self) -> str:
        if self.db_url:
            return self.db_url
        if self.db_url_file is not None:
            return read_secret_file(self.db_url_file, "database URL file")
        return f"sqlite:///{(self.work_dir / 'dlsched.db').resolve()}"

    def api_auth(self) -> ApiAuth | None:
        """The API's authentication: the token from token_file or DLSCHED_TOKEN, or None."""
        token = resolve_token(self.token_file)
        if token is None:
            if self.auth == "all":
                raise ConfigError("auth: all needs a token: give --token-file, token_file: or DLSCHED_TOKEN")
            return None
        return ApiAuth(token, self.auth)


#: Keys that name one thing two ways: a value given on top replaces the other from below.
_ALTERNATIVES = {"db_url": "db_url_file", "db_url_file": "db_url"}


def load_service_config(path: Path | None, **overrides: Any) -> ServiceConfig:
    """A YAML config (or the defaults) with the command line's non-None values on top."""
    from pydantic import ValidationError

    from dlsched.config import describe_validation_error, read_yaml_model

    base = read_yaml_model(Path(path), ServiceConfig, "service config") if path is not None else ServiceConfig()
    updates = {k: v for k, v in overrides.items() if v is not None}
    below = base.model_dump(exclude_unset=True)
    for key in updates:
        below.pop(_ALTERNATIVES.get(key, ""), None)
    if "backend_options" in updates:  # -o KEY=VALUE on top of the file's options, key by key
        updates["backend_options"] = {**below.get("backend_options", {}), **updates["backend_options"]}
    try:
        return ServiceConfig.model_validate({**below, **updates})
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, str(path or "command line"))) from None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Service:
    """Everything `run_service` builds, in an object tests and embedders can start and stop.

    `port` is the port actually bound (recorded with the lease, so a refused service can name
    it); nothing here touches a job before both leases are held."""

    def __init__(self, cfg: ServiceConfig, *, port: int | None = None):
        from dlsched.live.controller import Controller, live_refusal
        from dlsched.live.api.metrics import LiveMetrics
        from dlsched.live.store import Store
        from dlsched.policies.registry import make_policy

        self.cfg = cfg
        backend_settings = cfg.backend_settings()  # a bad backend or option fails before anything is made
        policy = make_policy(cfg.policy, **cfg.policy_options)
        refusal = live_refusal(policy)  # ... and so does a policy that cannot run live
        if refusal:
            raise ConfigError(refusal)
        db_url = cfg.database_url()  # a missing URL file fails before the work dir is made
        try:
            cfg.work_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the work dir {cfg.work_dir}: {exc.strerror or exc}") from None
        self.on_lost: list[Callable[[str], None]] = []  # called with the reason if the lease is lost while serving
        owner = Owner.me(port if port is not None else cfg.port)
        with ExitStack() as undo:
            self.work_dir_lock = WorkDirLock(cfg.work_dir, owner)
            self.work_dir_lock.acquire()
            undo.callback(self.work_dir_lock.release)
            self.store = Store(db_url)
            undo.callback(self.store.close)
            self.lease = StoreLease(self.store, owner, ttl=cfg.lease_seconds)
            self.lease.acquire()
            undo.callback(self.lease.release)
            self.lease.start_heartbeat(self._lease_lost)
            self.metrics = LiveMetrics()
            self.backend = make_backend(cfg.backend, backend_settings)
            undo.callback(self.backend.close)
            self.controller = Controller(self.store, self.backend, policy, work_dir=cfg.work_dir, tick=cfg.tick,
                                         metrics=self.metrics, retry=cfg.retry)
            self.dljobs = self._dljob_sync(cfg)
            if self.dljobs is not None:
                undo.callback(self.dljobs.close)
            undo.pop_all()
        self.stop_event = StopWhenLost(self.lease, self.backend.lost)
        self.thread: threading.Thread | None = None

    def _dljob_sync(self, cfg: ServiceConfig) -> Any:
        """The DLJob door (`live/api/dljobs.py`) on the Kubernetes backend's namespace, or None: another
        backend, `dljobs: false`, or (said loudly) no CRD or no right to DLJobs while `dljobs` was
        left at its default. Set explicitly, a door that cannot open is an error."""
        if cfg.backend != "kubernetes" or not cfg.dljobs:
            return None
        from dlsched.live.api.dljobs import DLJobSync

        api = self.backend.api  # the backend's kubeconfig and namespace: one cluster, one namespace
        sync = DLJobSync(self.store, api.config, api.namespace, admission=self.controller.admission_problems,
                         interval=max(0.5, cfg.tick), owns_store=lambda: not self.stop_event.is_set(),
                         trust_env=api.trust_env)
        why = sync.check()
        if not why:
            return sync
        sync.close()
        if "dljobs" in cfg.model_fields_set:
            raise ConfigError(f"dljobs: true, but {why}")
        log.warning("the DLJob door is closed: %s (dljobs: false silences this)", why)
        return None

    def _lease_lost(self, why: str) -> None:
        for hook in self.on_lost:
            hook(why)

    def _loop(self) -> None:
        try:
            self.controller.run(self.stop_event)
        except Exception:  # the API stays up to show what happened; the log has the trace
            log.exception("the controller stopped on an error; the API keeps serving the store")
        if self.backend.lost():  # another controller leads the cluster now: stop serving too
            self._lease_lost(self.lost())

    def lost(self) -> str:
        """Why this service stopped owning its jobs ("" while it owns them): its store lease, or
        the backend's own (a Kubernetes Lease) passed to another controller."""
        if self.lease.lost:
            return f"lost the lease on the store ({self.lease.lost})"
        if self.backend.lost():
            return f"the {self.cfg.backend} backend lost its leadership ({self.backend.lost()})"
        return "" if self.lease.valid() else "lost the lease on the store (it was not renewed in time)"

    def start_controller(self) -> None:
        self.thread = threading.Thread(target=self._loop, name="dlsched-controller", daemon=True)
        self.thread.start()
        if self.dljobs is not None:
            self.dljobs.start()

    def stop(self) -> None:
        """Stop the controller thread, then the jobs (or leave them for adoption: always when the
        lease was lost, as they belong to the new owner), then release the leases and the store."""
        self.stop_event.set()
        if self.dljobs is not None:  # no job added or cancelled through kubectl from here on
            self.dljobs.stop()
        if self.thread is not None:
            self.thread.join(timeout=max(30.0, 5 * self.cfg.tick))
            if self.thread.is_alive():
                log.warning("the controller thread did not stop within its timeout")
        stop_jobs = self.cfg.stop_jobs_on_exit and not self.lost()
        if self.cfg.stop_jobs_on_exit and not stop_jobs:
            log.error("not stopping the jobs: they may belong to another service now (%s)", self.lost())
        try:
            self.controller.shutdown(stop_jobs)
            if self.dljobs is not None and not self.lost():
                self.dljobs.publish_last()  # kubectl shows the jobs as the shutdown left them
        finally:
            if self.dljobs is not None:
                self.dljobs.close()
            try:
                if stop_jobs:  # close() stops what the backend runs: not when leaving jobs up
                    self.backend.close()
                else:
                    self.backend.detach()
            finally:
                self.lease.release()
                self.store.close()
                self.work_dir_lock.release()


def _absorb_exit_signals() -> dict:
    """uvicorn re-raises the SIGINT/SIGTERM it caught, under the handlers that were installed
    before it started, once it has shut down; with the default handlers that would kill the
    process (SIGTERM) or raise KeyboardInterrupt before the jobs are checkpointed. So install
    handlers that ignore that replay while uvicorn runs."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}


def _restore_signals(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def exposure_warning(host: str, auth: ApiAuth | None) -> str:
    """What to say loudly when the API listens beyond this machine ("" on loopback)."""
    if is_loopback(host):
        return ""
    if auth is None:
        return (f"binding {host} with no token: anyone who can reach this port can submit and cancel jobs; "
                "set one with --token-file or DLSCHED_TOKEN (docs/LIVE.md, Security)")
    reads = "" if auth.scope == "all" else "; reads are open (jobs, status page, metrics): auth: all closes them"
    return f"binding {host}: the token travels in clear over plain HTTP, put a TLS proxy in front{reads}"


def bind_api_socket(host: str, port: int) -> socket.socket:
    """The API's listening socket, bound before anything else starts: a port already taken is a
    one-line error before the store is opened or a job touched. Listening at once also keeps a
    second service from binding it meanwhile (SO_REUSEADDR lets two sockets bind one port until
    one of them listens)."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                          flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {getattr(exc, 'strerror', None) or exc}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # restart while old connections linger
        sock.bind(addr)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        hint = " (another service on this port? choose another with --port)" if port else ""
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}") from None
    return sock


def run_service(cfg: ServiceConfig, *, announce=print) -> None:
    """Serve until SIGINT/SIGTERM, then shut down cleanly (see the module docstring)."""
    import uvicorn

    from dlsched.live.api import create_app
    from dlsched.live.store.engine import mask_url

    auth = cfg.api_auth()  # a missing token file fails before anything is bound
    warning = exposure_warning(cfg.host, auth)
    if warning:
        log.warning("%s", warning)
    sock = bind_api_socket(cfg.host, cfg.port)
    with sock:
        port = sock.getsockname()[1]
        svc = Service(cfg, port=port)
        app = create_app(svc.store, svc.controller, svc.metrics, auth=auth)
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5))
        svc.on_lost.append(lambda why: setattr(server, "should_exit", True))
        shown = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
        if cfg.host in ("0.0.0.0", "::"):
            shown = "127.0.0.1"
        announce(f"dlsched service: policy {cfg.policy}, backend {cfg.backend}, store {mask_url(svc.store.url)}"
                 + (f", auth: token for {'every request' if auth.scope == 'all' else 'changes'}" if auth else ""))
        if svc.dljobs is not None:
            announce(f"kubectl door: DLJobs of namespace {svc.dljobs.namespace} (kubectl get dljobs -n "
                     f"{svc.dljobs.namespace})")
        if svc.lease.taken_from:
            announce(f"took the store over from a stale lease: {svc.lease.taken_from}")
        announce(f"status page: http://{shown}:{port}/   (API docs: /docs, metrics: /metrics)")
        svc.start_controller()
        previous = _absorb_exit_signals()
        try:
            server.run(sockets=[sock])
        finally:
            _restore_signals(previous)  # a second Ctrl-C now interrupts the shutdown
            lost = svc.lost()  # asked before `stop`, which releases the leases
            if not lost:
                announce("stopping: " + ("checkpointing running jobs" if cfg.stop_jobs_on_exit
                                         else "leaving running jobs up for the next start to adopt"))
            svc.stop()
    if lost:
        raise DlschedError(f"stopped: {lost}; its jobs were left running")
