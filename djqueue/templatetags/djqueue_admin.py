"""Template helpers of the dashboard: bar charts as inline SVG, and short durations."""

from __future__ import annotations

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

register = template.Library()


@register.simple_tag
def bar_chart(values: list[int], label: str, unit: str, width: int = 480,
              height: int = 90) -> SafeString:
    """A bar per value, oldest first; each bar's tooltip says its value."""
    count = max(len(values), 1)
    top = max(values, default=0) or 1
    step = width / count
    def bar(i: int, value: int) -> tuple[str, ...]:
        tall = value / top * (height - 2)
        return (f"{i * step:.1f}", f"{height - tall:.1f}", f"{max(step - 1, 1):.1f}", f"{tall:.1f}",
                str(count - i), unit, str(value))

    bars = format_html_join(
        "", '<rect x="{}" y="{}" width="{}" height="{}"><title>{} {} ago: {}</title></rect>',
        (bar(i, value) for i, value in enumerate(values)))
    return format_html(
        '<svg class="djqueue-chart" role="img" aria-label="{}" viewBox="0 0 {} {}" width="{}" '
        'height="{}" preserveAspectRatio="none">{}</svg>', label, width, height, width, height, bars)


@register.filter
def age(seconds: float | None) -> str:
    """3.2 s, 4 min, 2.5 h, 3.0 d."""
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"
