"""The cos/sin rows a ``Rope`` has served, kept for the next call.

Decode steps and repeated prefills ask for the same or the next positions
again and again; rebuilding exact table rows each time would cost more than
the rotation itself. A ``TableCache`` holds rows of one dtype (float32 for
float32, float16 and bfloat16 data; float64 for float64 data) for one window
of consecutive positions. A request inside the window is a lookup; a request
outside grows the window (at least doubling it, so a decode loop rebuilds
O(log n) times) or moves it, and a request wider than the bound is refused
(the caller then builds rows just for that call or computes them on the
fly). A move drops rows, so it waits until the requests it would serve
have been computed on the fly for as many rows as it builds (rent or buy):
calls alternating between two distant ranges then build no more rows
than they compute on the fly, instead of a whole window per call. Rows
are a pure function of (position, inv_freq, scale), so a row reads the
same whichever window holds it.

Thread safety: a published window is an immutable tuple whose arrays are
never written again; growing builds new arrays under a lock and publishes
them with one attribute store. A caller keeps its window tuple for the whole
C call, so a concurrent replacement cannot free rows in use. A child forked
while another thread grows the window gets the lock unheld and the last
published window (``_locks``).
"""
from collections import namedtuple

import numpy as np

from . import binding as _binding, launcher as _launcher, locks as _locks, tables as _tables
from .checks import MAX_POSITION

Window = namedtuple("Window", "start stop cos sin angles")
Window.__doc__ = """Rows for positions ``[start, stop)``, and the ``rope_angles`` template reading them."""

MAX_TABLE_BYTES = 32 << 20   # per Rope: cos + sin rows
MIN_ROWS = 64                # smallest window built


class TableCache:
    """Cached cos/sin rows (``dtype`` float32 or float64) for a window
    ``[start, stop)`` of positions."""

    __slots__ = ("_inv_freq", "_scale", "_lock", "window", "max_rows", "_inv_freq_ptr", "on_the_fly",
                 "dtype", "_rented")

    def __init__(self, inv_freq, scale, dtype=np.float32):
        self._inv_freq = inv_freq
        self._scale = scale
        self.dtype = np.dtype(dtype)
        self._lock = _locks.Lock()   # a forked child gets it unheld
        half = max(int(inv_freq.shape[0]), 1)
        self.max_rows = max(MAX_TABLE_BYTES // (2 * self.dtype.itemsize * half), MIN_ROWS)
        self.window = None  # a Window: replaced, never mutated
        self._rented = 0    # rows computed on the fly since a move was refused (lookup)
        (self._inv_freq_ptr,) = _binding.float_pointers(inv_freq)
        self.on_the_fly = _launcher.angle_template(self._inv_freq_ptr, scale)  # no rows: made per token

    def angles_over(self, cos, sin, start):
        """A ``rope_angles`` template reading rows ``cos``/``sin`` (C-contiguous
        of the cache's dtype, kept alive by the caller) for positions from
        ``start`` on."""
        cos_ptr, sin_ptr = _binding.float_pointers(cos, sin)
        return _launcher.angle_template(self._inv_freq_ptr, self._scale, (cos_ptr, sin_ptr, start, cos.shape[0]))

    def __reduce__(self):
        """Pickled (and copied) empty: rows are rebuilt on demand, the lock is new."""
        return (TableCache, (self._inv_freq, self._scale, self.dtype))

    def lookup(self, lo, hi, where="positions", tokens=1):
        """A ``Window`` covering positions ``lo..hi-1``, or None when that span
        is wider than the bound, or when serving it would move the window
        away from rows not yet paid for (below). ``where``: the user's
        argument that holds the positions, named if building rows fails;
        ``tokens``: the rows the caller computes on the fly if refused."""
        w = self.window
        if w is not None and w.start <= lo and hi <= w.stop:
            return w
        if hi - lo > self.max_rows:
            return None
        with self._lock:
            w = self.window
            if w is not None and w.start <= lo and hi <= w.stop:
                return w
            if w is not None and max(hi, w.stop) - min(lo, w.start) > self.max_rows:
                # Serving lo..hi-1 moves the window (its rows beyond the bound
                # are dropped). Rent or buy: such calls are computed on the fly
                # until they have cost as many rows as the move builds, so calls
                # alternating between distant or wide ranges build at most one
                # window per that many rows served, never one per call (a
                # decode running off the window's end waits 64 tokens).
                self._rented += tokens
                start, stop = self._size(w, lo, hi)
                if self._rented < stop - start:
                    return None
            self._rented = 0
            self.window = w = self._grown(w, lo, hi, where)
            return w

    def _size(self, w, lo, hi):
        """``(start, stop)`` of the window that serves ``lo..hi-1`` after window
        ``w`` (None: no window yet): grown to cover both while that fits the
        bound (at least doubling), else moved to ``lo``."""
        limit = self.max_rows
        if w is not None and max(hi, w[1]) - min(lo, w[0]) <= limit:
            start, stop = min(lo, w[0]), max(hi, w[1])
            size = min(limit, max(stop - start, 2 * (w[1] - w[0]), MIN_ROWS))
            if hi > w[1]:       # growing forwards (decode): slack ahead
                stop = start + size
            else:
                start = stop - size
        else:
            start, stop = lo, lo + min(limit, max(2 * (hi - lo), MIN_ROWS))
        # Stay inside the exact-angle range.
        if stop > MAX_POSITION + 1:
            start, stop = max(start - (stop - MAX_POSITION - 1), -MAX_POSITION), MAX_POSITION + 1
        if start < -MAX_POSITION:
            start, stop = -MAX_POSITION, min(stop + (-MAX_POSITION - start), MAX_POSITION + 1)
        return start, stop

    def _grown(self, w, lo, hi, where):
        start, stop = self._size(w, lo, hi)
        n, half = stop - start, self._inv_freq.shape[0]
        cos = np.empty((n, half), dtype=self.dtype)
        sin = np.empty((n, half), dtype=self.dtype)
        keep_lo = keep_hi = start
        if w is not None:   # rows already built are copied, not recomputed
            keep_lo, keep_hi = max(start, w[0]), min(stop, w[1])
            if keep_lo < keep_hi:
                cos[keep_lo - start:keep_hi - start] = w[2][keep_lo - w[0]:keep_hi - w[0]]
                sin[keep_lo - start:keep_hi - start] = w[3][keep_lo - w[0]:keep_hi - w[0]]
            else:
                keep_lo = keep_hi = start
        for a, b in ((start, keep_lo), (keep_hi, stop)):
            if b > a:
                _tables.cos_sin_range(a, b - a, self._inv_freq, self._scale,
                                      cos[a - start:b - start], sin[a - start:b - start], where,
                                      self.dtype)
        cos.flags.writeable = False
        sin.flags.writeable = False
        return Window(start, stop, cos, sin, self.angles_over(cos, sin, start))
