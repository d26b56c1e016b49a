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
        "fortran rows": np.asfortranarray(base.reshape(8, 8))[:4],  # gaps: left to the full checks
        "permuted": np.ascontiguousarray(base.reshape(4, 4, 4).transpose(2, 0, 1)).transpose(1, 2, 0),  # full checks
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
        ((a, b, np.zeros(16, np.float32)[::2]), ValueError, "out is not one dense block"),
        ((a, [1.0] * 8, out), TypeError, "in1 must be a numpy array, got list"),
    ):
        with pytest.raises(exc, match=text):
            op.execute(*args)
        assert not out.any()
    op.execute(a.reshape(2, 4), b, out)  # any C-contiguous shape
    np.testing.assert_array_equal(out, a + 1)
    op.execute(a.reshape(4, 2).T, b, out.reshape(2, 4).T)  # any dense block: read and written as its memory
    np.testing.assert_array_equal(out, a + 1)


#: arrays `arrays.quick_addresses` hands back (as an input; "read-only" not as out) and those it leaves
#: to the full checks
QUICK = {"1-d", "offset view", "2-d", "0-d", "read-only", "foreign buffer", "fortran"}


@pytest.mark.parametrize("name", sorted(_arrays()))
@pytest.mark.parametrize("role", ["in0", "in1", "out"])
def test_quick_addresses_take_only_plain_c_or_f_order_arrays_that_hold_the_reach(name, role):
    """The fast path of ``execute``: numpy's data pointers for plain C- or F-order arrays of the
    dtype that hold the bytes asked for (a writable out), else None (the full checks then run);
    never an address for an array that is too short by one element."""
    arr = _arrays()[name]
    plain = np.zeros(64, np.float32)
    args = [plain, plain.copy(), plain.copy()]
    i = ("in0", "in1", "out").index(role)
    args[i] = arr
    dtype = np.dtype(np.float32)
    need = [256, 256, 256]
    need[i] = max(arr.nbytes, 4)  # an operation reaches one element at least
    got = arrays.quick_addresses(*args, dtype, *need)
    if name in QUICK and not (name == "read-only" and role == "out") and arr.dtype is dtype:
        assert got == tuple(x.ctypes.data for x in args)
        need[i] += 1
        assert arrays.quick_addresses(*args, dtype, *need) is None
    else:
        assert got is None


def test_execute_takes_the_quick_path_and_the_full_checks_still_raise():
    """A GEMM's execute with plain arrays runs without the per-attribute checks (they are not
    called), and any array the quick path leaves raises the full check's error naming it."""
    op = TensorOperation("native", num_threads=1)
    op.setup("fp32", "none", "gemm", "none", "mnk", ["undefined"] * 3, [4, 3, 5], [5, 0, 1], [0, 1, 3], [3, 1, 0])
    assert op._quick is not None and op.config.inputs_swapped  # C order: in0 and in1 exchanged
    a = np.arange(20, dtype=np.float32).reshape(4, 5)
    b = np.ones((5, 3), np.float32)
    out = np.zeros((4, 3), np.float32)
    calls = []
    full = op._checked
    op._checked = lambda *args: calls.append(args) or full(*args)
    op.execute(a, b, out)
    np.testing.assert_allclose(out, a @ b)
    assert calls == []
    for args, exc, text in (
        ((a[:3], b, out), ValueError, "in0: the strides reach"),
        ((a, b.astype(">f4"), out), TypeError, "in1 has dtype >f4"),
        ((a, b, np.zeros((4, 6), np.float32)[:, :3]), ValueError, "out is not one dense block"),
    ):
        with pytest.raises(exc, match=text):
            op.execute(*args)
    assert len(calls) == 3


#: (array, dense): every layout numpy makes, and whether it fills one dense block
def _layouts() -> dict[str, tuple[np.ndarray, bool]]:
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    return {
        "C": (x, True),
        "F": (np.asfortranarray(x), True),
        "transpose": (x.T, True),
        "permuted": (np.ascontiguousarray(x.transpose(2, 0, 1)).transpose(1, 2, 0), True),
        "length-1 axes, any stride": (np.zeros((4, 1, 3))[:, ::-1].transpose(2, 1, 0), True),
        "empty with steps": (np.zeros((0, 6))[:, ::2], True),
        "0-d": (np.array(1.0), True),
        "steps": (x[:, ::2], False),
        "slice of a larger array": (x[:, :, :3], False),
        "F slice of rows": (np.asfortranarray(x)[:1], False),
        "negative": (x[::-1], False),
        "broadcast": (np.broadcast_to(x[:1], (2, 3, 4)), False),
        "equal strides": (np.lib.stride_tricks.as_strided(x, (2, 2), (8, 8)), False),
    }


@pytest.mark.parametrize("name", sorted(_layouts()))
def test_dense_view_is_the_block_an_array_fills(name):
    """`arrays.dense_view`: a C-contiguous view over the very memory of a dense array (its
    elements in memory order, first element at the same address), ValueError naming the argument
    for gaps, negative or repeated strides."""
    x, dense = _layouts()[name]
    assert arrays.is_dense(x.shape, x.strides, x.itemsize) is dense
    if not dense:
        with pytest.raises(ValueError, match="arg is not one dense block"):
            arrays.dense_view("arg", x)
        return
    v = arrays.dense_view("arg", x)
    assert v.flags.c_contiguous and v.size == x.size
    if x.size:
        lowest = x.ctypes.data + sum(s * (n - 1) for s, n in zip(x.strides, x.shape, strict=True) if s < 0)
        assert v.ctypes.data == x.ctypes.data == lowest  # the block's lowest address
        assert np.shares_memory(v, x)
        np.testing.assert_array_equal(v.reshape(-1), np.ravel(x, order="K"))  # memory order
        v.reshape(-1)[0] = -1  # a view, not a copy
        assert x.min() == -1
