"""Padded copies in scratch memory, shared by the convolutions, Winograd and max pooling (a module of its own so
those kernels' modules need not import each other)."""

from __future__ import annotations

import numpy as np


def padder(x: np.ndarray, pads, scratch, role: str = "pad", fill: float = 0.0, extra=(0, 0), nchw: bool = False):
    """(padded array, fill function): a copy of x with `pads` (top, left, bottom, right) plus `extra` rows/columns of
    `fill` below/right; the ring is rewritten each run because scratch is shared between steps."""
    top, left, bottom, right = pads
    bottom, right = bottom + extra[0], right + extra[1]
    if not (top or left or bottom or right):
        return x, None
    if nchw:
        n, c, h, w = x.shape
        xp = scratch.get(role, (n, c, h + top + bottom, w + left + right))
        ring = [xp[:, :, :top], xp[:, :, top + h:], xp[:, :, top:top + h, :left], xp[:, :, top:top + h, left + w:]]
        inner = xp[:, :, top:top + h, left:left + w]
    else:
        n, h, w, c = x.shape
        xp = scratch.get(role, (n, h + top + bottom, w + left + right, c))
        ring = [xp[:, :top], xp[:, top + h:], xp[:, top:top + h, :left], xp[:, top:top + h, left + w:]]
        inner = xp[:, top:top + h, left:left + w]
    return xp, refill(ring, [(inner, x)], fill)


def refill(ring: list, copies: list, value: float = 0.0):
    """The per-run step that fills a padded scratch: every view in `ring` set to `value` (empty views skipped), then
    each (destination, source) pair in `copies` copied."""
    ring = [r for r in ring if r.size]
    value = np.float32(value)

    def fill_in():
        for r in ring:
            r.fill(value)
        for dst, src in copies:
            np.copyto(dst, src)

    return fill_in
