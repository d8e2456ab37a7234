"""The HTML report's figures as inline SVG: reliability diagrams and line charts.

Drawn here as text, with no script, no plotly and no network, so the report
(results/report.py) opens offline anywhere, prints, and stays ~50 KB. Every attribute
value and text goes through html.escape; hovering a bar shows its numbers (SVG <title>).
"""

from __future__ import annotations

from html import escape
from typing import Any, Sequence

OVER, UNDER, BAR, ACCENT = "#d64541", "#3478c6", "#28283c", "#d64541"  # app/widgets/charts.py's colours
WHISKER = "#e6962a"  # app/widgets/reliability_charts.py's interval colour: seen on the dark bars and on the page
PLOT_W, TOP_H, HIST_H, LEFT, TOP = 200, 170, 40, 38, 8  # px: plot width, panel heights, margins


def _tag(name: str, text: str = "", /, **attrs: object) -> str:
    """An SVG element; attribute values and text are escaped (trailing _ dropped from names).
    `text` is positional only, so an attribute mapping (`**pen`) can never fill it."""
    attr = "".join(f' {k.rstrip("_").replace("_", "-")}="{escape(str(v))}"' for k, v in attrs.items())
    return f"<{name}{attr}>{escape(text)}</{name}>" if text else f"<{name}{attr}/>"


def reliability_svg(records: Sequence[dict[str, Any]]) -> str:
    """A reliability diagram of `ReliabilityData.to_records()` rows, drawn as app/widgets/reliability_charts.py's
    reliability_figure is: accuracy bars over each bin's edges with the Wilson interval as a
    whisker, red/blue gap to the mean confidence, the diagonal, a hollow (outlined) bar for a
    one-item bin, x for an empty bin, counts below."""

    def x(v: float) -> float:
        return round(LEFT + v * PLOT_W, 1)

    def y(v: float) -> float:
        return round(TOP + (1.0 - v) * TOP_H, 1)

    base = TOP + TOP_H + 12  # top of the histogram panel
    peak = max((r["count"] for r in records), default=0) or 1
    out = [_frame(x, y), _tag("line", x1=x(0), y1=y(0), x2=x(1), y2=y(1), stroke="#888", stroke_dasharray="4 3")]
    for r in records:
        x0, width = x(r["lower"]) + 0.5, max(x(r["upper"]) - x(r["lower"]) - 1.0, 1.5)
        height = round(r["count"] / peak * HIST_H, 1)
        out.append(_tag("rect", x=x0, y=base + HIST_H - height, width=width, height=height, fill="#9a9aaa"))
        mid = x((r["lower"] + r["upper"]) / 2)
        if r["count"] == 0:
            out.append(_tag("text", "x", x=mid, y=y(0) - 2, fill="#999", font_size=9, text_anchor="middle"))
            continue
        out.append(_bin_marks(r, x0, width, y))
        if r["acc_high"] > r["acc_low"]:
            out.append(_whisker(mid, y(r["acc_high"]), y(r["acc_low"])))
    out.append(_tag("text", "items", x=4, y=base + HIST_H / 2, font_size=9, fill="#555"))
    return _svg(LEFT + PLOT_W + 10, base + HIST_H + 20, out, "confidence", "accuracy", base + HIST_H + 14)


def _whisker(mid: float, top: float, bottom: float) -> str:
    """A bin's interval: a vertical line with short caps, over its bar."""
    pen = {"stroke": WHISKER, "stroke_width": 1.5}
    caps = "".join(_tag("line", x1=mid - 3, y1=v, x2=mid + 3, y2=v, **pen) for v in (top, bottom))
    return f"<g>{_tag('line', x1=mid, y1=top, x2=mid, y2=bottom, **pen)}{caps}</g>"


def _bin_marks(r: dict[str, Any], x0: float, width: float, y: Any) -> str:
    """One bin's accuracy bar and gap segment, filled, or outlined for a one-item bin, with
    its numbers on hover."""
    acc, conf = r["accuracy"], r["mean_confidence"]
    tip = (
        f"{r['lower']:.2f}-{r['upper']:.2f}: {r['count']} items, accuracy {acc:.3f} "
        f"(90% interval {r['acc_low']:.2f}-{r['acc_high']:.2f}), mean confidence {conf:.3f}"
    )
    gap = OVER if conf > acc else UNDER
    if r["hollow"]:  # one answer, 0 or 1: an outline, not a solid bar
        bar = {"fill": "none", "stroke": BAR, "stroke_width": 1.2}
        segment = {"fill": "none", "stroke": gap, "stroke_width": 1.2}
    else:
        bar, segment = {"fill": BAR}, {"fill": gap, "fill_opacity": 0.6}
    return (
        f"<g>{_tag('title', tip)}"
        + _tag("rect", x=x0, y=y(acc), width=width, height=round(y(0) - y(acc), 1), **bar)
        + _tag("rect", x=x0, y=y(max(acc, conf)), width=width, height=round(abs(y(acc) - y(conf)), 1), **segment)
        + "</g>"
    )


def line_svg(curves: dict[str, tuple[Sequence[float], Sequence[float]]], x_title: str, y_title: str) -> str:
    """Named (x, y) curves on shared axes scaled to the data; the first in the accent
    colour, the others grey and dashed (tau_mean over tau_min / tau_max)."""
    xs = [float(v) for xv, _ in curves.values() for v in xv]
    ys = [float(v) for _, yv in curves.values() for v in yv]
    x_lo, x_hi = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    pad = max((max(ys) - min(ys)) * 0.1, 1e-3)
    y_lo, y_hi = min(ys) - pad, max(ys) + pad

    def x(v: float) -> float:
        return round(LEFT + (v - x_lo) / (x_hi - x_lo) * PLOT_W, 1)

    def y(v: float) -> float:
        return round(TOP + (y_hi - v) / (y_hi - y_lo) * TOP_H, 1)

    out = [_tag("rect", x=LEFT, y=TOP, width=PLOT_W, height=TOP_H, fill="none", stroke="#ccc")]
    for v, anchor in ((y_lo + pad, "end"), (y_hi - pad, "end")):
        out.append(_tag("text", f"{v:.4g}", x=LEFT - 3, y=y(v) + 3, font_size=9, text_anchor=anchor))
    out += [
        _tag("text", f"{x_lo:g}", x=x(x_lo), y=TOP + TOP_H + 11, font_size=9, text_anchor="middle"),
        _tag("text", f"{x_hi:g}", x=x(x_hi), y=TOP + TOP_H + 11, font_size=9, text_anchor="middle"),
    ]
    for k, (name, (xv, yv)) in enumerate(curves.items()):
        points = " ".join(f"{x(float(a))},{y(float(b))}" for a, b in zip(xv, yv, strict=True))
        out.append(
            f"<g>{_tag('title', name)}"
            + _tag(
                "polyline",
                points=points,
                fill="none",
                stroke=ACCENT if k == 0 else "#999",
                stroke_width=2 if k == 0 else 1,
                stroke_dasharray="none" if k == 0 else "3 2",
            )
            + "</g>"
        )
    legend = ", ".join(f"{n}{' (dashed)' if k else ''}" for k, n in enumerate(curves))
    out.append(_tag("text", legend, x=LEFT, y=TOP + TOP_H + 40, font_size=9, fill="#555"))
    return _svg(LEFT + PLOT_W + 10, TOP + TOP_H + 46, out, x_title, y_title, TOP + TOP_H + 24)


def _frame(x: Any, y: Any) -> str:
    """The unit square's box, light grid lines and tick labels at 0, 0.5, 1."""
    parts = [_tag("rect", x=x(0), y=y(1), width=PLOT_W, height=TOP_H, fill="none", stroke="#ccc")]
    for v in (0.0, 0.5, 1.0):
        parts += [
            _tag("line", x1=x(0), y1=y(v), x2=x(1), y2=y(v), stroke="#eee"),
            _tag("text", f"{v:g}", x=x(0) - 3, y=y(v) + 3, font_size=9, text_anchor="end"),
            _tag("text", f"{v:g}", x=x(v), y=TOP + TOP_H + 10, font_size=9, text_anchor="middle"),
        ]
    return "".join(parts)


def _svg(width: float, height: float, parts: list[str], x_title: str, y_title: str, x_title_y: float) -> str:
    """An <svg> element (inline in HTML5: no namespace URL needed) with axis titles."""
    titles = _tag("text", x_title, x=LEFT + PLOT_W / 2, y=x_title_y, font_size=10, text_anchor="middle") + _tag(
        "text",
        y_title,
        x=10,
        y=TOP + TOP_H / 2,
        font_size=10,
        text_anchor="middle",
        transform=f"rotate(-90 10 {TOP + TOP_H / 2})",
    )
    return (
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'font-family="sans-serif">{"".join(parts)}{titles}</svg>'
    )
