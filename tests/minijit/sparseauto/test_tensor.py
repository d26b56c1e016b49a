"""SparseTensor: storage built from COO, scipy and pydata round-trips to the dense array; bad input
raises naming the array, level or mode."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

import minijit
from minijit.sparseauto.tensor import Level, SparseTensor, as_sparse, first_unsorted, is_sparse
from tests.minijit.sparseauto.strategies import shapes, sparse_tensors

sparse = pytest.importorskip("sparse")


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_from_coo_round_trip(data):
    shape = data.draw(shapes)
    t, dense = data.draw(sparse_tensors(shape, dtype=data.draw(st.sampled_from((np.float32, np.float64)))))
    assert t.shape == shape and t.dtype == dense.dtype
    np.testing.assert_array_equal(t.to_dense(), dense)
    coords, vals = t.to_coo()
    back = SparseTensor.from_coo(coords, vals, shape, t.levels, t.mode_order)
    np.testing.assert_array_equal(back.to_dense(), dense)
    for k, lv in enumerate(t.storage):  # the invariants the generated loops rely on
        if lv.format == "compressed":
            assert lv.pos[0] == 0 and (np.diff(lv.pos) >= 0).all() and lv.pos[-1] == lv.crd.shape[0]
            assert lv.pos.dtype == lv.crd.dtype == np.int32
        assert lv.size == shape[t.mode_order[k]]


def test_levels_and_nnz():
    d = np.array([[0, 1.0, 0], [0, 0, 0], [2.0, 0, 3.0]])
    csr = SparseTensor.from_dense(d, ("dense", "compressed"))
    assert csr.levels == ("dense", "compressed") and csr.nnz == 3
    assert csr.storage[1].pos.tolist() == [0, 1, 1, 3] and csr.storage[1].crd.tolist() == [1, 0, 2]
    dcsr = SparseTensor.from_dense(d)
    assert dcsr.levels == ("compressed", "compressed") and dcsr.storage[0].crd.tolist() == [0, 2]
    dense_last = SparseTensor.from_dense(d, ("compressed", "dense"))
    assert dense_last.nnz == 6  # two non-empty rows, stored densely
    np.testing.assert_array_equal(dense_last.to_dense(), d)


def test_duplicates_are_summed():
    t = SparseTensor.from_coo([[1, 0, 1], [2, 0, 2]], np.array([1.0, 5.0, 2.5]), (2, 3))
    assert t.nnz == 2
    np.testing.assert_array_equal(t.to_dense(), [[5.0, 0, 0], [0, 0, 3.5]])


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_from_scipy(fmt):
    m = sp.random(7, 5, density=0.3, format=fmt, random_state=1, dtype=np.float32)
    t = SparseTensor.from_scipy(m)
    assert t.dtype == np.float32
    assert t.mode_order == ((1, 0) if fmt == "csc" else (0, 1))
    np.testing.assert_array_equal(t.to_dense(), m.toarray())
    assert is_sparse(m) and as_sparse(m).shape == (7, 5)


def test_from_scipy_unsorted_with_duplicates():
    m = sp.csr_matrix((np.array([1.0, 2.0, 4.0]), np.array([2, 0, 2]), np.array([0, 3])), shape=(1, 3))
    assert not m.has_canonical_format
    t = SparseTensor.from_scipy(m)
    assert t.storage[1].crd.tolist() == [0, 2]
    np.testing.assert_array_equal(t.to_dense(), m.toarray())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 6), max_size=5), min_size=1, max_size=6))
def test_first_unsorted_matches_a_loop_over_fibres(fibres):
    crd = np.array([c for f in fibres for c in f], np.int64)
    pos = np.cumsum([0] + [len(f) for f in fibres])
    want = None
    for f in range(len(fibres)):
        for j in range(pos[f], pos[f + 1] - 1):
            if crd[j + 1] <= crd[j] and (want is None or j < want):
                want = j
    assert first_unsorted(pos, crd) == want


def test_from_scipy_canonical_input_is_copied():
    """A canonical matrix skips scipy's sort; the tensor still owns its indices and values."""
    m = sp.random(6, 9, density=0.4, format="csr", random_state=3)
    assert m.has_canonical_format
    dense = m.toarray()
    t = SparseTensor.from_scipy(m)
    m.indices[:] = 0  # the caller's matrix changes afterwards: the tensor does not
    m.data[:] = -1.0
    np.testing.assert_array_equal(t.to_dense(), dense)


def test_from_scipy_slack_past_indptr_end_is_ignored():
    """scipy may keep spare capacity after indptr[-1]: only the first nnz entries are read."""
    m = sp.csr_matrix(
        (np.array([1.0, 2.0, 7.0]), np.array([0, 2, 1]), np.array([0, 1, 2])), shape=(2, 3)
    )  # indices/data hold one unused entry
    t = SparseTensor.from_scipy(m)
    assert t.nnz == 2
    np.testing.assert_array_equal(t.to_dense(), [[1.0, 0, 0], [0, 0, 2.0]])


def test_from_pydata_coo():
    rng = np.random.default_rng(3)
    d = np.where(rng.random((4, 3, 5)) < 0.3, rng.standard_normal((4, 3, 5)), 0)
    x = sparse.COO.from_numpy(d)
    t = SparseTensor.from_pydata(x)
    assert t.levels == ("compressed",) * 3
    np.testing.assert_array_equal(t.to_dense(), d)
    assert is_sparse(x) and not is_sparse(d)


def test_from_pydata_gcxs():
    """GCXS (one numba compilation per process: a single case) with two compressed axes."""
    rng = np.random.default_rng(3)
    d = np.where(rng.random((4, 3, 5)) < 0.3, rng.standard_normal((4, 3, 5)), 0)
    x = sparse.GCXS.from_numpy(d, compressed_axes=(0, 2))
    t = SparseTensor.from_pydata(x)
    assert t.mode_order[:2] == tuple(x.compressed_axes) and t.levels[0] == "dense"
    np.testing.assert_array_equal(t.to_dense(), d)


def _pos_crd(pos, crd):
    return [Level("dense", 2), Level("compressed", 3, np.array(pos), np.array(crd))]


@pytest.mark.parametrize(
    "make, exc, text",
    [
        (lambda: SparseTensor((2, 3), _pos_crd([0, 2, 1], [0, 1]), np.zeros(2)), ValueError, "not monotone"),
        (lambda: SparseTensor((2, 3), _pos_crd([1, 1, 2], [0, 1]), np.zeros(2)), ValueError, "pos[0] must be 0"),
        (lambda: SparseTensor((2, 3), _pos_crd([0, 1], [0]), np.zeros(1)), ValueError, "pos has length 2"),
        (lambda: SparseTensor((2, 3), _pos_crd([0, 1, 3], [0, 1]), np.zeros(2)), ValueError, "crd has 2"),
        (lambda: SparseTensor((2, 3), _pos_crd([0, 1, 2], [0, 3]), np.zeros(2)), ValueError, "crd[1] = 3"),
        (lambda: SparseTensor((2, 3), _pos_crd([0, 2, 2], [1, 1]), np.zeros(2)), ValueError, "strictly increasing"),
        (lambda: SparseTensor((2, 3), _pos_crd([0, 1, 2], [0, 1]), np.zeros(3)), ValueError, "vals has shape"),
        (lambda: SparseTensor((2, 3), _pos_crd([0, 1, 2], [0, 1]), np.zeros(2, int)), TypeError, "vals must be"),
        (lambda: SparseTensor((2, 3), _pos_crd([0, 1, 2], [0.5, 1]), np.zeros(2)), TypeError, "crd must be"),
        (lambda: SparseTensor.from_coo([[0, 2]], np.ones(2), (2,)), ValueError, "coords[0][1] = 2"),
        (lambda: SparseTensor.from_coo([[0, -1]], np.ones(2), (2,)), ValueError, "out of range"),
        (lambda: SparseTensor.from_coo([[0, 1]], np.ones(3), (2,)), ValueError, "values has shape"),
        (lambda: SparseTensor.from_coo([[0, 1]], np.ones(2, np.float16), (2,)), TypeError, "float32 or float64"),
        (lambda: SparseTensor.from_coo([[0, 1]], np.ones(2), (2,), ["sparse"]), ValueError, "levels[0]"),
        (lambda: SparseTensor.from_coo([[0, 1]], np.ones(2), (2, 2)), ValueError, "coords must have shape"),
        (lambda: SparseTensor.from_coo([[0], [1]], np.ones(1), (2, 2), mode_order=(0, 0)), ValueError, "mode_order"),
        (lambda: SparseTensor.from_coo([[0]], np.ones(1), (-1,)), ValueError, "shape[0]"),
        (lambda: SparseTensor.from_scipy(sp.random(3, 3, format="lil")), TypeError, "tocsr"),
        (lambda: SparseTensor.from_pydata(np.zeros(3)), TypeError, "sparse.COO"),
        (lambda: as_sparse([1, 2], "B"), TypeError, "B: expected"),
    ],
)
def test_bad_input(make, exc, text):
    with pytest.raises(exc, match=None) as info:
        make()
    assert text in str(info.value)


def test_nonzero_fill_value_refused():
    x = sparse.COO.from_numpy(np.ones((2, 2)), fill_value=1.0)
    with pytest.raises(ValueError, match="fill value"):
        SparseTensor.from_pydata(x)
    with pytest.raises(ValueError, match="X: the fill value"):
        as_sparse(x, "X")


def test_storage_is_read_only():
    t = SparseTensor.from_dense(np.eye(3))
    with pytest.raises(ValueError):
        t.vals[0] = 2.0
    with pytest.raises(ValueError):
        t.storage[1].crd[0] = 2


def test_construction_leaves_callers_arrays_alone():
    vals = np.array([1.0, 2.0])
    crd = np.array([0, 2], np.int32)
    t = SparseTensor((2, 3), [Level("dense", 2), Level("compressed", 3, np.array([0, 1, 2]), crd)], vals)
    assert vals.flags.writeable and crd.flags.writeable
    vals[0] = 5.0  # values may change under the tensor; its indices are its own copies
    crd[0] = 99
    assert t.storage[1].crd.tolist() == [0, 2]


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        ("decreasing", "indptr decreases"),
        ("index_high", "outside"),
        ("index_negative", "outside"),
        ("indptr_short", "entries, expected"),
        ("indptr_start", r"indptr\[0\]"),
        ("indptr_end", "indptr ends at"),
    ],
)
def test_from_scipy_refuses_malformed_structure_before_scipy_reads_it(fmt, breakage, message):
    """A malformed CSR/CSC (found by the fuzzer: a decreasing indptr corrupted the heap inside
    scipy's sum_duplicates) is refused by name before scipy's C code or ours touches it."""
    import scipy.sparse as sp

    dense = np.array([[1.0, 0, 2], [0, 3, 0], [4, 0, 5], [0, 0, 6]])
    m = (sp.csr_matrix if fmt == "csr" else sp.csc_matrix)(dense)
    indptr, indices, data = m.indptr.copy(), m.indices.copy(), m.data.copy()
    if breakage == "decreasing":
        indptr[1:] = indptr[1:][::-1].copy()
    elif breakage == "index_high":
        indices[0] = 7
    elif breakage == "index_negative":
        indices[-1] = -1
    elif breakage == "indptr_short":
        indptr = indptr[:-1]
    elif breakage == "indptr_start":
        indptr = indptr + 1
    elif breakage == "indptr_end":
        indptr[-1] += 3
    bad = (sp.csr_matrix if fmt == "csr" else sp.csc_matrix)(dense.shape)
    bad.indptr, bad.indices, bad.data = indptr, indices, data  # past scipy's own constructor checks
    with pytest.raises(ValueError, match=message):
        SparseTensor.from_scipy(bad)
    with pytest.raises(ValueError, match=message):
        minijit.einsum("ij,jk->ik", bad, np.ones((dense.shape[1], 2)))
