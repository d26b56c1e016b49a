"""CSR given on the device (``SpMM(target="cuda")``): (indptr, indices, data, shape) of device
arrays or a torch ``sparse_csr`` tensor, validated before any launch; run in the PTX simulator
(and on a GPU when there is one)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from minijit.sparse import SpMM
from tests.minijit.sparse.helpers import csr_with_lengths
from tests.minijit.sparse.test_tca import _Cai

TYPESTR = {np.dtype(np.int32): "<i4", np.dtype(np.int64): "<i8", np.dtype(np.float16): "<f2",
           np.dtype(np.float32): "<f4", np.dtype(np.float64): "<f8"}  # fmt: skip


def _dev(drv, x: np.ndarray, typestr: str | None = None, keep: list | None = None) -> _Cai:
    buf = drv.to_device(x)
    if keep is not None:
        keep.append(buf)
    return _Cai(buf.ptr, x.shape, typestr or TYPESTR[x.dtype], strides=None)


class _TorchSparseCsr:
    """Duck-typed stand-in for a CUDA ``torch.sparse_csr`` tensor (torch is not a test dependency):
    ``layout``, ``shape``, ``crow_indices()``, ``col_indices()``, ``values()`` as device arrays."""

    layout = "torch.sparse_csr"

    def __init__(self, crow, col, values, shape):
        self._parts, self.shape = (crow, col, values), shape

    def crow_indices(self):
        return self._parts[0]

    def col_indices(self):
        return self._parts[1]

    def values(self):
        return self._parts[2]


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_device_csr_vs_scipy(cuda_backend, index_dtype):
    """The same matrix from scipy, from device arrays (int32/int64 indices, float32/float16/bf16
    values) and from a sparse_csr tensor gives scipy's S @ B (fp64, fp16-rounded inputs)."""
    from ptx.mma import f32_to_bf16_bits

    drv, keep = cuda_backend.driver, []
    rng = np.random.default_rng(7)
    s = csr_with_lengths([0, 4, 130, 0, 9, 1, 33, 0], 140, rng)
    m, k, n = s.shape[0], s.shape[1], 16
    b = rng.standard_normal((k, n)).astype(np.float16)
    ip, ix = s.indptr.astype(index_dtype), s.indices.astype(index_dtype)
    d_ip, d_ix = _dev(drv, ip, keep=keep), _dev(drv, ix, keep=keep)
    want = SpMM(s, n, target="cuda", driver=drv).execute(b, np.empty((m, n), np.float32))
    sq = sp.csr_matrix((s.data.astype(np.float16).astype(np.float64), s.indices, s.indptr), shape=s.shape)
    np.testing.assert_allclose(want, sq @ b.astype(np.float64), rtol=1e-5, atol=1e-5)
    sources = {
        "float32 values": (d_ip, d_ix, _dev(drv, s.data, keep=keep), (m, k)),
        "float16 values": (d_ip, d_ix, _dev(drv, s.data.astype(np.float16), keep=keep), [m, k]),
        "sparse_csr": _TorchSparseCsr(d_ip, d_ix, _dev(drv, s.data, keep=keep), (m, k)),
    }
    for what, src in sources.items():
        op = SpMM(src, n, target="cuda", driver=drv)
        assert op.csr.shape == (m, k) and op.csr.nnz == s.nnz, what
        c = np.full((m, n), np.nan, np.float32)
        np.testing.assert_array_equal(op.execute(b, c), want, err_msg=what)
    bf = f32_to_bf16_bits(s.data)  # bf16 values (CAI typestr <V2), bf16 kernel
    op = SpMM((d_ip, d_ix, _dev(drv, bf, "<V2", keep), (m, k)), n, dtype="bf16", target="cuda", driver=drv)
    ref = SpMM(s, n, dtype="bf16", target="cuda", driver=drv).execute(b, np.empty((m, n), np.float32))
    np.testing.assert_array_equal(op.execute(b, np.full((m, n), np.nan, np.float32)), ref)


def test_device_csr_is_validated_before_any_launch(monkeypatch):
    """Each malformed device CSR raises naming the array; no module is loaded, nothing runs."""
    from ptx import simdriver

    loads = []
    monkeypatch.setattr(simdriver, "load_ptx", lambda *a, **kw: loads.append(a))
    keep: list = []
    rng = np.random.default_rng(1)
    s = csr_with_lengths([2, 0, 3, 1], 10, rng)
    ip, ix, dv = s.indptr, s.indices, s.data

    def dev(x, typestr=None):
        return _dev(simdriver, np.ascontiguousarray(x), typestr, keep)

    bad_ip = ip.copy()
    bad_ip[2] = 1  # 0, 2, 1, 5, 6
    bad_ix = ix.copy()
    bad_ix[3] = 10
    cases = [
        ((dev(ip), dev(ix), dev(dv), (4, int(ix.max()))), ValueError, "is out of range for"),
        ((dev(bad_ip), dev(ix), dev(dv), (4, 10)), ValueError, "indptr is not monotone"),
        ((dev(ip), dev(bad_ix), dev(dv), (4, 10)), ValueError, r"indices\[3\] = 10 is out of range"),
        ((dev(ip), dev(ix), dev(dv), (5, 10)), ValueError, "indptr has length 5, expected rows \\+ 1 = 6"),
        ((dev(ip), dev(ix[:-1]), dev(dv[:-1]), (4, 10)), ValueError, "nnz mismatch"),
        ((dev(ip.astype(np.float32)), dev(ix), dev(dv), (4, 10)), TypeError, "indptr must hold int32 or int64"),
        ((dev(ip), dev(ix.astype(np.int16), "<i2"), dev(dv), (4, 10)), TypeError, "indices must hold int32 or int64"),
        ((dev(ip), dev(ix), dev(dv.astype(np.int32)), (4, 10)), TypeError, "data must hold float16 or bfloat16"),
        ((dev(ip), dev(np.stack([ix, ix])), dev(dv), (4, 10)), ValueError, "indices must be 1-D"),
        ((dev(ip), ix, dev(dv), (4, 10)), TypeError, "indices is a ndarray while other CSR arrays are on the device"),
        ((dev(ip), dev(ix), dev(dv)), ValueError, r"\(indptr, indices, data, shape\); got 3 items"),
        ((dev(ip), dev(ix), dev(dv), (4, -1)), ValueError, "shape: cols = -1"),
    ]
    strided = _Cai(dev(ix).__cuda_array_interface__["data"][0], (ix.size // 2,), "<i4", strides=(8,))
    cases.append(((dev(ip[:3]), strided, dev(dv[:3]), (2, 10)), ValueError, "indices must be contiguous"))
    for csr, exc, text in cases:
        with pytest.raises(exc, match=text):
            SpMM(csr, 8, target="cuda", driver=simdriver)
    assert loads == []
