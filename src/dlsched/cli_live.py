"""`dlsched serve | submit | status | cancel | retry | delete`: run the live service and talk to it over HTTP.

The client commands only speak the REST API (httpx), so they work the same against a service on
this machine or on a cluster's head node (`--url` or DLSCHED_URL). Job files are validated
locally before anything is sent, so a typo is reported with the file name and the key, not as a
server response. Everything a user or a job wrote (names, reasons, node names, event messages)
is printed through `cli_support.safe`, so it cannot carry terminal escapes or rich markup.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from dlsched.cli_support import console, friendly, safe
from dlsched.core.errors import ConfigError, DlschedError

DEFAULT_URL = "http://127.0.0.1:8765"
#: Jobs `dlsched status` shows when not told (the newest); the API answers at most 1000 per page.
STATUS_ROWS = 20
MAX_ROWS = 1000
_URL = typer.Option(DEFAULT_URL, "--url", envvar="DLSCHED_URL", help="Where the dlsched service listens.")
_TOKEN_FILE = typer.Option(None, "--token-file", envvar="DLSCHED_TOKEN_FILE",
                           help="File holding the service's API token (else DLSCHED_TOKEN; see docs/LIVE.md, Security).")


def _backends_help() -> str:
    from dlsched.live.backends.registry import backends_help

    return backends_help()


def _key_values(items: list[str] | None, flag: str) -> dict[str, Any] | None:
    """KEY=VALUE options into a mapping (VALUE read as YAML: numbers, booleans, null); None for none."""
    import yaml

    if not items:
        return None
    out: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ConfigError(f"{flag} takes KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError:
            out[key.strip()] = value
    return out


# --------------------------------------------------------------------------- HTTP


def _request(method: str, url: str, path: str, *, token_file: Path | None = None, **kw: Any):
    """One API call; a service that is not there, or an error it answers, is one clear DlschedError.
    Sends the API token (from `token_file`, else DLSCHED_TOKEN) when there is one."""
    import httpx

    from dlsched.live.api.auth import resolve_token

    token = resolve_token(token_file)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    base = url.rstrip("/")
    try:
        with httpx.Client(base_url=base, timeout=30.0, headers=headers) as client:
            resp = client.request(method, path, **kw)
    except httpx.ConnectError:
        raise DlschedError(f"no dlsched service at {base}: start one with `dlsched serve`") from None
    except httpx.TimeoutException:
        raise DlschedError(f"the dlsched service at {base} did not answer in time") from None
    except httpx.HTTPError as exc:
        raise DlschedError(f"cannot talk to the dlsched service at {base}: {exc}") from None
    if resp.status_code == 401:
        hint = "the token was refused" if token else "set DLSCHED_TOKEN or pass --token-file"
        raise DlschedError(f"{_error_text(resp)} ({hint})")
    if resp.status_code >= 400:
        raise DlschedError(_error_text(resp))
    return resp


def _quote(job_id: str) -> str:
    from urllib.parse import quote

    return quote(job_id, safe="")


def _error_text(resp) -> str:
    try:
        body = resp.json()
    except ValueError:
        return f"the service answered {resp.status_code}: {resp.text[:300]}"
    if isinstance(body, dict):
        if isinstance(body.get("message"), str):
            return body["message"]
        if isinstance(body.get("detail"), str):
            return body["detail"]
    return f"the service answered {resp.status_code}: {body}"


# --------------------------------------------------------------------------- job files


def read_job_file(path: Path) -> list:
    """Every TrainJob in a YAML or JSON file (one mapping or a list of them); all problems at once."""
    from pydantic import ValidationError

    from dlsched.config import read_yaml, validation_problems
    from dlsched.live.spec import TrainJob

    data = read_yaml(path, "job file")  # JSON is YAML
    items = data if isinstance(data, list) else [data]
    if not items or data is None:
        raise ConfigError(f"{path}: empty; expected a job (model, steps, ...) or a list of jobs")
    jobs, problems = [], []
    for i, item in enumerate(items, 1):
        where = f"{path}" if len(items) == 1 else f"{path}: job {i}"
        if not isinstance(item, dict):
            problems.append(f"{where}: expected a mapping of job keys (model, steps, ...), got {type(item).__name__}")
            continue
        try:
            job = TrainJob.model_validate(item)
        except ValidationError as exc:
            problems += [f"{where}: {line}" for line in validation_problems(exc, top="job")]
            continue
        jobs.append(job)
        problems += [f"{where}: {key}: {msg}" for key, msg in job.demand_problems()]  # the service refuses them too
    if problems:
        raise ConfigError(f"{path}: invalid job file\n  " + "\n  ".join(problems))
    return jobs


# --------------------------------------------------------------------------- rendering


def _span(seconds: float | None) -> str:
    """A length of time for a person: 4.2s, 59s, 12m03s, 5h07m ("–" when not known)."""
    if seconds is None:
        return "–"
    s = max(0.0, float(seconds))
    if s < 10:
        return f"{s:.1f}s"
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def _ago(t: float | None) -> str:
    return "–" if t is None else f"{_span(time.time() - t)} ago"


def _took(job: dict) -> str:
    """An ended job's time from submit to end and, when the store knows it, how long it ran
    (the rest it queued); "–" while it has not ended. Both come from the API's job view."""
    took = job.get("duration_s")
    if took is None:
        return "–"
    ran = job.get("run_time_s")
    return _span(took) + (f" (ran {_span(ran)})" if ran is not None else "")


def _age(job: dict) -> str:
    """The table's `age`: time in the system, submit → now, or → its end once it ended (then
    with its run time, as `_took`). One column instead of "submitted … ago" beside "took": for a
    job still in the system the two are the same number."""
    if job.get("duration_s") is not None:
        return _took(job)
    t = job.get("submitted_at")
    return "–" if t is None else _span(time.time() - t)


def _progress(job: dict) -> str:
    total = job["spec"]["steps"]
    done = min(job.get("steps_done", 0), total)
    filled = int(round(10 * done / total)) if total else 0
    return f"{'█' * filled}{'░' * (10 - filled)} {done}/{total}"


_STATUS_STYLE = {"queued": "yellow", "running": "blue", "done": "green", "failed": "red", "rejected": "red",
                 "cancelled": "dim"}


def _status(job: dict) -> str:
    s = job["status"]
    extra = " (cancelling)" if job.get("cancel_requested") and s in ("queued", "running") else ""
    return f"[{_STATUS_STYLE.get(s, 'white')}]{safe(s)}{extra}[/]"


def _why(job: dict) -> str:
    """Why a queued job waits (and its last failure, if any), or why an ended job ended."""
    waiting, reason = job.get("waiting_reason") or "", job.get("reason") or ""
    if job["status"] == "queued" and waiting:
        return waiting + (f" (last run: {reason})" if reason else "")
    return reason


def _dir_cells(jobs: list[dict]) -> tuple[list[str], str]:
    """The job dir cell of each row and the caption under the table. The folders of one service
    share a parent (`<work dir>/jobs/`): that is said once below the table and each row shows its
    folder's name, so a row stays narrow; folders with different parents are shown whole."""
    from pathlib import PurePath

    dirs = [j.get("job_dir") for j in jobs]
    parents = {str(PurePath(d).parent) for d in dirs if d}
    if len(parents) != 1:
        return [d or "–" for d in dirs], ""
    parent = parents.pop()
    return [PurePath(d).name + "/" if d else "–" for d in dirs], f"job dirs are in {parent}/"


def _jobs_table(jobs: list[dict], title: str) -> Table:
    """The jobs, one row each. The job dir column is left out when no job shown has a folder yet
    (a column of dashes only costs the `why` column width)."""
    cells, where = _dir_cells(jobs)
    columns = ["id", "name", "model", "status", "progress", "size", "nodes", "steps/s", "loss", "age", "why"]
    if any(j.get("job_dir") for j in jobs):
        columns.append("job dir")
    notes = ["age: since submit, until the end once ended (ran: time running)", where]
    table = Table(title=title, title_justify="left", caption="\n".join(safe(n) for n in notes if n),
                  caption_justify="left")
    for col in columns:
        table.add_column(col, no_wrap=col not in ("name", "nodes", "age", "why", "job dir"), overflow="fold")
    for j, folder in zip(jobs, cells):
        spec = j["spec"]
        size = (f"{j['workers']}w" + (f"+{j['ps']}ps" if j["ps"] else "")) if j["status"] == "running" else "–"
        row = [
            safe(j["id"]), safe(j.get("name") or ""), safe(f"{spec['model']}/{spec['mode']}"), _status(j),
            _progress(j), size, safe(", ".join(j.get("nodes", []))),
            f"{j['steps_per_s']:.1f}" if j.get("steps_per_s") else "–",
            f"{j['loss']:.4g}" if j.get("loss") is not None else "–", _age(j), safe(_why(j)[:200]), safe(folder),
        ]
        table.add_row(*row[:len(columns)])
    return table


def _page_title(shown: int, total: int, offset: int, statuses: list[str]) -> str:
    """'20 newest of 1200 jobs (1180 more: --offset 20)'."""
    what = f"{' or '.join(statuses)} jobs" if statuses else "jobs"
    if total == 0:
        return f"no {what}"
    if shown == total:
        return f"{total} {what}"
    first = "newest" if offset == 0 else f"newest after skipping {offset}"
    more = total - offset - shown
    tail = f" ({more} more: --offset {offset + shown})" if more > 0 else ""
    return f"{shown} {first} of {total} {what}{tail}"


def _show_job(job: dict, events: list[dict]) -> None:
    spec = job["spec"]
    console.print(f"[bold]{safe(job['id'])}[/] {safe(job.get('name') or '')}  {_status(job)}")
    rows = [
        ("model", f"{spec['model']} ({spec['mode']}), batch {spec['batch_size']}, workers "
                  f"{spec.get('min_workers') or spec['workers']}..{spec.get('max_workers') or spec['workers']}"),
        ("progress", _progress(job)),
        ("size", f"{job['workers']} worker(s), {job['ps']} ps on {', '.join(job.get('nodes', [])) or '–'}"),
        ("speed", f"{job['steps_per_s']:.2f} steps/s" if job.get("steps_per_s") else "–"),
        ("loss", f"{job['loss']:.5g}" if job.get("loss") is not None else "–"),
        ("runs", f"attempt {job.get('attempt', 0)}, {job.get('restarts', 0)} restart(s)"),
        ("submitted", _ago(job.get("submitted_at"))),
        ("started", _ago(job.get("started_at"))),
        ("finished", _ago(job.get("finished_at"))),
        ("took", _took(job)),
        ("job dir", job.get("job_dir") or "–"),
    ]
    if job["status"] == "queued" and job.get("waiting_reason"):
        rows.append(("waiting", job["waiting_reason"]))
    if job.get("reason"):
        rows.append(("reason", job["reason"]))
    for key, value in rows:
        console.print(f"  [bold]{key:<10}[/]", safe(value) if key != "progress" else value, highlight=False)
    table = Table(title="events", title_justify="left")
    for col in ("time", "kind", "message"):
        table.add_column(col, no_wrap=col != "message")
    for e in events:
        table.add_row(time.strftime("%H:%M:%S", time.localtime(e["time"])), safe(e["kind"]), safe(e.get("message", "")))
    console.print(table)


# --------------------------------------------------------------------------- commands


def register_live(app: typer.Typer) -> None:
    """Add serve/submit/status/cancel/retry/delete/backends to the `dlsched` app."""

    @app.command("backends")
    @friendly
    def list_backends() -> None:
        """List the live backends and their options (`dlsched serve --backend NAME -o KEY=VALUE`)."""
        from dlsched.live.backends.registry import BACKENDS

        for entry in BACKENDS.values():
            console.print(f"[bold]{entry.name}[/]: {entry.summary}", highlight=False)
            for key, field in entry.options.model_fields.items():
                text = field.description or ""
                if field.default is not None and "default" not in text:
                    text += f" (default {field.default})"
                console.print(f"    {key:<16}{text}", highlight=False, markup=False)

    @app.command("serve")
    @friendly
    def serve(
        config: Optional[Path] = typer.Option(None, "--config", help="YAML with ServiceConfig keys (host, port, db_url, db_url_file, token_file, auth, work_dir, backend, backend_options, nodes, ray_address, policy, policy_options, tick, stop_jobs_on_exit, lease_seconds, retry, dljobs)."),
        port: Optional[int] = typer.Option(None, "--port", help="Port (default 8765)."),
        host: Optional[str] = typer.Option(None, "--host", help="Address to bind (default 127.0.0.1; elsewhere, set a token)."),
        policy: Optional[str] = typer.Option(None, "--policy", "-p", help="Scheduling policy (default optimus; see `dlsched policies`)."),
        backend: Optional[str] = typer.Option(None, "--backend", help="Where jobs run (default local): " + _backends_help() + ". `dlsched backends` lists each one's options."),
        backend_option: Optional[list[str]] = typer.Option(None, "--backend-option", "-o", help="A backend option as KEY=VALUE (repeatable; VALUE is read as YAML), e.g. -o standby=0."),
        work_dir: Optional[Path] = typer.Option(None, "--work-dir", help="Job directories and the default SQLite store (default ./dlsched-service)."),
        db_url: Optional[str] = typer.Option(None, "--db-url", envvar="DLSCHED_DB_URL", help="SQLAlchemy URL of the store, e.g. postgresql+psycopg://... (default: SQLite in the work dir). A flag is visible in `ps`: pass a password by DLSCHED_DB_URL or --db-url-file."),
        db_url_file: Optional[Path] = typer.Option(None, "--db-url-file", help="File holding the store's URL (keeps its password out of `ps`)."),
        token_file: Optional[Path] = typer.Option(None, "--token-file", help="File holding the API token (else DLSCHED_TOKEN); with one, changes need `Authorization: Bearer`."),
        auth: Optional[str] = typer.Option(None, "--auth", help="With a token: 'writes' (default: submit, cancel... need it) or 'all' (reads too)."),
        ray_address: Optional[str] = typer.Option(None, "--ray-address", help="Ray cluster address for --backend ray."),
    ) -> None:
        """Run the live scheduler: the REST API, the status page and the controller that trains the jobs."""
        import logging

        from dlsched.live.service import load_service_config, run_service

        cfg = load_service_config(config, port=port, host=host, policy=policy, backend=backend, work_dir=work_dir,
                                  db_url=db_url, db_url_file=db_url_file, token_file=token_file, auth=auth,
                                  ray_address=ray_address, backend_options=_key_values(backend_option, "--backend-option"))
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        for chatty in ("httpx", "httpx2"):  # one line per API request (the Kubernetes Lease renews every 2 s)
            logging.getLogger(chatty).setLevel(logging.WARNING)
        run_service(cfg, announce=lambda line: console.print(line, highlight=False, markup=False))

    @app.command("submit")
    @friendly
    def submit(
        file: Path = typer.Argument(..., help="YAML or JSON job file (TrainJob keys; a list for several jobs)."),
        url: str = _URL,
        token_file: Optional[Path] = _TOKEN_FILE,
    ) -> None:
        """Submit the job(s) of a file to a running service; prints their ids."""
        jobs = read_job_file(file)
        for job in jobs:
            view = _request("POST", url, "/jobs", token_file=token_file,
                            json=job.model_dump(mode="json", exclude_unset=True)).json()
            label = f" ({safe(view['name'])})" if view.get("name") else ""
            console.print(f"submitted [bold]{safe(view['id'])}[/]{label}: {job.model} x{job.steps} steps",
                          highlight=False)

    @app.command("status")
    @friendly
    def status(
        job_id: Optional[str] = typer.Argument(None, help="One job to show with its events (default: the newest jobs)."),
        limit: int = typer.Option(STATUS_ROWS, "--limit", "-n", help=f"Jobs to show, newest first (1..{MAX_ROWS})."),
        offset: int = typer.Option(0, "--offset", help="Newest jobs to skip (to page back)."),
        status_: Optional[list[str]] = typer.Option(None, "--status", "-s", help="Only jobs in this status "
                                                    "(queued, running, done, failed, cancelled, rejected; repeatable)."),
        url: str = _URL,
        token_file: Optional[Path] = _TOKEN_FILE,
    ) -> None:
        """Show the newest jobs of a running service (and how many more there are), or one job and its events."""
        if job_id is None:
            if not 1 <= limit <= MAX_ROWS:
                raise ConfigError(f"--limit must be between 1 and {MAX_ROWS}, got {limit}")
            if offset < 0:
                raise ConfigError(f"--offset must be 0 or more, got {offset}")
            statuses = list(status_ or [])
            params = [("limit", limit), ("offset", offset), ("order", "newest")] + [("status", s) for s in statuses]
            resp = _request("GET", url, "/jobs", token_file=token_file, params=params)
            jobs = resp.json()
            total = int(resp.headers.get("x-total-count", len(jobs)))
            console.print(_jobs_table(jobs, safe(_page_title(len(jobs), total, offset, statuses))))
            return
        job = _request("GET", url, f"/jobs/{_quote(job_id)}", token_file=token_file).json()
        events = _request("GET", url, f"/jobs/{_quote(job_id)}/events", token_file=token_file).json()
        _show_job(job, events)

    @app.command("cancel")
    @friendly
    def cancel(job_id: str = typer.Argument(..., help="The job to cancel."), url: str = _URL,
               token_file: Optional[Path] = _TOKEN_FILE) -> None:
        """Ask the service to cancel a job (it is stopped, checkpointing, on the controller's next round)."""
        view = _request("POST", url, f"/jobs/{_quote(job_id)}/cancel", token_file=token_file).json()
        console.print(f"cancel requested for [bold]{safe(view['id'])}[/] (was {safe(view['status'])})", highlight=False)

    @app.command("retry")
    @friendly
    def retry(job_id: str = typer.Argument(..., help="A failed or cancelled job."), url: str = _URL,
              token_file: Optional[Path] = _TOKEN_FILE) -> None:
        """Queue a failed or cancelled job again; it resumes from its last checkpoint."""
        view = _request("POST", url, f"/jobs/{_quote(job_id)}/retry", token_file=token_file).json()
        console.print(f"[bold]{safe(view['id'])}[/] queued again; resumes from its checkpoint "
                      f"(step {view.get('steps_done', 0)} of {view['spec']['steps']})", highlight=False)

    @app.command("delete")
    @friendly
    def delete(
        job_id: str = typer.Argument(..., help="An ended job (done, failed, cancelled or rejected)."),
        purge: bool = typer.Option(False, "--purge", help="Also remove its job directory (checkpoints, progress, logs)."),
        url: str = _URL,
        token_file: Optional[Path] = _TOKEN_FILE,
    ) -> None:
        """Remove an ended job and its events from the service's store (and with --purge its files)."""
        out = _request("DELETE", url, f"/jobs/{_quote(job_id)}", token_file=token_file,
                       params={"purge": str(purge).lower()}).json()
        gone = f"; removed {safe(out['purged'])}" if out.get("purged") else ""
        console.print(f"deleted [bold]{safe(out['id'])}[/] (was {safe(out['status'])}){gone}", highlight=False)
