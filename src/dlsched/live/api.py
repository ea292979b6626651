"""The REST API of `dlsched serve`: submit, list, inspect and cancel jobs; cluster, metrics, status page.

The API only reads and writes the store; the controller picks new jobs and cancel requests up
from there on its next round and writes their status back. So a request never waits for a
scheduling decision or a process start, and the API stays up when the controller is busy or gone.
Every route declares its response model, so /openapi.json is a complete description a client (or
schemathesis) can be generated from.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from fastapi import FastAPI, HTTPException, Path, Query, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel, Field

from dlsched.live.auth import ApiAuth
from dlsched.live.metrics import CONTENT_TYPE, LiveMetrics
from dlsched.live.spec import TrainJob
from dlsched.live.status_page import render_status_page
from dlsched.live.store import FINISHED, EventView, JobStatusName, JobView, Store


log = logging.getLogger("dlsched.api")


class ErrorBody(BaseModel):
    detail: str = Field(description="what went wrong, for people")


class ValidationProblem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorBody(BaseModel):
    """422: `message` is one readable line per problem; `detail` is pydantic's list, for programs."""

    message: str
    detail: list[ValidationProblem]


class NodeView(BaseModel):
    name: str
    gpus: float
    cpus: float
    mem_gb: float
    used_gpus: float
    used_cpus: float
    used_mem_gb: float
    jobs: list[str] = []


class ClusterView(BaseModel):
    nodes: list[NodeView]
    policy: str
    backend: str
    decisions: int
    last_error: str = Field("", description="why the last decision failed; empty while decisions succeed")


class Health(BaseModel):
    status: str = Field("ok", description="'ok', or 'failing' while the policy's decisions fail (HTTP 503)")
    controller: bool = Field(description="whether a controller is attached")
    error: str = Field("", description="why the last decision failed")


_JOB_ID = Path(description="a job id such as job-000001", max_length=64)
_422 = {422: {"model": ValidationErrorBody, "description": "invalid request"}}
_404 = {404: {"model": ErrorBody, "description": "no such job"}, **_422}


def describe_problems(errors: list[dict[str, Any]]) -> str:
    """pydantic's errors as `where: what` lines (`body.` dropped: users think in job keys)."""
    lines = []
    for err in errors:
        loc = [str(x) for x in err.get("loc", ())]
        if loc and loc[0] == "body":
            loc = loc[1:]
        where = ".".join(loc) or "request body"
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        lines.append(f"{where}: {msg}")
    return "; ".join(lines)


def create_app(store: Store, controller: Any = None, metrics: LiveMetrics | None = None,
               auth: ApiAuth | None = None) -> FastAPI:
    """The API over `store`. `controller` (optional) answers /cluster; `metrics` is served at /metrics;
    `auth` (optional) guards every route, including those added later, by method (`live/auth.py`)."""
    metrics = metrics if metrics is not None else LiveMetrics()
    app = FastAPI(
        title="dlsched",
        version="1",
        description="Submit distributed PyTorch training jobs to the dlsched live scheduler and watch them run.",
        dependencies=auth.dependencies() if auth is not None else None,
    )
    app.state.store = store
    app.state.controller = controller
    app.state.metrics = metrics

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        problems = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
                    for e in errors]
        what = "invalid job" if request.url.path == "/jobs" and request.method == "POST" else "invalid request"
        return JSONResponse(status_code=422, content=jsonable_encoder(
            {"message": f"{what}: {describe_problems(errors)}", "detail": problems}))

    def _cluster() -> dict | None:
        ctl = app.state.controller
        if ctl is None:
            return None
        try:
            return ctl.cluster_view()
        except Exception as exc:  # the store still answers: say what failed instead of a bare 500
            log.exception("the controller failed to describe the cluster")
            raise HTTPException(503, f"the controller failed to describe the cluster: {exc}") from None

    @app.post("/jobs", status_code=status.HTTP_201_CREATED, response_model=JobView, tags=["jobs"],
              responses={400: {"model": ErrorBody, "description": "the body is not JSON"}, **_422},
              summary="Submit a training job")
    def submit(job: TrainJob) -> JobView:
        """Queue a job; the controller starts it when the policy gives it resources."""
        return store.add(job)

    @app.get("/jobs", response_model=list[JobView], responses=_422, tags=["jobs"], summary="List jobs (oldest first)")
    def list_jobs(
        status_: Optional[list[JobStatusName]] = Query(None, alias="status",
                                                      description="only jobs in these statuses (repeatable)"),
    ) -> list[JobView]:
        return store.list(status_)

    def _job(job_id: str) -> JobView:
        view = store.get(job_id)
        if view is None:
            raise HTTPException(404, f"no job {job_id!r} (ids look like job-000001; GET /jobs lists them)")
        return view

    @app.get("/jobs/{job_id}", response_model=JobView, responses=_404, tags=["jobs"], summary="One job")
    def get_job(job_id: str = _JOB_ID) -> JobView:
        return _job(job_id)

    @app.get("/jobs/{job_id}/events", response_model=list[EventView], responses=_404, tags=["jobs"],
             summary="What happened to a job, oldest first")
    def job_events(job_id: str = _JOB_ID, limit: int = Query(1000, ge=1, le=100_000)) -> list[EventView]:
        _job(job_id)
        return store.events(job_id, limit=limit)

    @app.post("/jobs/{job_id}/cancel", status_code=status.HTTP_202_ACCEPTED, response_model=JobView,
              responses={**_404, 409: {"model": ErrorBody, "description": "the job already ended"}},
              tags=["jobs"], summary="Ask for a job to be cancelled")
    def cancel(job_id: str = _JOB_ID) -> JobView:
        """Accepted, not done: the controller stops the job (checkpointing) on its next round."""
        view = _job(job_id)
        if view.status in FINISHED:
            raise HTTPException(409, f"job {job_id} already ended ({view.status}): nothing to cancel")
        return store.request_cancel(job_id) or _job(job_id)  # deleted meanwhile: 404

    @app.get("/cluster", response_model=ClusterView, tags=["cluster"],
             responses={503: {"model": ErrorBody, "description": "no controller attached, or it failed"}},
             summary="Nodes, their use and the running policy")
    def cluster() -> ClusterView:
        view = _cluster()
        if view is None:
            raise HTTPException(503, "no controller attached to this service: cluster unknown")
        return ClusterView.model_validate(view)

    @app.get("/metrics", response_class=Response, tags=["service"], summary="Prometheus metrics",
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                              "description": "Prometheus text exposition"}})
    def prometheus() -> Response:
        metrics.set_job_counts(store.counts())
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/", response_class=HTMLResponse, tags=["service"], summary="Status page",
             responses={200: {"content": {"text/html": {"schema": {"type": "string"}}}, "description": "HTML"}})
    def status_page() -> HTMLResponse:
        try:
            cluster, problem = _cluster(), ""
        except HTTPException as exc:
            cluster, problem = None, str(exc.detail)
        return HTMLResponse(render_status_page(store.list(), cluster, problem=problem))

    @app.get("/healthz", response_model=Health, tags=["service"], summary="Liveness and scheduling health",
             responses={503: {"model": Health, "description": "the policy's decisions are failing"}})
    def healthz() -> Health | JSONResponse:
        ctl = app.state.controller
        error = ctl.health() if ctl is not None else ""
        if error:  # jobs are not being scheduled: not healthy, whatever the web server thinks
            return JSONResponse(status_code=503, content=Health(status="failing", controller=True,
                                                                error=error).model_dump())
        return Health(controller=ctl is not None)

    return app
