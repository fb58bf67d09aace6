"""Bar charts drawn on the server as SVG: no script, readable by a screen reader (each bar has
a title, the chart a label), coloured by the page's CSS so light and dark both work."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

__all__ = ["bar_chart"]

_BAR_H = 22
_GAP = 8
_LABEL_W = 150
_VALUE_W = 170
_WIDTH = 640


def bar_chart(title: str, bars: Sequence[tuple[str, float, str]]) -> str:
    """Horizontal bars: ``(label, value, value as text)``; empty when there is nothing."""
    if not bars:
        return ""
    top = max((value for _, value, _ in bars), default=0.0) or 1.0
    track = _WIDTH - _LABEL_W - _VALUE_W
    height = len(bars) * (_BAR_H + _GAP) + _GAP
    parts = [
        f'<svg class="chart" role="img" aria-label="{escape(title)}" '
        f'viewBox="0 0 {_WIDTH} {height}" preserveAspectRatio="xMinYMin meet">',
        f"<title>{escape(title)}</title>",
    ]
    for index, (label, value, text) in enumerate(bars):
        y = _GAP + index * (_BAR_H + _GAP)
        width = max(2.0, track * value / top) if value > 0 else 0.0
        shown = label if len(label) <= 22 else label[:21] + "…"
        parts.append(
            f'<g class="bar"><title>{escape(label)}: {escape(text)}</title>'
            f'<text class="chart-label" x="{_LABEL_W - 8}" y="{y + _BAR_H * 0.7:.1f}" '
            f'text-anchor="end">{escape(shown)}</text>'
            f'<rect class="chart-track" x="{_LABEL_W}" y="{y}" width="{track}" '
            f'height="{_BAR_H}" rx="4"/>'
            f'<rect class="chart-bar" x="{_LABEL_W}" y="{y}" width="{width:.1f}" '
            f'height="{_BAR_H}" rx="4"/>'
            f'<text class="chart-value" x="{_LABEL_W + track + 8}" y="{y + _BAR_H * 0.7:.1f}">'
            f"{escape(text)}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)
