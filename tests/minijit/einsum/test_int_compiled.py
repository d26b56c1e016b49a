"""`minijit.einsum` on int32 / int64 numpy arrays runs minijit's integer kernels (x86-64 native)
and gives numpy's result bit for bit, wrap-around included: hypothesis over expressions and values
at the range's edges, GEMM-like shapes large enough for packed, copied and threaded blocks, mixed
int32/int64, ``dtype=``/``out=``/``casting=`` as numpy's, strided operands read in place."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minijit
from minijit.einsum import dtypes
from minijit.errors import SetupError, error_t
from minijit.targets import native
from minijit.tensor_operation import TensorOperation

from .strategies import expressions

pytestmark = pytest.mark.skipif(
    "s32" not in native().int_dtypes, reason="the native target has no integer kernels (x86-64 only)"
)

INTS = [np.int32, np.int64]


def int_operands(shapes, dtype, seed: int, kind: str) -> list[np.ndarray]:
    """Operands over the whole range ("full"), at its edges ("edges": every product wraps) or small."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    edges = np.array([info.min, info.min + 1, info.max, info.max - 1, -1, 0, 1, 3, -(1 << 20)], dtype)
    out = []
    for s in shapes:
        if kind == "edges":
            out.append(edges[rng.integers(0, edges.size, s)])
        elif kind == "small":
            out.append(rng.integers(-5, 6, s).astype(dtype))
        else:
            out.append(rng.integers(info.min, info.max, s, dtype=dtype, endpoint=True))
    return out


def assert_numpys(subs, ops, **kw) -> np.ndarray:
    want = np.einsum(subs, *ops, **kw)
    got = minijit.einsum(subs, *ops, **kw)
    assert type(got) is np.ndarray and got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want), (subs, [o.shape for o in ops])
    return got


@given(
    expr=expressions(min_ops=1, max_ops=3, max_indices=5, max_size=7, max_product=2048),
    dtype=st.sampled_from(INTS),
    kind=st.sampled_from(["full", "edges", "small"]),
    optimize=st.sampled_from([False, True, "greedy"]),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=60, deadline=None)
def test_expressions_bit_for_bit(expr, dtype, kind, optimize, seed):
    subs, shapes = expr
    ops = int_operands(shapes, dtype, seed, kind)
    assert_numpys(subs, ops, optimize=optimize)
    why = dtypes.numpy_reason(subs, tuple(ops), None, None, None, None, "auto", None)
    text = minijit.einsum(subs, *ops, optimize=optimize, explain=True)
    if why is None:
        assert text.startswith("minijit compiled:") and f"{np.dtype(dtype)}" in text
    else:  # only a one-operand view stays numpy's (numpy returns a view of the operand)
        assert "view" in why and len(ops) == 1 and text.startswith("numpy.einsum:")


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize(
    "subs,shapes",
    [
        ("ij,jk->ik", [(131, 257), (257, 75)]),  # remainder blocks, packed / copied operands
        ("bij,bjk->bik", [(3, 40, 33), (3, 33, 29)]),
        ("ij,kj->ik", [(64, 300), (50, 300)]),  # B transposed
        ("ji,jk->ik", [(90, 70), (90, 40)]),  # A transposed
        ("i,i->", [(100_003,), (100_003,)]),  # a long dot product
        ("ij,ij->i", [(37, 513), (37, 513)]),  # batched dots
        ("ij,j->i", [(300, 129), (129,)]),  # GEMV-like
        ("ijk->", [(20, 30, 40)]),  # a full reduction
        ("ik,kj,jl->il", [(30, 40), (40, 50), (50, 20)]),
    ],
)
def test_gemm_like_shapes(dtype, subs, shapes):
    for kind in ("full", "edges"):
        assert_numpys(subs, int_operands(shapes, dtype, 7, kind))
    assert minijit.einsum(subs, *int_operands(shapes, dtype, 7, "small"), explain=True).startswith("minijit")


def test_threaded_gemm_is_numpys():
    """A GEMM over the parallel threshold (several threads, shared loops) is still bit for bit."""
    a, b = int_operands([(512, 384), (384, 256)], np.int32, 3, "full")
    assert_numpys("ij,jk->ik", [a, b])


def test_mixed_widths_dtype_out_and_casting_are_numpys():
    a32, b64 = int_operands([(20, 30)], np.int32, 1, "full")[0], int_operands([(30, 10)], np.int64, 2, "full")[0]
    got = assert_numpys("ij,jk->ik", [a32, b64])  # int64: int32 operands widened as numpy's
    assert got.dtype == np.int64
    assert_numpys("ij,jk->ik", [a32, a32.T.copy()], dtype=np.int64)
    out = np.empty((20, 20), np.int32)
    res = minijit.einsum("ij,jk->ik", a32, a32.T, out=out)
    assert res is out and np.array_equal(out, np.einsum("ij,jk->ik", a32, a32.T))
    for kw in ({"dtype": np.int32}, {"dtype": np.int32, "casting": "same_kind"}):  # int64 -> int32
        try:
            want = np.einsum("ij,jk->ik", a32, b64, **kw)
        except TypeError:
            with pytest.raises(TypeError):
                minijit.einsum("ij,jk->ik", a32, b64, **kw)
        else:
            assert np.array_equal(minijit.einsum("ij,jk->ik", a32, b64, **kw), want)
    with pytest.raises(TypeError):  # numpy's 'no': int32 -> int64 is a cast
        np.einsum("ij,jk->ik", a32, b64, casting="no")
    with pytest.raises(TypeError):
        minijit.einsum("ij,jk->ik", a32, b64, casting="no")


def test_strided_operands_read_in_place_or_copied():
    base = int_operands([(60, 80)], np.int64, 5, "edges")[0]
    assert_numpys("ij,jk->ik", [base.T, base])  # a transpose: relabelled, read in place
    assert_numpys("ij,jk->ik", [base[::2, 1::3], base[:27, :5]])  # gaps: copied
    assert_numpys("ij,jk->ik", [np.asfortranarray(base), base.T], order="K")


def test_paths_numpy_keeps():
    """Integers with floats, a one-operand view and other targets' calls stay numpy's (same
    result, numpy's path named); other integer widths and unsigned run on the int32/int64
    kernels (`minijit.einsum.widen`), numpy's result bit for bit."""
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    for dt in (np.int16, np.uint32):
        ops = [a.astype(dt), a.T.astype(dt)]
        assert minijit.einsum("ij,jk->ik", *ops, explain=True).startswith("minijit compiled:"), dt
        assert_numpys("ij,jk->ik", ops)
    cases = [
        ("ij,jk->ik", [a, a.T.astype(np.float32)], {}),
        ("ij->ji", [a], {}),
        ("ij,jk->ik", [a, a.T], {"target": "aarch64-sme"}),
    ]
    for subs, ops, kw in cases:
        assert minijit.einsum(subs, *ops, explain=True, **kw).startswith("numpy.einsum:"), (subs, kw)
        got = minijit.einsum(subs, *ops, **kw)
        want = np.einsum(subs, *ops)
        assert got.dtype == want.dtype and np.array_equal(got, want)
    assert minijit.einsum("ij->ji", a).base is a.base  # numpy's view


def test_integer_operation_refuses_what_it_has_no_kernel_for():
    """A TensorOperation of dtype s32: a GEMM sets up; a binary op has no integer kernel
    (SetupError wrong_dtype, naming the dtype)."""
    op = TensorOperation()
    assert op.setup("s32", "zero", "gemm", "none", ["m", "n", "k"], ["undefined"] * 3, [8, 8, 8],
                    [1, 0, 8], [0, 8, 1], [1, 8, 0]) is error_t.success  # fmt: skip
    a, b = np.arange(64, dtype=np.int32), np.arange(64, dtype=np.int32)[::-1].copy()
    c = np.empty(64, np.int32)
    op.execute(a, b, c)
    assert np.array_equal(c.reshape(8, 8).T, a.reshape(8, 8).T @ b.reshape(8, 8).T)
    with pytest.raises(SetupError) as info:
        TensorOperation().setup("s32", "none", "add", "none", ["c", "c"], ["undefined"] * 2, [8, 8],
                                [1, 8], [1, 8], [1, 8])  # fmt: skip
    assert info.value.code is error_t.wrong_dtype and "s32" in info.value.message


def test_torch_cpu_integer_tensors_run_compiled():
    """torch CPU int32/int64 tensors take the integer rules too (a torch result, numpy's values);
    int8 ones stay numpy's."""
    torch = pytest.importorskip("torch")
    a = torch.from_numpy(int_operands([(9, 13)], np.int64, 4, "edges")[0])
    b = torch.from_numpy(int_operands([(13, 6)], np.int64, 5, "full")[0])
    got = minijit.einsum("ij,jk->ik", a, b)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.int64
    assert np.array_equal(got.numpy(), np.einsum("ij,jk->ik", a.numpy(), b.numpy()))
    arrays = [a.numpy(), b.numpy()]
    assert dtypes.host_reason(arrays, None, None, None) is None
    assert "int8" in dtypes.host_reason([x.astype(np.int8) for x in arrays], None, None, None)
