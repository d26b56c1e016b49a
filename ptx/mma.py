"""mma.sync fragment layouts as data, and a numpy model of one warp's mma.

Layouts follow the PTX ISA sections "Matrix Fragments for mma.m16n8k8" and
"... mma.m16n8k16 with floating point type": with ``g = lane >> 2`` (groupID)
and ``t = lane % 4`` (threadID_in_group), element ``i`` of a lane's fragment
holds operand entry (row, col):

==================  ======================================================
m16n8k8 f16/bf16    A (16x8)  i<4:  row g + 8*(i>=2),     col 2t + (i&1)
                    B (8x8)   i<2:  row 2t + i,           col g
m16n8k8 tf32        A (16x8)  i<4:  row g + 8*(i&1),      col t + 4*(i>=2)
                    B (8x8)   i<2:  row t + 4*i,          col g
m16n8k16 f16/bf16   A (16x16) i<8:  row g + 8*((i>>1)&1), col 2t + (i&1) + 8*(i>=4)
                    B (16x8)  i<4:  row 2t + (i&1) + 8*(i>=2), col g
all (f32 C/D 16x8)  C         i<4:  row g + 8*(i>=2),     col 2t + (i&1)
==================  ======================================================

For f16/bf16 two consecutive elements share one .b32 register (element 2j in
the low 16 bits); tf32 and f32 use one register per element. A is row-major
("row"), B column-major ("col") in the instruction name, which only fixes
which (row, col) each element is, as tabulated.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .types import Req

OPERANDS = ("a", "b", "c")


@dataclass(frozen=True)
class MmaInfo:
    shape: str
    dtype: str
    m: int
    n: int
    k: int
    elems_a: int
    elems_b: int
    elems_c: int
    per_reg: int  # A/B elements per .b32 register
    req: Req

    @property
    def regs_a(self) -> int:
        return self.elems_a // self.per_reg

    @property
    def regs_b(self) -> int:
        return self.elems_b // self.per_reg

    @property
    def regs_c(self) -> int:
        return self.elems_c

    def dims(self, operand: str) -> tuple[int, int]:
        return {"a": (self.m, self.k), "b": (self.k, self.n), "c": (self.m, self.n), "d": (self.m, self.n)}[operand]


MMA_SHAPES: dict[tuple[str, str], MmaInfo] = {
    ("m16n8k8", "f16"): MmaInfo("m16n8k8", "f16", 16, 8, 8, 4, 2, 4, 2, Req((6, 5), 75, "mma.m16n8k8.f16")),
    ("m16n8k8", "bf16"): MmaInfo("m16n8k8", "bf16", 16, 8, 8, 4, 2, 4, 2, Req((7, 0), 80, "mma.m16n8k8.bf16")),
    ("m16n8k8", "tf32"): MmaInfo("m16n8k8", "tf32", 16, 8, 8, 4, 2, 4, 1, Req((7, 0), 80, "mma.m16n8k8.tf32")),
    ("m16n8k16", "f16"): MmaInfo("m16n8k16", "f16", 16, 8, 16, 8, 4, 4, 2, Req((7, 0), 80, "mma.m16n8k16.f16")),
    ("m16n8k16", "bf16"): MmaInfo("m16n8k16", "bf16", 16, 8, 16, 8, 4, 4, 2, Req((7, 0), 80, "mma.m16n8k16.bf16")),
}


def info(shape: str, dtype: str) -> MmaInfo:
    try:
        return MMA_SHAPES[(shape, dtype)]
    except KeyError:
        raise ValueError(f"unsupported mma shape/type {shape}.{dtype}; supported: {sorted(MMA_SHAPES)}") from None


def element_position(shape: str, dtype: str, operand: str, lane: int, i: int) -> tuple[int, int]:
    """(row, col) of element ``i`` of ``lane``'s fragment of ``operand`` ('a', 'b', 'c'/'d')."""
    inf = info(shape, dtype)
    g, t = lane >> 2, lane % 4
    if operand in ("c", "d"):
        if not 0 <= i < inf.elems_c:
            raise IndexError(i)
        return g + 8 * (i >= 2), 2 * t + (i & 1)
    if operand == "a":
        if not 0 <= i < inf.elems_a:
            raise IndexError(i)
        if shape == "m16n8k16":
            return g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >= 4)
        if dtype == "tf32":
            return g + 8 * (i & 1), t + 4 * (i >= 2)
        return g + 8 * (i >= 2), 2 * t + (i & 1)
    if operand == "b":
        if not 0 <= i < inf.elems_b:
            raise IndexError(i)
        if shape == "m16n8k16":
            return 2 * t + (i & 1) + 8 * (i >= 2), g
        if dtype == "tf32":
            return t + 4 * i, g
        return 2 * t + i, g
    raise ValueError(f"operand {operand!r}; one of a, b, c, d")


def layout(shape: str, dtype: str, operand: str) -> np.ndarray:
    """int array (32, elems, 2): ``layout[lane, i] = (row, col)``; read-only (one per argument, cached)."""
    return _layout(shape, dtype, operand)


@functools.cache
def _layout(shape: str, dtype: str, operand: str) -> np.ndarray:
    inf = info(shape, dtype)
    n = {"a": inf.elems_a, "b": inf.elems_b, "c": inf.elems_c, "d": inf.elems_c}[operand]
    out = np.empty((32, n, 2), dtype=np.int64)
    for lane in range(32):
        for i in range(n):
            out[lane, i] = element_position(shape, dtype, operand, lane, i)
    out.flags.writeable = False
    return out


def owners(shape: str, dtype: str, operand: str) -> np.ndarray:
    """Inverse table: int array (rows, cols, 2) giving (lane, element) for each entry (-1 if none)."""
    lay = layout(shape, dtype, operand)
    r, c = info(shape, dtype).dims(operand)
    out = np.full((r, c, 2), -1, dtype=np.int64)
    for lane in range(32):
        for i in range(lay.shape[1]):
            row, col = lay[lane, i]
            out[row, col] = (lane, i)
    return out


def scatter(shape: str, dtype: str, operand: str, tile: np.ndarray) -> np.ndarray:
    """Split a full operand tile into per-lane fragments: array (32, elems)."""
    lay = layout(shape, dtype, operand)
    tile = np.asarray(tile)
    if tile.shape != info(shape, dtype).dims(operand):
        raise ValueError(f"{operand} tile has shape {tile.shape}, expected {info(shape, dtype).dims(operand)}")
    return tile[lay[..., 0], lay[..., 1]]


def gather(shape: str, dtype: str, operand: str, frags: np.ndarray) -> np.ndarray:
    """Reassemble a full operand tile from per-lane fragments (inverse of :func:`scatter`)."""
    lay = layout(shape, dtype, operand)
    frags = np.asarray(frags)
    if frags.shape != lay.shape[:2]:
        raise ValueError(f"{operand} fragments have shape {frags.shape}, expected {lay.shape[:2]}")
    out = np.zeros(info(shape, dtype).dims(operand), dtype=frags.dtype)
    out[lay[..., 0], lay[..., 1]] = frags
    return out


# --------------------------------------------------------------------------- number formats


def f32_to_bf16_bits(x) -> np.ndarray:
    """Round-to-nearest-even f32 -> bf16 bit patterns (uint16), as cvt.rn.bf16.f32."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    r = np.where(nan, 0x7FC0, r)
    return r.astype(np.uint16)


def bf16_bits_to_f32(b) -> np.ndarray:
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_tf32(x) -> np.ndarray:
    """cvt.rna.tf32.f32: round to 10 mantissa bits, ties away from zero (finite inputs)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x1000) & 0xFFFFE000).astype(np.uint32)
    return r.view(np.float32)


def quantize(dtype: str, x) -> np.ndarray:
    """Values as the tensor core sees them for input type ``dtype`` (returned as float32).

    f16/bf16 round to nearest even; tf32 keeps the upper 19 bits of the f32
    register (the hardware ignores the low 13 bits, so un-rounded inputs are
    truncated).
    """
    x = np.asarray(x, dtype=np.float32)
    if dtype == "f16":
        return x.astype(np.float16).astype(np.float32)
    if dtype == "bf16":
        return bf16_bits_to_f32(f32_to_bf16_bits(x))
    if dtype == "tf32":
        return (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    raise ValueError(f"dtype {dtype!r}")


def encode(dtype: str, x) -> np.ndarray:
    """Values as device memory holds them for input type ``dtype``: float16 (f16), bf16 bit
    patterns as uint16 (bf16, round to nearest even) or float32 (tf32: the kernel rounds, or the
    tensor core truncates). Values are rounded to float32 first, as `quantize` rounds them: float64
    straight to float16 would round a value just below a float16 halfway point down where float32
    lands on the halfway point and float16 then rounds it to even."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "f16":
        return x.astype(np.float16)
    if dtype == "bf16":
        return f32_to_bf16_bits(x)
    if dtype == "tf32":
        return x
    raise ValueError(f"dtype {dtype!r}")


def decode(dtype: str, raw) -> np.ndarray:
    """`encode`'s bytes (any array viewable as them) back as float32 values."""
    raw = np.asarray(raw)
    if dtype == "f16":
        return raw.view(np.float16).astype(np.float32)
    if dtype == "bf16":
        return bf16_bits_to_f32(raw.view(np.uint16))
    if dtype == "tf32":
        return raw.view(np.float32).astype(np.float32)
    raise ValueError(f"dtype {dtype!r}")


def pack_regs(dtype: str, frags: np.ndarray) -> np.ndarray:
    """Per-lane element fragments (32, elems) -> .b32 register values (32, regs) as uint32."""
    frags = np.asarray(frags, dtype=np.float32)
    if dtype == "tf32":
        return quantize("tf32", frags).view(np.uint32).copy()
    if dtype == "f16":
        h = frags.astype(np.float16).view(np.uint16).astype(np.uint32)
    elif dtype == "bf16":
        h = f32_to_bf16_bits(frags).astype(np.uint32)
    else:
        raise ValueError(f"dtype {dtype!r}")
    return h[:, 0::2] | (h[:, 1::2] << 16)


def unpack_regs(dtype: str, regs: np.ndarray) -> np.ndarray:
    """Inverse of :func:`pack_regs`: (32, regs) uint32 -> (32, elems) float32."""
    regs = np.asarray(regs, dtype=np.uint32)
    if dtype == "tf32":
        return regs.view(np.float32).copy()
    lo, hi = (regs & 0xFFFF).astype(np.uint16), (regs >> 16).astype(np.uint16)
    if dtype == "f16":
        lo, hi = lo.view(np.float16).astype(np.float32), hi.view(np.float16).astype(np.float32)
    elif dtype == "bf16":
        lo, hi = bf16_bits_to_f32(lo), bf16_bits_to_f32(hi)
    else:
        raise ValueError(f"dtype {dtype!r}")
    out = np.empty((regs.shape[0], 2 * regs.shape[1]), dtype=np.float32)
    out[:, 0::2], out[:, 1::2] = lo, hi
    return out


# --------------------------------------------------------------------------- warp models


def mma_sync(shape: str, dtype: str, a_frags, b_frags, c_frags) -> np.ndarray:
    """One warp's ``mma.sync.aligned.shape.row.col.f32.dtype.dtype.f32``.

    Fragments are element arrays (32, elems) (see :func:`scatter`); returns D's
    fragments (32, 4) float32. Each lane's D element (row, col) is computed from
    the A row and B column that the other lanes hold, located through the
    layout tables; products and sums are formed in float64 (the hardware's
    accumulation order and intermediate precision are not modelled).
    """
    inf = info(shape, dtype)
    a = np.asarray(a_frags, dtype=np.float32)
    b = np.asarray(b_frags, dtype=np.float32)
    c = np.asarray(c_frags, dtype=np.float32)
    for name, arr, n in (("a", a, inf.elems_a), ("b", b, inf.elems_b), ("c", c, inf.elems_c)):
        if arr.shape != (32, n):
            raise ValueError(f"{name} fragments have shape {arr.shape}, expected (32, {n})")
    qa = quantize(dtype, a).astype(np.float64)
    qb = quantize(dtype, b).astype(np.float64)
    own_a, own_b = owners(shape, dtype, "a"), owners(shape, dtype, "b")
    lay_c = layout(shape, dtype, "c")
    d = np.empty((32, inf.elems_c), dtype=np.float32)
    for lane in range(32):
        for i in range(inf.elems_c):
            row, col = lay_c[lane, i]
            acc = float(c[lane, i])
            for kk in range(inf.k):
                la, ia = own_a[row, kk]
                lb, ib = own_b[kk, col]
                acc += qa[la, ia] * qb[lb, ib]
            d[lane, i] = acc
    return d


def ldmatrix(matrices, trans: bool = False) -> np.ndarray:
    """``ldmatrix.sync.aligned.m8n8.x{n}{.trans}.shared.b16``: (n, 8, 8) -> (32, n, 2).

    Lane i receives, from each 8x8 matrix j, row i/4 and columns 2(i%4),
    2(i%4)+1 (with .trans: the transposed matrix, i.e. column i/4 and rows
    2(i%4), 2(i%4)+1) as destination register j (low half, high half).
    """
    mats = np.asarray(matrices)
    if mats.ndim != 3 or mats.shape[1:] != (8, 8) or mats.shape[0] not in (1, 2, 4):
        raise ValueError(f"expected (1|2|4, 8, 8) matrices, got {mats.shape}")
    if trans:
        mats = mats.transpose(0, 2, 1)
    out = np.empty((32, mats.shape[0], 2), dtype=mats.dtype)
    for lane in range(32):
        for j in range(mats.shape[0]):
            out[lane, j] = mats[j, lane // 4, 2 * (lane % 4) : 2 * (lane % 4) + 2]
    return out
