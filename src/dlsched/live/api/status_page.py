"""The service's HTML status page (GET /): cluster nodes and the jobs table with progress bars.

The table shows one page of jobs, newest first (`?offset=` pages back, `?status=` filters), so
the page stays small however many jobs the store holds; the counts per status are of all jobs.
A queued job shows why it waits.

The page is rendered on the server with every user-supplied string escaped, and is entirely
self-contained (inline CSS and a few lines of script, no external assets), so it works on an
air-gapped cluster. The script re-fetches the page every few seconds and swaps in the new body,
which keeps the scroll position; without JavaScript a meta refresh does the same, more crudely.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from html import escape as _html
from typing import Any, Mapping, Sequence
from urllib.parse import urlencode

from dlsched.core.text import visible
from dlsched.live.store.views import JobView


def escape(text: str) -> str:
    """User text for the page: control characters shown as escapes, then HTML-escaped."""
    return _html(visible(text))

REFRESH_SECONDS = 3


@dataclass(frozen=True)
class JobPage:
    """One page of the jobs table: `jobs` newest first, `offset` of them skipped out of `total`."""

    jobs: Sequence[JobView]
    total: int
    offset: int
    limit: int
    statuses: tuple[str, ...] = ()

    def link(self, offset: int) -> str:
        """The URL of the page at `offset`, with the same status filter."""
        query = [("status", s) for s in self.statuses] + ([("offset", offset)] if offset else [])
        return "/" + (f"?{urlencode(query)}" if query else "")

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5rem;color:#222;background:#fafafa}
h1{font-size:1.4rem;margin:0 0 .2rem} h2{font-size:1.1rem;margin:1.4rem 0 .5rem}
.muted{color:#777;font-size:.85rem}
.error{color:#a00;background:#fee;border:1px solid #e99;padding:.4rem .6rem;border-radius:4px}
table{border-collapse:collapse;width:100%;background:#fff;font-size:.9rem}
th,td{text-align:left;padding:.35rem .6rem;border-bottom:1px solid #e5e5e5;white-space:nowrap}
th{background:#f0f0f0;font-weight:600}
.bar{background:#e8e8e8;border-radius:3px;height:.8rem;width:10rem;display:inline-block;vertical-align:middle;overflow:hidden}
.bar>span{display:block;height:100%;background:#3b82f6}
.s-queued{color:#a16207}.s-running{color:#1d4ed8}.s-done{color:#15803d}
.s-failed,.s-rejected{color:#b91c1c}.s-cancelled{color:#6b7280}
.nodes{display:flex;flex-wrap:wrap;gap:.6rem}
.node{background:#fff;border:1px solid #ddd;border-radius:6px;padding:.5rem .7rem;min-width:13rem;font-size:.85rem}
.node b{font-size:.95rem}
td.why{white-space:normal;color:#555;max-width:28rem}
.pager{margin:.5rem 0;font-size:.9rem}
"""

_SCRIPT = """
setInterval(async () => {
  try {
    const r = await fetch(location.pathname + location.search, {cache: "no-store"});
    if (!r.ok) return;
    const doc = new DOMParser().parseFromString(await r.text(), "text/html");
    const fresh = doc.getElementById("content");
    if (fresh) document.getElementById("content").replaceWith(fresh);
  } catch (e) { /* service restarting: try again next time */ }
}, %d);
""" % (REFRESH_SECONDS * 1000)


def _bar(used: float, total: float) -> str:
    pct = 0.0 if total <= 0 else max(0.0, min(100.0, 100.0 * used / total))
    return f'<span class="bar" title="{pct:.0f}%"><span style="width:{pct:.1f}%"></span></span>'


#: (label, key in a node of `Controller.cluster_view()`, unit) of the bars on each node card
_RESOURCES = (("GPU", "gpus", ""), ("CPU", "cpus", ""), ("mem", "mem_gb", " GB"))


def _nodes_html(cluster: dict[str, Any] | None, problem: str = "") -> str:
    if cluster is None:
        return f'<p class="muted">{escape(problem or "no controller attached: cluster unknown")}</p>'
    error = cluster.get("last_error") or ""
    alarm = (f'<p class="error"><b>decisions are failing:</b> {escape(str(error))}</p>' if error else "")
    head = alarm + (f'<p class="muted">policy <b>{escape(str(cluster.get("policy", "?")))}</b> · backend '
            f'<b>{escape(str(cluster.get("backend", "?")))}</b> · {int(cluster.get("decisions", 0))} decisions</p>')
    cards = []
    for n in cluster.get("nodes", []):
        jobs = ", ".join(escape(str(j)) for j in n.get("jobs", [])) or "idle"
        bars = "".join(f'{label} {_bar(n.get("used_" + key, 0), n.get(key, 0))} {n.get("used_" + key, 0):g}/'
                       f'{n.get(key, 0):g}{unit}<br>' for label, key, unit in _RESOURCES)
        cards.append(f'<div class="node"><b>{escape(str(n.get("name", "?")))}</b><br>{bars}'
                     f'<span class="muted">{jobs}</span></div>')
    return head + '<div class="nodes">' + "".join(cards) + "</div>"


def _pager(page: JobPage) -> str:
    """'jobs 1–50 of 1200 (newest first) · ← newer · older →'."""
    first, last = page.offset + 1, page.offset + len(page.jobs)
    what = f" {escape(', '.join(page.statuses))}" if page.statuses else ""
    parts = [f"{what.strip() or 'jobs'} {first}–{last} of {page.total} (newest first)"]
    if page.offset > 0:
        parts.append(f'<a href="{escape(page.link(max(0, page.offset - page.limit)))}">← newer</a>')
    if last < page.total:
        parts.append(f'<a href="{escape(page.link(last))}">older →</a> ({page.total - last} more)')
    if page.statuses:
        parts.append('<a href="/">all jobs</a>')
    return '<p class="pager muted">' + " · ".join(parts) + "</p>"


def _jobs_html(page: JobPage) -> str:
    if not page.jobs:
        if page.total or page.statuses or page.offset:
            return '<p class="muted">no jobs on this page · <a href="/">first page</a></p>'
        return '<p class="muted">no jobs yet: submit one with <code>dlsched submit job.yaml</code></p>'
    rows = []
    for j in page.jobs:  # newest first
        total = j.spec.steps
        pct = 100.0 * min(j.steps_done, total) / total if total else 0.0
        size = f"{j.workers}w" + (f"+{j.ps}ps" if j.ps else "") if j.status == "running" else "–"
        speed = f"{j.steps_per_s:.1f}" if j.steps_per_s is not None else "–"
        loss = f"{j.loss:.4g}" if j.loss is not None else "–"
        status = escape(j.status) + (" (cancelling)" if j.cancel_requested and j.status in ("queued", "running") else "")
        rows.append(
            f"<tr><td>{escape(j.id)}</td><td>{escape(j.name or '')}</td><td>{escape(j.spec.model)}/{escape(j.spec.mode)}</td>"
            f'<td class="s-{escape(j.status)}">{status}</td>'
            f"<td>{_bar(j.steps_done, total)} {j.steps_done}/{total} ({pct:.0f}%)</td>"
            f"<td>{size}</td><td>{escape(', '.join(j.nodes))}</td><td>{speed}</td><td>{loss}</td>"
            f"<td>{j.restarts}</td><td class=\"why\">{escape(_why(j)[:200])}</td></tr>")
    return (_pager(page) + "<table><thead><tr><th>id</th><th>name</th><th>model</th><th>status</th><th>progress</th>"
            "<th>size</th><th>nodes</th><th>steps/s</th><th>loss</th><th>restarts</th><th>why</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def _why(job: JobView) -> str:
    """A queued job's waiting reason (then its last failure, if any); an ended job's reason."""
    if job.status == "queued" and job.waiting_reason:
        return job.waiting_reason + (f" (last run: {job.reason})" if job.reason else "")
    return job.reason


def render_status_page(page: JobPage, counts: Mapping[str, int], cluster: dict[str, Any] | None,
                       now: float | None = None, problem: str = "") -> str:
    """The whole page: one `page` of jobs, `counts` of all jobs per status, `cluster` as
    `Controller.cluster_view()` (None: unknown, `problem` says why)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() if now is None else now))
    summary = " · ".join(f'<a href="{escape(JobPage((), 0, 0, 0, (s,)).link(0))}">{n} {escape(s)}</a>'
                         for s, n in counts.items() if n) or "no jobs"
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f'<noscript><meta http-equiv="refresh" content="{REFRESH_SECONDS}"></noscript>'
        f"<title>dlsched</title><style>{_STYLE}</style></head><body>"
        '<h1>dlsched</h1><p class="muted">live runtime · <a href="/docs">API</a> · <a href="/metrics">metrics</a></p>'
        f'<div id="content"><p class="muted">updated {stamp} · {summary}</p>'
        f"<h2>Cluster</h2>{_nodes_html(cluster, problem)}<h2>Jobs</h2>{_jobs_html(page)}</div>"
        f"<script>{_SCRIPT}</script></body></html>"
    )
