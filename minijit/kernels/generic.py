"""The generic tier's GEMM kernel: one kernel per (ISA, dtype) whose sizes, strides and batch count
are run-time arguments, so a new shape needs planning only, no code generation.

    f(a, b, c, args)        args: int64[ARGS], in the order of `ARGS`

For every batch index ``t`` < ``batch``, column ``n`` < N and row ``m`` < M (strides in elements,
any sign; ``X_t = X + t * batch_x``)::

    acc = C_t[m + n*ldc] if accumulate else 0
    for kk in 0 .. K-1:  acc = fma(A_t[m + kk*lda], B_t[kk*ldb_k + n*ldb_n], acc)
    C_t[m + n*ldc] = acc

A and C are column-major with unit-stride M (their columns load as vectors, the last one masked);
B is read an element at a time (broadcast), at any two strides. Each output element is one FMA
chain over K in order, as in the shape-specialised BRGEMM with a fused first-touch zero
(``accumulate`` 0) or on top of C (1): the two tiers give bitwise identical results. Nothing
outside the ``M x K``, ``K x N`` and ``M x N`` blocks of each batch is read or written; the caller
(`minijit.einsum.generic`) proves every address in bounds before the call.

Generators: `minijit.kernels.x86_64.generic` (AVX2, AVX-512), `minijit.kernels.aarch64.generic`
(NEON), reached through the target's ``generic_gemm`` generator (`minijit.kernels.generic_gemm`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["ARGS", "pack_args", "reference", "signature"]

#: the int64 arguments, in order
ARGS = ("m", "n", "k", "lda", "ldb_k", "ldb_n", "ldc", "batch", "batch_a", "batch_b", "batch_c", "accumulate")
#: byte offset of each argument in ``args``
OFFSET = {name: 8 * i for i, name in enumerate(ARGS)}


def signature(ctype: str) -> str:
    """The C signature of the generic GEMM kernel for elements of ``ctype`` ("float", "double"),
    spelled as the code cache stores it (`minijit.runtime.codecache.signature_text`), so loading
    the kernel compares the text without parsing it."""
    return f"void(const {ctype} * a, const {ctype} * b, {ctype} * c, const int64_t * args)"


def pack_args(**values: int) -> np.ndarray:
    """The ``args`` array of the kernel from keyword values (every name of `ARGS`; ValueError
    naming a missing, unknown or non-int one, or a negative size)."""
    unknown = sorted(set(values) - set(ARGS))
    missing = [n for n in ARGS if n not in values]
    if unknown or missing:
        raise ValueError(f"generic GEMM args: unknown {unknown}, missing {missing}")
    for name, v in values.items():
        if not isinstance(v, int | np.integer) or isinstance(v, bool):
            raise ValueError(f"generic GEMM args: {name} must be an int, got {v!r}")
    for name in ("m", "n", "k", "batch"):
        if not 0 <= values[name] < 1 << 40:
            raise ValueError(f"generic GEMM args: {name} must be in 0..2**40, got {values[name]}")
    if values["accumulate"] not in (0, 1):
        raise ValueError(f"generic GEMM args: accumulate must be 0 or 1, got {values['accumulate']}")
    return np.array([values[n] for n in ARGS], dtype=np.int64)


def reference(a: np.ndarray, b: np.ndarray, c: np.ndarray, args: np.ndarray) -> None:
    """The kernel's semantics in numpy over flat arrays ``a``, ``b``, ``c`` whose element 0 is the
    kernel's pointer (for tests; FMA rounding is not reproduced: products round before the sum)."""
    v = dict(zip(ARGS, (int(x) for x in args), strict=True))
    for t in range(v["batch"]):
        for n in range(v["n"]):
            for m in range(v["m"]):
                ci = t * v["batch_c"] + m + n * v["ldc"]
                acc = c[ci] if v["accumulate"] else c.dtype.type(0)
                for kk in range(v["k"]):
                    ai = t * v["batch_a"] + m + kk * v["lda"]
                    bi = t * v["batch_b"] + kk * v["ldb_k"] + n * v["ldb_n"]
                    acc = acc + a[ai] * b[bi]
                c[ci] = acc
