"""Frames of the built-in envs drawn with numpy (``render_rgb``): filled segments, discs and
boxes on an RGB canvas, enough to film cartpole, acrobot, pendulum and the MinAtar grids with
``distrl play RUN --video out.mp4`` without a graphics library. Coordinates are pixels, x to
the right and y down."""

from __future__ import annotations

import numpy as np

WHITE = (255, 255, 255)
BLACK = (0, 0, 0)


def canvas(height: int, width: int, color: tuple[int, int, int] = WHITE) -> np.ndarray:
    img = np.empty((height, width, 3), dtype=np.uint8)
    img[:] = color
    return img


def segment(
    img: np.ndarray,
    p0: tuple[float, float],
    p1: tuple[float, float],
    half_width: float,
    color: tuple[int, int, int],
) -> None:
    """Fill every pixel whose centre lies within ``half_width`` of the segment p0-p1 (a disc
    when p0 == p1): a line with round caps."""
    (x0, y0), (x1, y1) = p0, p1
    h, w = img.shape[:2]
    lo_x = max(int(min(x0, x1) - half_width), 0)
    hi_x = min(int(max(x0, x1) + half_width) + 1, w)
    lo_y = max(int(min(y0, y1) - half_width), 0)
    hi_y = min(int(max(y0, y1) + half_width) + 1, h)
    if lo_x >= hi_x or lo_y >= hi_y:
        return
    ys, xs = np.mgrid[lo_y:hi_y, lo_x:hi_x].astype(np.float64) + 0.5
    dx, dy = x1 - x0, y1 - y0
    length2 = dx * dx + dy * dy
    t = np.zeros_like(xs) if length2 == 0 else ((xs - x0) * dx + (ys - y0) * dy) / length2
    t = np.clip(t, 0.0, 1.0)
    dist2 = (xs - (x0 + t * dx)) ** 2 + (ys - (y0 + t * dy)) ** 2
    img[lo_y:hi_y, lo_x:hi_x][dist2 <= half_width * half_width] = color


def box(
    img: np.ndarray, x0: float, y0: float, x1: float, y1: float, color: tuple[int, int, int]
) -> None:
    h, w = img.shape[:2]
    a, b = max(int(round(y0)), 0), min(int(round(y1)), h)
    c, d = max(int(round(x0)), 0), min(int(round(x1)), w)
    if a < b and c < d:
        img[a:b, c:d] = color


def grid(cells: np.ndarray, palette: np.ndarray, scale: int) -> np.ndarray:
    """A (C, H, W) 0/1 grid as an RGB image: each cell takes the colour of its last set channel
    (``palette`` [C, 3]; black where none is set), upscaled ``scale`` times."""
    c, h, w = cells.shape
    img = np.zeros((h, w, 3), dtype=np.uint8)
    for k in range(c):
        img[cells[k] > 0] = palette[k]
    return np.repeat(np.repeat(img, scale, axis=0), scale, axis=1)
