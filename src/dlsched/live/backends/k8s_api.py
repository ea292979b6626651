"""Every call the Kubernetes backend makes to the API server, in one place.

Clients (one shared by the controller thread and a small pool of API threads, which issue the
creates, binds and deletes of a decision in parallel; one of its own per watch thread, with an
abortable transport), and the few verbs the backend uses: create a pod or Service, bind a pod (the
Binding subresource, with the pod's UID as precondition), delete pods and Services, list a job's
pods, record a Warning Event. Errors come back as strings for people, not exceptions, where a
failure is an outcome the backend reports (a gang that did not start), and are logged where it is
not (a delete that will be retried). Only these verbs: never pods/log, exec, attach, portforward or
proxy (a unit test checks the source).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterable, TypeVar

from dlsched.core.errors import ConfigError
from dlsched.live.backends import k8s_pods as kp
from dlsched.live.backends.k8s_watch import AbortableTransport

log = logging.getLogger("dlsched.k8s")
T = TypeVar("T")
R = TypeVar("R")


def load_config(kubeconfig: str | Path | None, context: str | None) -> Any:
    """The kubeconfig: `kubeconfig` when given, else $KUBECONFIG, else the in-cluster service
    account, else ~/.kube/config (a `ConfigError` naming what failed otherwise)."""
    from lightkube import KubeConfig
    from lightkube.core.exceptions import ConfigError as KubeConfigError

    try:
        path = kubeconfig or os.environ.get("KUBECONFIG")
        if path:
            conf = KubeConfig.from_file(Path(path).expanduser())
        else:
            try:
                conf = KubeConfig.from_service_account()
            except KubeConfigError:
                conf = KubeConfig.from_file(Path("~/.kube/config").expanduser())
        single = conf.get(context_name=context)
    except (KubeConfigError, OSError, ValueError) as exc:
        where = kubeconfig or "KUBECONFIG / in-cluster / ~/.kube/config"
        raise ConfigError(f"cannot load the Kubernetes configuration ({where}): {exc}") from None
    if single is None:
        raise ConfigError(f"no context {context!r} in the Kubernetes configuration")
    return single


def bound_running_fields() -> dict:
    """Field selector of pods bound to some node and not terminated (what takes a node's capacity)."""
    from lightkube.operators import not_equal, not_in

    return {"spec.nodeName": not_equal(""), "status.phase": not_in(["Succeeded", "Failed"])}


class KubeApi:
    """The API server as the backend uses it, in `namespace`."""

    def __init__(self, config: Any, namespace: str, *, trust_env: bool = False, workers: int = 16,
                 timeout: float = 15.0):
        self.config, self.namespace, self.trust_env, self.timeout = config, namespace, trust_env, timeout
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dlsched-k8s-api")
        # one thread per gang being started: they only wait on `_pool`'s calls (which never wait
        # on anything), so a gang's binds overlap other gangs' creates without a deadlock
        self._gangs = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dlsched-k8s-gang")
        self.client = self.make_client()
        # pod name -> (uid, grace): deletes the API server did not take (unreachable, restarting, 5xx),
        # for `retry_deletes`; without it a pod whose delete failed ran on until its job was launched
        # again (found by tests/test_k8s_chaos.py: pods of failed runs trained to the end meanwhile)
        self.undeleted: dict[str, tuple[str, int]] = {}
        # uid -> unix time its first delete was taken (or found it gone): when its deletion began at
        # the latest; a sim pod whose delete was taken after its sim-end may have completed first
        self.taken: dict[str, float] = {}
        self._undeleted_lock = threading.Lock()
        self._retried_at = 0.0

    def make_client(self) -> Any:
        import httpx2
        from lightkube import Client

        return Client(config=self.config, namespace=self.namespace, trust_env=self.trust_env,
                      timeout=httpx2.Timeout(self.timeout), field_manager="dlsched")

    def watch_client(self) -> tuple[Any, AbortableTransport]:
        """A client of its own for one watch thread, whose transport `Reflector.stop` can abort."""
        import httpx2
        from lightkube import Client
        from lightkube.config.client_adapter import verify_cluster

        cfg = self.config
        transport = AbortableTransport(httpx2.HTTPTransport(
            verify=verify_cluster(cfg.cluster, cfg.user, cfg.abs_file, trust_env=self.trust_env),
            trust_env=self.trust_env))
        client = Client(config=cfg, namespace=self.namespace, trust_env=self.trust_env, transport=transport,
                        timeout=httpx2.Timeout(self.timeout))
        return client, transport

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """`fn` over `items` on the API threads (one decision's calls at once), in order."""
        return list(self._pool.map(fn, items))

    def per_gang(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        """`fn` over `items` on the gang threads, in order: each call may itself `map` (a gang's
        creates, then its binds), so one gang's binds need not wait for every gang's creates."""
        return list(self._gangs.map(fn, items))

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self._gangs.shutdown(wait=False)
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass

    # ------------------------------------------------------------------ verbs
    def create(self, obj: dict) -> tuple[str, str]:
        """Create a Pod or Service from its manifest: (uid, "") or ("", why it failed)."""
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Pod, Service

        kind, name = obj["kind"], obj["metadata"]["name"]
        res = Pod if kind == "Pod" else Service
        try:
            return self.client.create(res.from_dict(obj), namespace=self.namespace).metadata.uid, ""
        except ApiError as exc:
            return "", f"create {kind} {name}: {exc.status.code} {exc.status.reason}: {exc.status.message}"
        except Exception as exc:  # noqa: BLE001 - the connection: the gang fails, the controller retries
            return "", f"create {kind} {name}: {type(exc).__name__}: {exc}"

    def bind(self, name: str, uid: str, node: str) -> str:
        """Bind pod `name` to `node`, only if it is still the pod with `uid`: "" or why it failed.

        The API server answers a binding with a Status (201), which lightkube 1.0.1 decodes as a
        Binding and so raises msgspec.ValidationError after the pod was bound; every refusal
        (409 already assigned, 409 UID precondition, 404, 403) is an ApiError, raised before any
        decoding. So a ValidationError here means bound."""
        import msgspec
        from lightkube import ApiError
        from lightkube.models.core_v1 import ObjectReference
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Pod

        binding = Pod.Binding(metadata=ObjectMeta(name=name, namespace=self.namespace, uid=uid),
                              target=ObjectReference(apiVersion="v1", kind="Node", name=node))
        try:
            self.client.create(binding, name, namespace=self.namespace)
        except msgspec.ValidationError:
            pass
        except ApiError as exc:
            return f"bind pod {name} to {node}: {exc.status.code} {exc.status.reason}: {exc.status.message}"
        except Exception as exc:  # noqa: BLE001
            return f"bind pod {name} to {node}: {type(exc).__name__}: {exc}"
        return ""

    def delete_pods(self, pods: Iterable[tuple[str, str]], grace: int) -> list[tuple[str, str]]:
        """Delete pods (name, uid) with `grace` seconds, all at once; pods already gone are fine.
        Returns the pods whose delete the API server did not take; those it may take later (it
        was unreachable, or answered 429 or 5xx) are kept in `undeleted` for `retry_deletes`."""
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Pod

        def one(p: tuple[str, str]) -> tuple[str, float]:  # ("" (deleted or gone), "retry" or "refused"; when)
            try:
                self.client.delete(Pod, p[0], namespace=self.namespace, grace_period=grace)
            except ApiError as exc:
                if exc.status.code == 404:
                    return "", time.time()
                log.warning("deleting pod %s: %s", p[0], exc.status.message)
                return "retry" if exc.status.code == 429 or exc.status.code >= 500 else "refused", 0.0
            except Exception as exc:  # noqa: BLE001 - the connection: retried by `retry_deletes`
                log.warning("deleting pod %s: %s", p[0], exc)
                return "retry", 0.0
            return "", time.time()

        pods = list(pods)
        outcomes = self.map(one, pods)
        with self._undeleted_lock:
            for (name, uid), (outcome, when) in zip(pods, outcomes):
                if outcome == "retry":
                    before = self.undeleted.get(name)
                    self.undeleted[name] = (uid, grace if before is None else min(grace, before[1]))
                else:
                    self.undeleted.pop(name, None)
                    if not outcome and uid:
                        self.taken.setdefault(uid, when)
        return [p for p, (outcome, _) in zip(pods, outcomes) if outcome]

    def deletion_taken(self, uids: Iterable[str], forget: bool = False) -> dict[str, float]:
        """uid -> unix time its first delete was taken, for those of `uids` that have one (and
        drop them from the record with `forget`: the backend is done with those pods)."""
        with self._undeleted_lock:
            got = {u: self.taken[u] for u in uids if u in self.taken}
            if forget:
                for u in got:
                    del self.taken[u]
        return got

    def retry_deletes(self, keep: Callable[[str], bool], every: float = 1.0) -> None:
        """Delete again (at most every `every` seconds) the pods whose delete the API server did
        not take; a pod for which `keep(uid)` is false (gone meanwhile) is dropped instead."""
        now = time.monotonic()
        todo: dict[int, list[tuple[str, str]]] = {}
        with self._undeleted_lock:
            if not self.undeleted or now - self._retried_at < every:
                return
            self._retried_at = now
            for name, (uid, grace) in list(self.undeleted.items()):
                if uid and keep(uid):
                    todo.setdefault(grace, []).append((name, uid))
                else:
                    del self.undeleted[name]
        for grace, pods in todo.items():
            self.delete_pods(pods, grace)

    def delete_services(self, names: Iterable[str]) -> None:
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Service

        for name in names:
            try:
                self.client.delete(Service, name, namespace=self.namespace)
            except ApiError as exc:
                if exc.status.code != 404:
                    log.warning("deleting service %s: %s", name, exc.status.message)
            except Exception as exc:  # noqa: BLE001
                log.warning("deleting service %s: %s", name, exc)

    def job_pods(self, job_id: str, attempt: int | None = None) -> list:
        """The job's pods (of `attempt`, or all), as lightkube objects, straight from the API."""
        from lightkube.resources.core_v1 import Pod

        return list(self.client.list(Pod, namespace=self.namespace, labels=kp.job_selector(job_id, attempt)))

    def event(self, pod: str, reason: str, message: str) -> None:
        """A Warning Event about `pod`, for `kubectl get events` (best effort)."""
        from lightkube.models.core_v1 import EventSource, ObjectReference
        from lightkube.models.meta_v1 import ObjectMeta
        from lightkube.resources.core_v1 import Event

        now = dt.datetime.now(dt.timezone.utc)
        try:
            self.client.create(Event(metadata=ObjectMeta(generateName=f"{pod}.", namespace=self.namespace),
                                     involvedObject=ObjectReference(kind="Pod", name=pod, namespace=self.namespace,
                                                                    apiVersion="v1"),
                                     reason=reason, message=message[:1000], type="Warning", count=1,
                                     source=EventSource(component="dlsched"), firstTimestamp=now, lastTimestamp=now))
        except Exception as exc:  # noqa: BLE001
            log.debug("could not record event %s on %s: %s", reason, pod, exc)
