"""Launch tables of a CUDA GEMM: the byte offsets of every index tuple of a set of dims, and a
config computed as C^T = B^T A^T."""

from __future__ import annotations

import numpy as np

from minijit.ir import TensorConfig, dim_t


def _swapped(config: TensorConfig) -> TensorConfig:
    """``config`` computed as C^T = B^T A^T: in0 and in1 exchange strides, M and N dims their types
    (as `optimizer.swap_operands` does, here for configs with prim dims too)."""
    other = {dim_t.m: dim_t.n, dim_t.n: dim_t.m}
    dims = [
        d.with_(type=other.get(d.type, d.type), stride_in0=d.stride_in1, stride_in1=d.stride_in0) for d in config.dims
    ]
    return config.with_dims(dims, inputs_swapped=not config.inputs_swapped)


def _offsets(dims, tensors) -> np.ndarray:
    """Byte offsets (rows: all index tuples of ``dims``, outer first; columns: tensors)."""
    cols = []
    for tensor, es in tensors:
        off = np.zeros(1, np.int64)
        for d in dims:
            off = (off[:, None] + np.arange(d.size, dtype=np.int64)[None, :] * (d.stride(tensor) * es)).reshape(-1)
        cols.append(off)
    return np.ascontiguousarray(np.stack(cols, axis=1))
