"""Leader election on a `coordination.k8s.io/v1` Lease: one dlsched controller per namespace.

The protocol is client-go's `leaderelection` (what kube-scheduler uses), with its defaults: the
Lease `dlsched-controller` holds `holderIdentity` (host-pid-uuid, so a restarted process is a new
candidate), `leaseDurationSeconds` 15, and the holder renews it every 2 s; a holder that has not
renewed for 10 s (the renew deadline) gives up, before any other candidate may take over (15 s).

A candidate takes the Lease when it is absent (create; 409 AlreadyExists: another won), has no
holder (released), is its own, or has expired. Expired means either of:
- `renewTime + leaseDurationSeconds` is in the past by this machine's clock (so a controller
  restarted after a crash takes over at once instead of watching for a full lease duration; this
  trusts the candidates' clocks to agree within a few seconds, as NTP keeps them), or
- the Lease record has not changed for `leaseDurationSeconds` as this candidate observed it
  (client-go's rule, which needs no clock agreement).
Every write is a `replace` carrying the resourceVersion it read, so two candidates racing for an
expired Lease cannot both win: the loser gets 409 Conflict. Taking it from another holder counts a
transition (`leaseTransitions`).

`acquire(timeout)` blocks until this candidate leads (None: forever; a second controller waits
there), then a daemon thread renews. When renewing fails for `renew_deadline` seconds, or the Lease
shows another holder, `lost` is set to the reason and the `on_lost` callbacks run once: the owner
must stop acting at once (the new leader owns the pods now). `release()` stops renewing and, if
this candidate still holds the Lease, clears the holder so the next candidate takes over at once.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any, Callable

from dlsched.core.errors import ConfigError

log = logging.getLogger("dlsched.k8s")

LEASE_NAME = "dlsched-controller"
LEASE_DURATION_S = 15
RENEW_PERIOD_S = 2.0
RENEW_DEADLINE_S = 10.0
RETRY_PERIOD_S = 2.0


def default_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _utc(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc)


class LeaderLease:
    """One candidate for the Lease `name` in `namespace` (see the module docstring)."""

    def __init__(self, client: Any, namespace: str, name: str = LEASE_NAME, identity: str | None = None, *,
                 lease_duration: int = LEASE_DURATION_S, renew_period: float = RENEW_PERIOD_S,
                 renew_deadline: float = RENEW_DEADLINE_S, retry_period: float = RETRY_PERIOD_S,
                 clock: Callable[[], float] = time.time):
        if not renew_period < renew_deadline < lease_duration:
            raise ValueError(f"need renew_period ({renew_period}) < renew_deadline ({renew_deadline}) < "
                             f"lease_duration ({lease_duration})")
        self.client, self.namespace, self.name = client, namespace, name
        self.identity = identity or default_identity()
        self.lease_duration, self.renew_period = int(lease_duration), renew_period
        self.renew_deadline, self.retry_period = renew_deadline, retry_period
        self.clock = clock
        self.lost: str | None = None
        self.on_lost: list[Callable[[str], None]] = []
        self.holder: str | None = None  # the holder last read (for people: who leads)
        self.acquired_at: float | None = None
        self.last_renew: float | None = None
        self._observed: tuple | None = None  # (holder, renewTime, resourceVersion) last seen
        self._observed_at = 0.0  # our monotonic time when `_observed` last changed
        self._leading = False
        self._expires_in: float | None = None  # seconds until another holder's lease expires, as last read
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def leading(self) -> bool:
        return self._leading and self.lost is None

    # ------------------------------------------------------------------ acquire / release
    def acquire(self, timeout: float | None = None) -> bool:
        """Block until this candidate holds the Lease (True) or `timeout` seconds pass (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        waited = False
        while True:
            try:
                got = self._try()
            except ConfigError:
                raise
            except Exception as exc:  # noqa: BLE001
                # the API server unreachable (restarting, a network blip): a waiting candidate keeps
                # waiting, as the renew loop keeps renewing; it used to die here with a traceback
                # (found by tests/test_k8s_chaos.py: a standby killed by an API server restart)
                log.warning("reading Lease %s/%s: %s: %s", self.namespace, self.name, type(exc).__name__, exc)
                got = False
            if got:
                self._leading, self.lost = True, None
                self.acquired_at = self.last_renew = self.clock()
                self._stop.clear()
                self._thread = threading.Thread(target=self._renew_loop, name="dlsched-k8s-lease", daemon=True)
                self._thread.start()
                log.info("leading as %s (Lease %s/%s)", self.identity, self.namespace, self.name)
                return True
            if not waited:
                log.info("Lease %s/%s is held by %s: waiting to lead", self.namespace, self.name, self.holder)
                waited = True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            # poll every retry period, but wake when the holder's lease runs out if that is sooner,
            # so a crashed leader is replaced one lease duration after its last renewal
            pause = self.retry_period if self._expires_in is None else min(self.retry_period, self._expires_in + 0.05)
            if deadline is not None:
                pause = min(pause, max(0.0, deadline - time.monotonic()))
            time.sleep(max(0.01, pause))

    def release(self) -> None:
        """Stop renewing; hand the Lease over at once if we still hold it."""
        self.stop_renewing()
        if not self._leading or self.lost is not None:
            self._leading = False
            return
        self._leading = False
        from lightkube import ApiError
        from lightkube.resources.coordination_v1 import Lease

        try:
            lease = self.client.get(Lease, self.name, namespace=self.namespace)
            if lease.spec is None or lease.spec.holderIdentity != self.identity:
                return
            now = _utc(self.clock())
            lease.spec.holderIdentity = None
            lease.spec.leaseDurationSeconds = 1
            lease.spec.renewTime = now
            self.client.replace(lease)
        except ApiError as exc:
            log.warning("could not release Lease %s/%s: %s", self.namespace, self.name, exc.status.message)
        except Exception as exc:  # noqa: BLE001 - the API may be gone at shutdown; it expires anyway
            log.warning("could not release Lease %s/%s: %s", self.namespace, self.name, exc)

    def stop_renewing(self) -> None:
        """Stop the renew thread without touching the Lease (a crash, as far as others can tell)."""
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=max(5.0, 2 * self.renew_period))
        self._thread = None

    # ------------------------------------------------------------------ one try
    def _try(self) -> bool:
        """Take or renew the Lease once; True when we hold it afterwards."""
        from lightkube import ApiError
        from lightkube.models.coordination_v1 import LeaseSpec
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.coordination_v1 import Lease

        now = self.clock()
        try:
            lease = self.client.get(Lease, self.name, namespace=self.namespace)
        except ApiError as exc:
            if exc.status.code == 403 and not self._leading:
                raise ConfigError(f"not allowed to read Lease {self.namespace}/{self.name}: {exc.status.message} "
                                  "(see deploy/k8s/rbac.yaml)") from None
            if exc.status.code != 404:
                log.warning("reading Lease %s/%s: %s", self.namespace, self.name, exc.status.message)
                return False
            try:
                self.client.create(Lease(metadata=ObjectMeta(name=self.name, namespace=self.namespace),
                                         spec=LeaseSpec(holderIdentity=self.identity, leaseDurationSeconds=self.lease_duration,
                                                        acquireTime=_utc(now), renewTime=_utc(now), leaseTransitions=0)))
                self.holder = self.identity
                return True
            except ApiError as exc2:
                if exc2.status.code == 404:  # the namespace: waiting would never end
                    raise ConfigError(f"cannot create Lease {self.namespace}/{self.name}: {exc2.status.message}") from None
                if exc2.status.code == 403:
                    raise ConfigError(f"not allowed to create Lease {self.namespace}/{self.name}: "
                                      f"{exc2.status.message} (see deploy/k8s/rbac.yaml)") from None
                if exc2.status.code != 409:
                    log.warning("creating Lease %s/%s: %s", self.namespace, self.name, exc2.status.message)
                return False
        spec = lease.spec or LeaseSpec()
        holder = spec.holderIdentity or None
        record = (holder, spec.renewTime, lease.metadata.resourceVersion)
        mono = time.monotonic()
        if record != self._observed:
            self._observed, self._observed_at = record, mono
        self.holder = holder
        duration = spec.leaseDurationSeconds or self.lease_duration
        self._expires_in = None
        if holder is not None and holder != self.identity:
            renewed = spec.renewTime.timestamp() if spec.renewTime is not None else 0.0
            left = min(renewed + duration - now, self._observed_at + duration - mono)
            if left > 0:  # not expired by either rule
                self._expires_in = left
                return False
        ours = holder == self.identity
        spec.holderIdentity = self.identity
        spec.leaseDurationSeconds = self.lease_duration
        spec.renewTime = _utc(now)
        if not ours:
            spec.acquireTime = _utc(now)
            if holder is not None:
                spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
        lease.spec = spec
        try:
            self.client.replace(lease)  # carries the resourceVersion read: 409 if anyone wrote since
        except ApiError as exc:
            if exc.status.code != 409:
                log.warning("writing Lease %s/%s: %s", self.namespace, self.name, exc.status.message)
            return False
        self.holder = self.identity
        return True

    # ------------------------------------------------------------------ renewing
    def _renew_loop(self) -> None:
        while not self._stop.wait(self.renew_period):
            try:
                ok = self._try()
            except Exception as exc:  # noqa: BLE001 - the API server unreachable: retried until the deadline
                log.warning("renewing Lease %s/%s: %s", self.namespace, self.name, exc)
                ok = False
            if self._stop.is_set():
                return
            now = self.clock()
            if ok:
                self.last_renew = now
                continue
            if self.holder is not None and self.holder != self.identity:
                self._lose(f"Lease {self.namespace}/{self.name} was taken by {self.holder}")
                return
            if self.last_renew is not None and now - self.last_renew > self.renew_deadline:
                self._lose(f"Lease {self.namespace}/{self.name} not renewed for {now - self.last_renew:.1f} s "
                           f"(deadline {self.renew_deadline:g} s)")
                return

    def _lose(self, why: str) -> None:
        self.lost = why
        self._leading = False
        log.error("lost leadership: %s", why)
        for hook in list(self.on_lost):
            try:
                hook(why)
            except Exception:  # noqa: BLE001 - one bad hook must not keep the others from running
                log.exception("a lease-lost hook failed")
