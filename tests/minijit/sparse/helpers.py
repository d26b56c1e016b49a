"""Random CSR matrices with controlled row lengths for the sparse tests."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def csr_with_lengths(lengths, k: int, rng: np.random.Generator, dtype=np.float32) -> sp.csr_matrix:
    """A CSR matrix whose row i has ``lengths[i]`` non-zeros (sorted, distinct columns; lengths <= k)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    indptr = np.zeros(lengths.size + 1, np.int32)
    indptr[1:] = np.cumsum(lengths)
    parts = [np.sort(rng.choice(k, int(n), replace=False)) for n in lengths]
    indices = np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)
    data = rng.standard_normal(int(indptr[-1])).astype(dtype)
    return sp.csr_matrix((data, indices, indptr), shape=(lengths.size, k))


def skewed(m: int, k: int, density: float, rng: np.random.Generator) -> sp.csr_matrix:
    """Power-law row lengths with mean about density * k, some empty rows, capped at k."""
    mean = max(density * k, 0.05)
    lengths = np.minimum(np.floor(rng.pareto(1.5, m) * mean * 0.5 + rng.random(m) * mean), k).astype(np.int64)
    lengths[rng.random(m) < 0.1] = 0
    return csr_with_lengths(lengths, k, rng)


def quantized_reference(s: sp.csr_matrix, b: np.ndarray) -> np.ndarray:
    """S @ B in float64 with S and B rounded to fp16 (what the tensor cores multiply)."""
    sq = sp.csr_matrix((s.data.astype(np.float16).astype(np.float64), s.indices, s.indptr), shape=s.shape)
    return sq @ b.astype(np.float16).astype(np.float64)
