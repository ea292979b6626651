"""The DLJob door: DLJobs of one namespace and dlsched's store kept in step, both ways.

kubectl and the REST API are two doors to one store (the store stays the only truth; the
controller never reads a DLJob). `DLJobSync` watches DLJobs (`k8s_watch.Reflector`: list, then
watch, listing again after any error) and, on every change and every `interval` seconds, makes one
pass (`reconcile`):

- **a new DLJob** is validated as a `TrainJob` (its `spec` is one; `name` defaults to the DLJob's
  name) and checked as the REST API checks a submission (`admission`: the job must be able to run on
  this cluster), then added to the store with the key `<namespace>/<uid>` (`Store.add(dljob=...)`):
  a DLJob already in the store is not added again, whoever restarts. A spec pydantic or admission
  refuses (a rule the schema cannot express) gets `status.phase: Rejected` and the reason, and is
  not stored, as the REST API answers 422 and stores nothing.
- **a deleted DLJob** whose job has not ended: the job is cancelled as `POST /jobs/{id}/cancel`
  does (`Store.request_cancel`; the controller checkpoints and stops it on its next round). An
  ended job stays in the store (its history); `DELETE /jobs/{id}` removes it.
- **a job submitted through the REST API** gets a mirror DLJob named after its id, labelled
  `dlsched.io/mirror: "true"`, and is linked to it in the store, so it is mirrored once: deleting
  the mirror cancels the job like any DLJob and does not bring the mirror back. A job that had ended
  more than `MIRROR_HISTORY_S` before the sync started is not mirrored (an old store must not flood
  the namespace). A mirror whose job was deleted from the store is deleted.
- **status**: dlsched owns every DLJob's `.status` (the status subresource); each pass writes what
  the store says (phase, workers, waiting reason, steps, progress, job id, message) where it differs
  from what the API holds; progress alone at most every `progress_every` seconds per DLJob.

Deletions are found by comparing the store's links with the DLJobs listed (not only from watch
events), so a DLJob deleted while no service ran is cancelled at the next start. Only links of
this namespace are compared; a DLJob this sync has just created counts as present until the watch
shows it. No thread of the controller waits on Kubernetes for this: the sync has its own thread
and clients.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import ValidationError

from dlsched.live.api.dljob_crd import API_VERSION, KIND, dljob_resource
from dlsched.live.spec import TrainJob
from dlsched.live.store import Store
from dlsched.live.store.views import FINISHED, JobView

log = logging.getLogger("dlsched.dljobs")

#: Label of the DLJobs dlsched creates for jobs submitted through the REST API.
MIRROR_LABEL = "dlsched.io/mirror"
#: Annotation of a mirror: the id of the job it stands for.
JOB_ANNOTATION = "dlsched.io/job-id"
#: A REST job that had ended this long before the sync started gets no mirror.
MIRROR_HISTORY_S = 600.0
#: How long a DLJob this sync created counts as present before the watch shows it.
CREATED_GRACE_S = 30.0
#: After a burst of DLJob events (our own status writes among them), wait this long before a pass.
SETTLE_S = 0.2
#: Status fields that change with every controller round while a job runs: written at most every
#: `progress_every` seconds per DLJob (a phase or worker change is written at once), so a thousand
#: running jobs are not a thousand PATCHes a second.
PROGRESS_FIELDS = frozenset({"stepsDone", "progress"})

Admission = Callable[[TrainJob], list[tuple[str, str]]]


@dataclass(frozen=True)
class DLJobInfo:
    """What the sync keeps of one DLJob (made by the watch thread, read by the sync's)."""

    name: str
    uid: str
    spec: dict
    status: dict
    mirror_of: str  # the job id a mirror stands for; "" for a DLJob a user made


def dljob_info(obj: Any) -> DLJobInfo:
    md = obj.metadata
    mirror = (md.labels or {}).get(MIRROR_LABEL) == "true"
    return DLJobInfo(md.name, md.uid, dict(obj.get("spec") or {}), dict(obj.get("status") or {}),
                     (md.annotations or {}).get(JOB_ANNOTATION, "") if mirror else "")


def job_status(view: JobView) -> dict[str, Any]:
    """The `.status` of a DLJob whose job is `view`."""
    steps, done = view.spec.steps, view.steps_done
    return {"phase": view.status.capitalize(), "jobId": view.id, "workers": view.workers, "ps": view.ps,
            "waitingReason": view.waiting_reason, "stepsDone": done, "steps": steps,
            "progress": f"{done}/{steps} ({100 * done // steps}%)", "message": view.reason}


def rejected_status(message: str) -> dict[str, Any]:
    """The `.status` of a DLJob whose spec never became a job."""
    return {"phase": "Rejected", "jobId": "", "workers": 0, "ps": 0, "waitingReason": "", "stepsDone": 0,
            "steps": 0, "progress": "", "message": message}


def spec_problems(err: ValidationError) -> str:
    """pydantic's errors as `spec.key: problem` (`spec: problem` for a rule between fields), on one line."""
    from dlsched.config import validation_problems

    return "; ".join("spec" + (line if line.startswith(":") else f".{line}")
                     for line in validation_problems(err, top=""))


def as_train_job(info: DLJobInfo, admission: Admission | None) -> tuple[TrainJob | None, str]:
    """The DLJob's spec as a TrainJob, or None and why not (pydantic's or admission's words)."""
    spec = dict(info.spec)
    if spec.get("name") is None:
        spec["name"] = info.name[:100]
    try:
        job = TrainJob.model_validate(spec)
    except ValidationError as exc:
        return None, spec_problems(exc)
    problems = admission(job) if admission is not None else job.demand_problems()
    if problems:
        return None, "; ".join(f"spec.{key}: {msg}" for key, msg in problems)
    return job, ""


@dataclass
class _Pass:
    """What one reconcile pass works on: the DLJobs, the store's jobs and links (job -> DLJob uid, of
    this namespace), updated as the pass adds and links."""

    dljobs: dict[str, DLJobInfo]
    jobs: dict[str, JobView]
    links: dict[str, str]
    by_uid: dict[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.by_uid = {uid: jid for jid, uid in self.links.items()}

    def link(self, jid: str, uid: str) -> None:
        self.links[jid], self.by_uid[uid] = uid, jid


class DLJobSync:
    """Keeps the DLJobs of `namespace` and `store` in step (see the module docstring).

    `config`: a lightkube kubeconfig (the backend's); `admission`: the controller's check of a new
    job (None: the job's own `demand_problems`); `owns_store`: whether this service still owns the
    store (a pass is skipped when it does not: its jobs belong to another service then); `mirror`:
    whether REST jobs get mirror DLJobs."""

    def __init__(self, store: Store, config: Any, namespace: str, *, admission: Admission | None = None,
                 interval: float = 2.0, owns_store: Callable[[], bool] = lambda: True, mirror: bool = True,
                 progress_every: float = 2.0, trust_env: bool = False):
        from dlsched.live.backends.k8s_api import KubeApi
        from dlsched.live.backends.k8s_watch import Reflector

        self.store, self.namespace, self.admission = store, namespace, admission
        self.interval, self.owns_store, self.mirror = interval, owns_store, mirror
        self.progress_every = progress_every
        self.res = dljob_resource()
        _warm_decoders(self.res)
        self.api = KubeApi(config, namespace, trust_env=trust_env, workers=1, timeout=5.0)
        self._cond = threading.Condition(threading.RLock())
        self._dirty = True
        self.reflector = Reflector("dljobs", self.api.watch_client, self.res, cond=self._cond, namespace=namespace,
                                   transform=dljob_info, on_change=self._changed)
        self.started_at = time.time()
        self.passes = 0
        self.last_error = ""
        self._created: dict[str, float] = {}  # uid of a DLJob created here -> when (monotonic), until the watch shows it
        self._unmirrorable: set[str] = set()  # jobs the API refused a mirror (name taken, invalid): tried once
        self._written: dict[str, float] = {}  # uid -> when (monotonic) its status was last written
        self._names: dict[str, str] = {}  # uid -> name of the DLJobs seen, to name a deleted one in its job's events
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifetime
    def check(self) -> str:
        """Why the door cannot open ("" when it can): the CRD not installed, or no right to list
        DLJobs here. Asked once before starting, so a missing CRD is one line at start, not a
        warning every few seconds."""
        from lightkube import ApiError

        try:
            next(iter(self.api.client.list(self.res, namespace=self.namespace, chunk_size=1)), None)
        except ApiError as exc:
            if exc.status.code == 404:
                return ("the DLJob CRD is not installed (kubectl apply -f deploy/k8s/dljob-crd.yaml, or "
                        "`dlsched k8s crd | kubectl apply -f -`)")
            if exc.status.code == 403:
                return f"no right to list DLJobs in namespace {self.namespace} (deploy/k8s/rbac.yaml grants it)"
            return f"listing DLJobs: {exc.status.code} {exc.status.message}"
        except Exception as exc:  # noqa: BLE001 - no answer: say so, the caller decides
            return f"listing DLJobs: {type(exc).__name__}: {exc}"
        return ""

    def start(self) -> "DLJobSync":
        self.reflector.start()
        self._thread = threading.Thread(target=self._run, name="dlsched-dljobs", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the watch and the passes (nothing is added or cancelled after this); the client
        stays open for `publish_last`."""
        self._stop.set()
        self.reflector.stop()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def close(self) -> None:
        self.stop()
        self.api.close()

    def publish_last(self) -> None:
        """Write the statuses once more, after the service's shutdown stopped (checkpointed) the jobs,
        so kubectl does not show them Running while no service runs. Best effort: the first failure
        (an API server that is gone) ends it, logged."""
        if not self.reflector.synced.is_set():
            return
        with self._cond:
            dljobs = dict(self.reflector.items)
        try:
            self._publish(self._pass(dljobs))
        except Exception as exc:  # noqa: BLE001 - shutting down: say it and go on
            log.warning("could not write the DLJobs' last status: %s: %s", type(exc).__name__, exc)

    def _changed(self, kind: str, key: str, new: Any, old: Any) -> None:
        """Under self._cond (the reflector holds it and notifies): a pass is due; a DLJob created
        here is now known to the watch, so its absence from now on means it was deleted."""
        self._dirty = True
        self._created.pop(key, None)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                if not self._dirty:
                    self._cond.wait(self.interval)
                self._dirty = False
            if self._stop.is_set():
                return
            self._stop.wait(SETTLE_S)  # a burst of events makes one pass
            try:
                if self.owns_store():
                    self.reconcile()
                self.last_error = ""
            except Exception as exc:  # noqa: BLE001 - a store or API hiccup (API server restarting): retried
                why = f"{type(exc).__name__}: {exc}"
                if why != self.last_error:  # once per distinct error, not every pass while it lasts
                    log.warning("DLJob sync pass failed (%s); retrying every %.1f s", why, self.interval)
                log.debug("DLJob sync pass failed", exc_info=True)
                self.last_error = why
                self._stop.wait(self.interval)

    # ------------------------------------------------------------------ one pass
    def reconcile(self) -> None:
        """One pass: admit new DLJobs, cancel the jobs of deleted ones, mirror REST jobs, write status.
        Does nothing until the watch has listed once (an empty cache would look like deletions)."""
        if not self.reflector.synced.is_set():
            return
        with self._cond:
            dljobs = dict(self.reflector.items)
        p = self._pass(dljobs)
        self._forget_seen(p)
        self._names = {uid: n for uid, n in self._names.items() if uid in dljobs or uid in p.by_uid}
        self._names.update((uid, info.name) for uid, info in dljobs.items())
        self._written = {uid: t for uid, t in self._written.items() if uid in dljobs}
        for info in list(p.dljobs.values()):
            if not info.mirror_of:
                self._admit(p, info)
        self._cancel_deleted(p)
        if self.mirror:
            self._mirror_rest_jobs(p)
        self._publish(p)
        self.passes += 1

    def _pass(self, dljobs: dict[str, DLJobInfo]) -> _Pass:
        prefix = f"{self.namespace}/"
        links = {jid: key[len(prefix):] for jid, key in self.store.dljob_links().items() if key.startswith(prefix)}
        return _Pass(dljobs, {v.id: v for v in self.store.list()}, links)

    def _forget_seen(self, p: _Pass) -> None:
        now = time.monotonic()
        with self._cond:
            self._created = {uid: t for uid, t in self._created.items()
                             if uid not in p.dljobs and now - t < CREATED_GRACE_S}

    def _admit(self, p: _Pass, info: DLJobInfo) -> None:
        """A DLJob not yet in the store becomes a job, or Rejected. One that names a job the store no
        longer has (deleted through the REST API) is not submitted again: that would run it twice."""
        if info.uid in p.by_uid or info.status.get("jobId") or info.status.get("phase") == "Rejected":
            return
        job, why = as_train_job(info, self.admission)
        if job is None:
            log.info("DLJob %s/%s rejected: %s", self.namespace, info.name, why)
            self._write_status(info, rejected_status(why))
            return
        view = self.store.add(job, dljob=f"{self.namespace}/{info.uid}")
        if view.id not in p.jobs:
            self.store.add_event(view.id, "dljob", f"submitted as DLJob {self.namespace}/{info.name}")
            log.info("DLJob %s/%s is job %s", self.namespace, info.name, view.id)
        p.jobs[view.id] = view
        p.link(view.id, info.uid)

    def _cancel_deleted(self, p: _Pass) -> None:
        """Jobs whose DLJob is gone are cancelled, as the REST API's cancel does (ended jobs are left)."""
        for jid, uid in p.links.items():
            view = p.jobs.get(jid)
            with self._cond:
                just_made = uid in self._created
            if uid in p.dljobs or just_made or view is None:
                continue
            if view.status in FINISHED or view.cancel_requested:
                continue
            if self.store.request_cancel(jid) is not None:
                name = self._names.pop(uid, f"(uid {uid})")
                self.store.add_event(jid, "dljob", f"DLJob {self.namespace}/{name} deleted: cancel requested")
                log.info("DLJob of %s deleted: cancel requested", jid)

    def _mirror_rest_jobs(self, p: _Pass) -> None:
        linked = self.store.dljob_links()  # every namespace's: a job linked elsewhere is not mirrored here
        horizon = self.started_at - MIRROR_HISTORY_S
        for jid, view in p.jobs.items():
            if jid in linked or jid in p.links or jid in self._unmirrorable:
                continue
            if view.status in FINISHED and (view.finished_at or view.submitted_at) < horizon:
                continue
            info = self._create_mirror(view)
            if info is None:
                continue
            self.store.link_dljob(jid, f"{self.namespace}/{info.uid}")
            self.store.add_event(jid, "dljob", f"mirrored as DLJob {self.namespace}/{info.name}")
            p.dljobs[info.uid] = info
            p.link(jid, info.uid)

    def _create_mirror(self, view: JobView) -> DLJobInfo | None:
        """The mirror DLJob of a REST job (named after its id; an existing mirror of it is taken as
        is: a pass that crashed after creating it), or None: the name belongs to another DLJob, or
        the API refused it (tried once), or did not answer (tried again next pass)."""
        from lightkube import ApiError

        obj = self.res(apiVersion=API_VERSION, kind=KIND,
                       metadata={"name": view.id, "namespace": self.namespace, "labels": {MIRROR_LABEL: "true"},
                                 "annotations": {JOB_ANNOTATION: view.id}},
                       spec=view.spec.model_dump(mode="json", exclude_none=True))
        try:
            info = dljob_info(self.api.client.create(obj, namespace=self.namespace))
        except ApiError as exc:
            if exc.status.code != 409:
                log.warning("cannot mirror %s as a DLJob: %s %s", view.id, exc.status.code, exc.status.message)
                if 400 <= exc.status.code < 500:
                    self._unmirrorable.add(view.id)
                return None
            info = dljob_info(self.api.client.get(self.res, view.id, namespace=self.namespace))
            if info.mirror_of != view.id:
                log.warning("cannot mirror %s as a DLJob: DLJob %s/%s exists and is not its mirror",
                            view.id, self.namespace, view.id)
                self._unmirrorable.add(view.id)
                return None
        with self._cond:  # the watch may have shown it already (then `_changed` will not come for it)
            if info.uid not in self.reflector.items:
                self._created[info.uid] = time.monotonic()
        return info

    def _publish(self, p: _Pass) -> None:
        """Write each DLJob's status where it differs from the store's; delete mirrors of deleted jobs."""
        for info in p.dljobs.values():
            jid = info.mirror_of or p.by_uid.get(info.uid, "")
            view = p.jobs.get(jid) if jid else None
            if view is not None:
                self._write_status(info, job_status(view))
            elif info.mirror_of:
                self._delete_mirror(info)
            elif info.status.get("jobId"):
                gone = f"job {info.status['jobId']} is no longer in dlsched's store (deleted through its REST API)"
                self._write_status(info, {**info.status, "message": gone})

    def _write_status(self, info: DLJobInfo, status: dict[str, Any]) -> None:
        from lightkube import ApiError
        from lightkube.types import PatchType

        changed = {k for k, v in status.items() if info.status.get(k) != v}
        now = time.monotonic()
        if not changed or (changed <= PROGRESS_FIELDS
                           and now - self._written.get(info.uid, -math.inf) < self.progress_every):
            return
        try:
            self.api.client.patch(self.res.Status, info.name, {"status": status}, namespace=self.namespace,
                                  patch_type=PatchType.MERGE)
            self._written[info.uid] = now
        except ApiError as exc:
            if exc.status.code != 404:  # deleted meanwhile: the next pass sees it gone
                log.warning("cannot write the status of DLJob %s/%s: %s", self.namespace, info.name, exc.status.message)

    def _delete_mirror(self, info: DLJobInfo) -> None:
        from lightkube import ApiError

        try:
            self.api.client.delete(self.res, info.name, namespace=self.namespace)
            log.info("deleted DLJob %s/%s: job %s is no longer in the store", self.namespace, info.name, info.mirror_of)
        except ApiError as exc:
            if exc.status.code != 404:
                log.warning("cannot delete DLJob %s/%s: %s", self.namespace, info.name, exc.status.message)


def _warm_decoders(res: type) -> None:
    """Build lightkube's list decoder of DLJob before the watch thread runs (concurrent first
    decodes crashed msgspec: see k8s_watch.warm_decoders)."""
    from lightkube.core import decoders

    from dlsched.live.backends.k8s_watch import warm_decoders

    warm_decoders()
    decoders.decode_list(b'{"items":[],"metadata":{}}', res)
