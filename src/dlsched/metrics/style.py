"""How a policy looks in every plot dlsched draws: one colour and one marker per policy, and a line
style, marker fill and bar hatch per kind (baseline, published system, other).

Why a fixed table instead of "the i-th colour of a cycle": with a cycle, a policy's colour depended
on where it stood in the run (fifo and dual-agent both came out blue in an 11-policy report, and
fifo was blue in one report and red in the next). Here every built-in policy has its own colour,
whatever else is in the run, so two reports can be read side by side. The colours were chosen for
distance (CIEDE2000 ΔE ≥ 16 between any two of the eleven default policies, ≥ 13 between any two of
the 33 colours in this file; tests/test_report_style.py checks it) and for contrast on white:
  - baselines: filled markers, solid lines; blues, cyan, greens, olive, grey, black;
  - published systems: hollow markers, dashed lines; red, orange, pink, brown, purple;
  - other policies (variants, heuristics, plugins): half-filled markers, dash-dot lines.
The kind is the one `table.policy_kind` gives (the console's and the JSON's), so table and plots
never disagree about what a baseline is.

A name without a fixed entry ("qos-noscale", "fifo (2)", a plugin) gets a colour and marker from
the spare palette by a stable hash of its name (CRC-32, not Python's salted `hash`), so it keeps
them from report to report too; within one plot (`policy_styles`), a spare colour another policy
of the plot already has is skipped, so one plot never shows two policies in one colour while the
spare palette lasts. A policy that saw ground truth keeps its colour: the " (oracle)" its label
carries is not part of the name.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Sequence

from dlsched.metrics.table import KINDS, policy_kind

ORACLE_SUFFIX = " (oracle)"

#: The built-in policies: name -> (colour, marker). Every key of `policies.registry.POLICIES` has one.
FIXED: dict[str, tuple[str, str]] = {
    # the six baselines
    "fifo": ("#1f77b4", "o"),
    "srtf": ("#17becf", "s"),
    "drf": ("#2ca02c", "^"),
    "tiresias": ("#393b79", "D"),
    "optimus": ("#bcbd22", "v"),
    "kube-default": ("#7f7f7f", "p"),
    # the published systems
    "dragon": ("#d62728", "*"),
    "qos": ("#ff7f0e", "P"),
    "oasis": ("#e377c2", "X"),
    "dl2": ("#8c564b", "H"),
    "dual-agent": ("#9467bd", "d"),
    # the placement baselines of heterogeneous clusters
    "tiresias-ll": ("#268080", "<"),
    "tiresias-random": ("#000000", ">"),
    "gavel-style": ("#85aaf2", "h"),
    "pal-style": ("#00593b", "8"),
    # the other built-ins (the OASiS and QoS experiments' comparison points)
    "rrh": ("#a67f32", "o"),
    "dorm": ("#594a00", "s"),
    "edf": ("#a6006f", "^"),
    "kube-autoscale": ("#f28585", "D"),
}
#: Colours no built-in policy has, for the other names (in order of distance from the ones above).
SPARE_COLORS: tuple[str, ...] = (
    "#7900f2", "#1b4f59", "#f20079", "#768046", "#a65300", "#5ba68d", "#a60037",
    "#802a00", "#cc8f70", "#3c5900", "#f200f2", "#3d55cc", "#a65b80", "#268053",
)
SPARE_MARKERS: tuple[str, ...] = ("o", "s", "^", "v", "D", "p", "h", "<", ">", "8", "d", "P", "X", "*")

#: kind -> (line style, marker fill, bar hatch, the words a legend or table uses for the group)
KIND_LOOK: dict[str, tuple[str, str, str | None, str]] = {
    "baseline": ("-", "full", None, "baselines"),
    "published system": ("--", "none", "//", "published systems"),
    "other": ("-.", "bottom", "..", "other policies"),
}
LINE_WIDTH = 1.8
MARKER_SIZE = 6.0


@dataclass(frozen=True)
class PolicyStyle:
    """The look of one policy; `line()` and `bar()` are the keyword arguments for matplotlib."""

    color: str  # "#rrggbb"
    marker: str
    kind: str  # one of table.KINDS

    @property
    def linestyle(self) -> str:
        return KIND_LOOK[self.kind][0]

    @property
    def fillstyle(self) -> str:
        return KIND_LOOK[self.kind][1]

    @property
    def hatch(self) -> str | None:
        return KIND_LOOK[self.kind][2]

    def line(self) -> dict[str, Any]:
        """For Axes.plot / Axes.step: colour, line style by kind, marker (filled by kind)."""
        return {"color": self.color, "linestyle": self.linestyle, "linewidth": LINE_WIDTH, "marker": self.marker,
                "markersize": MARKER_SIZE, "fillstyle": self.fillstyle, "markeredgewidth": 1.2,
                "markerfacecoloralt": "white"}

    def bar(self) -> dict[str, Any]:
        """For Axes.bar: the colour, hatched for a published system (//) or another policy (..)."""
        return {"color": self.color, "hatch": self.hatch, "edgecolor": "white", "linewidth": 0.5}


def policy_name(label: str) -> str:
    """The name a label's style is keyed on: the label without the " (oracle)" mark."""
    label = str(label).strip()
    return label[: -len(ORACLE_SUFFIX)] if label.endswith(ORACLE_SUFFIX) else label


def group_title(kind: str) -> str:
    """"baselines", "published systems" or "other policies": how a legend or table names the group."""
    return KIND_LOOK[kind][3]


def _slot(name: str) -> int:
    return zlib.crc32(name.encode("utf-8"))


def policy_style(label: str) -> PolicyStyle:
    """The style of one policy on its own: its fixed one, else the spare colour its name hashes to."""
    name = policy_name(label)
    kind = policy_kind(name)
    if name in FIXED:
        color, marker = FIXED[name]
        return PolicyStyle(color, marker, kind)
    h = _slot(name)
    return PolicyStyle(SPARE_COLORS[h % len(SPARE_COLORS)], SPARE_MARKERS[(h // 7) % len(SPARE_MARKERS)], kind)


def policy_styles(labels: Sequence[str]) -> list[PolicyStyle]:
    """The styles of the policies of one plot, in the order of `labels`: the fixed ones as they are;
    a hashed one moves to the next spare colour no other policy of the plot has (names taken in
    sorted order, so the result does not depend on the order of `labels`). The same label twice
    gets the same style."""
    styles = {policy_name(lb): policy_style(lb) for lb in labels}
    taken = {s.color for n, s in styles.items() if n in FIXED}
    for name in sorted(n for n in styles if n not in FIXED):
        s = styles[name]
        start = SPARE_COLORS.index(s.color)
        # if the spare palette is used up, the hashed colour stays (markers still tell them apart)
        for step in range(len(SPARE_COLORS)):
            color = SPARE_COLORS[(start + step) % len(SPARE_COLORS)]
            if color not in taken:
                s = PolicyStyle(color, s.marker, s.kind)
                break
        styles[name] = s
        taken.add(s.color)
    return [styles[policy_name(lb)] for lb in labels]


def kind_order(labels: Sequence[str]) -> list[int]:
    """Indices of `labels` grouped baselines, published systems, other (each group in the given
    order): the order of the legends and of the report's summary table, as on the console."""
    kinds = [policy_kind(policy_name(lb)) for lb in labels]
    return sorted(range(len(labels)), key=lambda i: KINDS.index(kinds[i]))
