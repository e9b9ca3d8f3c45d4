"""Plots as standalone SVG text, with no plotting library (the SDK depends on grpcio and protobuf only).

>>> svg = utilisation_panels_svg({"ECMP": [0.9, 0.1], "ADAPTIVE": [0.5, 0.5]}, "uplinks")
>>> svg.startswith("<svg")
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from xml.sax.saxutils import escape

__all__ = ["utilisation_panels_svg"]

_PANEL_W, _PANEL_H, _PAD = 360, 180, 40


def utilisation_panels_svg(panels: Mapping[str, Sequence[float]], title: str) -> str:
    """One panel per label: the links' utilisation (0..1) as bars sorted high to low.

    Dashed lines mark 80 % and 20 %: links above the first and below the second at once are the
    signature of flows pinned by ECMP.
    """
    width = _PAD + len(panels) * (_PANEL_W + _PAD)
    height = _PANEL_H + 3 * _PAD
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{_PAD}" y="20" font-size="14">{escape(title)}</text>',
    ]
    for i, (label, values) in enumerate(panels.items()):
        x0, y0 = _PAD + i * (_PANEL_W + _PAD), 2 * _PAD
        ordered = sorted((min(max(v, 0.0), 1.0) for v in values), reverse=True)
        hot = sum(v > 0.8 for v in ordered)
        idle = sum(v < 0.2 for v in ordered)
        parts.append(
            f'<text x="{x0}" y="{y0 - 8}">{escape(label)}: {len(ordered)} links, '
            f"{hot} above 80%, {idle} below 20%</text>"
        )
        parts.append(
            f'<rect x="{x0}" y="{y0}" width="{_PANEL_W}" height="{_PANEL_H}" fill="none" stroke="#888"/>'
        )
        bar = _PANEL_W / max(1, len(ordered))
        for j, value in enumerate(ordered):
            h = value * _PANEL_H
            colour = "#d62728" if value > 0.8 else ("#7f7f7f" if value < 0.2 else "#1f77b4")
            parts.append(
                f'<rect x="{x0 + j * bar:.2f}" y="{y0 + _PANEL_H - h:.2f}" width="{max(bar - 0.5, 0.5):.2f}" '
                f'height="{h:.2f}" fill="{colour}"/>'
            )
        for level in (0.8, 0.2):
            y = y0 + _PANEL_H * (1 - level)
            parts.append(
                f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + _PANEL_W}" y2="{y:.1f}" '
                'stroke="#444" stroke-dasharray="4 3"/>'
            )
            parts.append(f'<text x="{x0 - 30}" y="{y + 4:.1f}">{level:.0%}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
