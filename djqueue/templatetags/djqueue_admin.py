"""Template helpers of djqueue's admin pages: bar charts as inline SVG, short durations,
clock offsets, and breadcrumbs in the markup of the Django that runs."""

from __future__ import annotations

import django
from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from djqueue.monitoring import worker_listing

register = template.Library()


@register.simple_tag
def bar_chart(values: list[int | None], label: str, unit: str, width: int = 480,
              height: int = 90) -> SafeString:
    """A bar per value, oldest first; each bar's tooltip says its value (None: no data).
    ``data-total`` and ``data-bars`` (bars above zero) let a test read the chart."""
    count = max(len(values), 1)
    top = max((v for v in values if v is not None), default=0) or 1
    step = width / count

    def bar(i: int, value: int | None) -> tuple[str, ...]:
        tall = (value or 0) / top * (height - 2)
        return (f"{i * step:.1f}", f"{height - tall:.1f}", f"{max(step - 1, 1):.1f}", f"{tall:.1f}",
                str(count - i), unit, "no data" if value is None else str(value))

    bars = format_html_join(
        "", '<rect x="{}" y="{}" width="{}" height="{}"><title>{} {} ago: {}</title></rect>',
        (bar(i, value) for i, value in enumerate(values)))
    total = sum(v for v in values if v is not None)
    shown = sum(1 for v in values if v)
    return format_html(
        '<svg class="djqueue-chart" role="img" aria-label="{}" viewBox="0 0 {} {}" width="{}" '
        'height="{}" preserveAspectRatio="none" data-total="{}" data-bars="{}">{}</svg>',
        label, width, height, width, height, total, shown, bars)


@register.simple_tag
def breadcrumbs(*crumbs: str) -> SafeString:
    """``url, label, url, label, ..., label``: links to the pages above, then this page's
    name. Django 6 writes an ordered list (its CSS styles ``ol.breadcrumbs`` alone);
    Django 5.2 a line of links separated by &rsaquo;."""
    *pairs, here = crumbs
    links = list(zip(pairs[::2], pairs[1::2], strict=True))
    if django.VERSION >= (6, 0):
        # The items stand on lines of their own, as Django's: the space between them is
        # the one around each separator.
        items = format_html_join("\n", '<li><a href="{}">{}</a></li>', links)
        return format_html('<ol class="breadcrumbs">\n{}\n<li aria-current="page">{}</li>\n'
                           '</ol>', items, here)
    items = format_html_join("", '<a href="{}">{}</a> &rsaquo; ', links)
    return format_html('<div class="breadcrumbs">{}{}</div>', items, here)


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


@register.filter
def clock_offset(seconds: float | None) -> str:
    """+0.003 s; +90.000 s (far); - when not compared (djqueue.monitoring.worker_listing)."""
    return worker_listing.clock_text(seconds)
