"""A progress line of a reproduction that is also a point of a live curve."""

from __future__ import annotations


class Point(str):
    """``Point(text, series, step, value)``: the line ``text`` (printed, shown, logged like any other) with
    the curve point it reports: held-out loss ``value`` of ``series`` at ``step``."""

    series: str
    step: int
    value: float

    def __new__(cls, text: str, series: str, step: int, value: float):
        line = super().__new__(cls, text)
        line.series, line.step, line.value = str(series), int(step), float(value)
        return line
