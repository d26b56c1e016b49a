"""Tensor maps for ``cp.async.bulk.tensor`` (TMA): validation, the simulator's encoding, swizzles.

On a GPU the 128-byte opaque ``CUtensorMap`` comes from ``cuTensorMapEncodeTiled`` (see
:func:`ptx.driver.encode_tensor_map_tiled`); the simulated driver and :mod:`ptx.sim` use
:func:`encode_tiled`, which takes the same arguments, applies the same checks and packs them
into 128 bytes of this module's own format (``magic`` first, so a stray buffer is rejected).

Layout conventions (as in the driver API): dimension 0 is the innermost (contiguous) one;
``global_strides`` are in **bytes** for dimensions 1..rank-1; ``box_dim`` counts elements.
The box lands in shared memory row by row (dimension 0 fastest); with a swizzle mode the 16-byte
chunks of each shared address are permuted by :func:`swizzle` (address bits [4, 4+b) XOR bits
[7, 7+b), b = 1, 2, 3 for 32/64/128 B), the pattern ``wgmma`` descriptors read back.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

#: CUtensorMapDataType values and element sizes in bytes
DATA_TYPES = {
    "uint8": (0, 1),
    "uint16": (1, 2),
    "uint32": (2, 4),
    "int32": (3, 4),
    "uint64": (4, 8),
    "int64": (5, 8),
    "float16": (6, 2),
    "float32": (7, 4),
    "float64": (8, 8),
    "bfloat16": (9, 2),
    "float32_ftz": (10, 4),
    "tfloat32": (11, 4),
    "tfloat32_ftz": (12, 4),
}
#: CUtensorMapSwizzle values -> swizzle span in bytes (0: none)
SWIZZLES = {0: 0, 1: 32, 2: 64, 3: 128}
SWIZZLE_NONE, SWIZZLE_32B, SWIZZLE_64B, SWIZZLE_128B = 0, 1, 2, 3
_MAGIC = 0x4D4A544D  # "MJTM"
_HEAD = struct.Struct("<7I4xQ5I4x4Q5B5B")
TENSOR_MAP_BYTES = 128


class TensorMapError(ValueError):
    """Arguments that cuTensorMapEncodeTiled would reject (CUDA_ERROR_INVALID_VALUE)."""


@dataclass(frozen=True)
class TensorMapTiled:
    """The arguments of ``cuTensorMapEncodeTiled`` (tiled mode), validated like the driver does.

    ``dtype``: a key of :data:`DATA_TYPES`; ``global_address``: device address (16-byte aligned);
    ``global_dim``: elements per dimension, innermost first; ``global_strides``: bytes between
    consecutive indices of dimensions 1..rank-1 (multiples of 16); ``box_dim``: box elements per
    dimension (1..256, the innermost a multiple of 16 bytes); ``element_strides``: 1..8;
    ``swizzle``: 0..3 (none, 32, 64, 128 B; the innermost box row must fit in the span).
    """

    dtype: str
    global_address: int
    global_dim: tuple[int, ...]
    global_strides: tuple[int, ...]
    box_dim: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: int = 0
    swizzle: int = 0
    l2_promotion: int = 0
    oob_fill: int = 0

    def __post_init__(self) -> None:
        def bad(msg: str):
            raise TensorMapError(f"tensor map: {msg}")

        if self.dtype not in DATA_TYPES:
            bad(f"dtype {self.dtype!r}; one of {sorted(DATA_TYPES)}")
        rank = len(self.global_dim)
        if not 1 <= rank <= 5:
            bad(f"rank {rank} not in 1..5")
        for name, n in (
            ("global_strides", rank - 1),
            ("box_dim", rank),
            ("element_strides", rank),
        ):
            if len(getattr(self, name)) != n:
                bad(f"{name} needs {n} entries for rank {rank}, got {len(getattr(self, name))}")
        if self.global_address % 16 or self.global_address <= 0:
            bad(f"global_address {self.global_address:#x} must be a nonzero multiple of 16")
        for i, d in enumerate(self.global_dim):
            if not 1 <= d <= 1 << 32:
                bad(f"global_dim[{i}] = {d} not in 1..2^32")
        for i, s in enumerate(self.global_strides):
            if s % 16 or not 0 < s < 1 << 40:
                bad(f"global_strides[{i}] = {s} bytes must be a positive multiple of 16 below 2^40")
        for i, b in enumerate(self.box_dim):
            if not 1 <= b <= 256:
                bad(f"box_dim[{i}] = {b} not in 1..256")
        for i, e in enumerate(self.element_strides):
            if not 1 <= e <= 8:
                bad(f"element_strides[{i}] = {e} not in 1..8")
        if self.interleave != 0:
            bad("only interleave NONE (0) is supported")
        if self.swizzle not in SWIZZLES:
            bad(f"swizzle {self.swizzle} not in 0..3")
        if self.l2_promotion not in range(4) or self.oob_fill not in (0, 1):
            bad("l2_promotion in 0..3, oob_fill in 0..1")
        row = self.box_dim[0] * self.esize
        if row % 16:
            bad(f"innermost box row of {row} bytes is not a multiple of 16")
        span = SWIZZLES[self.swizzle]
        if span and row > span:
            bad(f"innermost box row of {row} bytes exceeds the {span}-byte swizzle span")

    @property
    def esize(self) -> int:
        return DATA_TYPES[self.dtype][1]

    @property
    def rank(self) -> int:
        return len(self.global_dim)

    @property
    def box_bytes(self) -> int:
        """Bytes one box load writes to shared memory (what ``expect_tx`` must announce)."""
        return int(np.prod(self.box_dim)) * self.esize

    def pack(self) -> bytes:
        """The 128-byte object the simulator reads (this module's format, not the driver's)."""
        r = self.rank
        pad = 5 - r
        fields = (
            _MAGIC,
            DATA_TYPES[self.dtype][0],
            r,
            self.interleave,
            self.swizzle,
            self.l2_promotion,
            self.oob_fill,
            self.global_address,
            *[d - 1 for d in self.global_dim],
            *([0] * pad),
            *self.global_strides,
            *([0] * (4 - (r - 1))),
            *[b - 1 for b in self.box_dim],
            *([0] * pad),
            *self.element_strides,
            *([1] * pad),
        )
        raw = _HEAD.pack(*fields)
        return raw + bytes(TENSOR_MAP_BYTES - len(raw))

    @staticmethod
    def unpack(raw: bytes) -> TensorMapTiled:
        """Decode :meth:`pack`'s bytes; ValueError for anything else."""
        if len(raw) != TENSOR_MAP_BYTES:
            raise TensorMapError(f"a tensor map has {TENSOR_MAP_BYTES} bytes, got {len(raw)}")
        f = _HEAD.unpack(raw[: _HEAD.size])
        if f[0] != _MAGIC:
            raise TensorMapError("not a tensor map built by ptx.tensormap.encode_tiled (bad magic)")
        code, rank = f[1], f[2]
        dtype = next(k for k, v in DATA_TYPES.items() if v[0] == code)
        dims = tuple(d + 1 for d in f[8 : 8 + rank])
        strides = tuple(f[13 : 13 + rank - 1])
        box = tuple(b + 1 for b in f[17 : 17 + rank])
        es = tuple(f[22 : 22 + rank])
        return TensorMapTiled(dtype, f[7], dims, strides, box, es, f[3], f[4], f[5], f[6])


def encode_tiled(
    dtype: str,
    rank: int,
    global_address: int,
    global_dim,
    global_strides,
    box_dim,
    element_strides,
    interleave: int = 0,
    swizzle: int = 0,
    l2_promotion: int = 0,
    oob_fill: int = 0,
) -> bytes:
    """128 bytes for the simulator, arguments in ``cuTensorMapEncodeTiled``'s order."""
    tm = TensorMapTiled(
        dtype,
        int(global_address),
        tuple(int(x) for x in global_dim),
        tuple(int(x) for x in global_strides),
        tuple(int(x) for x in box_dim),
        tuple(int(x) for x in element_strides),
        interleave,
        swizzle,
        l2_promotion,
        oob_fill,
    )
    if tm.rank != rank:
        raise TensorMapError(f"rank {rank} does not match {tm.rank} global dimensions")
    return tm.pack()


def swizzle(addr, span: int):
    """Shared address of logical byte address ``addr`` under a ``span``-byte swizzle (0, 32, 64,
    128): the 16-byte chunk bits [4, 4+b) XOR address bits [7, 7+b). Works on ints and arrays."""
    if span == 0:
        return addr
    mask = {32: 1, 64: 3, 128: 7}[span]
    return addr ^ (((addr >> 7) & mask) << 4)


__all__ = [
    "DATA_TYPES",
    "SWIZZLES",
    "SWIZZLE_128B",
    "SWIZZLE_32B",
    "SWIZZLE_64B",
    "SWIZZLE_NONE",
    "TENSOR_MAP_BYTES",
    "TensorMapError",
    "TensorMapTiled",
    "encode_tiled",
    "swizzle",
]
