"""Split-K for the mma.sync GEMM family: the reduction kernel (PTX through :mod:`ptx`) and its numpy model.

With ``GemmSpec.split_k = S`` > 1 the GEMM kernel (:mod:`minijit.cuda.gemm`) runs ``S`` CTAs per
output tile, each over its part of the flattened ``R * ceil(K/bk)`` K-tile sequence
(`gemm.split_range`), and writes its fp32 partial sum to a workspace instead of touching C. The
workspace is ``batch * S`` planes of ``M x N`` fp32, M-contiguous (column-major, leading dim
``M`` elements = ``4*M`` bytes); plane ``z * S + s`` holds part ``s`` of batch entry ``z``
(:func:`workspace_bytes`). No atomics: the result does not depend on the order CTAs run in.

The reduction kernel then computes, per element of every batch entry ``z``::

    C_z[m, n] = last_touch(((0 + W[z*S, m, n]) + W[z*S+1, m, n]) + ... + first_touch(C_z[m, n]))

summing the parts in a fixed order (f32 adds), first touch zero (C not read), load or relu
(max(C, 0)), last touch none or relu, with stores predicated ``m < M and n < N`` (the tile
epilogue's order and rounding, `gemm.store_touched`).

Kernel parameters, in order: ``W, C, batch_table`` (u64 device pointers), ``M, N`` (s32), ``ldc``
(s64, **bytes**); ``batch_table`` is the GEMM's (rows of three s64 byte offsets; the third, C's,
is used). Grid ``(ceil(M/32), ceil(N/rows), batch)``, block ``(32 * rows,)``: warp ``w`` of a
CTA sums column ``n = ctaid.y * rows + w``, lane ``l`` row ``m = ctaid.x * 32 + l`` (128-byte
coalesced loads and stores).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minijit.cuda import gemm
from ptx import Module, addr, sreg

PARAMS = ("W", "C", "batch_table", "M", "N", "ldc")
#: grid y limit (columns per CTA times this bounds N)
MAX_GRID_Y = 65535


@dataclass(frozen=True)
class ReduceSpec:
    """The reduction of ``split`` fp32 partial planes into C with the first and last touch
    (`gemm.FIRST_TOUCH`, `gemm.LAST_TOUCH`); ``rows``: warps (output columns n) per CTA."""

    split: int
    first: str = "zero"
    last: str = "none"
    rows: int = 8

    def __post_init__(self) -> None:
        if isinstance(self.split, bool) or not isinstance(self.split, int) or not 2 <= self.split <= gemm.MAX_SPLIT:
            raise ValueError(f"ReduceSpec.split must be an int in 2..{gemm.MAX_SPLIT}, got {self.split!r}")
        if self.first not in gemm.FIRST_TOUCH:
            raise ValueError(f"ReduceSpec.first must be one of {gemm.FIRST_TOUCH}, got {self.first!r}")
        if self.last not in gemm.LAST_TOUCH:
            raise ValueError(f"ReduceSpec.last must be one of {gemm.LAST_TOUCH}, got {self.last!r}")
        if isinstance(self.rows, bool) or self.rows not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"ReduceSpec.rows must be a power of two in 1..32, got {self.rows!r}")

    @property
    def threads(self) -> int:
        return 32 * self.rows

    @property
    def name(self) -> str:
        return f"splitk_reduce_s{self.split}_r{self.rows}_{self.first}_{self.last}"

    def grid(self, m: int, n: int, batch: int = 1) -> tuple[int, int, int]:
        gy = -(-n // self.rows)
        if gy > MAX_GRID_Y:
            raise ValueError(f"N = {n}: {gy} CTAs in grid y exceed {MAX_GRID_Y}")
        return (-(-m // 32), gy, batch)


def workspace_bytes(split: int, m: int, n: int, batch: int = 1) -> int:
    """Bytes of the partials workspace: ``batch * split`` fp32 planes of ``M x N``."""
    return 4 * batch * split * m * n


@dataclass
class ReduceKernel(gemm.GeneratedKernel):
    """A generated reduction kernel: PTX module, kernel and launch geometry."""

    spec: ReduceSpec

    def grid(self, m: int, n: int, batch: int = 1) -> tuple[int, int, int]:
        return self.spec.grid(m, n, batch)


def generate(spec: ReduceSpec) -> ReduceKernel:
    """Emit the reduction kernel for ``spec`` (parameters in the module docstring)."""
    S = spec
    mod = Module()
    k = mod.kernel(S.name, reqntid=S.threads)
    V = gemm.Val
    g = {}
    for n in PARAMS[:3]:
        p = k.param("u64", n)
        raw, gp = k.reg("s64"), k.reg("s64")
        k.ld_param(raw, p)
        k.cvta(gp, raw)
        g[n] = V(k, gp)
    for n, t in (("M", "s32"), ("N", "s32"), ("ldc", "s64")):
        p = k.param(t, n)
        r = k.reg(t)
        k.ld_param(r, p)
        g[n] = V(k, r)
    M, N, ldc = g["M"], g["N"], g["ldc"]

    def sreg_val(src):
        r = k.reg("s32")
        k.mov(r, src)
        return V(k, r)

    tid = sreg_val(sreg.tid.x)
    m = sreg_val(sreg.ctaid.x) * 32 + (tid & 31)
    n = sreg_val(sreg.ctaid.y) * S.rows + (tid >> 5)
    z = sreg_val(sreg.ctaid.z)
    ok_m, ok_n, ok = k.reg("pred"), k.reg("pred"), k.reg("pred")
    k.setp("lt", ok_m, m.r, M.r)
    k.setp("lt", ok_n, n.r, N.r)
    k.and_(ok, ok_m, ok_n)

    mm = gemm.to64(M)
    plane = mm * gemm.to64(N) * 4  # bytes per partial plane
    first_plane = gemm.to64(z) * S.split
    src = g["W"] + (first_plane * gemm.to64(N) + gemm.to64(n)) * mm * 4 + gemm.to64(m) * 4
    acc, part = k.reg("f32"), k.reg("f32")
    k.mov(acc, 0.0)
    ptr = src
    for s in range(S.split):
        if s:
            ptr = ptr + plane
        k.mov(part, 0.0)
        k.ld("global", part, addr(ptr.r), pred=ok)
        k.add(acc, acc, part)

    coff = k.reg("s64")
    brow = g["batch_table"] + gemm.to64(z) * 24
    k.ld("global", coff, addr(brow.r, 16))
    dst = g["C"] + V(k, coff) + gemm.to64(n) * ldc + gemm.to64(m) * 4
    zero_f = k.reg("f32")
    k.mov(zero_f, 0.0)
    gemm.store_touched(k, S.first, S.last, acc, addr(dst.r), ok, zero_f)
    k.ret()
    return ReduceKernel(S, mod, k)


def simulate(spec: ReduceSpec, w: np.ndarray, c: np.ndarray, m: int, n: int, ldc: int, batch_table=None) -> None:
    """The reduction in numpy with the kernel's f32 rounding and order: ``w`` the workspace
    (float32, `workspace_bytes` of them), ``c`` float32 updated in place at the batch table's C
    byte offsets, ``ldc`` in bytes (a multiple of 4)."""
    bt, _ = gemm.tables(batch_table)
    if ldc % 4:
        raise ValueError(f"ldc {ldc} bytes is not a multiple of 4")
    planes = np.asarray(w, np.float32).reshape(-1)[: len(bt) * spec.split * m * n].reshape(len(bt), spec.split, n, m)
    for z in range(len(bt)):
        acc = np.zeros((n, m), np.float32)
        for s in range(spec.split):
            acc = acc + planes[z, s]
        if bt[z, 2] % 4:
            raise ValueError(f"C offset {bt[z, 2]} of batch entry {z} is not a multiple of 4 bytes")
        idx = bt[z, 2] // 4 + np.arange(n)[:, None] * (ldc // 4) + np.arange(m)[None, :]
        if idx.size and (idx.min() < 0 or idx.max() >= c.size):
            raise AssertionError("C access outside the buffer")
        if spec.first != "zero":
            old = c[idx]
            acc = acc + (np.maximum(old, np.float32(0)) if spec.first == "relu" else old)
        if spec.last == "relu":
            acc = np.maximum(acc, np.float32(0))
        c[idx] = acc


__all__ = ["PARAMS", "ReduceKernel", "ReduceSpec", "generate", "simulate", "workspace_bytes"]
