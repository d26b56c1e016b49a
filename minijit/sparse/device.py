"""CSR matrices given on the device (`host_csr`): a torch ``sparse_csr`` tensor, or
``(indptr, indices, data, shape)`` of device arrays, read back to the host once (CSR given on the
device is validated and planned on the host, once per pattern).

Device arrays themselves (torch CUDA tensors, cupy arrays, ``__cuda_array_interface__``, DLPack)
are read by `minijit.runtime.device_arrays`, which every part of minijit uses.
"""

from __future__ import annotations

from minijit.runtime.device_arrays import INDEX_DTYPES, VALUE_DTYPES, is_device_array, read_vector, vector_view

__all__ = ["host_csr"]


def _is_torch_sparse_csr(x: object) -> bool:
    return str(getattr(x, "layout", "")) == "torch.sparse_csr" and callable(getattr(x, "crow_indices", None))


def host_csr(x: object, driver) -> tuple | None:
    """``(indptr, indices, data, shape)`` as host numpy arrays when ``x`` is a CSR matrix on the
    device: a torch ``sparse_csr`` tensor, or ``(indptr, indices, data, shape)`` whose arrays are
    device arrays (indices int32/int64; values float16/bfloat16/float32/float64). None for
    anything else (host CSR goes to `minijit.sparse.csr.as_csr` as it is). Element types, rank
    and contiguity are checked before anything is read; values (monotone indptr, indices in
    range, lengths) are then checked by ``as_csr`` on the copies, before any launch."""
    if _is_torch_sparse_csr(x):
        parts = (x.crow_indices(), x.col_indices(), x.values())
        shape = tuple(int(d) for d in x.shape)
    elif isinstance(x, tuple | list) and any(is_device_array(p) for p in x[:3]):
        if len(x) != 4:
            raise ValueError(f"a CSR tuple is (indptr, indices, data, shape); got {len(x)} items")
        *parts, shape = x
        for nm, p in zip(("indptr", "indices", "data"), parts, strict=True):
            if not is_device_array(p):
                raise TypeError(f"{nm} is a {type(p).__name__} while other CSR arrays are on the device: "
                                "pass all three on the device or all three as numpy arrays")  # fmt: skip
    else:
        return None
    names = ("indptr", "indices", "data")
    kinds = (INDEX_DTYPES, INDEX_DTYPES, VALUE_DTYPES)
    for nm, p, ok in zip(names, parts, kinds, strict=True):  # every array's kind before any read
        vector_view(p, nm, ok)
    host = [read_vector(p, nm, ok, driver) for nm, p, ok in zip(names, parts, kinds, strict=True)]
    return (*host, shape)
