"""The look every study figure shares: colors, axis titles, hover text, notes, markers, log axes.

A fixed color per LR rule (:data:`RULE_COLORS`, :func:`rule_color`), axis titles with units
(:func:`axis_label`), one batch axis (:func:`batch_axis`: log2 spacing, ticks at the batches
present) and ticks at the world sizes present (:func:`count_ticks`), hover text that names the trial and its configuration (:func:`hover`), one
marker size, a white template (:func:`new_figure`), round ticks on a log value axis
(:func:`log_ticks`), and an empty figure with a note, rather than an error, while a study has
nothing to show (:func:`with_note`, its text wrapped to the figure's width; over a figure that
still draws points, a subtitle instead). Each figure's module draws with these; the analysis
figures too.

plotly is imported by the functions that build plotly objects, not at the top: a figure's
module imports this one beside its data step, which must load without plotly
(``from hpsearch.dashboards import frontier_info`` draws nothing).

Example:
    >>> rule_color("linear"), axis_label("runtime_s")
    ('#D55E00', 'runtime (s)')
    >>> wrap_text("an LR law needs at least three batch sizes with two LRs each", width=30)
    'an LR law needs at least three<br>batch sizes with two LRs each'
"""

from __future__ import annotations

import copy
import functools
import html
import math
import textwrap
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from hpsearch import record

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = [
    "EMPTY_MESSAGE",
    "FRONT_COLOR",
    "MARKER_SIZE_PX",
    "MAX_TICKS",
    "NOTE_WIDTH",
    "RULE_COLORS",
    "AxisTicks",
    "TrialLike",
    "axis_label",
    "batch_axis",
    "count_ticks",
    "format_value",
    "hover",
    "legend_entry",
    "log_ticks",
    "new_figure",
    "rule_color",
    "subtitle",
    "thinned_note",
    "trial_markers",
    "white_template",
    "with_batch_axis",
    "with_log_axes",
    "with_note",
    "wrap_text",
]

# Fixed colors per LR rule so "linear" is the same color in every figure and on every
# page. Okabe-Ito colors: they stay distinguishable for color-blind readers.
RULE_COLORS: dict[str, str] = {
    "constant": "#0072B2",
    "linear": "#D55E00",
    "sqrt": "#009E73",
}
# For other group names (user-defined rules, or a different color column). The pick is
# by a stable hash of the name, not by order of appearance, so a name keeps its color
# when another figure shows a different set of groups.
_OTHER_COLORS: tuple[str, ...] = (
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#F0E442",
    "#999999",
    "#000000",
)
#: The color of what is not a group: the Pareto front, medians, diagonals.
FRONT_COLOR = "#333333"

#: The note of a figure that has no completed trial to draw.
EMPTY_MESSAGE = "no completed trials yet"

#: Marker diameter in pixels of a trial's point (the frontier grows it with the batch).
MARKER_SIZE_PX = 8.0

#: Characters per line of a note across a figure: about what the narrowest figure box of the
#: dashboard (560 px) holds at the note's 16 px font. plotly never wraps an annotation, and a
#: refusal of the LR-law fit ran off both sides of its figure.
NOTE_WIDTH = 56


def rule_color(name: str) -> str:
    """The color used for an LR rule (or any group name) in every figure.

    Args:
        name: A group name, e.g. ``"linear"``.

    Returns:
        A CSS hex color: fixed for ``constant``, ``linear`` and ``sqrt``, and stable
        per name for any other.

    Example:
        >>> rule_color("linear")
        '#D55E00'
    """
    if name in RULE_COLORS:
        return RULE_COLORS[name]
    return _OTHER_COLORS[zlib.crc32(name.encode("utf-8")) % len(_OTHER_COLORS)]


def axis_label(column: str) -> str:
    """A human axis title, with units, for a trials column.

    Args:
        column: A column name such as ``"runtime_s"``.

    Returns:
        The label, e.g. ``"runtime (s)"``; unknown columns are returned unchanged.

    Example:
        >>> axis_label("device_seconds")
        'device-seconds'
    """
    return record.label(column)


def format_value(value: object) -> str:
    """A value for hover text: floats to six significant digits, anything else as text.

    Example:
        >>> format_value(0.123456789), format_value("linear")
        ('0.123457', 'linear')
    """
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def hover(title: str, values: Mapping[str, object], config: Mapping[str, object]) -> str:
    """Hover text: a bold title naming the trial, the plotted values under their axis
    labels, then the configuration (measurements and bookkeeping such as the Ray node id are
    not configuration: :func:`hpsearch.dashboards.points.hover_configs`).

    Example:
        >>> hover("trial 3", {"runtime_s": 12.5}, {"lr_rule": "sqrt"})
        '<b>trial 3</b><br>runtime (s): 12.5<br>lr_rule: sqrt'
    """
    lines = [f"<b>{title}</b>"]
    lines += [f"{axis_label(column)}: {format_value(value)}" for column, value in values.items()]
    lines += [f"{key}: {format_value(value)}" for key, value in config.items()]
    return "<br>".join(lines)


def wrap_text(text: str, width: int = NOTE_WIDTH) -> str:
    """Plain text as plotly text: ``<`` and ``>`` escaped (``val_loss <= 2.65`` is no tag), lines
    of at most ``width`` characters (longer words stay whole) joined by ``<br>``.

    Example:
        >>> wrap_text("val_loss <= 2.65 for every trial", width=16)
        'val_loss &lt;= 2.65<br>for every trial'
    """
    lines = textwrap.wrap(text, width=width, break_long_words=False, break_on_hyphens=False) or [""]
    return "<br>".join(html.escape(line, quote=False) for line in lines)


def subtitle(text: str, width: int = 2 * NOTE_WIDTH - 16) -> str:
    """``text`` (plain) as the subtitle a figure's title ends with: small, on lines of their own
    that fit the figure (the subtitle's font is about half the note's).

    Example:
        >>> "Best LR vs effective batch size" + subtitle("alpha 0.52 [0.31, 0.74]: the sqrt rule fits", width=30)
        'Best LR vs effective batch size<br><sup>alpha 0.52 [0.31, 0.74]: the</sup><br><sup>sqrt rule fits</sup>'
    """
    return "".join(f"<br><sup>{line}</sup>" for line in wrap_text(text, width).split("<br>"))


def new_figure(title: str, x: str, y: str, legend_title: str = "LR rule") -> go.Figure:
    """An empty figure in the house layout: a title, axis titles with units, a white template."""
    import plotly.graph_objects as go  # heavy (about a second): loaded with the first figure drawn

    # The template as plain data, validated once: naming "plotly_white" makes plotly look it up,
    # validate it and deep-copy it for every figure, 25 ms of each (a sixth of the cold
    # 10,000-trial study page's figures).
    fig = go.Figure(layout={"template": white_template()}, _validate=False)
    fig.update_layout(
        title={"text": title[0].upper() + title[1:]},
        xaxis={"title": {"text": axis_label(x)}},
        yaxis={"title": {"text": axis_label(y)}},
        legend={"title": {"text": legend_title}},
        hovermode="closest",
    )
    return fig


@functools.cache
def _white_template() -> dict[str, Any]:
    import plotly.io as pio  # heavy: see new_figure

    template: dict[str, Any] = pio.templates["plotly_white"].to_plotly_json()
    return template


def white_template() -> dict[str, Any]:
    """plotly's ``plotly_white`` template as plain data (a fresh copy), read once per process."""
    return copy.deepcopy(_white_template())


def with_note(fig: go.Figure, note: str, *, xref: str = "paper", yref: str = "paper") -> go.Figure:
    """The figure (or the subplot of axes ``xref``, ``yref``) with ``note``, plain text, wrapped to
    fit (:func:`wrap_text`).

    Where nothing is drawn, the note is the figure: across its middle. Where points are drawn (a
    refused fit still draws the trials it refused), it never covers them: a figure's note ends
    its title, as a subtitle line (:func:`subtitle`); a subplot's sits just above its plot area.
    """
    if not _draws_on(fig, xref):
        fig.add_annotation(text=wrap_text(note), xref=xref, yref=yref, x=0.5, y=0.5, showarrow=False,
                           font={"size": 16})
        if xref == "paper":
            # Nothing drawn: plotly's default ranges labelled an empty batch axis from -1 to 6.
            fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False)
            fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False)
    elif xref == "paper":
        # Centred across the plot, a refused fit's reason lay over the very points it explained.
        fig.update_layout(title_text=(fig.layout.title.text or "") + subtitle(note))
    else:
        fig.add_annotation(text=wrap_text(note, width=NOTE_WIDTH // 2), xref=xref, yref=yref, x=0.5, y=1,
                           yanchor="bottom", showarrow=False, font={"size": 12})
    return fig


def _draws_on(fig: go.Figure, xref: str) -> bool:
    """Whether any trace of ``fig`` is drawn on the x axis of ``xref`` (``"paper"``: on any axis)."""
    if xref == "paper":
        return bool(fig.data)
    axis = xref.removesuffix(" domain")
    return any((trace.xaxis or "x") == axis for trace in fig.data)


def with_log_axes(fig: go.Figure, log_x: bool, log_y: bool, *, x: Iterable[float | None] | None = None,
                  y: Iterable[float | None] | None = None, **subplot: int) -> go.Figure:
    """The figure with its x and y axes (those of one subplot, given ``row`` and ``col``)
    logarithmic where asked; given the values an axis draws (``x``, ``y``), a log axis is labelled
    at round values (:func:`log_ticks`)."""
    if log_x:
        fig.update_xaxes(**_log_axis(x), **subplot)
    if log_y:
        fig.update_yaxes(**_log_axis(y), **subplot)
    return fig


def _log_axis(values: Iterable[float | None] | None) -> dict[str, Any]:
    """The plotly settings of a log axis drawing ``values`` (``None``: values unknown, plotly's ticks)."""
    ticks = log_ticks(values) if values is not None else None
    return ticks.layout() if ticks is not None and ticks.tickvals else {"type": "log"}


#: Most ticks an axis labels: past this, only the powers of two among the values present keep one
#: (then every other of them), so labels never overlap on the narrowest figure box.
MAX_TICKS = 12


@dataclass(frozen=True)
class AxisTicks:
    """How a batch or device-count axis is drawn: its type and a tick at each value present.

    Attributes:
        log: Whether the axis is logarithmic.
        tickvals: Where the ticks go: the values present (thinned past :data:`MAX_TICKS`).
        ticktext: Their labels, as the trials table writes them (``1,024``).
    """

    log: bool
    tickvals: tuple[float, ...]
    ticktext: tuple[str, ...]

    def layout(self) -> dict[str, Any]:
        """The plotly axis settings (``fig.update_xaxes(**ticks.layout())``)."""
        settings: dict[str, Any] = {"tickmode": "array", "tickvals": list(self.tickvals),
                                    "ticktext": list(self.ticktext)}
        if self.log:
            settings["type"] = "log"
        return settings


def count_ticks(values: Iterable[float | None], *, log: bool = False) -> AxisTicks:
    """Ticks at the distinct finite values present, for an axis of whole counts (a world size,
    a batch): a world size of 1 and 2 gets ticks 1 and 2, never 1.5.

    Example:
        >>> count_ticks([1, 2, 2, None]).tickvals, count_ticks([1, 2]).ticktext
        ((1.0, 2.0), ('1', '2'))
    """
    present = sorted({float(v) for v in values if v is not None and math.isfinite(float(v))})
    if len(present) > MAX_TICKS:
        powers = [v for v in present if v > 0 and float(v).is_integer() and (int(v) & (int(v) - 1)) == 0]
        present = powers if len(powers) >= 2 else present
        while len(present) > MAX_TICKS:
            present = present[::2]
    return AxisTicks(log, tuple(present), tuple(f"{v:,.0f}" if v.is_integer() else f"{v:g}" for v in present))


def batch_axis(values: Iterable[float | None]) -> AxisTicks:
    """The batch axis every figure draws (effective or per-device batch): logarithmic, so each
    doubling of the batch takes the same width, with a tick at each batch present.

    Batches are searched in doublings (8, 16, ..., 1024); on a linear axis batches 8 to 64
    would crowd into the left 12% of the accuracy figure while 512 to 1024 take half of it. A zero
    or negative value (which a log axis cannot draw) keeps the axis linear.

    Example:
        >>> ticks = batch_axis([8, 64, 1024, 1024])
        >>> ticks.log, ticks.tickvals, ticks.ticktext
        (True, (8.0, 64.0, 1024.0), ('8', '64', '1,024'))
    """
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return count_ticks(finite, log=bool(finite) and min(finite) > 0)


def with_batch_axis(fig: go.Figure, values: Iterable[float | None], axis: str = "x", **subplot: int) -> go.Figure:
    """The figure with its ``axis`` (``"x"`` or ``"y"``; of one subplot, given ``row`` and
    ``col``) drawn as :func:`batch_axis` of ``values``."""
    settings = batch_axis(values).layout()
    if axis == "x":
        fig.update_xaxes(**settings, **subplot)
    else:
        fig.update_yaxes(**settings, **subplot)
    return fig


#: The round values a log axis is labelled at, finest first: 1, 2 and 5 times each power of ten,
#: then the powers of ten alone.
_LOG_STEPS: tuple[tuple[int, ...], ...] = ((1, 2, 5), (1,))
#: Each digit's multiple of the powers of ten: for an axis within about a decade.
_EVERY_DIGIT = tuple(range(1, 10))


def log_ticks(values: Iterable[float | None]) -> AxisTicks:
    """Ticks of a logarithmic value axis (a loss, a runtime): at round values written out in full,
    1, 2 and 5 times each power of ten the values span, or the powers of ten alone (then every
    other of them) where that would be more than :data:`MAX_TICKS`; one more round value beyond
    each end labels the ends. Values within about a decade get each digit's multiple (0.3, 0.4),
    and values too close for two round values none: plotly's own ticks (``tickvals`` empty).

    plotly's own labelled the values between powers of ten with their first digit alone: a
    ``val_loss`` axis read "0.01, 2, 5, 0.1, 2, 5, 1", as though some trials lost 2 and 5.

    Example:
        >>> log_ticks([0.004, 2.5]).ticktext
        ('0.002', '0.005', '0.01', '0.02', '0.05', '0.1', '0.2', '0.5', '1', '2', '5')
    """
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v)) and float(v) > 0]
    if not finite:
        return AxisTicks(True, (), ())
    low, high = min(finite), max(finite)
    decades = range(math.floor(math.log10(low)), math.floor(math.log10(high)) + 2)

    def spanning(steps: tuple[int, ...]) -> tuple[list[tuple[int, int]], int]:
        """The round values of ``steps`` from the one below ``low`` to the one above ``high``,
        each as its digit and exponent (2 * 10 ** -3 is 0.0020000000000000005 in floats), and how
        many of them lie within the values."""
        ticks = [(digit, exponent) for exponent in decades for digit in steps]
        inside = [i for i, (d, e) in enumerate(ticks) if low <= float(f"{d}e{e}") <= high]
        if not inside:
            return [], 0
        return ticks[max(inside[0] - 1, 0):inside[-1] + 2], len(inside)

    for steps in _LOG_STEPS:
        ticks, inside = spanning(steps)
        if len(ticks) <= MAX_TICKS:
            break
    if inside < 3:
        ticks, inside = spanning(_EVERY_DIGIT)
        if inside < 2 or len(ticks) > MAX_TICKS:
            return AxisTicks(True, (), ())
    while len(ticks) > MAX_TICKS:
        ticks = ticks[::2]
    return AxisTicks(True, tuple(float(f"{d}e{e}") for d, e in ticks), tuple(_round_label(d, e) for d, e in ticks))


def _round_label(digit: int, exponent: int) -> str:
    """``digit`` times ten to ``exponent``, as read: ``0.002``, ``50``, ``10,000``; ``1e-7`` past
    four zeros after the point and ``1e7`` past six before it."""
    if exponent > 6:
        return f"{digit}e{exponent}"
    if exponent >= 0:
        return f"{digit * 10**exponent:,}"
    if exponent < -4:
        return f"{digit}e{exponent}"
    return f"{digit / 10**-exponent:.{-exponent}f}"


class TrialLike(Protocol):
    """What a marker needs of a trial's point: a frontier point or a noise-scale one."""

    @property
    def number(self) -> int: ...

    @property
    def x(self) -> float: ...

    @property
    def y(self) -> float: ...


def trial_markers(name: str, points: Sequence[TrialLike], size: float | list[float], hovertext: list[str]) -> go.Scatter:
    """One group's trials as markers in the group's color; each marker carries its trial number
    (``customdata``, which the dashboard's pages link to) and its hover text."""
    import plotly.graph_objects as go  # heavy: see new_figure

    # Unvalidated: plotly checks a list element by element, and a 2,000-point scatter spent
    # more time there than in computing its points. The values are plain floats, ints and text
    # built here. (numpy arrays would pass the check at once, but plotly then writes them as
    # base64 typed arrays, and the figures' JSON is read by scripts too.)
    return go.Scatter(
        x=[p.x for p in points],
        y=[p.y for p in points],
        mode="markers",
        name=name,
        marker={
            "color": rule_color(name),
            "size": size,
            # A hollow marker is its outline alone, drawn in the marker's color: 1 px read as a faint ring.
            "line": {"width": 2 if any(getattr(p, "solo_estimate", False) for p in points) else 1,  # not a record name
                     "color": "white"},
            "opacity": 0.85,
            # A confirmation run of the study's answer (a trial with ``confirmation``) is a diamond;
            # a point whose runtime is a solo estimate (``solo_estimate``: it trained fused) is hollow.
            **({"symbol": [_symbol(p) for p in points]} if any(_symbol(p) != "circle" for p in points) else {}),
        },
        customdata=[p.number for p in points],
        hovertext=hovertext,
        _validate=False,
        hovertemplate="%{hovertext}<extra></extra>",
    )


def _symbol(point: TrialLike) -> str:
    """A trial's marker symbol (``trial_markers``)."""
    shape = "diamond" if getattr(point, "confirmation", False) else "circle"  # not a record name: a point's field
    return f"{shape}-open" if getattr(point, "solo_estimate", False) else shape  # not a record name


def legend_entry(name: str, symbol: str) -> go.Scatter:
    """A legend entry alone, drawing nothing: what a marker ``symbol`` means, in grey."""
    import plotly.graph_objects as go  # heavy: see new_figure

    return go.Scatter(x=[None], y=[None], mode="markers", name=name, hoverinfo="skip",
                      marker={"symbol": symbol, "color": "#555555", "size": MARKER_SIZE_PX, "line": {"width": 2}})


def thinned_note(shown: int, total: int, front: int | None = None, what: str = "completed trials") -> str:
    """The subtitle of a scatter that draws some of its trials.

    Example:
        >>> thinned_note(2000, 9000, 12)
        'showing 2,000 of 9,000 completed trials: all 12 on the Pareto front, the rest one per region'
    """
    if front is not None:
        return f"showing {shown:,} of {total:,} {what}: all {front:,} on the Pareto front, the rest one per region"
    return f"showing {shown:,} of {total:,} {what}, one per region of the plot"
