"""Chart geometry for inline SVG: horizontal bar charts, one row per label, one bar per series.

Only numbers are computed here; ``templates/_charts.html`` draws them (autoescaped labels, no
inline styles: colours come from CSS classes ``s0``, ``s1``… so the CSP stays strict). The SVG
scales with its container through ``viewBox``, down to a 375 px screen.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

WIDTH = 560
LABEL_W = 150
VALUE_W = 80
PAD = 4  # above and below each row's bars
TOP = 8


@dataclass(frozen=True)
class Bar:
    series: int
    x: float
    y: float
    w: float
    h: float
    text: str
    text_x: float
    text_y: float


@dataclass(frozen=True)
class Row:
    label: str
    label_y: float
    bars: tuple[Bar, ...]


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    description: str
    series: tuple[str, ...]
    rows: tuple[Row, ...]
    width: int
    height: int
    label_x: int
    axis_x: int


def hbars(
    key: str,
    title: str,
    description: str,
    rows: Sequence[tuple[str, Sequence[float]]],
    series: Sequence[str],
    fmt: Callable[[float], str],
    max_value: float | None = None,
) -> Chart:
    """A horizontal bar chart: ``rows`` of (label, one value per series), bars scaled to the
    largest value (or ``max_value``, e.g. 1.0 for rates)."""
    n = max(len(series), 1)
    top = max((v for _, vs in rows for v in vs), default=0.0)
    scale_to = max_value if max_value is not None else top
    span = WIDTH - LABEL_W - VALUE_W
    bar_h = 20.0 if n == 1 else 16.0
    row_h = n * bar_h + 2 * PAD
    out: list[Row] = []
    y = float(TOP)
    for label, values in rows:
        bars = []
        for i, v in enumerate(values):
            w = span * v / scale_to if scale_to > 0 else 0.0
            by = y + PAD + i * bar_h
            bars.append(
                Bar(
                    series=i,
                    x=LABEL_W,
                    y=round(by, 1),
                    w=round(max(w, 0.0), 1),
                    h=round(bar_h - 1, 1),
                    text=fmt(v),
                    text_x=round(LABEL_W + w + 4, 1),
                    text_y=round(by + bar_h / 2 + 5, 1),
                )
            )
        out.append(Row(label, round(y + row_h / 2 + 5, 1), tuple(bars)))
        y += row_h
    return Chart(key, title, description, tuple(series), tuple(out), WIDTH, int(y + TOP), LABEL_W - 6, LABEL_W)


def ms(v: float) -> str:
    return f"{v:,.0f} ms" if v >= 10 else f"{v:.1f} ms"


def pct(v: float) -> str:
    return f"{v:.0%}"


def count(v: float) -> str:
    return f"{v:,.0f}"
