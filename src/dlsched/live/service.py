"""`dlsched serve`: the store, a backend, a policy and the controller behind the REST API.

One process: the controller steps in a daemon thread, uvicorn serves the API in the main thread
(so it owns SIGINT/SIGTERM). When uvicorn returns, the controller thread is stopped first, then
the controller checkpoints and stops the running jobs (or, with `stop_jobs_on_exit: false`,
leaves them running for the next start to adopt). The API has no authentication, so it binds
127.0.0.1 unless told otherwise, and says so loudly when told otherwise.
"""

from __future__ import annotations

import ipaddress
import logging
import signal
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dlsched.core.errors import ConfigError
from dlsched.live.retry import RetryConfig

log = logging.getLogger("dlsched.service")


class ServiceConfig(BaseModel):
    """Settings of `dlsched serve` (YAML keys; unknown keys are errors)."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field("127.0.0.1", description="address to bind; the API has no authentication")
    port: int = Field(8765, ge=0, le=65535)
    db_url: str | None = Field(None, description="SQLAlchemy URL (default: sqlite file in work_dir)")
    work_dir: Path = Field(Path("dlsched-service"), description="job directories and the default database")
    backend: Literal["local", "ray", "dry"] = Field(
        "local", description="local processes, a Ray cluster, or 'dry' (no training: made-up progress)")
    nodes: Path | None = Field(None, description="virtual-node YAML of the local backend (default: this machine)")
    ray_address: str | None = Field(None, description="Ray cluster address (default: start a local one)")
    policy: str = "optimus"
    policy_options: dict[str, Any] = Field(default_factory=dict)
    tick: float = Field(1.0, gt=0, le=3600, description="seconds between controller rounds")
    stop_jobs_on_exit: bool = Field(True, description="checkpoint and stop jobs on exit (else leave them for adoption)")
    retry: RetryConfig = Field(default_factory=RetryConfig, description="backoff between failed runs of a job")

    def database_url(self) -> str:
        return self.db_url or f"sqlite:///{(self.work_dir / 'dlsched.db').resolve()}"


def load_service_config(path: Path | None, **overrides: Any) -> ServiceConfig:
    """A YAML config (or the defaults) with the command line's non-None values on top."""
    from pydantic import ValidationError

    from dlsched.config import describe_validation_error, read_yaml_model

    base = read_yaml_model(Path(path), ServiceConfig, "service config") if path is not None else ServiceConfig()
    updates = {k: v for k, v in overrides.items() if v is not None}
    try:
        return ServiceConfig.model_validate({**base.model_dump(exclude_unset=True), **updates})
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(exc, str(path or "command line"))) from None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def make_backend(cfg: ServiceConfig):
    """The configured backend; the real ones are imported only when asked for."""
    if cfg.backend == "local":
        try:
            from dlsched.live.local_backend import LocalBackend
        except ImportError as exc:
            raise ConfigError(f"the local backend cannot be loaded: {exc}") from None
        return LocalBackend(nodes=cfg.nodes, standby=True)
    if cfg.backend == "ray":
        try:
            from dlsched.live.ray_backend import RayBackend
        except ImportError as exc:
            raise ConfigError(f"the Ray backend cannot be loaded ({exc}); install it with `pip install 'dlsched[ray]'`") from None
        return RayBackend(address=cfg.ray_address)
    from dlsched.core.cluster import Cluster
    from dlsched.live.dry_backend import DryBackend
    from dlsched.presets import load_cluster

    cluster = load_cluster(cfg.nodes) if cfg.nodes is not None else Cluster.homogeneous(
        "dry", nodes=2, gpus=4, cpus=16, mem=64)
    return DryBackend(cluster)


class Service:
    """Everything `run_service` builds, in an object tests and embedders can start and stop."""

    def __init__(self, cfg: ServiceConfig):
        from dlsched.live.controller import Controller, live_refusal
        from dlsched.live.metrics import LiveMetrics
        from dlsched.live.store import Store
        from dlsched.policies.registry import make_policy

        self.cfg = cfg
        policy = make_policy(cfg.policy, **cfg.policy_options)  # bad names fail before anything is made
        refusal = live_refusal(policy)  # ... and so does a policy that cannot run live
        if refusal:
            raise ConfigError(refusal)
        cfg.work_dir.mkdir(parents=True, exist_ok=True)
        self.store = Store(cfg.database_url())
        self.metrics = LiveMetrics()
        self.backend = make_backend(cfg)
        try:
            self.controller = Controller(self.store, self.backend, policy, work_dir=cfg.work_dir, tick=cfg.tick,
                                         metrics=self.metrics, retry=cfg.retry)
        except BaseException:
            self.backend.close()
            raise
        self.stop_event = threading.Event()
        self.thread: threading.Thread | None = None

    def _loop(self) -> None:
        try:
            self.controller.run(self.stop_event)
        except Exception:  # the API stays up to show what happened; the log has the trace
            log.exception("the controller stopped on an error; the API keeps serving the store")

    def start_controller(self) -> None:
        self.thread = threading.Thread(target=self._loop, name="dlsched-controller", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        """Stop the controller thread, then the jobs (or leave them for adoption), then the store."""
        self.stop_event.set()
        if self.thread is not None:
            self.thread.join(timeout=max(30.0, 5 * self.cfg.tick))
            if self.thread.is_alive():
                log.warning("the controller thread did not stop within its timeout")
        try:
            self.controller.shutdown(self.cfg.stop_jobs_on_exit)
        finally:
            if self.cfg.stop_jobs_on_exit:  # close() stops what the backend runs: not when leaving jobs up
                self.backend.close()
            self.store.close()


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


def run_service(cfg: ServiceConfig, *, announce=print) -> None:
    """Serve until SIGINT/SIGTERM, then shut down cleanly (see the module docstring)."""
    import uvicorn

    from dlsched.live.api import create_app

    if not is_loopback(cfg.host):
        log.warning("binding %s: the dlsched API has no authentication; anyone who can reach this port can "
                    "submit and cancel jobs", cfg.host)
    svc = Service(cfg)
    app = create_app(svc.store, svc.controller, svc.metrics)
    shown = f"[{cfg.host}]" if ":" in cfg.host else cfg.host
    if cfg.host in ("0.0.0.0", "::"):
        shown = "127.0.0.1"
    store_url = svc.store.engine.url.render_as_string(hide_password=True)  # never print a password
    announce(f"dlsched service: policy {cfg.policy}, backend {cfg.backend}, store {store_url}")
    announce(f"status page: http://{shown}:{cfg.port}/   (API docs: /docs, metrics: /metrics)")
    svc.start_controller()
    previous = _absorb_exit_signals()
    try:
        uvicorn.Server(uvicorn.Config(app, host=cfg.host, port=cfg.port, log_level="warning",
                                      timeout_graceful_shutdown=5)).run()
    finally:
        _restore_signals(previous)  # a second Ctrl-C now interrupts the shutdown
        announce("stopping: " + ("checkpointing running jobs" if cfg.stop_jobs_on_exit
                                 else "leaving running jobs up for the next start to adopt"))
        svc.stop()
