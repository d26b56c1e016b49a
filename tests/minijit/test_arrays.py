"""`minijit.arrays`: the address of an array's first element, and the checks ``execute`` makes."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from minijit import arrays
from minijit.tensor_operation import TensorOperation


def _arrays() -> dict[str, np.ndarray]:
    base = np.arange(64, dtype=np.float32)
    ro = base.copy()
    ro.flags.writeable = False
    buf = mmap.mmap(-1, 4096)
    return {
        "1-d": base,
        "offset view": base[5:],
        "2-d": base.reshape(8, 8),
        "read-only": ro,
        "0-d": np.array(3.0, np.float32),
        "empty": np.empty(0, np.float32),
        "big-endian": base.astype(">f4"),
        "fortran": np.asfortranarray(base.reshape(8, 8)),
        "strided": base[::3],
        "reversed": base[::-1],
        "foreign buffer": np.frombuffer(buf, np.float32),
        "subclass": np.arange(6.0).reshape(2, 3).view(np.matrix),
    }


@pytest.mark.parametrize("name", sorted(_arrays()))
def test_address_is_numpy_s_data_pointer(name):
    arr = _arrays()[name]
    assert arrays.address(arr) == arr.ctypes.data


def test_execute_checks_name_the_argument_and_write_nothing():
    op = TensorOperation("native", num_threads=1)
    op.setup("fp32", "none", "add", "none", ["c"], ["undefined"], [8], [1], [1], [1])
    a, b = np.arange(8, dtype=np.float32), np.ones(8, np.float32)
    out = np.zeros(8, np.float32)
    for args, exc, text in (
        ((a.astype(">f4"), b, out), TypeError, "in0 has dtype >f4"),
        ((a, b.astype(np.float64), out), TypeError, "in1 has dtype float64"),
        ((a, b, out[:7]), ValueError, "out: the strides reach elements 0..7"),
        ((a, b, np.zeros(16, np.float32)[::2]), ValueError, "out is not C-contiguous"),
        ((a, [1.0] * 8, out), TypeError, "in1 must be a numpy array, got list"),
    ):
        with pytest.raises(exc, match=text):
            op.execute(*args)
        assert not out.any()
    op.execute(a.reshape(2, 4), b, out)  # any C-contiguous shape
    np.testing.assert_array_equal(out, a + 1)
