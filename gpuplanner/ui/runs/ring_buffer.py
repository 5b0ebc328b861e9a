"""A fixed-capacity ring buffer of float64 columns whose newest rows are always one contiguous view.

Every row is written twice, at ``i`` and ``i + capacity``, so the last ``n`` rows are the slice
``[start, start + n)`` of each column without copying: a plot can take the views directly. Storage
grows by doubling up to ``capacity`` so a short run does not hold a day's worth of memory.

Storage holds one row more than ``capacity`` and views show at most ``capacity`` rows, so the slot the
next append writes is never inside a view handed out before it (a plot may paint a view after the
producer appended once more).

Not thread-safe by design: one owner (the GUI thread) appends and reads.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

RAW_CHUNK = 16  # buckets per chunk of raw rows (see PeakDecimator.curves)


class RingBuffer:
    """``columns`` named float64 series of at most ``capacity`` rows (older rows are dropped)."""

    def __init__(self, columns: Sequence[str], capacity: int, *, initial: int = 1024) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.columns = tuple(columns)
        self._index = {name: i for i, name in enumerate(self.columns)}
        self.capacity = int(capacity)
        self._max_size = self.capacity + 1
        self._size = min(self._max_size, max(2, int(initial)))  # current storage rows (<= capacity + 1)
        self._data = np.full((len(self.columns), 2 * self._size), np.nan)
        self._count = 0  # rows ever appended
        self.clears = 0  # bumps on clear(): absolute row numbers then start again
        self.version = 0  # bumps on every change, so a redraw can skip unchanged buffers

    def __len__(self) -> int:
        return min(self._count, self._size, self.capacity)

    @property
    def total(self) -> int:
        """Rows ever appended (including dropped ones)."""
        return self._count

    def clear(self) -> None:
        self._count = 0
        self._data[:] = np.nan
        self.clears += 1
        self.version += 1

    def _grow(self, needed: int) -> None:
        if needed <= self._size or self._size == self._max_size:
            return
        new_size = self._size
        while new_size < needed and new_size < self._max_size:
            new_size *= 2
        new_size = min(new_size, self._max_size)
        n = len(self)
        old = self.columns_view()
        data = np.full((len(self.columns), 2 * new_size), np.nan)
        data[:, :n] = old
        data[:, new_size : new_size + n] = old
        self._data, self._size, self._count = data, new_size, n

    def append(self, row: Sequence[float]) -> None:
        """Append one row (one value per column; ``None`` becomes NaN)."""
        self.extend(np.asarray([[np.nan if v is None else v for v in row]], dtype=np.float64))

    def extend(self, rows: np.ndarray | Sequence[Sequence[float]]) -> None:
        """Append rows given as an array of shape ``(m, len(columns))``."""
        rows = np.asarray(rows, dtype=np.float64)
        if rows.ndim != 2 or rows.shape[1] != len(self.columns):
            raise ValueError(f"rows must have shape (m, {len(self.columns)}), not {rows.shape}")
        m = rows.shape[0]
        if m == 0:
            return
        self._grow(self._count + m)
        size = self._size
        if m > size:
            self._count += m - size  # the oldest rows of the block are dropped at once
            rows, m = rows[-size:], size
        pos = (self._count + np.arange(m)) % size
        block = rows.T
        self._data[:, pos] = block
        self._data[:, pos + size] = block
        self._count += m
        self.version += 1

    def _start(self) -> int:
        n = len(self)
        return (self._count - n) % self._size

    def columns_view(self) -> np.ndarray:
        """All columns, oldest row first, as one ``(columns, n)`` view (no copy)."""
        start = self._start()
        return self._data[:, start : start + len(self)]

    def view(self, column: str) -> np.ndarray:
        """One column, oldest row first (a view: copy it if you keep it past the next append)."""
        start = self._start()
        return self._data[self._index[column], start : start + len(self)]

    def last(self, column: str) -> float | None:
        """The newest value of a column, or ``None`` when empty or NaN."""
        if not len(self):
            return None
        value = float(self._data[self._index[column], (self._count - 1) % self._size])
        return None if np.isnan(value) else value


class Curves(NamedTuple):
    """What :meth:`PeakDecimator.curves` returns: points ``x`` and ``ys`` (``(columns, points)``).

    Points ``[head, settled)`` come from complete buckets and stay the same for as long as
    ``settled_key`` does (a plot redraws them only when it changes; ``None``: always redraw).
    The others change at any time: ``[0, head)`` is the oldest bucket while the ring buffer drops rows
    from it, ``[settled, len)`` the open bucket and the newest sample."""

    x: np.ndarray
    ys: np.ndarray
    head: int
    settled: int
    settled_key: tuple | None


def _interleave(ids: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Two points per bucket, ``(min, max)`` for even bucket numbers and ``(max, min)`` for odd ones: the
    segment joining two buckets then runs between two maxima or two minima (short), not across the band,
    which halves the pixels a noisy curve paints without changing what it shows."""
    even = (ids % 2) == 0
    out = np.empty(lo.shape[:-1] + (2 * lo.shape[-1],))
    out[..., 0::2] = np.where(even, lo, hi)
    out[..., 1::2] = np.where(even, hi, lo)
    return out


class PeakDecimator:
    """Min/max ("peak") decimation of some columns of one :class:`RingBuffer`, kept up to date as rows arrive.

    Rows are grouped into buckets of a fixed grid, ``floor(x / bucket_s)`` (so the grid does not move
    when a window scrolls). For every bucket the decimator keeps the first sample's x and the min and max
    of each column (NaN-ignoring; NaN only when the whole bucket is NaN, which draws as a gap). Complete
    buckets are stored; each :meth:`curves` call only reduces the rows that arrived since (plus the still
    open last bucket) and re-reduces the oldest bucket when the ring buffer dropped rows from it, so the
    cost per frame does not grow with the history (86,400 rows per GPU for a day).

    Assumes x is non-decreasing, as the telemetry's time axis is. Not thread-safe (one owner).
    """

    def __init__(self, buffer: RingBuffer, columns: Sequence[str]) -> None:
        self.buffer = buffer
        self.columns = tuple(columns)
        self._cols = [buffer.columns.index(c) for c in self.columns]
        self._xcol = buffer.columns.index("x")
        self._bucket_s: float | None = None
        self._reset(None, 0)

    # -- bucket summary ---------------------------------------------------------------------------
    def _reset(self, bucket_s: float | None, next_row: int) -> None:
        k = len(self.columns)
        self._bucket_s = bucket_s
        self._ids = np.empty(0, np.int64)  # grid number of each complete bucket
        self._x = np.empty(0)  # x of each complete bucket's first row
        self._row = np.empty(0, np.int64)  # absolute row number of each complete bucket's first row
        self._lo = np.empty((k, 0))
        self._hi = np.empty((k, 0))
        self._next_row = next_row  # absolute row where the open (incomplete) bucket starts
        self.generation = getattr(self, "generation", 0) + 1  # bumps whenever complete buckets change
        self.reduced_rows = 0  # rows reduced since the reset (tests and diagnostics)

    def _rows(self, start: int, stop: int) -> np.ndarray:
        """Columns of absolute rows ``[start, stop)`` (must still be in the buffer)."""
        oldest = self.buffer.total - len(self.buffer)
        return self.buffer.columns_view()[:, start - oldest : stop - oldest]

    def _reduce(self, start: int, stop: int) -> tuple[np.ndarray, ...]:
        block = self._rows(start, stop)
        self.reduced_rows += block.shape[1]
        assert self._bucket_s is not None
        ids = np.floor(block[self._xcol] / self._bucket_s).astype(np.int64)
        starts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
        starts = np.concatenate(([0], starts))
        values = block[self._cols]
        with np.errstate(invalid="ignore"):
            lo = np.fmin.reduceat(values, starts, axis=1)
            hi = np.fmax.reduceat(values, starts, axis=1)
        return ids[starts], block[self._xcol][starts], starts + start, lo, hi

    def update(self, bucket_s: float) -> None:
        """Bring the bucket summary up to date with the buffer (on a grid of ``bucket_s``)."""
        buf = self.buffer
        total = buf.total
        oldest = total - len(buf)
        if bucket_s != self._bucket_s or total < self._next_row or self._next_row < oldest:
            # a new grid, a cleared buffer, or everything stored has been dropped: start over
            self._reset(bucket_s, oldest)
        elif len(self._row) and self._row[0] < oldest:
            # the ring dropped rows: forget whole buckets, re-reduce the one now cut at the front
            j = int(np.searchsorted(self._row, oldest, side="right")) - 1
            end = int(self._row[j + 1]) if j + 1 < len(self._row) else self._next_row
            self._ids, self._x, self._row = self._ids[j:], self._x[j:].copy(), self._row[j:].copy()
            self._lo, self._hi = self._lo[:, j:].copy(), self._hi[:, j:].copy()
            if self._row[0] < oldest:
                _, x, _, lo, hi = self._reduce(oldest, end)
                self._x[0], self._row[0] = x[0], oldest
                self._lo[:, 0], self._hi[:, 0] = lo[:, 0], hi[:, 0]
            if j:  # whole buckets went (a cut first bucket is a "head": curves() keeps it out of the settled part)
                self.generation += 1
        if total > self._next_row:
            ids, x, rows, lo, hi = self._reduce(self._next_row, total)
            if len(ids) > 1:  # all but the last bucket are complete
                self._ids = np.concatenate((self._ids, ids[:-1]))
                self._x = np.concatenate((self._x, x[:-1]))
                self._row = np.concatenate((self._row, rows[:-1]))
                self._lo = np.concatenate((self._lo, lo[:, :-1]), axis=1)
                self._hi = np.concatenate((self._hi, hi[:, :-1]), axis=1)
                self._next_row = int(rows[-1])
                self.generation += 1

    def buckets(self, bucket_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(ids, x, lo, hi)`` of every bucket, the open last one included; ``lo``/``hi`` are
        ``(columns, buckets)``."""
        self.update(bucket_s)
        total = self.buffer.total
        if total <= self._next_row:
            return self._ids, self._x, self._lo, self._hi
        ids, x, _, lo, hi = self._reduce(self._next_row, total)  # the open bucket
        return (
            np.concatenate((self._ids, ids)),
            np.concatenate((self._x, x)),
            np.concatenate((self._lo, lo), axis=1),
            np.concatenate((self._hi, hi), axis=1),
        )

    # -- curves -----------------------------------------------------------------------------------
    def curves(self, x_lo: float, x_hi: float, bucket_s: float, max_raw: int) -> Curves:
        """Points to draw for x in ``[x_lo, x_hi]`` (see :class:`Curves`).

        When at most ``max_raw`` rows fall in the window (plus one on each side, so lines reach the
        edges) they are returned as they are (copies). Otherwise each bucket of ``bucket_s`` gives two
        points at its first sample's x, its min and its max, so no spike is hidden; the newest row is
        appended as a last point, so the curve always ends at the latest sample."""
        buf = self.buffer
        k = len(self.columns)
        n = len(buf)
        if n == 0:
            return Curves(np.empty(0), np.empty((k, 0)), 0, 0, None)
        xs = buf.view("x")
        a = max(0, int(np.searchsorted(xs, x_lo, side="left")) - 1)
        b = min(n, int(np.searchsorted(xs, x_hi, side="right")) + 1)
        if b - a <= max_raw:
            # raw rows, from the start of the chunk (RAW_CHUNK buckets) the window starts in: the rows of
            # complete chunks are the settled part, so while a window scrolls the body gets new data only
            # when the window's start or end passes a chunk boundary, not at every frame (the few rows
            # before x_lo are off screen, clipped by the view)
            chunk = RAW_CHUNK * bucket_s
            a = max(0, int(np.searchsorted(xs, math.floor(x_lo / chunk) * chunk, side="left")) - 1)
            s = int(np.searchsorted(xs, math.floor(xs[b - 1] / chunk) * chunk, side="left"))
            block = buf.columns_view()[:, a:b]
            oldest = buf.total - n
            if s - a < 2 or (a == 0 and oldest > 0):  # nothing settled, or the ring drops rows at the start
                return Curves(block[self._xcol].copy(), block[self._cols].copy(), 0, 0, None)
            return Curves(
                block[self._xcol].copy(),
                block[self._cols].copy(),
                0,
                s - a,
                ("raw", buf.clears, oldest + a, oldest + s),
            )
        ids, x, lo, hi = self.buckets(bucket_s)
        i = max(0, int(np.searchsorted(ids, np.floor(x_lo / bucket_s), side="left")) - 1)
        j = min(len(ids), int(np.searchsorted(ids, np.floor(x_hi / bucket_s), side="right")) + 1)
        complete = max(0, min(j, len(self._ids)) - i)
        head = 1 if i == 0 and complete else 0  # the oldest bucket may still lose rows to the ring
        ids, x, lo, hi = ids[i:j], x[i:j], lo[:, i:j], hi[:, i:j]
        out_x, out_y = np.repeat(x, 2), _interleave(ids, lo, hi)
        last = buf.columns_view()[:, n - 1]
        if x_lo <= last[self._xcol] <= x_hi:
            out_x = np.append(out_x, last[self._xcol])
            out_y = np.concatenate((out_y, last[self._cols][:, None]), axis=1)
        return Curves(out_x, out_y, 2 * head, 2 * complete, (self.generation, bucket_s, i, complete))
