"""Server-rendered SVG charts: a line over the last minutes, drawn from numbers only.

The markup is built from formatted numbers and fixed strings, never from stored data, so it
is safe to insert into a page unescaped; the caption goes through :func:`html.escape`.
"""

from __future__ import annotations

import html

__all__ = ["line_chart"]


def _nice_max(value: float) -> float:
    """A round axis maximum >= value (1, 2, 5 x 10^n)."""
    if value <= 0:
        return 1.0
    magnitude = 1.0
    while magnitude * 10 <= value:
        magnitude *= 10
    while magnitude > value:
        magnitude /= 10
    for step in (1, 2, 5, 10):
        if step * magnitude >= value:
            return step * magnitude
    return 10 * magnitude  # pragma: no cover - the loop always returns


def _label(value: float, percent: bool) -> str:
    if percent:
        return f"{value * 100:.0f}%"
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def line_chart(
    series: list[tuple[float, float]],
    *,
    caption: str,
    span_seconds: float = 300.0,
    width: int = 480,
    height: int = 140,
    percent: bool = False,
) -> str:
    """An SVG line of ``(seconds ago, value)`` points over the last ``span_seconds``."""
    left, right, top, bottom = 44, 8, 10, 22
    plot_w, plot_h = width - left - right, height - top - bottom
    points = [(ago, value) for ago, value in series if 0 <= ago <= span_seconds]
    y_max = 1.0 if percent else _nice_max(max((v for _, v in points), default=0.0))
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{html.escape(caption)}</title>",
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" class="plot"/>',
    ]
    for fraction in (0.0, 0.5, 1.0):
        y = top + plot_h * (1 - fraction)
        parts.append(
            f'<line x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
            f'<text x="{left - 4}" y="{y + 4:.1f}" class="axis" text-anchor="end">'
            f"{_label(y_max * fraction, percent)}</text>"
        )
    minutes = span_seconds / 60
    parts.append(
        f'<text x="{left}" y="{height - 6}" class="axis">-{minutes:g} min</text>'
        f'<text x="{left + plot_w}" y="{height - 6}" class="axis" text-anchor="end">now</text>'
    )
    if points:
        coords = []
        for ago, value in sorted(points, key=lambda p: -p[0]):
            x = left + plot_w * (1 - ago / span_seconds)
            y = top + plot_h * (1 - min(value, y_max) / y_max)
            coords.append(f"{x:.1f},{y:.1f}")
        if len(coords) == 1:
            cx, cy = coords[0].split(",")
            parts.append(f'<circle cx="{cx}" cy="{cy}" r="2.5" class="line"/>')
        else:
            parts.append(f'<polyline points="{" ".join(coords)}" class="line" fill="none"/>')
    else:
        parts.append(
            f'<text x="{left + plot_w / 2:.1f}" y="{top + plot_h / 2:.1f}" class="axis" '
            'text-anchor="middle">collecting samples...</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
