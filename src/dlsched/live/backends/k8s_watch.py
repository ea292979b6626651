"""A reflector (list, then watch, one kind of object into a dict, in a daemon thread), and the
small records the Kubernetes backend keeps of nodes and pods.

No Python Kubernetes client ships informers, so this is the small part of client-go's reflector
that the backend needs: list (server-side label and field selectors), keep the list's
resourceVersion, watch from it, apply each event to the cache, and on any error (410 Gone: the
version was compacted away; a dropped connection; the API server restarting) list again, diffing the
new list against the cache so that objects deleted meanwhile are reported as DELETED. Every change
is handed to `on_change(kind, key, new, old)` under the owner's lock, and the owner's condition is
notified, so other threads can wait for a state (`wait_for`).

Stopping: lightkube's watch re-connects by itself whenever the server ends a watch, and closing
its client from another thread does not interrupt a blocked read; worse, it frees the socket's file
descriptor under the reading thread, and the next connection opened anywhere in the process may get
that number, so both read each other's TLS records ("bad record mac", seen in this project's tests).
So each reflector's client has an `AbortableTransport`: `stop()` shuts its sockets down (the blocked
read returns, the descriptor stays valid) and refuses new requests; the reflector's own thread then
closes the client.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from dlsched.live.backends import k8s_pods as kp

log = logging.getLogger("dlsched.k8s")

#: Container waiting reasons after which a pod will not start by itself (real mode).
FATAL_WAITING = {"InvalidImageName", "ImagePullBackOff", "CreateContainerConfigError", "CreateContainerError"}

OnChange = Callable[[str, str, Any, Any], None]  # (ADDED | MODIFIED | DELETED, key, new, old)


class AbortableTransport:
    """An httpx2 transport around another: it remembers the sockets of its responses, so that
    `abort()` can shut them down (unblocking a thread reading a watch without closing the descriptor
    under it), and refuses every request after `abort()`."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.aborted = False
        self._socks: list = []
        self._lock = threading.Lock()

    def handle_request(self, request: Any) -> Any:
        if self.aborted:
            raise RuntimeError("this watch was stopped")
        resp = self.inner.handle_request(request)
        stream = resp.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None:
            with self._lock:
                self._socks = [s for s in self._socks if s.fileno() != -1 and s is not sock] + [sock]
        if self.aborted:  # stopped while this request was under way
            self._shutdown()
        return resp

    def abort(self) -> None:
        self.aborted = True
        self._shutdown()

    def _shutdown(self) -> None:
        with self._lock:
            socks = list(self._socks)
        for sock in socks:
            try:  # the plain socket's shutdown: an SSLSocket's own would drop its SSL object under the reader
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> "AbortableTransport":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Reflector:
    """Keeps `items` (key → `transform(object)`) in step with the API for one kind and selector."""

    def __init__(self, name: str, make_client: Callable[[], tuple[Any, AbortableTransport]], res: type, *,
                 cond: threading.Condition,
                 namespace: str | None = None, labels: dict | None = None, fields: dict | None = None,
                 key: Callable[[Any], str] = lambda o: o.metadata.uid,
                 transform: Callable[[Any], Any] = lambda o: o, on_change: OnChange | None = None,
                 server_timeout: int = 20):
        self.name, self._make_client, self.res = name, make_client, res
        self.namespace, self.labels, self.fields = namespace, labels, fields
        self.key, self.transform, self.on_change = key, transform, on_change
        self.cond = cond  # the owner's condition (and its lock): every change happens under it
        self.server_timeout = server_timeout
        self.items: dict[str, Any] = {}
        self.synced = threading.Event()
        self.relists = 0
        self.last_error = ""
        self._stop = threading.Event()
        self._transport: AbortableTransport | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> "Reflector":
        self._thread = threading.Thread(target=self._run, name=f"dlsched-k8s-{self.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Make the thread end soon (it closes its own client): see the module docstring."""
        self._stop.set()
        transport = self._transport
        if transport is not None:
            transport.abort()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    # ------------------------------------------------------------------ the loop
    def _run(self) -> None:
        client, self._transport = self._make_client()
        if self._stop.is_set():
            self._transport.abort()
        try:
            self._loop(client)
        finally:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    def _loop(self, client: Any) -> None:
        from lightkube import ApiError
        from lightkube.types import OnErrorAction, OnErrorResult

        backoff = 0.2
        ns = {"namespace": self.namespace} if self.namespace is not None else {}
        while not self._stop.is_set():
            try:
                listing = client.list(self.res, labels=self.labels, fields=self.fields, **ns)
                objs = list(listing)
                rv = listing.resourceVersion
                self._replace(objs)
                self.synced.set()
                backoff = 0.2
                for kind, obj in client.watch(self.res, labels=self.labels, fields=self.fields, resource_version=rv,
                                              server_timeout=self.server_timeout,
                                              on_error=lambda e, n: OnErrorResult(OnErrorAction.RAISE), **ns):
                    if self._stop.is_set():
                        return
                    self._event(kind, obj)
            except ApiError as exc:
                if self._stop.is_set():
                    return
                if exc.status.code == 410:  # compacted: list again from now, no wait
                    log.info("%s watch: resource version too old, listing again", self.name)
                    self.relists += 1
                    continue
                self._failed(f"{exc.status.code} {exc.status.reason}: {exc.status.message}", backoff)
                backoff = min(backoff * 2, 5.0)
            except Exception as exc:  # noqa: BLE001 - dropped connection, API server down: list again
                if self._stop.is_set():
                    return
                self._failed(f"{type(exc).__name__}: {exc}", backoff)
                backoff = min(backoff * 2, 5.0)

    def _failed(self, why: str, backoff: float) -> None:
        self.last_error = why
        self.relists += 1
        log.warning("%s watch failed (%s); listing again in %.1f s", self.name, why, backoff)
        self._stop.wait(backoff)

    def _replace(self, objs: list) -> None:
        """A fresh list: objects gone from it since the cache was filled are DELETED."""
        fresh = {}
        for o in objs:
            fresh[self.key(o)] = self.transform(o)
        with self.cond:
            old = self.items
            self.items = fresh
            if self.on_change is not None:
                for k, v in old.items():
                    if k not in fresh:
                        self.on_change("DELETED", k, None, v)
                for k, v in fresh.items():
                    self.on_change("MODIFIED" if k in old else "ADDED", k, v, old.get(k))
            self.cond.notify_all()

    def _event(self, kind: str, obj: Any) -> None:
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return  # BOOKMARK (not asked for)
        k = self.key(obj)
        new = self.transform(obj)
        with self.cond:
            old = self.items.get(k)
            if kind == "DELETED":
                self.items.pop(k, None)
            else:
                self.items[k] = new
            if self.on_change is not None:
                self.on_change(kind, k, None if kind == "DELETED" else new, old)
            self.cond.notify_all()


# ------------------------------------------------------------------ what the caches keep
# (small frozen records, not lightkube objects: the watch threads make them, the controller thread reads them)


@dataclass(frozen=True)
class NodeInfo:
    name: str
    ready: bool
    why_not_ready: str
    unschedulable: bool
    allocatable: tuple[float, float, float]
    labels: dict


@dataclass(frozen=True)
class PodInfo:
    name: str
    uid: str
    node: str | None
    phase: str
    deleting: bool
    labels: dict
    annotations: dict
    problem: str  # why it failed or will not start ("" when none), for people


@dataclass(frozen=True)
class UsageInfo:
    """A bound, non-terminated pod anywhere in the cluster: what it takes from its node."""

    namespace: str
    name: str
    node: str
    request: tuple[float, float, float]


def node_info(node: Any, slot: str) -> NodeInfo:
    st, spec, md = node.status, node.spec, node.metadata
    ready = next((c for c in (st.conditions or []) if c.type == "Ready"), None) if st is not None else None
    why = "" if ready is not None and ready.status == "True" else (
        "no Ready condition" if ready is None else f"Ready={ready.status}" + (f" ({ready.reason}: {ready.message})"
                                                                               if ready.reason else ""))
    alloc = kp.resource_vector(st.allocatable if st is not None else None, slot)
    return NodeInfo(md.name, not why, why, bool(spec is not None and spec.unschedulable), alloc, dict(md.labels or {}))


def pod_problem(pod: Any) -> str:
    st = pod.status
    if st is None:
        return ""
    parts = []
    if st.reason or st.message:
        parts.append(": ".join(x for x in (st.reason, st.message) if x))
    for cs in st.containerStatuses or []:
        state = cs.state
        if state is None:
            continue
        if state.terminated is not None and (st.phase == "Failed" or state.terminated.exitCode):
            t = state.terminated
            parts.append(f"container {cs.name} terminated ({t.reason or 'no reason'}, exit code {t.exitCode})"
                         + (f": {t.message}" if t.message else ""))
        elif state.waiting is not None and state.waiting.reason in FATAL_WAITING:
            parts.append(f"container {cs.name} waiting: {state.waiting.reason}"
                         + (f": {state.waiting.message}" if state.waiting.message else ""))
    return "; ".join(parts)


def pod_info(pod: Any) -> PodInfo:
    md, st = pod.metadata, pod.status
    return PodInfo(md.name, md.uid, pod.spec.nodeName if pod.spec is not None else None,
                   (st.phase if st is not None else None) or "Pending", md.deletionTimestamp is not None,
                   dict(md.labels or {}), dict(md.annotations or {}), pod_problem(pod))




def usage_info(pod: Any, slot: str) -> UsageInfo:
    return UsageInfo(pod.metadata.namespace, pod.metadata.name, pod.spec.nodeName,
                     kp.pod_request(pod.spec.to_dict() if pod.spec is not None else None, slot))


_warm_lock = threading.Lock()
_warmed = False


def warm_decoders() -> None:
    """Build lightkube's msgspec decoders of every kind the backend reads, once, in one thread.

    msgspec (0.22, under lightkube 1.0.1) builds a type's decoder on its first use, resolving its
    forward references; two threads doing that for the same type at once crashed the interpreter
    (a segmentation fault in the first list of pods, from two watch threads). Call this before
    starting threads that decode."""
    global _warmed
    with _warm_lock:
        if _warmed:
            return
        import msgspec
        from lightkube.core import decoders
        from lightkube.resources.coordination_v1 import Lease
        from lightkube.resources.core_v1 import Event, Namespace, Node, Pod, Service

        for res in (Pod, Node, Service, Lease, Event, Namespace, Pod.Binding):
            decoders.decode_list(b'{"items":[],"metadata":{}}', res)
            try:
                msgspec.json.encode(decoders.decode_object(b'{"metadata":{"name":"x"}}', res))
            except msgspec.ValidationError:
                pass  # a required field missing (Event, Binding): the decoder is built all the same
        decoders.decode_status(b'{"status":"Success"}')
        decoders.decode_watch_event(b'{"type":"ADDED","object":{}}')
        _warmed = True


def wait_synced(reflectors: list[Reflector], timeout: float) -> list[str]:
    """Wait until every reflector has listed once; the names of those that have not (with why)."""
    deadline = time.monotonic() + timeout
    for r in reflectors:
        r.synced.wait(max(0.0, deadline - time.monotonic()))
    return [f"{r.name} ({r.last_error or 'no answer'})" for r in reflectors if not r.synced.is_set()]
