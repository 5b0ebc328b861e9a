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

from collections.abc import Sequence

import numpy as np


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
        data[:, new_size:new_size + n] = old
        self._data, self._size, self._count = data, new_size, n

    def append(self, row: Sequence[float]) -> None:
        """Append one row (one value per column; ``None`` becomes NaN)."""
        self.extend(np.asarray([[np.nan if v is None else v for v in row]], dtype=np.float64))

    def extend(self, rows: np.ndarray) -> None:
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
        return self._data[:, start:start + len(self)]

    def view(self, column: str) -> np.ndarray:
        """One column, oldest row first (a view: copy it if you keep it past the next append)."""
        start = self._start()
        return self._data[self._index[column], start:start + len(self)]

    def last(self, column: str) -> float | None:
        """The newest value of a column, or ``None`` when empty or NaN."""
        if not len(self):
            return None
        value = float(self._data[self._index[column], (self._count - 1) % self._size])
        return None if np.isnan(value) else value
