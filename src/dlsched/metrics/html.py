"""The report's index.html: one self-contained page (inline CSS, PNGs as data URIs, no scripts).

Self-contained so the page can be mailed, attached to an issue or opened from a CI artifact and
still show everything; the only links are relative ones to the data files written next to it.
Tables go through pandas' `to_html` (which escapes); the rest of the text through `html.escape`.

Layout: text stays in a readable 1200 px column, but the summary table may use the whole window
(`.wide`, a full-bleed row of the body's grid) and is compact, with grouped headers: at 1400 px
every one of its columns is visible without scrolling. On a narrower window it scrolls sideways
inside its own box, with the policy column kept in view. Its rows come in groups (baselines,
published systems, other policies), each under a heading row, and each policy's name has a swatch
of its colour and line style in the plots (`style.py`), so a row and its curve are found together.
"""

from __future__ import annotations

import base64
import re
from html import escape
from typing import TYPE_CHECKING, Sequence

import pandas as pd

if TYPE_CHECKING:
    from dlsched.metrics.style import PolicyStyle

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
table.data tr.kind th { text-align: left; background: #e8eef6; font-weight: 600; padding: .35rem .55rem; }
.swatch { display: inline-block; width: 1.3em; margin-right: .3em; vertical-align: middle;
          border-top: 3px solid currentColor; }
.swatch.published-system { border-top-style: dashed; } .swatch.other { border-top-style: dotted; }
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


_HEX = re.compile(r"#[0-9a-fA-F]{6}")


def grouped_rows(table: str, looks: Sequence["PolicyStyle"], ncols: int) -> str:
    """`table` (pandas' HTML of a frame whose first column is the policy, rows already ordered by
    kind) with a heading row before each kind's first row and a swatch of the policy's colour and
    line style in its name's cell. A table whose body does not have one row per look is returned
    unchanged (a decoration must never garble the numbers)."""
    from dlsched.metrics.style import group_title

    start, end = table.find("<tbody>"), table.find("</tbody>")
    if start < 0 or end < 0:
        return table
    rows = table[start + len("<tbody>"):end].split("<tr>")
    head, rows = rows[0], rows[1:]
    if len(rows) != len(looks):
        return table
    out, kind = [], None
    for row, look in zip(rows, looks):
        if look.kind != kind:
            kind = look.kind
            out.append(f'<tr class="kind"><th colspan="{ncols}" scope="rowgroup">'
                       f"{escape(group_title(kind))}</th></tr>\n")
        if _HEX.fullmatch(look.color):
            swatch = (f'<span class="swatch {look.kind.replace(" ", "-")}" style="color:{look.color}" '
                      f'title="{escape(look.kind)}"></span>')
            row = row.replace("<td>", "<td>" + swatch, 1)
        out.append("<tr>" + row)
    return table[:start] + "<tbody>" + head + "".join(out) + table[end:]


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
    run: Sequence[tuple[str, str]] = (),  # (label, text): how the numbers were made
    summary_looks: Sequence["PolicyStyle"] = (),  # per summary row, in its order: kind and plot colour
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
        grouped_rows(table_html(summary, "compact", wide=True), summary_looks, summary.shape[1])
        if summary_looks else table_html(summary, "compact", wide=True),
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
    if run:
        parts.append('<h2>Reproduce</h2><dl class="meta">'
                     + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in run) + "</dl>")
    parts.append("<h2>Files</h2><ul>")
    parts += [f'<li><a href="{escape(name)}">{escape(name)}</a>: {escape(what)}</li>' for name, what in files]
    parts += ["</ul>", f"<footer>{escape(footer)}</footer>", "</body></html>"]
    return "\n".join(parts)
