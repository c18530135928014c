"""An array's bits, for the tests that compare results bit for bit."""
import numpy as np


def bits(a):
    """The bits of ``a`` in C order as unsigned integers of its item size (uint8 for
    any other size): two arrays compare equal under ``np.array_equal`` exactly when
    their bits do, NaNs and signed zeros included. A view where ``a`` is contiguous:
    ``.copy()`` it to keep what an array held."""
    a = np.ascontiguousarray(a)
    size = a.dtype.itemsize
    return a.view(f"u{size}" if size in (1, 2, 4, 8) else np.uint8)
