"""`scaled_dot_product_attention`: torch's call on numpy arrays and torch CPU tensors, and the
`AttentionPlan` it runs (set up once for shapes, dtype, mask kind and scale; executed many times).

Semantics are torch's ``torch.nn.functional.scaled_dot_product_attention``: query ``(..., L, E)``,
key ``(..., S, E)``, value ``(..., S, Ev)`` give ``(..., L, Ev)``; the leading dims broadcast;
``scale`` defaults to ``1/sqrt(E)``; ``is_causal`` keeps the top-left-aligned lower triangle (query
i attends to keys j <= i); a bool ``attn_mask`` (True: attend) or a float one (added to the scores)
broadcasts to ``(..., L, S)``; ``enable_gqa`` lets query head i use key/value head
``i // (Hq // Hk)`` (heads are dim -3). A row with every key masked is NaN, as torch's math
definition gives it.

The plan streams the key axis in tiles and keeps FlashAttention-2's running row max, row sum and
unscaled output (seed 001, appendix), so memory stays at a few tiles whatever L and S are: an
L x S score matrix is never formed. Every mask kind runs the native target's fused kernel (a
float mask is its additive bias, strides as given; a bool mask is made one, 0 / -inf, a block of
`BOOL_MASK_ROWS` rows x a key chunk just before each call, its broadcast axes kept stride 0)
(`minijit.targets.base.Target.attention_kernel`: `minijit.kernels.x86_64.attention` on AVX2 and
AVX-512, `minijit.kernels.aarch64.attention` on NEON and SVE; issue 50 part 3) past the decode rows:
K^T packed tile-major per (batch, head) (once per slice, shared by the threads when slices are
fewer than threads), one kernel call per (batch, head) slice, block of query rows and L2-sized
key chunk (x86-64 resumes each row's state between chunks) through ctypes on raw addresses (the
GIL released), the calls split over `minijit.parallel`'s threads (``MINIJIT_NUM_THREADS``), a
per-thread scratch. Decode shapes (at most `DECODE_MAX_ROWS` query rows) split the key axis over
the threads, numpy's batched GEMVs reading K and V as they are, and merge the partial (max, sum,
output) triples (`AttentionPlan.path`, `explain`). Hosts without a fused kernel and ``FUSED =
False`` compute each tile with numpy (`AttentionPlan._rows`, the reference path).
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["AttentionPlan", "scaled_dot_product_attention"]

#: the dtypes attention computes in
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
#: query rows and keys of one tile of the streamed computation (elements)
TILE_Q, TILE_S = 256, 512
#: whether masks "none" and "causal" use the fused kernel where the native target has one
FUSED = True
#: query rows of one fused-kernel call when a (batch, head) slice is split over threads
FUSED_ROWS = 96
#: query rows of one fused-kernel call with a bool mask, whose block (these rows x a key chunk)
#: is made an additive bias (0 / -inf) just before the call
BOOL_MASK_ROWS = 256

#: the most query rows the decode path takes (`AttentionPlan._decode`: the key axis split into
#: chunks over the threads, numpy's GEMV reading K as it is, the partial (max, sum, output)
#: triples merged): for so few rows the fused kernel's per-call K^T packing costs more than the
#: kernel (bench/results/x86_64_attention_first_2026-11-28.md)
DECODE_MAX_ROWS = 4
#: bytes of one slice's K and V the fused path keeps in L2 at a time: longer key axes run in
#: chunks of keys (whole key tiles), the kernel resuming each row's (max, sum, output) between
#: them (``chain``), so every 6-row query tile reads K and V from L2, not L3 (issue 50 bench)
KEY_CHUNK_BYTES = 256 << 10
#: the fewest keys of one decode chunk, and the most bytes of one chunk's scores (all slices)
DECODE_MIN_KEYS, DECODE_CHUNK_BYTES = 256, 4 << 20

_fused: dict[str, Any] = {}
_local = threading.local()


def _thread_buffer(name: str, nbytes: int) -> np.ndarray:
    """This thread's 8-byte aligned buffer ``name`` of at least ``nbytes`` bytes (kept and grown between calls:
    fresh pages cost a fault each on first touch)."""
    buf = getattr(_local, name, None)
    if buf is None or buf.nbytes < nbytes:
        buf = np.zeros(max(-(-nbytes // 8), 8), np.float64)  # views as float32 or float64
        setattr(_local, name, buf)
    return buf


_fused_lock = threading.Lock()


def fused_kernel(
    dtype: np.dtype, g: int | None = None, s_x: int | None = None, softmax: bool = True
) -> tuple[Any, Any, str, int, int] | None:
    """The native target's fused attention kernel (`minijit.targets.base.Target.attention_kernel`)
    for ``dtype`` with ``g`` query rows a tile (the default 6; fewer for fewer query rows) and
    ``s_x`` keys a tile (the kernel's default when None) as (ctypes function of six addresses,
    generator module, isa, g, s_x), generated once per process; None where the native target has
    none. ``softmax=False``: the kernel without its softmax stage (wrong results: only
    `minijit.bench.attention` uses it, to measure the softmax's share)."""
    key = (np.dtype(dtype).name, g, s_x, softmax)
    found = _fused.get(key)
    if found is None:
        with _fused_lock:
            if key not in _fused:
                _fused[key] = _load_fused(*key) or ()
            found = _fused[key]
    return found[1:] if found else None


def _load_fused(name: str, g: int | None, s_x: int | None, softmax: bool) -> tuple[Any, ...] | None:
    import ctypes

    from minijit import targets

    dtype = {"float32": "fp32", "float64": "fp64"}[name]
    found = targets.native().attention_kernel(dtype, g, s_x, softmax)
    if found is None:
        return None
    module, owner, isa, g, s_x = found  # owner keeps the code mapped
    function = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 6)(owner.address)
    return owner, function, module, isa, g, s_x


def _bool_bias(block: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A block of a bool mask (True: attend) as the fused kernel's additive bias (0 or -inf) in
    ``dtype``: only the mask's own elements are converted, its broadcast (stride 0) axes stay
    stride 0 (a padding mask broadcast over the query rows is one row)."""
    rows = slice(0, 1) if block.strides[0] == 0 else slice(None)
    cols = slice(0, 1) if block.strides[1] == 0 else slice(None)
    own = np.ascontiguousarray(np.where(block[rows, cols], dtype.type(0), dtype.type(-np.inf)))  # column stride 1
    return np.broadcast_to(own, block.shape)


def _pack_kt(kt: np.ndarray, ks: np.ndarray, lo: int, hi: int, s_x: int) -> None:
    """Key tiles lo..hi of ``ks`` (S x E) into ``kt`` (tiles x E x s_x) transposed; of a last
    partial tile only its S % s_x columns (the kernel reads its own padded copy of them)."""
    S = ks.shape[0]
    full = min(hi, S // s_x)
    if lo < full:
        kt[lo:full] = ks[lo * s_x : full * s_x].reshape(full - lo, s_x, ks.shape[1]).transpose(0, 2, 1)
    if hi > full and full * s_x < S:
        kt[full, :, : S - full * s_x] = ks[full * s_x :].T


def decode_chunks(
    keys: int, slices: int, rows: int, itemsize: int, threads: int, split: int | None = None
) -> list[tuple[int, int]]:
    """The decode path's key chunks [(begin, end)]: ``split`` chunks when given, else at least one
    per thread, none under `DECODE_MIN_KEYS` keys (one chunk for fewer), and more where one
    chunk's scores (slices x rows x keys elements) would pass `DECODE_CHUNK_BYTES`."""
    if split is None:
        split = min(threads, max(1, keys // DECODE_MIN_KEYS))
        per_key = max(1, slices * rows * itemsize)
        split = max(split, -(-keys * per_key // DECODE_CHUNK_BYTES))
    split = max(1, min(split, keys))
    return [(keys * i // split, keys * (i + 1) // split) for i in range(split)]


@functools.lru_cache(maxsize=256)
def _kernel_tile(L: int, E: int, Ev: int, dtype: str) -> tuple[int, int]:
    from minijit.attention import model

    s_x = model.kernel_s_x(E, Ev, dtype)
    return min(L, model.kernel_g(E, Ev, s_x, dtype)), s_x


def _shape_error(msg: str) -> ValueError:
    return ValueError(f"scaled_dot_product_attention: {msg}")


@dataclass(frozen=True)
class AttentionPlan:
    """Attention for one set of shapes, dtype, mask kind and scale (see the module docstring):
    ``batch`` the broadcast leading dims of the result, ``groups`` the query heads per key/value
    head (``enable_gqa``; 1 without), ``mask`` "none", "causal", "bool" or "float". ``threads``:
    threads to split over (None: `minijit.parallel.default_threads` at each call); ``tile``: the
    fused kernel's (g query rows, s_x keys) (None: `kernel_tile`); ``key_split``: key chunks of
    the decode path (None: `decode_chunks`)."""

    query_shape: tuple[int, ...]
    key_shape: tuple[int, ...]
    value_shape: tuple[int, ...]
    dtype: np.dtype
    mask: str = "none"
    mask_shape: tuple[int, ...] | None = None
    scale: float | None = None
    enable_gqa: bool = False
    threads: int | None = None
    tile: tuple[int, int] | None = None
    key_split: int | None = None

    def __post_init__(self) -> None:
        q, k, v = self.query_shape, self.key_shape, self.value_shape
        for name in ("threads", "key_split"):
            x = getattr(self, name)
            if x is not None and (not isinstance(x, int) or isinstance(x, bool) or x < 1):
                raise ValueError(f"scaled_dot_product_attention: {name} must be a positive int or None, got {x!r}")
        if self.tile is not None and (
            not isinstance(self.tile, tuple)
            or len(self.tile) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in self.tile)
        ):
            raise ValueError(f"scaled_dot_product_attention: tile must be (g, s_x), positive ints, got {self.tile!r}")
        for name, shape in (("query", q), ("key", k), ("value", v)):
            if len(shape) < 2:
                raise _shape_error(f"{name} needs at least 2 dims (..., L or S, E), got shape {shape}")
        try:
            dtype = np.dtype(self.dtype) if self.dtype is not None else None
        except TypeError:
            dtype = None
        if dtype is None or dtype not in DTYPES:
            raise TypeError(f"scaled_dot_product_attention: dtype {self.dtype!r} is not supported (float32 or float64)")
        object.__setattr__(self, "dtype", dtype)  # np.float32 and "float32" name the same plan
        if q[-1] != k[-1]:
            raise _shape_error(f"query and key disagree on E: {q[-1]} and {k[-1]}")
        if k[-2] != v[-2]:
            raise _shape_error(f"key and value disagree on S: {k[-2]} and {v[-2]}")
        if self.mask not in ("none", "causal", "bool", "float"):
            raise _shape_error(f"mask kind must be none, causal, bool or float, got {self.mask!r}")
        if (self.mask in ("bool", "float")) != (self.mask_shape is not None):
            raise _shape_error("a bool or float mask needs its shape, and only those")
        if self.scale is not None and not (isinstance(self.scale, int | float) and math.isfinite(self.scale)):
            raise _shape_error(f"scale must be a finite number, got {self.scale!r}")
        kb, vb = self._kv_batch(k), self._kv_batch(v)
        try:
            np.broadcast_shapes(q[:-2], kb, vb)
        except ValueError:
            raise _shape_error(
                f"the leading dims of query {q[:-2]}, key {k[:-2]} and value {v[:-2]} do not broadcast"
                + (" (after grouping the heads)" if self.enable_gqa else "")
            ) from None
        if self.mask_shape is not None:
            scores = (*self.batch, q[-2], k[-2])
            try:
                fits = np.broadcast_shapes(self.mask_shape, scores) == scores
            except ValueError:
                fits = False
            if not fits:
                raise _shape_error(f"attn_mask of shape {self.mask_shape} does not broadcast to the scores {scores}")

    def _kv_batch(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Leading dims of key or value as the query sees them (the heads repeated for GQA)."""
        lead = shape[:-2]
        if not self.enable_gqa:
            return lead
        if len(self.query_shape) < 3 or len(shape) < 3:
            raise _shape_error("enable_gqa needs a heads dim (-3) in query, key and value")
        hq, hk = self.query_shape[-3], shape[-3]
        if hk < 1 or hq % hk:
            raise _shape_error(f"enable_gqa: {hq} query heads cannot be grouped over {hk} key/value heads")
        return (*lead[:-1], hq)

    @property
    def batch(self) -> tuple[int, ...]:
        return np.broadcast_shapes(
            self.query_shape[:-2], self._kv_batch(self.key_shape), self._kv_batch(self.value_shape)
        )

    @property
    def groups(self) -> int:
        return self.query_shape[-3] // self.key_shape[-3] if self.enable_gqa else 1

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (*self.batch, self.query_shape[-2], self.value_shape[-1])

    @property
    def scale_value(self) -> float:
        return 1.0 / math.sqrt(self.query_shape[-1]) if self.scale is None else float(self.scale)

    def execute(self, query: np.ndarray, key: np.ndarray, value: np.ndarray, attn_mask: np.ndarray | None = None):
        """The attention of numpy arrays of the plan's shapes and dtype (a new C-order array)."""
        return self._execute(query, key, value, attn_mask)

    def execute_without_softmax(
        self, query: np.ndarray, key: np.ndarray, value: np.ndarray, attn_mask: np.ndarray | None = None
    ) -> np.ndarray | None:
        """`execute` with the fused kernel generated without its softmax stage: the two products
        and their data movement only, so the result is WRONG; it exists to measure the softmax's
        share of the time (`minijit bench attention`). None where a call would not run the fused
        kernel (decode shapes, no fused kernel on this host)."""
        return self._execute(query, key, value, attn_mask, softmax=False)

    def path(self) -> str:
        """Which code a call runs: "decode" (few query rows: key chunks over the threads, numpy's
        batched GEMVs, the partial triples merged), "fused g x s_x (isa)" (the native target's
        fused kernel) or "numpy tiles" (no fused kernel here, ``FUSED = False``)."""
        if self.query_shape[-2] <= DECODE_MAX_ROWS:
            return "decode"
        if FUSED:
            found = fused_kernel(self.dtype, *self.kernel_tile())
            if found is not None:
                _, _, isa, g, s_x = found
                return f"fused {g} x {s_x} ({isa})"
        return "numpy tiles"

    def explain(self, code: bool = True) -> str:
        """The plan in words: seed 001's IO-model derivation for these shapes on this host
        (`minijit.attention.model.plan`: tiles per level, memory and transfers, the predicted split
        of time between the products and the softmax), the path a call runs (`path`) and, with
        ``code``, the listing of the fused kernel it calls."""
        from minijit.attention import model

        batch, L, S = self.batch, self.query_shape[-2], self.key_shape[-2]
        E, Ev = self.query_shape[-1], self.value_shape[-1]
        heads = batch[-1] if batch else 1
        outer = math.prod(batch[:-1]) if batch else 1
        dtype = "fp32" if self.dtype == np.float32 else "fp64"
        derivation = model.plan(
            outer, heads, L, S, E, Ev, dtype=dtype, causal=self.mask == "causal", threads=self.threads_now()
        )
        lines = [derivation.explain(), "", f"path: {self.path()} ({self.threads_now()} threads)"]
        if self.path() == "decode":
            chunks = decode_chunks(S, math.prod(batch), L, self.dtype.itemsize, self.threads_now(), self.key_split)
            lines.append(f"decode: {len(chunks)} key chunks of about {S // len(chunks)} keys")
        elif code and self.path().startswith("fused"):
            owner = _fused[(self.dtype.name, *self.kernel_tile(), True)][0]
            lines += ["", f"// ==== {owner.name}", owner.listing]
        return "\n".join(lines)

    def threads_now(self) -> int:
        """The threads a call splits over now."""
        from minijit import parallel

        return self.threads or parallel.default_threads()

    def kernel_tile(self) -> tuple[int, int]:
        """The fused kernel's tile (g query rows, s_x keys): ``tile`` when given, else the s_x of
        `minijit.attention.model.kernel_s_x` and the g of `minijit.attention.model.kernel_g` (L when
        shorter)."""
        if self.tile is not None:
            return self.tile
        L, E, Ev = self.query_shape[-2], self.query_shape[-1], self.value_shape[-1]
        return _kernel_tile(L, E, Ev, "fp32" if self.dtype == np.float32 else "fp64")

    def _execute(self, query, key, value, attn_mask, softmax: bool = True) -> np.ndarray:
        """`execute`; ``softmax=False`` (the bench only): the fused kernel without its softmax stage
        (wrong results; None where the fused kernel would not run)."""
        self._check(query, key, value, attn_mask)
        L, S = self.query_shape[-2], self.key_shape[-2]
        batch = self.batch
        out = np.empty(self.out_shape, self.dtype)
        scale = self.dtype.type(self.scale_value)
        if not out.size:
            return out
        group = self.groups
        if group > 1:  # GQA: the heads axis split into (key/value heads, group), key and value
            # broadcast along the group (stride 0): query head i reads key/value head i // group,
            # and nothing is copied
            kv_batch = (*batch[:-1], batch[-1] // group)
            batch = (*kv_batch, group)
            key = np.broadcast_to(key, (*kv_batch, S, key.shape[-1]))[..., None, :, :]
            value = np.broadcast_to(value, (*kv_batch, S, value.shape[-1]))[..., None, :, :]
            query = np.broadcast_to(query, (*self.batch, L, query.shape[-1])).reshape(*batch, L, -1)
            out_view = out.reshape(*batch, L, -1)
            if attn_mask is not None:
                attn_mask = np.broadcast_to(attn_mask, (*self.batch, L, S)).reshape(*batch, L, S)
        else:
            out_view = out
        q = np.broadcast_to(query, (*batch, L, query.shape[-1]))
        k = np.broadcast_to(key, (*batch, S, key.shape[-1]))
        v = np.broadcast_to(value, (*batch, S, value.shape[-1]))
        mask = None if attn_mask is None else np.broadcast_to(attn_mask, (*batch, L, S))
        if L <= DECODE_MAX_ROWS and softmax:
            if group > 1:  # the group's query rows together: one batched product per key/value head
                rows = (*batch[:-1], group * L)
                q, k, v = q.reshape(*rows, -1), k[..., 0, :, :], v[..., 0, :, :]
                mask = None if mask is None else mask.reshape(*rows, S)
                out_view = out.reshape(*rows, -1)
            self._decode(q, k, v, mask, out_view, scale, L)
            return out
        if FUSED:
            found = fused_kernel(self.dtype, *self.kernel_tile(), softmax=softmax)
            if found is not None:
                self._fused(q, k, v, mask, out_view, scale, *found, group=group)
                return out
        if not softmax:
            return None
        for lo in range(0, L, TILE_Q):
            hi = min(L, lo + TILE_Q)
            out_view[..., lo:hi, :] = self._rows(q[..., lo:hi, :], k, v, mask, lo, hi, scale)
        return out

    def _fused(self, q, k, v, mask, out, scale, function, kernel, isa: str, g: int, s_x: int, group: int = 1) -> None:
        """``out`` by the fused kernel: one call per (slice, block of query rows), K^T packed
        tile-major (key tiles of s_x, E x s_x each, contiguous). With at least as many slices as
        threads each thread packs its slices in turn into a buffer of its own (kept between
        calls); with fewer, every slice's K^T is packed once, by all threads, into the caller's
        buffer, and the threads share it (memory: min(slices, threads) packed slices). A float
        mask is the kernel's bias: its slice's strides as they are (0 where it broadcasts), a
        copy where a column stride is neither 0 nor 1. ``group`` > 1 (GQA): the last batch dim is
        the group, along which key and value are broadcast: slice b reads key/value slice b //
        group, packed once for the group."""
        from minijit import parallel

        L, E = q.shape[-2:]
        S, Ev = v.shape[-2:]
        batch = q.shape[:-2]
        n = math.prod(batch)
        dt = self.dtype
        es = dt.itemsize
        q = np.ascontiguousarray(q)  # no copy for C-order operands
        if group > 1:  # one key/value slice per group (the broadcast group dim dropped)
            k, v = k[..., 0, :, :], np.ascontiguousarray(v[..., 0, :, :])
            kv_batch = batch[:-1]
        else:
            v = np.ascontiguousarray(v)
            kv_batch = batch
        n_kv = n // group
        name = "fp32" if dt == np.float32 else "fp64"
        scratch_bytes = kernel.scratch_bytes(name, isa, E, Ev, g, s_x)
        tiles = -(-S // s_x)
        size = tiles * E * s_x  # one slice's packed K^T (elements)
        chunk = max(s_x, KEY_CHUNK_BYTES // ((E + Ev) * es) // s_x * s_x)  # keys of one L2-resident chunk
        if "chain" not in kernel.ARGS:  # a kernel that cannot resume a row's state: the whole key axis at once
            chunk = max(S, 1)
        params = np.array([scale], dt)
        threads = self.threads_now()
        blocks = 1 if n >= threads else min(-(-L // FUSED_ROWS), -(-threads // n))
        rows = -(-L // blocks)
        qa, va, oa, pa = (x.ctypes.data for x in (q, v, out, params))
        causal = int(self.mask == "causal")

        def slice_of(x, b, shape=batch):
            return x[np.unravel_index(b, shape)] if shape else x

        shared = None
        if blocks > 1:  # few slices: each packed once, the key tiles split over the threads
            shared = _thread_buffer("kt_shared", n_kv * size * es).view(dt)[: n_kv * size]
            shared = shared.reshape(n_kv, tiles, E, s_x)

            def pack_all(begin: int, end: int) -> None:
                for b in range(n_kv):
                    lo, hi = max(begin - b * tiles, 0), min(end - b * tiles, tiles)
                    if lo < hi:
                        _pack_kt(shared[b], slice_of(k, b, kv_batch), lo, hi, s_x)

            parallel.run_range(pack_all, n_kv * tiles, threads)

        def run(begin: int, end: int) -> None:
            scratch = _thread_buffer("scratch", scratch_bytes + 64)
            if shared is None:
                kt = _thread_buffer("kt", size * es).view(dt)[:size].reshape(tiles, E, s_x)
            lse = _thread_buffer("lse", 2 * L * es) if S > chunk else None  # (m, l) of each row between chunks
            args = np.zeros(len(kernel.ARGS), np.int64)
            scr = scratch.ctypes.data + (-scratch.ctypes.data % 64)
            args[1:12] = (S, E, Ev, E, s_x, Ev, Ev, 0, causal, scr, E * s_x)  # no bias: bias = ldb = ldb_c = 0
            aa = args.ctypes.data
            packed = -1
            for job in range(begin, end):
                b, r = divmod(job, blocks)
                lo = r * rows
                hi = min(L, lo + rows)
                if hi <= lo:
                    continue
                kv = b // group  # the key/value slice
                if shared is not None:
                    ka = shared[kv].ctypes.data
                elif kv != packed:  # K^T of slice kv, tile-major (the last tile partial)
                    _pack_kt(kt, slice_of(k, kv, kv_batch), 0, tiles, s_x)
                    packed, ka = kv, kt.ctypes.data
                ms = None
                if mask is not None:
                    ms = slice_of(mask, b)
                    if ms.dtype != np.bool_ and (ms.strides[1] not in (0, es) or ms.strides[0] % es):
                        ms = np.ascontiguousarray(ms)
                for c0 in range(0, S, chunk):  # one chunk (the whole key axis) unless S > chunk
                    c1 = min(S, c0 + chunk)
                    more = c1 < S
                    if causal:  # rows r see keys <= r: rows past the chunk's start, final where their diagonal is
                        parts = ((max(lo, c0), min(hi, c1), False), (max(lo, c1), hi, more))
                    else:
                        parts = ((lo, hi, more),)
                    if ms is not None and ms.dtype == np.bool_:  # rows in pieces: each piece's bias made at once
                        parts = tuple(
                            (p0, min(r1, p0 + BOOL_MASK_ROWS), keep)
                            for r0, r1, keep in parts
                            for p0 in range(r0, r1, BOOL_MASK_ROWS)
                        )
                    for r0, r1, keep in parts:
                        if r1 <= r0:
                            continue
                        args[0], args[1], args[8] = r1 - r0, c1 - c0, max(0, r0 - c0) if causal else r0
                        if ms is not None:
                            bs = _bool_bias(ms[r0:r1, c0:c1], dt) if ms.dtype == np.bool_ else ms[r0:, c0:]
                            args[12:15] = (bs.ctypes.data, bs.strides[0] // es, bs.strides[1] // es)
                        if lse is not None:
                            args[15:17] = (lse.ctypes.data + r0 * 2 * es, (c0 > 0) | (2 * keep))
                        function(
                            qa + (b * L + r0) * E * es,
                            ka + (c0 // s_x) * E * s_x * es,
                            va + (kv * S + c0) * Ev * es,
                            oa + (b * L + r0) * Ev * es,
                            aa,
                            pa,
                        )
                    if causal and c1 >= hi:
                        break  # later keys: past every row's diagonal

        parallel.run_range(run, n * blocks, threads)

    def _decode(self, q, k, v, mask, out, scale, L: int) -> None:
        """``out`` for few query rows (decode): the key axis in chunks (`decode_chunks`, or
        ``key_split``) over the threads; per chunk numpy's batched GEMVs read K and V as they are
        (no packing) and give each row's partial triple (max m, sum l, unscaled output o); the
        triples are merged at the end (m = max m_c, o = sum exp(m_c - m) o_c / sum exp(m_c - m) l_c).
        ``L``: the query rows of a head; ``q``'s rows are several heads' (GQA's group) when more."""
        from minijit import parallel

        S = k.shape[-2]
        keys = min(S, L) if self.mask == "causal" else S  # past the last row's diagonal: no key
        if keys == 0:
            out[...] = np.nan  # no key: 0 / 0, as torch's math
            return
        threads = self.threads_now()
        bounds = decode_chunks(keys, math.prod(q.shape[:-2]), q.shape[-2], self.dtype.itemsize, threads, self.key_split)
        c = len(bounds)
        shape = (c, *out.shape[:-1], 1)
        m_parts, l_parts = np.empty(shape, self.dtype), np.empty(shape, self.dtype)
        o_parts = np.empty((c, *out.shape), self.dtype)
        rows = np.tile(np.arange(L), q.shape[-2] // L)[:, None]  # each row's index in its head

        def run(begin: int, end: int) -> None:
            for i in range(begin, end):
                c0, c1 = bounds[i]
                s = np.matmul(q, np.swapaxes(k[..., c0:c1, :], -1, -2))
                s *= scale
                if self.mask == "causal":
                    s = np.where(np.arange(c0, c1)[None, :] <= rows, s, -np.inf)
                elif self.mask == "bool":
                    s = np.where(mask[..., c0:c1], s, -np.inf)
                elif self.mask == "float":
                    s += mask[..., c0:c1]
                m = s.max(axis=-1, keepdims=True)
                s -= np.where(np.isneginf(m), 0, m)  # a row masked in this chunk: weight 0
                np.exp(s, out=s)
                m_parts[i], l_parts[i] = m, s.sum(axis=-1, keepdims=True)
                np.matmul(s, v[..., c0:c1, :], out=o_parts[i])

        parallel.run_range(run, c, min(threads, c))
        m = m_parts.max(axis=0)
        safe = np.where(np.isneginf(m), 0, m)
        w = np.exp(np.where(np.isneginf(m_parts), -np.inf, m_parts - safe))
        with np.errstate(invalid="ignore", divide="ignore"):
            np.divide((w * o_parts).sum(axis=0), (w * l_parts).sum(axis=0), out=out)  # all masked: 0 / 0 = NaN

    def _rows(self, q, k, v, mask, lo: int, hi: int, scale) -> np.ndarray:
        """Query rows lo..hi: the key axis streamed in tiles, FlashAttention-2's running max m,
        sum l and unscaled output o; o / l at the end."""
        S = k.shape[-2]
        dt = self.dtype
        shape = (*q.shape[:-1], 1)
        m = np.full(shape, -np.inf, dt)
        l_sum = np.zeros(shape, dt)
        o = np.zeros((*q.shape[:-1], v.shape[-1]), dt)
        rows = np.arange(lo, hi)[:, None]
        stop = min(S, hi) if self.mask == "causal" else S  # keys past the last row's diagonal: none
        for ks in range(0, stop, TILE_S):
            ke = min(stop, ks + TILE_S)
            s = np.matmul(q, np.swapaxes(k[..., ks:ke, :], -1, -2)) * scale
            if self.mask == "causal":
                s = np.where(np.arange(ks, ke)[None, :] <= rows, s, -np.inf)
            elif self.mask == "bool":
                s = np.where(mask[..., lo:hi, ks:ke], s, -np.inf)
            elif self.mask == "float":
                s = s + mask[..., lo:hi, ks:ke]
            m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
            safe = np.where(np.isneginf(m_new), 0, m_new)  # a row masked so far stays at zero weight
            p = np.exp(s - safe)
            alpha = np.exp(np.where(np.isneginf(m), -np.inf, m - safe))
            l_sum = alpha * l_sum + p.sum(axis=-1, keepdims=True)
            o = alpha * o + np.matmul(p, v[..., ks:ke, :])
            m = m_new
        with np.errstate(invalid="ignore", divide="ignore"):
            return o / l_sum  # a row with every key masked: 0 / 0 = NaN, as torch's math

    def _check(self, query, key, value, attn_mask) -> None:
        for name, x, shape in (
            ("query", query, self.query_shape),
            ("key", key, self.key_shape),
            ("value", value, self.value_shape),
        ):
            if x.shape != shape or x.dtype != self.dtype:
                raise _shape_error(f"{name} is {x.dtype} {x.shape}; the plan is for {self.dtype} {shape}")
        if self.mask in ("bool", "float") and (attn_mask is None or attn_mask.shape != self.mask_shape):
            raise _shape_error(f"the plan needs an attn_mask of shape {self.mask_shape}")


def _as_array(x: Any, name: str) -> np.ndarray:
    from minijit.runtime.device_arrays import host_array

    arr = host_array(x, f"scaled_dot_product_attention: {name}")
    if arr.dtype not in DTYPES and not (name == "attn_mask" and arr.dtype == np.bool_):
        raise TypeError(f"scaled_dot_product_attention: {name} has dtype {arr.dtype}; float32 or float64 only")
    return arr


def scaled_dot_product_attention(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Any:
    """torch's ``scaled_dot_product_attention`` on numpy arrays or torch CPU tensors (the result
    follows the query's kind): see the module docstring. ValueError, TypeError or
    NotImplementedError naming the argument before anything runs: mismatched E or S, non-float or
    mixed dtypes, ``dropout_p`` other than 0, a mask that does not broadcast, a mask together
    with ``is_causal``, heads GQA cannot group, fewer than 2 dims, a non-finite scale."""
    from minijit.runtime.device_arrays import host_result, like_input

    if dropout_p != 0.0:
        raise NotImplementedError(f"scaled_dot_product_attention: dropout_p={dropout_p!r}: only 0.0 (no dropout)")
    if attn_mask is not None and is_causal:
        raise ValueError("scaled_dot_product_attention: attn_mask and is_causal together (torch refuses them too)")
    if not isinstance(is_causal, bool) or not isinstance(enable_gqa, bool):
        raise TypeError("scaled_dot_product_attention: is_causal and enable_gqa must be bools")
    like = like_input([query])
    q, k, v = (_as_array(x, n) for x, n in ((query, "query"), (key, "key"), (value, "value")))
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"scaled_dot_product_attention: mixed dtypes query {q.dtype}, key {k.dtype}, value {v.dtype}")
    mask, kind = None, "causal" if is_causal else "none"
    if attn_mask is not None:
        mask = _as_array(attn_mask, "attn_mask")
        if mask.dtype == np.bool_:
            kind = "bool"
        elif mask.dtype == q.dtype:
            kind = "float"
        else:
            raise TypeError(f"scaled_dot_product_attention: a float attn_mask must be {q.dtype}, got {mask.dtype}")
    plan = AttentionPlan(
        q.shape, k.shape, v.shape, q.dtype, kind, None if mask is None else mask.shape, scale, enable_gqa
    )
    return host_result(plan.execute(q, k, v, mask), like)
