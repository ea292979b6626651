"""The report's index.html: one self-contained page (inline CSS, PNGs as data URIs, no scripts).

Self-contained so the page can be mailed, attached to an issue or opened from a CI artifact and
still show everything; the only links are relative ones to the data files written next to it.
Tables go through pandas' `to_html` (which escapes); the rest of the text through `html.escape`.

Layout: text stays in a readable 1200 px column, but the summary table may use the whole window
(`.wide`, a full-bleed row of the body's grid) and is compact, with grouped headers: at 1400 px
every one of its columns is visible without scrolling. On a narrower window it scrolls sideways
inside its own box, with the policy column kept in view.
"""

from __future__ import annotations

import base64
from html import escape
from typing import Sequence

import pandas as pd

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2rem 0;
       padding: 0 1rem; color: #222; line-height: 1.45;
       display: grid; grid-template-columns: 1fr min(1200px, 100%) 1fr; }
body > * { grid-column: 2; min-width: 0; }
body > .wide { grid-column: 1 / -1; justify-self: center; max-width: 100%; }
h1 { margin-bottom: .2rem; } h2 { margin-top: 2rem; border-bottom: 1px solid #ddd; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: .2rem 1rem; }
dl.meta dt { font-weight: 600; } dl.meta dd { margin: 0; }
.scroll { overflow-x: auto; }
table.data th:first-child, table.data td:first-child { position: sticky; left: 0; z-index: 1; }
table.data { border-collapse: collapse; font-size: .9rem; font-variant-numeric: tabular-nums; }
table.data th, table.data td { border: 1px solid #ddd; padding: .3rem .55rem; }
table.data th { background: #f4f4f4; text-align: center; }
table.data td { text-align: right; } table.data td:first-child { text-align: left; font-weight: 600; }
table.data tr:nth-child(even) td { background: #fafafa; }
table.data td { background: #fff; }
table.compact { font-size: .82rem; } table.compact th, table.compact td { padding: .25rem .4rem; }
table.compact td { white-space: nowrap; } table.compact td:first-child { white-space: normal; min-width: 6rem; }
table.compact thead tr:first-child th:not([colspan]) { border-bottom: none; }
table.compact thead tr:last-child th { font-weight: 500; } table.compact thead tr:last-child th:empty { border-top: none; }
table.reasons td { text-align: left; }
p.note { background: #fff8e1; border-left: 4px solid #f0c36d; padding: .5rem .8rem; }
figure { margin: 1.5rem 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: .9rem; }
footer { margin-top: 3rem; color: #777; font-size: .85rem; }
"""


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def table_html(df: pd.DataFrame, extra_class: str = "", wide: bool = False) -> str:
    """A DataFrame of already formatted strings as an escaped HTML table, in a box that scrolls
    sideways when the table is wider than it; `wide`: the box may use the whole window."""
    classes = ["data", extra_class] if extra_class else ["data"]
    box = "scroll wide" if wide else "scroll"
    return f'<div class="{box}">' + df.to_html(index=False, escape=True, border=0, classes=classes) + "</div>"


def page(
    *,
    title: str,
    workload: str,
    cluster_desc: str,
    notes: Sequence[str],
    summary: pd.DataFrame,
    summary_note: str,
    figures: Sequence[tuple[str, bytes, str]],  # (alt text, png, caption)
    unfinished: pd.DataFrame | None,
    files: Sequence[tuple[str, str]],  # (relative file name, what it holds)
    footer: str,
) -> str:
    """Assemble the page from parts already computed by the report."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        '<dl class="meta">',
        f"<dt>Workload</dt><dd>{escape(workload)}</dd>",
        f"<dt>Cluster</dt><dd>{escape(cluster_desc)}</dd>",
        "</dl>",
    ]
    if notes:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>")
    parts += [
        "<h2>Summary</h2>",
        table_html(summary, "compact", wide=True),
        f'<p class="note">{escape(summary_note)}</p>',
        "<p>JCT and queueing delay are over finished jobs only; “–” means the run produced no value "
        "(no finished job, no job with a deadline). Queueing counts every wait: before the first start "
        "and after each preemption or failed run; the wait to first start is the first of them only. "
        "GPU util. counts GPUs making progress; "
        "held GPU·h are GPUs reserved by jobs waiting for the rest of their gang.</p>",
        "<h2>Plots</h2>",
    ]
    for alt, png, caption in figures:
        parts.append(
            f'<figure><img src="{data_uri(png)}" alt="{escape(alt)}">'
            f"<figcaption>{escape(caption)}</figcaption></figure>"
        )
    parts.append("<h2>Jobs that did not finish</h2>")
    if unfinished is None or unfinished.empty:
        parts.append("<p>Every job of every policy finished.</p>")
    else:
        parts.append(table_html(unfinished, "reasons"))
    parts.append("<h2>Files</h2><ul>")
    parts += [f'<li><a href="{escape(name)}">{escape(name)}</a>: {escape(what)}</li>' for name, what in files]
    parts += ["</ul>", f"<footer>{escape(footer)}</footer>", "</body></html>"]
    return "\n".join(parts)
