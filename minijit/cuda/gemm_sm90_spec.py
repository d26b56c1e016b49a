"""The sm_90a GEMM's specification and host side: :class:`Sm90Spec`, the kernel handle, the TMA tensor
maps, and :func:`plan`, which decides whether a GEMM fits the family."""

from __future__ import annotations

from dataclasses import dataclass

from ptx.tensormap import SWIZZLE_128B

from .gemm import FIRST_TOUCH, LAST_TOUCH, GeneratedKernel

ESIZE = {"f16": 2, "bf16": 2, "tf32": 4}
TMAP_DTYPE = {"f16": "float16", "bf16": "bfloat16", "tf32": "float32"}
BK = 64  #: K elements per stage of 16-bit inputs: one 128-byte swizzle row (tf32: 32)
SWIZZLE = 128
ROW = 128  #: bytes of one shared tile row (the swizzle span)
MN_BOX = 64  #: MN elements of one box of an MN-major operand (one 128-byte row of 16-bit elements)
BATCH_OPS = ("", "c", "ac", "bc", "abc")
GROUP_M = 8  #: persistent tile order: groups of this many tiles along m, swept over n (L2 reuse)
REDUCE_OPS = ("", "a", "b", "ab")


@dataclass(frozen=True)
class Sm90Spec:
    """One generated sm_90a kernel.

    ``dtype``: input type (f16, bf16, tf32); ``bm``: C tile extent in m (wgmma N: 64, 128, 192 or
    256); ``bn``: extent in n, 64 per consumer warpgroup (64 or 128); ``stages``: shared buffers
    (2..8); ``first``/``last`` touches as in :class:`minijit.cuda.gemm.GemmSpec`; ``a_major``:
    A's contiguous dim, "m" (``a[m + k*lda]``) or "k" (``a[k + m*lda]``); ``b_major``: B's, "k"
    (``b[k + n*ldb]``) or "n" (``b[n + k*ldb]``); tf32 needs both "k". ``batch``: "" for one
    GEMM per launch, else the operands that differ between ``blockIdx.z``: C always (its offset
    from the batch table, so "c" is in it) and "a"/"b" (a batch dim in their tensor maps), one of
    :data:`BATCH_OPS`; ``reduce``: the operands whose tensor maps carry a reduction dim (summed
    over ``R``), one of :data:`REDUCE_OPS` ("" for no ``R`` parameter); ``persistent``: CTAs loop
    over the output tiles (grid from :meth:`Sm90Kernel.grid`, a ``Z`` parameter).
    """

    dtype: str = "f16"
    bm: int = 256
    bn: int = 128
    stages: int = 4
    first: str = "zero"
    last: str = "none"
    a_major: str = "m"
    b_major: str = "k"
    batch: str = ""
    reduce: str = ""
    persistent: bool = False

    def __post_init__(self) -> None:
        def bad(msg: str):
            raise ValueError(f"Sm90Spec {self}: {msg}")

        if self.dtype not in ESIZE:
            bad(f"dtype {self.dtype!r}; one of {sorted(ESIZE)}")
        if self.bm not in (64, 128, 192, 256):
            bad("bm must be 64, 128, 192 or 256 (wgmma N)")
        if self.bn not in (64, 128):
            bad("bn must be 64 or 128 (one or two consumer warpgroups)")
        if not 2 <= self.stages <= 8:
            bad("stages must be in 2..8")
        if self.first not in FIRST_TOUCH or self.last not in LAST_TOUCH:
            bad(f"first touch in {FIRST_TOUCH}, last touch in {LAST_TOUCH}")
        if self.a_major not in ("m", "k") or self.b_major not in ("k", "n"):
            bad(f"a_major {self.a_major!r} must be 'm' or 'k', b_major {self.b_major!r} 'k' or 'n'")
        if self.dtype == "tf32" and self.orientation != "kk":
            bad("tf32 wgmma needs K-major A and B (a_major='k', b_major='k')")
        if self.batch not in BATCH_OPS:
            bad(f"batch {self.batch!r}: one of {BATCH_OPS}")
        if self.reduce not in REDUCE_OPS:
            bad(f"reduce {self.reduce!r}: one of {REDUCE_OPS}")
        if not isinstance(self.persistent, bool):
            bad("persistent must be a bool")
        if self.smem_bytes > 227 * 1024:
            bad(f"{self.smem_bytes} bytes of shared memory (max 232448)")

    # derived -------------------------------------------------------------------------------------
    @property
    def es(self) -> int:
        """Input element size in bytes."""
        return ESIZE[self.dtype]

    @property
    def bk(self) -> int:
        """K elements per stage: one 128-byte swizzle row (64 for f16/bf16, 32 for tf32)."""
        return ROW // self.es

    @property
    def orientation(self) -> str:
        """``a_major + b_major``: "mk" (the default), "kk", "mn" or "kn"."""
        return self.a_major + self.b_major

    @property
    def consumers(self) -> int:
        return self.bn // 64

    @property
    def threads(self) -> int:
        return 128 * (1 + self.consumers)

    @property
    def b_bytes(self) -> int:
        """Shared bytes of one stage's B tile (bn x bk elements, 128 bytes per row of either orientation)."""
        return self.bn * ROW

    @property
    def a_bytes(self) -> int:
        """Shared bytes of one stage's A tile (bm x bk elements)."""
        return self.bm * ROW

    @property
    def stage_bytes(self) -> int:
        return self.a_bytes + self.b_bytes

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory: 1024 bytes of alignment slack, the stages, 2 mbarriers per stage."""
        return 1024 + self.stages * self.stage_bytes + 16 * self.stages

    @property
    def name(self) -> str:
        tail = "" if self.orientation == "mk" else f"_a{self.a_major}b{self.b_major}"
        tail += (f"_z{self.batch}" if self.batch else "") + (f"_r{self.reduce}" if self.reduce else "")
        tail += "_p" if self.persistent else ""
        return f"gemm90_{self.dtype}_{self.bm}x{self.bn}x{self.bk}_s{self.stages}_{self.first}_{self.last}{tail}"


@dataclass
class Sm90Kernel(GeneratedKernel):
    """A generated kernel: PTX module, kernel and launch geometry (``grid(m, n, batch)``)."""

    spec: Sm90Spec

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory the launch must grant (bytes)."""
        return self.spec.smem_bytes

    def tiles(self, m: int, n: int, batch: int = 1) -> int:
        """Output tiles of an M x N GEMM times ``batch``."""
        return -(-m // self.spec.bm) * -(-n // self.spec.bn) * batch

    def grid(self, m: int, n: int, batch: int = 1, ctas: int | None = None) -> tuple[int, int, int]:
        """``(ceil(M/bm), ceil(N/bn), batch)``; persistent: ``(min(tiles, ctas), 1, 1)`` (``ctas``
        None: one per tile)."""
        if not self.spec.persistent:
            return (-(-m // self.spec.bm), -(-n // self.spec.bn), batch)
        total = self.tiles(m, n, batch)
        return (max(1, min(total, total if ctas is None else int(ctas))), 1, 1)


def tensor_maps(
    spec: Sm90Spec,
    a: int,
    b: int,
    m: int,
    n: int,
    k: int,
    lda: int,
    ldb: int,
    *,
    batch: int = 1,
    a_batch: int = 0,
    b_batch: int = 0,
    reduce: int = 1,
    a_reduce: int = 0,
    b_reduce: int = 0,
) -> tuple[dict, dict]:
    """``cuTensorMapEncodeTiled`` arguments (keyword dicts) for A at device address ``a`` (M x K
    in ``spec.a_major`` order, ``lda`` bytes between its outer index) and B at ``b`` (K x N,
    ``ldb``). ``batch``/``reduce``: number of z/r values; ``a_batch``, ``b_batch``, ``a_reduce``,
    ``b_reduce``: byte strides of A and B between consecutive z / r, nonzero exactly for the
    operands named in ``spec.batch``/``spec.reduce`` (those get the extra dimensions, r then z)."""
    S = spec
    common = dict(dtype=TMAP_DTYPE[S.dtype], swizzle=SWIZZLE_128B)
    if S.a_major == "m":
        ta = dict(global_dim=[m, k], global_strides=[lda], box_dim=[MN_BOX, S.bk])
    else:
        ta = dict(global_dim=[k, m], global_strides=[lda], box_dim=[S.bk, S.bm])
    if S.b_major == "k":
        tb = dict(global_dim=[k, n], global_strides=[ldb], box_dim=[S.bk, S.bn])
    else:
        tb = dict(global_dim=[n, k], global_strides=[ldb], box_dim=[MN_BOX, S.bk])
    for op, t, r_stride, z_stride in (("a", ta, a_reduce, a_batch), ("b", tb, b_reduce, b_batch)):
        for what, count, stride, ops in (("reduce", reduce, r_stride, S.reduce), ("batch", batch, z_stride, S.batch)):
            if (op in ops) != (stride != 0):
                raise ValueError(
                    f"tensor_maps: {op}_{what} stride {stride} bytes, but spec.{what} = {ops!r}"
                    f" ({'needs' if op in ops else 'takes no'} a {what} stride for {op.upper()})"
                )
            if op in ops:
                t["global_dim"].append(count)
                t["global_strides"].append(stride)
                t["box_dim"].append(1)
    out = []
    for ptr, t in ((a, ta), (b, tb)):
        rank = len(t["global_dim"])
        out.append(
            dict(
                global_address=ptr,
                rank=rank,
                element_strides=(1,) * rank,
                **{key: tuple(v) for key, v in t.items()},
                **common,
            )
        )
    return out[0], out[1]


def fits(
    dtype: str,
    m: int,
    n: int,
    k: int,
    ptr_a: int,
    ptr_b: int,
    lda: int,
    ldb: int,
    a_major: str = "m",
    b_major: str = "k",
) -> bool:
    """Can the sm_90a kernel run this GEMM: f16/bf16 in any of the 4 orientations, tf32 with A and
    B K-major only; TMA alignment (base addresses and leading dimensions in bytes multiples of
    16); sizes in the tensor map's range."""
    if dtype not in ESIZE or (dtype == "tf32" and (a_major, b_major) != ("k", "k")):
        return False
    return all(x % 16 == 0 for x in (ptr_a, ptr_b, lda, ldb)) and min(m, n, k) >= 1 and max(m, n, k) < 1 << 31


def uniform_strides(table) -> tuple[int, ...] | None:
    """Per column of an offset table (rows: batch or reduction index, columns: tensors; bytes),
    the stride ``s`` with ``table[i] == i * s``, or None when a column is not of that form (or a
    stride is negative or not a multiple of 16 bytes, which a tensor map cannot express)."""
    import numpy as np  # noqa: PLC0415

    t = np.asarray(table, np.int64)
    if t.ndim != 2 or len(t) == 0:
        return None
    s = t[1] - t[0] if len(t) > 1 else np.zeros(t.shape[1], np.int64)
    if (t != np.arange(len(t), dtype=np.int64)[:, None] * s[None, :]).any():
        return None
    if (s < 0).any() or (s % 16).any():
        return None
    return tuple(int(x) for x in s)


@dataclass(frozen=True)
class Sm90Plan:
    """How a (batched, reduced) GEMM maps onto one sm_90a launch: operand orientations, the
    operands with batch/reduction tensor-map dims (:attr:`Sm90Spec.batch`/``reduce`` strings),
    their counts and byte strides (``a_batch`` .. ``b_reduce``; 0 for an operand without the dim)."""

    a_major: str
    b_major: str
    batch: str
    reduce: str
    nbatch: int
    nreduce: int
    a_batch: int
    b_batch: int
    a_reduce: int
    b_reduce: int

    def __post_init__(self) -> None:
        if self.batch not in BATCH_OPS or self.reduce not in REDUCE_OPS:
            raise ValueError(f"Sm90Plan: batch {self.batch!r} in {BATCH_OPS}, reduce {self.reduce!r} in {REDUCE_OPS}")
        if self.nbatch < 1 or self.nreduce < 1:
            raise ValueError(f"Sm90Plan: nbatch {self.nbatch} and nreduce {self.nreduce} must be >= 1")

    def map_strides(self) -> dict:
        """The keyword arguments of :func:`tensor_maps` for the batch and reduction dims."""
        return dict(
            batch=self.nbatch,
            a_batch=self.a_batch,
            b_batch=self.b_batch,
            reduce=self.nreduce,
            a_reduce=self.a_reduce,
            b_reduce=self.b_reduce,
        )


def plan(
    dtype: str,
    m: int,
    n: int,
    k: int,
    a_major: str,
    b_major: str,
    lda: int,
    ldb: int,
    batch_table,
    red_table,
    ptr_a: int = 0,
    ptr_b: int = 0,
) -> Sm90Plan | None:
    """The :class:`Sm90Plan` of a GEMM given like :mod:`minijit.cuda.gemm`'s launch (orientations,
    leading dims in bytes, ``batch_table`` rows of (A, B, C) byte offsets, ``red_table`` rows of
    (A, B) byte offsets), or None when the sm_90a family cannot run it: see :func:`fits`; the A/B
    batch and reduction offsets must be ``i * stride`` with strides >= 0 and multiples of 16 bytes
    (C's batch offsets may be anything); a reduction with R > 1 needs a nonzero A or B stride;
    each leading dim at least its contiguous extent (lda >= M or K elements, ldb >= K or N)."""
    import numpy as np  # noqa: PLC0415

    if not fits(dtype, m, n, k, ptr_a, ptr_b, lda, ldb, a_major, b_major):
        return None
    es = ESIZE[dtype]
    if lda < (m if a_major == "m" else k) * es or ldb < (k if b_major == "k" else n) * es:
        return None
    bt, rt = np.asarray(batch_table, np.int64), np.asarray(red_table, np.int64)
    zs, rs = uniform_strides(bt[:, :2]), uniform_strides(rt[:, :2])
    if zs is None or rs is None or max(*zs, *rs) >= 1 << 40:
        return None
    nb, nr = len(bt), len(rt)
    batch = "" if nb == 1 and not bt[0, 2] else "".join(op for op, s in zip("ab", zs, strict=True) if s) + "c"
    reduce = "".join(op for op, s in zip("ab", rs, strict=True) if s)
    if nr > 1 and not reduce:
        return None
    return Sm90Plan(a_major, b_major, batch, reduce, nb, nr, zs[0], zs[1], rs[0], rs[1])
