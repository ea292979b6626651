"""The REST API of `dlsched serve`: submit, list, inspect and cancel jobs; cluster, metrics, status page.

The API only reads and writes the store; the controller picks new jobs and cancel requests up
from there on its next round and writes their status back. So a request never waits for a
scheduling decision or a process start, and the API stays up when the controller is busy or gone.
Every route declares its response model, so /openapi.json is a complete description a client (or
schemathesis) can be generated from.
"""

from __future__ import annotations

import logging
import shutil
from typing import Any, Literal, Optional

from fastapi import FastAPI, HTTPException, Path, Query, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, Field

from dlsched.live.api.auth import ApiAuth
from dlsched.live.api.metrics import CONTENT_TYPE, LiveMetrics
from dlsched.live.spec import TrainJob
from dlsched.live.api.status_page import JobPage, render_status_page
from dlsched.live.store import Store
from dlsched.live.store.views import FINISHED, EventView, JobStatusName, JobView, WrongState


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
    up: bool = Field(True, description="false while the backend reports the node down (failed, NotReady)")
    jobs: list[str] = []


class ClusterView(BaseModel):
    nodes: list[NodeView]
    policy: str
    backend: str
    decisions: int
    last_error: str = Field("", description="why the last decision failed; empty while decisions succeed")


class Deleted(BaseModel):
    """What `DELETE /jobs/{id}` removed."""

    id: str
    status: JobStatusName = Field(description="the status the job had")
    purged: str | None = Field(None, description="the job directory removed (purge=true), if it existed")


class Health(BaseModel):
    status: str = Field("ok", description="'ok', or 'failing' while the policy's decisions fail (HTTP 503)")
    controller: bool = Field(description="whether a controller is attached")
    error: str = Field("", description="why the last decision failed")


_JOB_ID = Path(description="a job id such as job-000001", max_length=64)
_422 = {422: {"model": ValidationErrorBody, "description": "invalid request"}}
_404 = {404: {"model": ErrorBody, "description": "no such job"}, **_422}
#: Jobs per page of GET /jobs when the client does not say (1,200 jobs were 800 KB in one answer).
DEFAULT_PAGE = 100
MAX_PAGE = 1000
#: Jobs per page of the status page.
PAGE_ROWS = 50
_PAGED = {200: {"description": "one page of jobs", "headers": {
    "X-Total-Count": {"description": "how many jobs match the filter in all", "schema": {"type": "integer"}},
    "Link": {"description": "RFC 8288 links to the next and previous pages, when there are some",
             "schema": {"type": "string"}}}}}


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
    # FastAPIOffline: /docs and /redoc load Swagger UI and ReDoc from files shipped in the package,
    # not from a CDN, so the API docs work on an air-gapped cluster
    app = FastAPIOffline(
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
        """Queue a job; the controller starts it when the policy gives it resources. A job that may
        never run (its workers take no GPU slot and no CPU, or its smallest size never fits this
        cluster) is refused with 422, as a typo is."""
        ctl = app.state.controller
        problems = ctl.admission_problems(job) if ctl is not None else job.demand_problems()
        if problems:
            raise RequestValidationError([{"loc": ("body", key), "msg": msg, "type": "value_error"}
                                          for key, msg in problems])
        return store.add(job)

    @app.get("/jobs", response_model=list[JobView], responses={**_PAGED, **_422}, tags=["jobs"],
             summary="List jobs, one page at a time")
    def list_jobs(
        request: Request,
        response: Response,
        status_: Optional[list[JobStatusName]] = Query(None, alias="status",
                                                      description="only jobs in these statuses (repeatable)"),
        limit: int = Query(DEFAULT_PAGE, ge=1, le=MAX_PAGE, description="jobs per page"),
        offset: int = Query(0, ge=0, le=2**62, description="jobs to skip"),
        order: Literal["oldest", "newest"] = Query("oldest", description="oldest first (stable pages while "
                                                   "jobs arrive) or newest first"),
    ) -> list[JobView]:
        """At most `limit` jobs; `X-Total-Count` says how many match in all and `Link` points to the
        next and previous pages."""
        jobs, total = store.page(status_, limit=limit, offset=offset, newest_first=order == "newest")
        response.headers["X-Total-Count"] = str(total)
        links = []
        if offset + len(jobs) < total:
            links.append(f'<{request.url.include_query_params(offset=offset + limit)}>; rel="next"')
        if offset > 0:
            links.append(f'<{request.url.include_query_params(offset=max(0, offset - limit))}>; rel="prev"')
        if links:
            response.headers["Link"] = ", ".join(links)
        return jobs

    def _missing(job_id: str) -> HTTPException:
        return HTTPException(404, f"no job {job_id!r} (ids look like job-000001; GET /jobs lists them)")

    def _job(job_id: str) -> JobView:
        view = store.get(job_id)
        if view is None:
            raise _missing(job_id)
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

    _409 = {409: {"model": ErrorBody, "description": "the job is not in a status this applies to"}}

    @app.post("/jobs/{job_id}/retry", response_model=JobView, responses={**_404, **_409}, tags=["jobs"],
              summary="Queue a failed or cancelled job again")
    def retry(job_id: str = _JOB_ID) -> JobView:
        """The job goes back to the queue and resumes from its last checkpoint when the policy
        places it; a `retried` event records it."""
        try:
            return store.retry(job_id)
        except WrongState as exc:
            raise HTTPException(409, str(exc)) from None
        except KeyError:  # deleted meanwhile
            raise _missing(job_id) from None

    @app.delete("/jobs/{job_id}", response_model=Deleted, tags=["jobs"], summary="Delete an ended job",
                responses={**_404, **_409, 503: {"model": ErrorBody, "description": "purge asked, no controller"}})
    def delete(job_id: str = _JOB_ID, purge: bool = Query(False, description="also remove its job directory "
                                                                             "(checkpoints, progress, logs)")) -> Deleted:
        """Remove an ended job (done, failed, cancelled or rejected) and its events from the store;
        a queued or running job is 409 (cancel it first)."""
        _job(job_id)
        ctl = app.state.controller
        if purge and ctl is None:
            raise HTTPException(503, "no controller attached to this service: its work dir is unknown, "
                                     "so purge=true cannot remove the job directory")
        try:
            view = store.delete(job_id)
        except WrongState as exc:
            raise HTTPException(409, str(exc)) from None
        except KeyError:  # deleted meanwhile
            raise _missing(job_id) from None
        purged = None
        if purge:
            job_dir = ctl.job_dir(job_id)
            if job_dir.exists():
                try:
                    shutil.rmtree(job_dir)
                except OSError as exc:
                    raise HTTPException(500, f"job {job_id} was deleted from the store, but its job directory "
                                             f"{job_dir} could not be removed: {exc}") from None
                purged = str(job_dir)
        return Deleted(id=view.id, status=view.status, purged=purged)

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
    def status_page(
        status_: Optional[list[JobStatusName]] = Query(None, alias="status", description="only these statuses"),
        offset: int = Query(0, ge=0, le=2**62, description="newest jobs to skip"),
    ) -> HTMLResponse:
        try:
            cluster, problem = _cluster(), ""
        except HTTPException as exc:
            cluster, problem = None, str(exc.detail)
        jobs, total = store.page(status_, limit=PAGE_ROWS, offset=offset, newest_first=True)
        page = JobPage(jobs=jobs, total=total, offset=offset, limit=PAGE_ROWS, statuses=tuple(status_ or ()))
        return HTMLResponse(render_status_page(page, store.counts(), cluster, problem=problem))

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
