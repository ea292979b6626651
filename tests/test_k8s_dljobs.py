"""The DLJob door (issue 28): the CRD, generated from TrainJob, and the sync between DLJobs and the store.

Without a cluster: the CRD file is what the code generates, its schema refuses exactly the values
pydantic refuses field by field, the store's DLJob key is idempotent, statuses and messages read
right. On the session's real control plane (marked `k8s`, one xdist group): a DLJob applied runs
through `dlsched serve`'s Service on the Kubernetes backend (sim mode, kwok) and shows phase and
progress; deleting it cancels the job; a REST job gets a mirror DLJob; malformed DLJobs are refused
by the API server naming the field (and rules between fields give phase Rejected); a restarted sync
adds nothing twice and cancels what was deleted while it was down; the watch survives a dropped
connection; the sync works with rbac.yaml's rights only; and the real kubectl applies and lists.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from dlsched.live.api.dljob_crd import API_VERSION, KIND, crd_manifest, spec_schema
from dlsched.live.spec import TrainJob
from dlsched.live.store import Store
from tests.k8s_control_plane import WAIT, control_plane, k8s_client, k8s_namespace, wait_until  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
k8s = [pytest.mark.k8s, pytest.mark.xdist_group("k8s")]


def on_k8s(fn):
    for m in k8s:
        fn = m(fn)
    return fn



# ====================================================================== without a cluster


def test_the_crd_file_is_what_the_code_generates():
    """deploy/k8s/dljob-crd.yaml is `dlsched k8s crd`'s output: regenerate it when TrainJob changes."""
    shipped = yaml.safe_load((ROOT / "deploy" / "k8s" / "dljob-crd.yaml").read_text())
    assert shipped == crd_manifest(), "deploy/k8s/dljob-crd.yaml is stale: dlsched k8s crd > deploy/k8s/dljob-crd.yaml"
    spec = shipped["spec"]
    assert (spec["group"], spec["names"]["kind"], spec["names"]["shortNames"], spec["scope"]) == \
        ("dlsched.io", "DLJob", ["dlj"], "Namespaced")
    version = spec["versions"][0]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")] == \
        ["Phase", "Workers", "Waiting", "Progress", "Age"]


def test_dlsched_k8s_crd_prints_it():
    from typer.testing import CliRunner

    from dlsched.cli_k8s import k8s_app

    res = CliRunner().invoke(k8s_app, ["crd"])
    assert res.exit_code == 0 and yaml.safe_load(res.output) == crd_manifest()


def _json_type_fits(prop: dict[str, Any], value: Any) -> bool:
    return {"string": isinstance(value, str), "boolean": isinstance(value, bool),
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, (int, float)) and not isinstance(value, bool)}[prop["type"]]


def _schema_refuses(prop: dict[str, Any], value: Any) -> bool:
    """What the API server's structural validation says of `value` under `prop` (the keys this
    schema uses: type, nullable, enum, bounds, lengths)."""
    if value is None:
        return not prop.get("nullable", False)
    kind = prop["type"]
    if not _json_type_fits(prop, value):
        return True
    if "enum" in prop and value not in prop["enum"]:
        return True
    if kind in ("integer", "number"):
        lo, hi = prop.get("minimum"), prop.get("maximum")
        if lo is not None and (value < lo or (prop.get("exclusiveMinimum") and value == lo)):
            return True
        if hi is not None and (value > hi or (prop.get("exclusiveMaximum") and value == hi)):
            return True
    if kind == "string" and not prop.get("minLength", 0) <= len(value) <= prop.get("maxLength", 10**9):
        return True
    return False


def _probes(prop: dict[str, Any]) -> list[Any]:
    """Values around every edge of `prop`, and a few of the wrong type."""
    out: list[Any] = [None, "x", 1, 1.5, True, -1, 0]
    for key in ("minimum", "maximum"):
        if key in prop:
            v = prop[key]
            out += [v, v - 1, v + 1, v - 0.5, v + 0.5, v - 1e-9, v + 1e-9]
    if "maxLength" in prop:
        out += ["a" * prop["maxLength"], "a" * (prop["maxLength"] + 1), ""]
    out += list(prop.get("enum", [])) + ["foo"]
    return out


def test_the_spec_schema_refuses_what_pydantic_refuses_field_by_field():
    """Each TrainJob field probed at and around its bounds: the CRD's schema refuses a value exactly
    when pydantic reports an error at that field, so the API server and the REST API agree. (Only
    values of the field's JSON type: pydantic also takes `true` or "5" for 1 or 5, the API server
    does not; stricter is fine.)"""
    schema = spec_schema()
    fields = set(TrainJob.model_fields)
    assert set(schema["properties"]) == fields
    assert schema["required"] == ["model", "steps"]
    assert schema["properties"]["model"]["enum"] == ["mlp", "cnn", "transformer"]
    assert schema["properties"]["mode"]["enum"] == ["ddp", "ps"]
    for name, prop in schema["properties"].items():
        for value in _probes(prop):
            if value is not None and not _json_type_fits(prop, value):
                assert _schema_refuses(prop, value)
                continue
            base = {"model": "mlp", "steps": 10, name: value}
            try:
                TrainJob.model_validate(base)
                refused = False
            except Exception as exc:  # noqa: BLE001 - pydantic's ValidationError
                refused = any(e["loc"][:1] == (name,) for e in exc.errors())  # type: ignore[attr-defined]
            assert _schema_refuses(prop, value) == refused, f"{name}={value!r}: schema refuses " \
                f"{_schema_refuses(prop, value)}, pydantic {refused}"


def test_a_dljob_key_is_added_once_and_links_a_mirror(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    job = TrainJob(model="mlp", steps=10)
    first = store.add(job, dljob="ns/uid-1")
    assert store.add(job, dljob="ns/uid-1").id == first.id and len(store.list()) == 1
    rest = store.add(job)
    assert store.dljob_links() == {first.id: "ns/uid-1"}
    store.link_dljob(rest.id, "ns/uid-2")
    assert store.dljob_links() == {first.id: "ns/uid-1", rest.id: "ns/uid-2"}
    with pytest.raises(KeyError):
        store.link_dljob("job-999999", "ns/x")
    store.close()


def test_a_store_made_before_the_dljob_column_opens_and_gains_it(tmp_path):
    import sqlite3

    path = tmp_path / "old.db"
    old = Store(f"sqlite:///{path}")
    job = old.add(TrainJob(model="mlp", steps=5))
    old.close()
    con = sqlite3.connect(path)
    con.execute("DROP INDEX ix_dlsched_jobs_dljob")
    con.execute("ALTER TABLE dlsched_jobs DROP COLUMN dljob")  # as the version before issue 28 made it
    con.commit()
    con.close()
    store = Store(f"sqlite:///{path}")
    assert store.dljob_links() == {} and store.get(job.id).status == "queued"
    assert store.add(TrainJob(model="mlp", steps=5), dljob="ns/u").id == "job-000002"
    store.close()


def test_the_dljobs_option_is_for_the_kubernetes_backend():
    from pydantic import ValidationError

    from dlsched.live.service import ServiceConfig

    assert ServiceConfig().dljobs and ServiceConfig(backend="kubernetes", dljobs=True).dljobs
    assert not ServiceConfig(backend="local", dljobs=False).dljobs
    with pytest.raises(ValidationError, match="dljobs: true needs backend: kubernetes"):
        ServiceConfig(backend="dry", dljobs=True)


def test_status_and_rejection_messages():
    from dlsched.live.api.dljobs import DLJobInfo, as_train_job, job_status
    from dlsched.live.store.views import JobView

    view = JobView(id="job-000003", spec=TrainJob(model="mlp", steps=300), status="running", submitted_at=0.0,
                   steps_done=100, workers=2)
    st = job_status(view)
    assert (st["phase"], st["jobId"], st["workers"], st["progress"], st["stepsDone"], st["steps"]) == \
        ("Running", "job-000003", 2, "100/300 (33%)", 100, 300)

    def info(**spec):
        return DLJobInfo("my-job", "u", spec, {}, "")

    job, why = as_train_job(info(model="mlp", steps=5), None)
    assert job is not None and job.name == "my-job" and why == ""
    job, why = as_train_job(info(model="mlp", steps=5, workers=4, max_workers=2), None)
    assert job is None and why == "spec: need min_workers (4) <= workers (4) <= max_workers (2)"
    job, why = as_train_job(info(model="mlp", steps=5, bogus=1), None)
    assert job is None and why == "spec.bogus: unknown key (typo?)"
    job, why = as_train_job(info(model="mlp", steps=5, gpus_per_worker=0, cpus_per_worker=0.5), None)
    assert job is None and why.startswith("spec.gpus_per_worker: each worker must take at least 1 GPU slot")


# ====================================================================== on the real API


@pytest.fixture(scope="module")
def crd(control_plane):
    """The DLJob CRD installed (and Established) on the session control plane."""
    from dlsched.live.api.dljob_crd import install_crd

    with control_plane.client() as client:
        install_crd(client)


@pytest.fixture
def D(crd):
    from dlsched.live.api.dljob_crd import dljob_resource

    return dljob_resource()


def dljob(D, name: str, **spec) -> Any:
    return D(apiVersion=API_VERSION, kind=KIND, metadata={"name": name}, spec={"model": "mlp", "steps": 100, **spec})


def status_of(client, D, ns: str, name: str) -> dict:
    from lightkube import ApiError

    try:
        return dict(client.get(D, name, namespace=ns).get("status") or {})
    except ApiError:
        return {}


@pytest.fixture
def service(control_plane, k8s_namespace, crd, tmp_path):
    """service(**ServiceConfig keys) -> a started `dlsched serve` Service (no HTTP server) on the
    Kubernetes backend, sim mode, in the test's namespace; stopped afterwards."""
    from dlsched.live.service import Service, ServiceConfig

    made: list = []

    def _make(**extra):
        cfg = ServiceConfig(backend="kubernetes", policy="fifo", tick=0.2, work_dir=tmp_path / f"svc{len(made)}",
                            backend_options={"kubeconfig": str(control_plane.kubeconfig()), "namespace": k8s_namespace,
                                             "rate_per_worker": 50.0, "startup": 0.2, "stop_grace_s": 1}, **extra)
        svc = Service(cfg, port=0)
        made.append(svc)
        svc.start_controller()
        return svc

    yield _make
    for svc in made:
        svc.stop()


@pytest.fixture
def sync(control_plane, k8s_namespace, crd, tmp_path):
    """sync(store=None, **options) -> a started DLJobSync without a controller (the store's jobs stay
    queued unless the test moves them); stopped afterwards."""
    from dlsched.live.api.dljobs import DLJobSync
    from dlsched.live.backends.k8s_api import load_config

    made: list = []

    def _make(store: Store | None = None, kubeconfig: Path | None = None, namespace: str | None = None, **kw):
        store = store or Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
        s = DLJobSync(store, load_config(kubeconfig or control_plane.kubeconfig(), None), namespace or k8s_namespace,
                      interval=0.3, **kw)
        made.append(s)
        return s.start()

    yield _make
    for s in made:
        s.close()


@on_k8s
def test_a_dljob_runs_as_a_job_and_shows_its_phase_and_progress(service, k8s_client, k8s_namespace, D):
    svc = service()
    assert svc.dljobs is not None
    k8s_client.create(dljob(D, "train-1", steps=150, workers=2), namespace=k8s_namespace)
    view = wait_until("the DLJob in the store", lambda: next((v for v in svc.store.list() if v.name == "train-1"), None))
    assert view.spec.workers == 2 and view.spec.steps == 150
    st = wait_until("phase Running with its workers", lambda: (s := status_of(k8s_client, D, k8s_namespace, "train-1"))
                    .get("phase") == "Running" and s.get("workers") == 2 and s)
    assert st["jobId"] == view.id and st["steps"] == 150
    st = wait_until("phase Done", lambda: (s := status_of(k8s_client, D, k8s_namespace, "train-1"))
                    .get("phase") == "Done" and s)
    assert (st["stepsDone"], st["progress"], st["workers"]) == (150, "150/150 (100%)", 0)
    assert any(e.kind == "dljob" and "train-1" in e.message for e in svc.store.events(view.id))


@on_k8s
def test_deleting_a_dljob_cancels_its_job(service, k8s_client, k8s_namespace, D):
    svc = service()
    k8s_client.create(dljob(D, "long", steps=1_000_000), namespace=k8s_namespace)
    wait_until("phase Running", lambda: status_of(k8s_client, D, k8s_namespace, "long").get("phase") == "Running")
    jid = status_of(k8s_client, D, k8s_namespace, "long")["jobId"]
    k8s_client.delete(D, "long", namespace=k8s_namespace)
    view = wait_until("the job cancelled", lambda: (v := svc.store.get(jid)).status == "cancelled" and v)
    assert view.cancel_requested
    kinds = [e.kind for e in svc.store.events(jid)]
    assert kinds.index("cancel-requested") > kinds.index("started")  # the REST API's path: a cancel request
    assert any(e.kind == "dljob" and "long deleted" in e.message for e in svc.store.events(jid))


@on_k8s
def test_a_service_that_stops_leaves_the_dljobs_saying_so(service, k8s_client, k8s_namespace, D):
    """The shutdown checkpoints and stops the jobs; the DLJobs then say Queued with no workers, not
    Running (the last status is written after the jobs were stopped)."""
    svc = service()
    k8s_client.create(dljob(D, "kept", steps=1_000_000), namespace=k8s_namespace)
    # Running with steps done: a stop before the first step (a loaded machine) would leave nothing to show
    wait_until("phase Running with steps done", lambda: (lambda st: st.get("phase") == "Running"
               and st.get("stepsDone", 0) > 0)(status_of(k8s_client, D, k8s_namespace, "kept")))
    svc.stop()
    svc.stop = lambda: None  # stopped here: the fixture has nothing left to stop
    st = status_of(k8s_client, D, k8s_namespace, "kept")
    assert (st["phase"], st["workers"]) == ("Queued", 0) and st["stepsDone"] > 0


@on_k8s
def test_a_rest_job_gets_a_mirror_dljob_that_follows_it(service, k8s_client, k8s_namespace, D):
    """Submitted through the REST API: a mirror DLJob named after its id appears and follows the job;
    the REST cancel shows as Cancelled, the REST delete removes the mirror. Deleting the mirror of
    another job cancels it, and the mirror does not come back."""
    from fastapi.testclient import TestClient

    from dlsched.live.api.dljobs import MIRROR_LABEL
    from dlsched.live.api import create_app

    svc = service()
    api = TestClient(create_app(svc.store, svc.controller))
    a = api.post("/jobs", json={"model": "cnn", "steps": 1_000_000, "name": "from-rest"}).json()["id"]
    mirror = wait_until("the mirror", lambda: next((o for o in k8s_client.list(D, namespace=k8s_namespace)
                                                    if o.metadata.name == a), None))
    assert mirror.metadata.labels[MIRROR_LABEL] == "true" and mirror["spec"]["name"] == "from-rest"
    assert mirror["spec"]["model"] == "cnn"
    wait_until("Running", lambda: status_of(k8s_client, D, k8s_namespace, a).get("phase") == "Running")
    assert api.post(f"/jobs/{a}/cancel").status_code == 202
    wait_until("Cancelled", lambda: status_of(k8s_client, D, k8s_namespace, a).get("phase") == "Cancelled")
    assert api.delete(f"/jobs/{a}").status_code == 200
    wait_until("the mirror deleted", lambda: a not in {o.metadata.name for o in k8s_client.list(D, namespace=k8s_namespace)})

    b = api.post("/jobs", json={"model": "mlp", "steps": 1_000_000}).json()["id"]
    wait_until("b's mirror Running", lambda: status_of(k8s_client, D, k8s_namespace, b).get("phase") == "Running")
    k8s_client.delete(D, b, namespace=k8s_namespace)
    wait_until("b cancelled", lambda: svc.store.get(b).status == "cancelled")  # at once: its mirror was seen
    passes = svc.dljobs.passes
    wait_until("two more passes", lambda: svc.dljobs.passes >= passes + 2)
    assert b not in {o.metadata.name for o in k8s_client.list(D, namespace=k8s_namespace)}  # no cancel loop
    assert [v.id for v in svc.store.list()] == [b]  # a left through the REST API; nothing added


def _strict_create(client, D, ns: str, obj) -> None:
    """Create as kubectl does (strict field validation: unknown fields are errors, not dropped)."""
    client._client.request("post", res=D, obj=obj, namespace=ns, params={"fieldValidation": "Strict"})


@on_k8s
def test_malformed_dljobs_are_refused_by_the_api_server_naming_the_field(sync, k8s_client, k8s_namespace, D):
    from lightkube import ApiError
    from lightkube.types import PatchType

    s = sync()
    for spec, words in [({"steps": -1}, ["spec.steps", "greater than or equal to 1"]),
                        ({"model": "foo"}, ["spec.model", 'Unsupported value: "foo"']),
                        ({"bogus": 1}, ['unknown field "spec.bogus"']),
                        ({"lr": 0}, ["spec.lr", "greater than 0"]),
                        ({"batch_size": 1.5}, ["spec.batch_size", "must be of type integer"]),
                        ({"user": ""}, ["spec.user"])]:
        with pytest.raises(ApiError) as err:
            _strict_create(k8s_client, D, k8s_namespace, dljob(D, "bad", **spec))
        assert err.value.status.code in (400, 422) and all(w in err.value.status.message for w in words), \
            (spec, err.value.status.message)
    with pytest.raises(ApiError) as err:
        k8s_client.create(D(apiVersion=API_VERSION, kind=KIND, metadata={"name": "nosteps"}, spec={"model": "mlp"}),
                          namespace=k8s_namespace)
    assert "spec.steps: Required value" in err.value.status.message
    # a rule between fields, which the schema cannot express: accepted, then Rejected by dlsched
    k8s_client.create(dljob(D, "between", workers=4, max_workers=2), namespace=k8s_namespace)
    st = wait_until("Rejected", lambda: (x := status_of(k8s_client, D, k8s_namespace, "between"))
                    .get("phase") == "Rejected" and x)
    assert st["message"] == "spec: need min_workers (4) <= workers (4) <= max_workers (2)"
    assert s.store.list() == []
    # and a spec never changes once submitted
    k8s_client.create(dljob(D, "fixed"), namespace=k8s_namespace)
    with pytest.raises(ApiError) as err:
        k8s_client.patch(D, "fixed", {"spec": {"steps": 7}}, namespace=k8s_namespace, patch_type=PatchType.MERGE)
    assert "spec is immutable" in err.value.status.message


@on_k8s
def test_a_restarted_sync_adds_nothing_twice_and_cancels_what_was_deleted_meanwhile(sync, k8s_client, k8s_namespace,
                                                                                   D, tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'restart.sqlite'}")
    first = sync(store)
    for name in ("r1", "r2", "r3"):
        k8s_client.create(dljob(D, name), namespace=k8s_namespace)
    wait_until("three jobs", lambda: len(store.list()) == 3)
    wait_until("their job ids written", lambda: all(status_of(k8s_client, D, k8s_namespace, n).get("jobId")
                                                    for n in ("r1", "r2", "r3")))
    first.stop()
    ids = {v.name: v.id for v in store.list()}
    k8s_client.delete(D, "r2", namespace=k8s_namespace)  # while no sync runs
    second = sync(store)
    wait_until("r2's job cancel requested", lambda: store.get(ids["r2"]).cancel_requested)
    passes = second.passes
    wait_until("two more passes", lambda: second.passes >= passes + 2)
    assert len(store.list()) == 3 and not store.get(ids["r1"]).cancel_requested
    # a DLJob whose job was added but whose status was never written (a crash in between): one job
    r4 = k8s_client.create(dljob(D, "r4"), namespace=k8s_namespace)
    second.stop()
    store.add(TrainJob(model="mlp", steps=100, name="r4"), dljob=f"{k8s_namespace}/{r4.metadata.uid}")
    sync(store)
    wait_until("r4's job id written", lambda: status_of(k8s_client, D, k8s_namespace, "r4").get("jobId") == "job-000004")
    assert len(store.list()) == 4


@on_k8s
def test_the_watch_resumes_after_a_dropped_connection(sync, k8s_client, k8s_namespace, D):
    s = sync()
    k8s_client.create(dljob(D, "before"), namespace=k8s_namespace)
    wait_until("the first job", lambda: len(s.store.list()) == 1)
    before = s.reflector.relists
    s.reflector._transport._shutdown()  # the watch's connection drops under its thread
    k8s_client.create(dljob(D, "after"), namespace=k8s_namespace)
    wait_until("the second job", lambda: [v.name for v in s.store.list()] == ["before", "after"])
    assert s.reflector.relists > before


@on_k8s
def test_the_sync_works_with_the_rbac_rights_only(control_plane, sync, k8s_client, k8s_namespace, D):
    """rbac.yaml's Role in the test's namespace, the sync under the service account's token: it
    admits, writes status, mirrors and deletes mirrors; elsewhere it may not even list DLJobs."""
    from lightkube import ApiError, codecs

    from dlsched.k8s.controlplane import RESTRICTED_USER
    from dlsched.live.api.dljobs import DLJobSync
    from dlsched.live.backends.k8s_api import load_config

    for obj in codecs.load_all_yaml((ROOT / "deploy" / "k8s" / "rbac.yaml").read_text()):
        if obj.kind in ("Role", "RoleBinding"):
            obj.metadata.namespace = k8s_namespace
        try:
            k8s_client.create(obj)
        except ApiError as exc:
            assert exc.status.code == 409, exc.status.message  # a cluster-wide object from an earlier test
    restricted = control_plane.kubeconfig_for(RESTRICTED_USER)
    s = sync(kubeconfig=restricted)
    assert s.check() == ""
    k8s_client.create(dljob(D, "rights"), namespace=k8s_namespace)
    wait_until("its status", lambda: status_of(k8s_client, D, k8s_namespace, "rights").get("phase") == "Queued")
    rest = s.store.add(TrainJob(model="mlp", steps=5))
    wait_until("the mirror", lambda: status_of(k8s_client, D, k8s_namespace, rest.id).get("phase") == "Queued")
    s.store.update(rest.id, status="done", finished_at=time.time())
    s.store.delete(rest.id)
    wait_until("the mirror deleted", lambda: not status_of(k8s_client, D, k8s_namespace, rest.id))
    assert s.last_error == ""
    elsewhere = DLJobSync(s.store, load_config(restricted, None), "default")
    try:
        assert "no right to list DLJobs in namespace default" in elsewhere.check()
    finally:
        elsewhere.close()


@on_k8s
def test_kubectl_applies_lists_and_refuses(control_plane, sync, k8s_namespace, crd, tmp_path):
    """The real kubectl (at its default strict validation): apply the example, `kubectl get dljobs`
    shows the printer columns and the status, a malformed DLJob is refused naming the field."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl on PATH")
    env = {"KUBECONFIG": str(control_plane.kubeconfig()), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # its cache

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([kubectl, "-n", k8s_namespace, *args], input=stdin, capture_output=True, text=True,
                              timeout=30, env=env)

    s = sync()
    r = run("apply", "-f", str(ROOT / "examples" / "dljob.yaml"))
    assert r.returncode == 0 and "dljob.dlsched.io/mlp-example created" in r.stdout, r.stderr
    wait_until("the job", lambda: [v.name for v in s.store.list()] == ["mlp-example"])
    s.store.update(s.store.list()[0].id, status="running", workers=2, steps_done=750)
    out = wait_until("kubectl get showing it", lambda: "Running" in (o := run("get", "dljobs").stdout) and o)
    head, row = out.splitlines()[:2]
    assert head.split() == ["NAME", "PHASE", "WORKERS", "WAITING", "PROGRESS", "AGE"]
    assert row.split()[:4] == ["mlp-example", "Running", "2", "750/3000"]
    wide = run("get", "dlj", "-o", "wide").stdout
    assert "JOB" in wide.splitlines()[0] and "job-000001" in wide
    doc = json.loads(run("get", "dljob", "mlp-example", "-o", "json").stdout)
    assert doc["status"]["jobId"] == "job-000001" and doc["status"]["progress"] == "750/3000 (25%)"
    bad = "apiVersion: dlsched.io/v1alpha1\nkind: DLJob\nmetadata: {name: bad}\nspec: {model: mlp, steps: 5, stepz: 5}\n"
    r = run("apply", "-f", "-", stdin=bad)
    assert r.returncode != 0 and 'unknown field "spec.stepz"' in r.stderr
    r = run("apply", "-f", "-", stdin=bad.replace("stepz: 5", "workers: 0"))
    assert r.returncode != 0 and "spec.workers" in r.stderr
