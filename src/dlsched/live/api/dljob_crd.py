"""The `DLJob` custom resource (dljobs.dlsched.io): its CRD, generated from `TrainJob`, and installing it.

Why generated: a DLJob's `spec` *is* a `TrainJob` (same keys, same bounds, so a job file for
`dlsched submit` pastes into a DLJob's spec unchanged), and the API server must refuse what
pydantic would refuse before anything reaches dlsched. Writing the OpenAPI schema by hand would be
a second copy of `live/spec.py` that drifts; so `crd_manifest()` derives it from
`TrainJob.model_json_schema()`, `deploy/k8s/dljob-crd.yaml` is its output (`dlsched k8s crd`
prints it), and a test fails when the two differ.

What the schema cannot say is left to pydantic on the sync's side (`dljobs.py`): the rules between
fields (`min_workers <= workers <= max_workers`, a transformer's width a multiple of 4, the PS
bounds) and whether the job fits this cluster. A DLJob breaking them is accepted by the API server
and gets `status.phase: Rejected` with pydantic's message. Unknown keys are pruned by the API
server; clients that ask for strict field validation (kubectl does by default) get them refused.
The spec is immutable (a CEL transition rule): a stored job's spec never changes, so an edit would
be silently ignored otherwise.
"""

from __future__ import annotations

import time
from typing import Any

from dlsched.core.errors import DlschedError
from dlsched.live.spec import TrainJob

GROUP, VERSION, KIND, PLURAL, SINGULAR, SHORT = "dlsched.io", "v1alpha1", "DLJob", "dljobs", "dljob", "dlj"
CRD_NAME = f"{PLURAL}.{GROUP}"
API_VERSION = f"{GROUP}/{VERSION}"
#: `status.phase`: the store's job status, capitalised as Kubernetes phases are; `Rejected` also
#: for a DLJob whose spec never became a job (it broke a rule the schema cannot express).
PHASES: tuple[str, ...] = ("Queued", "Running", "Done", "Failed", "Cancelled", "Rejected")
IMMUTABLE_SPEC = "spec is immutable: delete the DLJob and create a new one"

# JSON Schema keys that carry over to a Kubernetes OpenAPI v3 schema unchanged
_COPIED = ("type", "enum", "minimum", "maximum", "minLength", "maxLength", "description")


def _field_schema(prop: dict[str, Any]) -> dict[str, Any]:
    """One TrainJob property as a structural schema: `X | None` becomes X with `nullable`, JSON
    Schema's numeric exclusiveMinimum becomes Kubernetes' boolean form (for an integer, the next
    integer as minimum: a clearer message), and the default is told in the description (a CRD
    default would be written into every stored DLJob; pydantic's defaults apply in one place)."""
    nullable = False
    if "anyOf" in prop:
        kinds = [p for p in prop["anyOf"] if p.get("type") != "null"]
        if len(kinds) != 1 or len(kinds) == len(prop["anyOf"]):
            raise ValueError(f"cannot express {prop} in a structural schema")
        nullable, prop = True, {**prop, **kinds[0]}
    out = {k: prop[k] for k in _COPIED if k in prop}
    for bound, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if bound in prop:
            if prop["type"] == "integer":
                out[inclusive] = prop[bound] + (1 if inclusive == "minimum" else -1)
            else:
                out[inclusive], out[bound] = prop[bound], True
    if prop.get("default") is not None:
        out["description"] = f"{out.get('description', '')} (default {prop['default']})".strip()
    if nullable:
        out["nullable"] = True
    return dict(sorted(out.items()))


def spec_schema() -> dict[str, Any]:
    """The OpenAPI v3 schema of a DLJob's `spec`: TrainJob's fields, bounds, enums and required keys."""
    js = TrainJob.model_json_schema()
    return {
        "type": "object",
        "description": "A training job: the keys of a `dlsched submit` job file (TrainJob, src/dlsched/live/spec.py). "
                       "Unknown keys are refused with kubectl's strict field validation (its default) and dropped "
                       "otherwise; rules between fields are dlsched's (status.phase Rejected). Immutable.",
        "required": list(js.get("required", [])),
        "properties": {name: _field_schema(prop) for name, prop in js["properties"].items()},
        "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": IMMUTABLE_SPEC}],
    }


def status_schema() -> dict[str, Any]:
    """`status`, written only by dlsched (the status subresource): what the store says of the job."""
    def s(kind: str, what: str, **extra: Any) -> dict[str, Any]:
        return {"type": kind, "description": what, **extra}

    return {"type": "object", "properties": {
        "phase": s("string", "the job's status in dlsched's store (Rejected: the spec never became a job)",
                   enum=list(PHASES)),
        "jobId": s("string", "the job's id in dlsched's store and REST API (e.g. job-000001)"),
        "workers": s("integer", "workers running now"),
        "ps": s("integer", "parameter servers running now"),
        "waitingReason": s("string", "why a queued job waits"),
        "stepsDone": s("integer", "steps done"),
        "steps": s("integer", "steps to do"),
        "progress": s("string", "stepsDone/steps and percent, for kubectl get"),
        "message": s("string", "why the job failed or was rejected, or what else needs saying"),
    }}


def _column(name: str, path: str, kind: str = "string", priority: int = 0, what: str = "") -> dict[str, Any]:
    col = {"name": name, "type": kind, "jsonPath": path, "description": what}
    if priority:
        col["priority"] = priority
    return col


def crd_manifest() -> dict[str, Any]:
    """The CustomResourceDefinition of DLJob (what deploy/k8s/dljob-crd.yaml holds)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/part-of": "dlsched"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": KIND, "plural": PLURAL, "singular": SINGULAR, "shortNames": [SHORT],
                      "listKind": f"{KIND}List", "categories": ["dlsched"]},
            "versions": [{
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A distributed training job for dlsched (kubectl's door to its store).",
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec_schema(),
                        "status": status_schema(),
                    },
                }},
                "additionalPrinterColumns": [
                    _column("Phase", ".status.phase", what="the job's status in dlsched"),
                    _column("Workers", ".status.workers", "integer", what="workers running now"),
                    _column("Waiting", ".status.waitingReason", what="why a queued job waits"),
                    _column("Progress", ".status.progress", what="steps done / steps (percent)"),
                    _column("Job", ".status.jobId", priority=1, what="the job's id in dlsched's REST API"),
                    _column("Message", ".status.message", priority=1, what="why it failed or was rejected"),
                    _column("Age", ".metadata.creationTimestamp", "date", what="since the DLJob was created"),
                ],
            }],
        },
    }


def crd_yaml() -> str:
    """`crd_manifest()` as the YAML of deploy/k8s/dljob-crd.yaml (with a header saying where it comes from)."""
    import yaml

    head = ("# The DLJob custom resource: kubectl's door to dlsched's store (docs/KUBERNETES.md).\n"
            "# Generated from TrainJob (src/dlsched/live/spec.py) by `dlsched k8s crd`; do not edit by hand:\n"
            "#   dlsched k8s crd > deploy/k8s/dljob-crd.yaml\n")
    return head + yaml.safe_dump(crd_manifest(), sort_keys=False, width=120)


def dljob_resource() -> type:
    """lightkube's class for DLJob (namespaced, with its status subresource)."""
    from lightkube.generic_resource import create_namespaced_resource

    return create_namespaced_resource(GROUP, VERSION, KIND, PLURAL)


def install_crd(client: Any, timeout: float = 30.0) -> None:
    """Create or update the CRD and wait until the API server serves it (Established); a
    `DlschedError` saying why when it does not. Safe to call again (e.g. every `dlsched k8s up`)."""
    from lightkube import ApiError
    from lightkube.resources.apiextensions_v1 import CustomResourceDefinition as CRD

    obj = CRD.from_dict(crd_manifest())
    try:
        client.create(obj)
    except ApiError as exc:
        if exc.status.code != 409:
            raise DlschedError(f"cannot create the CRD {CRD_NAME}: {exc.status.message}") from None
        current = client.get(CRD, CRD_NAME)
        obj.metadata.resourceVersion = current.metadata.resourceVersion
        client.replace(obj)
    deadline = time.monotonic() + timeout
    while True:
        conds = client.get(CRD, CRD_NAME).status.conditions or []
        if any(c.type == "Established" and c.status == "True" for c in conds):
            return
        if time.monotonic() > deadline:
            raise DlschedError(f"the CRD {CRD_NAME} is not Established after {timeout:g} s: "
                               + "; ".join(f"{c.type}={c.status} {c.message or ''}" for c in conds))
        time.sleep(0.1)
