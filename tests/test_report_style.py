"""One colour and marker per policy in every plot, baselines and published systems kept apart
(`metrics/style.py`): the style table itself, then the report of the eleven default policies as
`dlsched simulate` writes it — its matplotlib artists, its HTML summary table and, where a headless
Chromium is installed, the page as a browser lays it out and paints it."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dlsched.cli import app
from dlsched.metrics import plots
from dlsched.metrics.style import FIXED, SPARE_COLORS, policy_name, policy_style, policy_styles
from dlsched.policies.registry import BASELINES, DEFAULT_POLICIES, HETERO_BASELINES, POLICIES, PUBLISHED

# --------------------------------------------------------------------------- colour distance


def _lab(hex_color: str) -> np.ndarray:
    """sRGB (D65) -> CIELAB."""
    rgb = np.array([int(hex_color[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    rgb = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ rgb
    xyz /= np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def delta_e(c1: str, c2: str) -> float:
    """CIEDE2000 colour difference of two "#rrggbb" colours: about 2 is just noticeable; two lines
    of a plot need far more to be told apart at a glance."""
    return _delta_e_lab(_lab(c1), _lab(c2))


def _delta_e_lab(lab1, lab2) -> float:
    """CIEDE2000 (Sharma, Wu & Dalal 2005) of two CIELAB colours."""
    (l1, a1, b1), (l2, a2, b2) = lab1, lab2
    cb = (np.hypot(a1, b1) + np.hypot(a2, b2)) / 2
    g = 0.5 * (1 - np.sqrt(cb ** 7 / (cb ** 7 + 25 ** 7)))
    a1, a2 = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = np.hypot(a1, b1), np.hypot(a2, b2)
    h1, h2 = np.degrees(np.arctan2(b1, a1)) % 360, np.degrees(np.arctan2(b2, a2)) % 360
    dh = 0.0 if c1p * c2p == 0 else (h2 - h1 + 180) % 360 - 180
    d_h = 2 * np.sqrt(c1p * c2p) * np.sin(np.radians(dh / 2))
    lb, cbp = (l1 + l2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        hb = h1 + h2
    elif abs(h1 - h2) <= 180:
        hb = (h1 + h2) / 2
    else:
        hb = (h1 + h2 + 360) / 2 if h1 + h2 < 360 else (h1 + h2 - 360) / 2
    t = (1 - 0.17 * np.cos(np.radians(hb - 30)) + 0.24 * np.cos(np.radians(2 * hb))
         + 0.32 * np.cos(np.radians(3 * hb + 6)) - 0.2 * np.cos(np.radians(4 * hb - 63)))
    sl = 1 + 0.015 * (lb - 50) ** 2 / np.sqrt(20 + (lb - 50) ** 2)
    sc, sh = 1 + 0.045 * cbp, 1 + 0.015 * cbp * t
    rt = -2 * np.sqrt(cbp ** 7 / (cbp ** 7 + 25 ** 7)) * np.sin(np.radians(60 * np.exp(-(((hb - 275) / 25) ** 2))))
    dl, dc = (l2 - l1) / sl, (c2p - c1p) / sc
    return float(np.sqrt(dl ** 2 + dc ** 2 + (d_h / sh) ** 2 + rt * dc * (d_h / sh)))


@pytest.mark.parametrize("lab1, lab2, expected", [  # pairs 1, 7 and 17 of Sharma et al.'s test data
    ((50, 2.6772, -79.7751), (50, 0, -82.7485), 2.0425),
    ((50, 0, 0), (50, -1, 2), 2.3669),
    ((50, 2.5, 0), (73, 25, -18), 27.1492),
])
def test_delta_e_matches_the_published_test_data(lab1, lab2, expected):
    assert _delta_e_lab(lab1, lab2) == pytest.approx(expected, abs=1e-4)
    assert delta_e("#000000", "#ffffff") == pytest.approx(100.0, abs=0.5)


# --------------------------------------------------------------------------- the style table


def test_every_built_in_policy_has_its_own_colour():
    assert set(FIXED) == set(POLICIES)
    colours = [c for c, _ in FIXED.values()]
    assert len(set(colours)) == len(colours)
    assert not set(SPARE_COLORS) & set(colours)  # a variant never looks like a built-in


def test_colours_are_far_apart_and_readable_on_white():
    default = [FIXED[p][0] for p in DEFAULT_POLICIES]
    worst = min(delta_e(a, b) for a, b in itertools.combinations(default, 2))
    assert worst >= 16, worst  # the eleven policies `dlsched simulate` compares
    palette = [c for c, _ in FIXED.values()] + list(SPARE_COLORS)
    assert len(palette) >= 30
    worst_all = min(delta_e(a, b) for a, b in itertools.combinations(palette, 2))
    assert worst_all >= 13, worst_all
    assert max(_lab(c)[0] for c in palette) < 80  # no pale line on the white background


def test_kind_decides_line_style_and_marker_fill():
    for p in BASELINES + HETERO_BASELINES:
        s = policy_style(p)
        assert (s.kind, s.linestyle, s.fillstyle, s.hatch) == ("baseline", "-", "full", None)
    for p in PUBLISHED:
        s = policy_style(p)
        assert (s.kind, s.linestyle, s.fillstyle, s.hatch) == ("published system", "--", "none", "//")
    for p in ("edf", "qos-noscale", "my-plugin"):
        assert (policy_style(p).kind, policy_style(p).linestyle) == ("other", "-.")
    # a marker is one policy's within its kind: 11 default policies, 11 (shape, fill) pairs
    assert len({(policy_style(p).marker, policy_style(p).fillstyle) for p in DEFAULT_POLICIES}) == 11


def test_a_policy_keeps_its_look_whatever_else_is_in_the_run():
    alone = policy_styles(["fifo", "qos-noscale"])
    crowd = policy_styles(["dual-agent", "qos-noscale", *DEFAULT_POLICIES, "edf", "fifo (2)"])
    assert crowd[2 + DEFAULT_POLICIES.index("fifo")] == alone[0] == policy_style("fifo")
    assert crowd[1] == alone[1] == policy_style("qos-noscale")  # a hashed name too
    assert crowd[0].color != crowd[2 + DEFAULT_POLICIES.index("fifo")].color  # the bug: both were blue
    assert policy_styles(list(reversed(DEFAULT_POLICIES))) == list(reversed(policy_styles(DEFAULT_POLICIES)))


def test_labels_variants_and_plugins():
    assert policy_name("srtf (oracle)") == "srtf" and policy_style("srtf (oracle)") == policy_style("srtf")
    assert policy_style("oasis (2) (oracle)") == policy_style("oasis (2)")
    fifo, second = policy_styles(["fifo", "fifo (2)"])
    assert second.color != fifo.color and second.color in SPARE_COLORS and second.kind == "baseline"
    plugin = policy_style("acme-gang")
    assert plugin == policy_style("acme-gang") and plugin.color in SPARE_COLORS and plugin.kind == "other"


def test_two_names_hashing_to_one_colour_are_told_apart_in_one_plot():
    first = "plugin-0"
    twin = next(f"plugin-{i}" for i in range(1, 10_000)
                if policy_style(f"plugin-{i}").color == policy_style(first).color)
    a, b = policy_styles([first, twin])
    assert a.color != b.color
    assert policy_styles([twin, first]) == [b, a]  # which one moves does not depend on the order
    assert {a.color, b.color} >= {policy_style(first).color}


# --------------------------------------------------------------------------- the report of the 11 defaults


@pytest.fixture(scope="module")
def eleven(tmp_path_factory) -> dict:
    """`dlsched simulate --limit 40` with the default policies, keeping the figures the report drew."""
    out = tmp_path_factory.mktemp("eleven") / "rep"
    figures: dict[str, object] = {}

    def spy(name):
        real = getattr(plots, name)

        def wrapper(*args, **kwargs):
            figures[name] = fig = real(*args, **kwargs)
            return fig
        return wrapper

    with pytest.MonkeyPatch.context() as mp:
        for name in ("jct_cdf", "utilization", "queue"):
            mp.setattr(plots, name, spy(name))
        res = CliRunner().invoke(app, ["simulate", "--limit", "40", "--out", str(out), "--format", "json"])
    assert res.exit_code == 0, res.output
    return {"index": out / "index.html", "figures": figures, "out": out}


def _name(label: str) -> str:
    return label.split(" (")[0]


def test_report_plots_give_eleven_policies_eleven_colours_grouped_by_kind(eleven):
    assert set(eleven["figures"]) == {"jct_cdf", "utilization", "queue"}
    for fig_name, fig in eleven["figures"].items():
        lines = fig.axes[0].get_lines()
        by_policy = {_name(ln.get_label()): ln for ln in lines}
        assert set(by_policy) == set(DEFAULT_POLICIES), fig_name
        assert len({ln.get_color() for ln in lines}) == 11, fig_name
        for p, ln in by_policy.items():
            assert ln.get_color() == FIXED[p][0] and ln.get_marker() == FIXED[p][1], (fig_name, p)
            assert ln.get_linestyle() == ("-" if p in BASELINES else "--"), (fig_name, p)
            assert ln.get_fillstyle() == ("full" if p in BASELINES else "none"), (fig_name, p)
            assert 0 < len(ln.get_markevery()) <= plots.MARKS_PER_LINE
        # one legend below the axes: the baselines under their heading, then the published systems
        (legend,) = fig.legends
        texts = [t.get_text() for t in legend.get_texts()]
        bold = [t.get_text() for t in legend.get_texts() if t.get_fontweight() in ("bold", 700)]
        assert bold == ["baselines", "published systems"], (fig_name, texts)
        named = [_name(t) for t in texts if t and t not in bold]
        head = texts.index("published systems")
        assert [n for n in named if n in BASELINES] == list(BASELINES)  # the run's order within a group
        assert all(texts.index(t) < head for t in texts if t and _name(t) in BASELINES)
        assert all(texts.index(t) > head for t in texts if t and _name(t) in PUBLISHED)
        # as drawn: the published systems start a column of their own, their heading level with the baselines'
        fig.draw_without_rendering()
        box = {t.get_text(): t.get_window_extent() for t in legend.get_texts() if t.get_text()}
        assert box["published systems"].y0 == pytest.approx(box["baselines"].y0)
        assert box["published systems"].x0 > max(b.x1 for t, b in box.items() if _name(t) in BASELINES)
        for head_text in bold:  # a heading tops its column
            under = [b for t, b in box.items() if t not in bold and b.x0 == pytest.approx(box[head_text].x0)]
            assert under and all(b.y0 < box[head_text].y0 for b in under), (fig_name, head_text)
    assert [_name(ln.get_label()) for ln in eleven["figures"]["jct_cdf"].axes[0].get_lines()] == list(DEFAULT_POLICIES)


def test_report_summary_table_groups_rows_by_kind_with_the_plot_colours(eleven):
    page = eleven["index"].read_text(encoding="utf-8")
    body = page[page.index("<tbody>", page.index("<h2>Summary</h2>")):]
    body = body[:body.index("</tbody>")]
    cells = re.findall(r'<tr class="kind"><th colspan="\d+" scope="rowgroup">([^<]+)</th>|'
                       r'<td><span class="swatch ([a-z-]+)" style="color:(#[0-9a-f]{6})"[^>]*></span>([^<]+)</td>', body)
    heads = [c[0] for c in cells if c[0]]
    rows = [(c[1], c[2], _name(c[3])) for c in cells if not c[0]]
    assert heads == ["baselines", "published systems"]
    assert [r[2] for r in rows] == list(BASELINES) + list(PUBLISHED)
    assert cells[0][0] == "baselines" and cells[len(BASELINES) + 1][0] == "published systems"
    for kind_class, colour, name in rows:
        assert colour == FIXED[name][0]
        assert kind_class == ("baseline" if name in BASELINES else "published-system")
    # summary.csv keeps the run's order (scripts read it by row)
    csv_rows = (eleven["out"] / "summary.csv").read_text().splitlines()[1:]
    assert [_name(r.split(",")[0]) for r in csv_rows] == list(DEFAULT_POLICIES)


def test_experiment_bars_use_the_policy_colours(tmp_path):
    import pandas as pd

    d = pd.DataFrame({"group": ["a", "a", "b", "b"], "policy": ["fifo", "dragon"] * 2,
                      "value": [1.0, 2.0, 3.0, 4.0], "low": [0.5, 1.5, 2.5, 3.5], "high": [1.5, 2.5, 3.5, 4.5]})
    drawn = {}
    real = plots.Figure.savefig

    def keep(fig, *a, **k):
        drawn["fig"] = fig
        return real(fig, *a, **k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots.Figure, "savefig", keep)
        plots.ci_bars(d, "y", "t", tmp_path / "bars.png")
    patches = drawn["fig"].axes[0].patches
    from matplotlib.colors import to_hex

    assert [to_hex(p.get_facecolor()) for p in patches] == [FIXED["fifo"][0]] * 2 + [FIXED["dragon"][0]] * 2
    assert [p.get_hatch() for p in patches] == [None, None, "//", "//"]
    assert (tmp_path / "bars.png").stat().st_size > 0


# --------------------------------------------------------------------------- in a real browser


def _browser() -> str | None:
    return next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


def _chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([_browser(), "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           *args], capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(_browser() is None, reason="needs a headless Chromium to lay the page out")
def test_browser_shows_every_policy_colour_in_its_group(eleven, tmp_path):
    """Laid out and painted by headless Chromium: each summary row's swatch has its policy's colour
    and a visible size, the group headings sit above their rows, and the screenshot of the page
    holds every one of the eleven colours."""
    probe = ("<script>addEventListener('load', () => { const out = [];"
             "for (const tr of document.querySelectorAll('table.data tbody tr')) {"
             " const s = tr.querySelector('.swatch'); const r = tr.getBoundingClientRect();"
             " out.push(s ? {kind: s.className, name: tr.cells[0].textContent, top: r.top,"
             "   color: getComputedStyle(s).borderTopColor, w: s.getBoundingClientRect().width,"
             "   h: s.getBoundingClientRect().height} : {head: tr.textContent, top: r.top}); }"
             "document.body.dataset.rows = JSON.stringify(out); });</script></body>")
    page = tmp_path / "probe.html"
    page.write_text(eleven["index"].read_text(encoding="utf-8").replace("</body>", probe), encoding="utf-8")
    dom = _chromium("--window-size=1400,1000", "--dump-dom", page.as_uri())
    found = re.search(r'data-rows="([^"]*)"', dom.stdout)
    assert found, dom.stderr[-2000:]
    rows = json.loads(found.group(1).replace("&quot;", '"'))
    heads = [r for r in rows if "head" in r]
    swatches = [r for r in rows if "head" not in r]
    assert [h["head"] for h in heads] == ["baselines", "published systems"]
    assert len(swatches) == 11
    for r in swatches:
        name = _name(r["name"])
        rgb = tuple(int(FIXED[name][0][i:i + 2], 16) for i in (1, 3, 5))
        assert r["color"] == f"rgb({rgb[0]}, {rgb[1]}, {rgb[2]})", r
        assert r["w"] >= 15 and r["h"] >= 2, r
        assert (heads[0]["top"] < r["top"] < heads[1]["top"]) == (name in BASELINES), r

    shot = tmp_path / "shot.png"
    _chromium("--window-size=1400,4000", f"--screenshot={shot}", eleven["index"].as_uri())  # notes, table, plots
    assert shot.exists(), "Chromium wrote no screenshot"
    from matplotlib.image import imread

    pixels = (imread(shot)[..., :3] * 255).round().astype(int)
    packed = pixels[..., 0] * 65536 + pixels[..., 1] * 256 + pixels[..., 2]
    values, counts = np.unique(packed, return_counts=True)
    seen = dict(zip(values.tolist(), counts.tolist()))
    for p in DEFAULT_POLICIES:
        assert seen.get(int(FIXED[p][0][1:], 16), 0) >= 20, f"{p}'s colour {FIXED[p][0]} is not on the page"
