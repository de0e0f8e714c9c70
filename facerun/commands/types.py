"""Click parameter types shared by the commands."""

from __future__ import annotations

import math

import click


class FiniteRange(click.FloatRange):
    """click's FloatRange, refusing nan and ±inf (every comparison with nan is false, so FloatRange lets it in)."""

    name = "float range"

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


AUTO = "auto"


class ProcessCount(click.ParamType):
    """`--processes`: a count of 1 or more, or `auto` (kept as the string AUTO)."""

    name = "N|auto"

    def convert(self, value, param, ctx):
        if isinstance(value, int) or value == AUTO:
            return value
        text = str(value).strip().lower()
        if text == AUTO:
            return AUTO
        if text.isdigit() and int(text) >= 1:
            return int(text)
        self.fail(f"{value!r} is not a count of 1 or more, nor 'auto'.", param, ctx)
