"""``wgmma`` (sm_90a) semantics: shared-memory matrix descriptors, canonical layouts, fragments.

Matrix descriptor (64 bits, PTX ISA "Matrix Descriptor Format"): bits 0-13 start address >> 4,
bits 16-29 leading dimension byte offset (LBO) >> 4, bits 32-45 stride dimension byte offset
(SBO) >> 4, bits 49-51 matrix base offset, bits 62-63 swizzle mode (0 none, 1 128 B, 2 64 B,
3 32 B).

Canonical layouts (PTX ISA, in elements; T = 16 bytes / element size; the swizzle is then applied
to the resulting shared byte address, see :func:`ptx.tensormap.swizzle`):

=========  ==========  ==========================================
major      swizzle     (mn, k) -> offset
=========  ==========  ==========================================
K          none        ((8,m),(T,2k)):((1T,SBO),(1,LBO))
K          32/64/128B  ((8,m),(T,2k)):((xT,SBO),(1,T)), x = 2/4/8
MN         none        ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))
MN         32/64/128B  ((T,x,m),(8,k)):((1,T,LBO),(xT,SBO))
=========  ==========  ==========================================

Accumulator fragment of ``m64nNk16`` (f32): warp ``w`` of the warpgroup holds rows
``16w .. 16w+15``; register ``i`` of lane ``l`` holds row ``16w + l//4 + 8*((i%4)//2)`` and column
``8*(i//4) + 2*(l%4) + i%2``.
"""

from __future__ import annotations

import numpy as np

from .tensormap import swizzle

#: descriptor swizzle field -> span in bytes
DESC_SWIZZLE = {0: 0, 1: 128, 2: 64, 3: 32}
_FIELD_OF_SPAN = {v: k for k, v in DESC_SWIZZLE.items()}
#: wgmma input types and element sizes (bytes); K per instruction is 32 bytes
WGMMA_TYPES = {"f16": 2, "bf16": 2, "tf32": 4}


def wgmma_k(dtype: str) -> int:
    """K of one ``wgmma.mma_async`` for ``dtype`` (16 for f16/bf16, 8 for tf32)."""
    return 32 // WGMMA_TYPES[dtype]


def make_descriptor(start: int, lbo: int, sbo: int, span: int, base_offset: int = 0) -> int:
    """64-bit matrix descriptor: shared byte address ``start``, byte offsets ``lbo``/``sbo``
    (multiples of 16, < 2^18), swizzle ``span`` 0/32/64/128 bytes."""
    for name, v in (("start", start), ("lbo", lbo), ("sbo", sbo)):
        if v % 16 or not 0 <= v < 1 << 18:
            raise ValueError(f"descriptor {name} {v} must be a multiple of 16 in [0, 2^18)")
    if span not in _FIELD_OF_SPAN or not 0 <= base_offset < 8:
        raise ValueError(f"swizzle span {span} not in 0/32/64/128, or base offset {base_offset} not in 0..7")
    return (start >> 4) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (base_offset << 49) | (_FIELD_OF_SPAN[span] << 62)


def decode_descriptor(desc: int) -> tuple[int, int, int, int, int]:
    """(start, lbo, sbo, span, base_offset) of a descriptor."""
    desc = int(desc)
    start = (desc & 0x3FFF) << 4
    lbo = ((desc >> 16) & 0x3FFF) << 4
    sbo = ((desc >> 32) & 0x3FFF) << 4
    base = (desc >> 49) & 7
    return start, lbo, sbo, DESC_SWIZZLE[(desc >> 62) & 3], base


def canonical_offsets(rows: int, cols: int, es: int, mn_major: bool, lbo: int, sbo: int, span: int) -> np.ndarray:
    """Unswizzled byte offsets (rows, cols) of element (mn, k) of a ``rows x cols`` (MN x K)
    operand in the canonical layout named by ``mn_major``/``lbo``/``sbo``/``span``."""
    t = 16 // es
    mn = np.arange(rows)[:, None]
    k = np.arange(cols)[None, :]
    if not mn_major:
        if span == 0:
            el = (mn % 8) * t + (k % t)
            by = el * es + (mn // 8) * sbo + (k // t) * lbo
        else:
            x = span // 16
            el = (mn % 8) * x * t + (k % t) + (k // t) * t
            by = el * es + (mn // 8) * sbo
    else:
        if span == 0:
            el = (mn % t) + (k % 8) * t
            by = el * es + (mn // t) * sbo + (k // 8) * lbo
        else:
            x = span // 16
            el = (mn % (x * t)) + (k % 8) * x * t
            by = el * es + (mn // (x * t)) * lbo + (k // 8) * sbo
    return by.astype(np.int64)


def operand_addresses(desc: int, rows: int, cols: int, es: int, mn_major: bool) -> np.ndarray:
    """Shared byte addresses (rows, cols) that a descriptor names for an MN x K operand."""
    start, lbo, sbo, span, base = decode_descriptor(desc)
    if base:
        raise ValueError("matrix base offset != 0 is not supported by the simulator")
    return swizzle(start + canonical_offsets(rows, cols, es, mn_major, lbo, sbo, span), span)


def acc_coords(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) arrays of shape (128, n//2): accumulator register ``i`` of warpgroup thread ``t``."""
    t = np.arange(128)[:, None]
    i = np.arange(n // 2)[None, :]
    w, lane = t // 32, t % 32
    row = 16 * w + lane // 4 + 8 * ((i % 4) // 2)
    col = 8 * (i // 4) + 2 * (lane % 4) + i % 2
    return row, col


def check_shape(shape: str, dtype: str) -> tuple[int, int, int]:
    """(m, n, k) of a wgmma shape such as "m64n128k16"; ValueError if illegal for ``dtype``."""
    import re

    m = re.fullmatch(r"m64n(\d+)k(\d+)", shape)
    if not m or dtype not in WGMMA_TYPES:
        raise ValueError(f"wgmma shape {shape!r} / type {dtype!r} not supported")
    n, k = int(m.group(1)), int(m.group(2))
    if not (8 <= n <= 256 and n % 8 == 0) or k != wgmma_k(dtype):
        raise ValueError(f"wgmma {shape}: N must be a multiple of 8 in 8..256 and K {wgmma_k(dtype)} for {dtype}")
    return 64, n, k


__all__ = [
    "DESC_SWIZZLE",
    "WGMMA_TYPES",
    "acc_coords",
    "canonical_offsets",
    "check_shape",
    "decode_descriptor",
    "make_descriptor",
    "operand_addresses",
    "wgmma_k",
]
