"""The AArch64 fused attention kernel (`minijit.kernels.aarch64.attention`), NEON and SVE at
128/256/512 bits, in the qemu worker (natively on an AArch64 host: NEON and its own SVE length),
against a float64 numpy reference: hypothesis-drawn L != S, E and Ev including 1 and odd sizes,
causal (with a row offset), a float bias (row stride any or 0, column stride 1 or 0, -inf
entries), scale, huge logits (|scores| ~ 1e4), plain and tile-major K^T, strided q and o rows
with guard values around o, every tile size class. fp32 error <= 3e-5 max(1, max|out|), fp64
<= 1e-12 max(1, max|out|). The scratch buffer and the bias live in the worker's memory (the
kernel reads their addresses from ``args``)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asm import llvm
from minijit.kernels.aarch64 import attention as at
from minijit.runtime import runs_natively
from minijit.runtime.features import detected_host
from tests.conftest import examples

NATIVE = runs_natively("aarch64")
if NATIVE:  # pragma: no cover - an AArch64 host runs its own SVE length only
    _VL = f"sve{detected_host().sve_vl_bits}"
    ISAS = ["neon"] + ([_VL] if detected_host().sve and _VL in at.ISAS else [])
else:
    ISAS = list(at.ISAS)
NP = {"fp32": np.float32, "fp64": np.float64}
TOL = {"fp32": 3e-5, "fp64": 1e-12}
SENTINEL = -7777.0

kernel = functools.cache(at.generate)


class Memory:
    """Buffers whose addresses the kernel reads from ``args``: worker memory for an emulated
    kernel, numpy arrays for a native one."""

    def __init__(self, k) -> None:
        self.worker = getattr(k, "worker", None)
        self.maps: list[tuple[int, int]] = []
        self.keep: list[np.ndarray] = []

    def alloc(self, nbytes: int, offset: int = 0) -> int:
        nbytes += offset + 64
        if self.worker is None:
            buf = np.full(nbytes // 8 + 1, np.nan)
            self.keep.append(buf)
            return buf.ctypes.data + offset
        addr = self.worker.mmap(nbytes)
        self.maps.append((addr, nbytes))
        self.worker.write(addr, np.full(nbytes // 8, np.nan).tobytes())  # stale NaNs, as a reused buffer
        return addr + offset

    def put(self, arr: np.ndarray) -> int:
        if self.worker is None:
            self.keep.append(arr)
            return arr.ctypes.data
        addr = self.alloc(arr.nbytes)
        self.worker.write(addr, arr.tobytes())
        return addr

    def free(self) -> None:
        for addr, n in self.maps:
            self.worker.munmap(addr, n)


def reference(q, k, v, scale, causal, row0, bias) -> np.ndarray:
    """float64 attention; a row with every key masked is NaN."""
    s = (q.astype(np.float64) @ k.astype(np.float64).T) * float(scale)
    if bias is not None:
        s = s + bias
    L, S = s.shape
    if causal:
        s = np.where(np.arange(S)[None, :] <= row0 + np.arange(L)[:, None], s, -np.inf)
    with np.errstate(invalid="ignore"):
        m = s.max(axis=1, keepdims=True)
        p = np.exp(s - m)
        return (p @ v.astype(np.float64)) / p.sum(axis=1, keepdims=True)


def attend(dtype, isa, q, k, v, *, scale, causal=False, row0=0, bias=None, bias_strides=(0, 0), g=None, s_x=None,
           tile_major=False, ldq=None, ldo=None, scratch_offset=0):  # fmt: skip
    """Run the kernel on one slice: q (L x E), k (S x E), v (S x Ev); returns o (L x Ev) and the
    whole o buffer (rows ``ldo`` apart, guard values around the block)."""
    f = NP[dtype]
    L, E = q.shape
    S, Ev = v.shape
    g, s_x = at.check_tiles(dtype, isa, g, s_x)
    ldq, ldo = ldq or E, ldo or Ev
    qbuf = np.full((max(L, 1), ldq), np.nan, f)
    qbuf[:L, :E] = q
    if tile_major:
        tiles = -(-S // s_x)
        kt = np.full((max(tiles, 1), E, s_x), np.nan, f)
        for t in range(tiles):
            block = k[t * s_x : (t + 1) * s_x]
            kt[t, :, : block.shape[0]] = block.T
        ldkt, kt_tile = s_x, E * s_x
    else:
        ldkt, kt_tile = S + 3, 0
        kt = np.full((E, ldkt), np.nan, f)
        kt[:, :S] = k.T
    obuf = np.full((L + 2, ldo), SENTINEL, f)
    k_ = kernel(dtype, isa, g, s_x)
    mem = Memory(k_)
    try:
        scratch = mem.alloc(at.scratch_bytes(dtype, isa, E, Ev, g, s_x), scratch_offset)
        baddr = 0 if bias is None else mem.put(np.ascontiguousarray(bias, f))
        args = at.pack_args(
            L=L, S=S, E=E, Ev=Ev, ldq=ldq, ldkt=ldkt, ldv=Ev, ldo=ldo, row0=row0, causal=int(causal),
            scratch=scratch, kt_tile=kt_tile, bias=baddr, ldb=bias_strides[0], ldb_c=bias_strides[1],
        )  # fmt: skip
        out = obuf[1:]  # row 0 of obuf: a guard row before the block
        k_(qbuf, kt, np.ascontiguousarray(v, f), out, args, np.array([scale], f))
    finally:
        mem.free()
    return obuf[1 : L + 1, :Ev], obuf


def check(dtype, o, obuf, ref, Ev) -> None:
    assert np.array_equal(np.isnan(o), np.isnan(ref))
    bound = TOL[dtype] * max(1.0, float(np.nanmax(np.abs(ref), initial=0.0)))
    err = np.nanmax(np.abs(o - ref), initial=0.0)
    assert err <= bound, (err, bound)
    guard = np.ones(obuf.shape, bool)
    guard[1 : 1 + o.shape[0], :Ev] = False
    assert np.all(obuf[guard] == SENTINEL)  # nothing outside the L x Ev block is written


@st.composite
def cases(draw):
    dtype = draw(st.sampled_from(["fp32", "fp32", "fp32", "fp64"]))
    isa = draw(st.sampled_from(ISAS))
    dims = st.one_of(st.integers(1, 3), st.integers(1, 40))
    L, E, Ev = draw(st.integers(1, 20)), draw(dims), draw(dims)
    S = draw(st.integers(1, 69))
    S += S == L  # L != S
    lanes = at.vtarget(dtype, isa).lanes
    g = draw(st.sampled_from([1, 2, 5, 6, 8]))
    s_x = lanes * draw(st.sampled_from([1, 2, 4]))
    causal = draw(st.booleans())
    row0 = draw(st.integers(0, 6)) if causal else 0
    bias = None if causal else draw(st.sampled_from([None, "full", "row", "col0", "both0"]))
    scale = draw(st.sampled_from([1.0, 0.125, 0.7, -0.3]))
    huge = draw(st.booleans())
    return dict(dtype=dtype, isa=isa, L=L, S=S, E=E, Ev=Ev, g=g, s_x=s_x, causal=causal, row0=row0, bias=bias,
                scale=scale, huge=huge, tile_major=draw(st.booleans()), pad=draw(st.integers(0, 3)),
                seed=draw(st.integers(0, 2**16)))  # fmt: skip


def _run_case(c) -> None:
    f = NP[c["dtype"]]
    rng = np.random.default_rng(c["seed"])
    L, S, E, Ev = c["L"], c["S"], c["E"], c["Ev"]
    q, k = rng.standard_normal((L, E)).astype(f), rng.standard_normal((S, E)).astype(f)
    scale = c["scale"]
    if c["huge"]:  # |scores| ~ 1e4, exact in fp32: integer operands, a power-of-two scale
        q, k = rng.integers(-400, 401, (L, E)).astype(f), rng.integers(-30, 31, (S, E)).astype(f)
        scale = float(np.sign(scale)) * 2.0 ** round(np.log2(abs(scale)))
    v = rng.standard_normal((S, Ev)).astype(f)
    bias, strides, full = None, (0, 0), None
    if c["bias"] is not None:
        shape = {"full": (L, S), "row": (1, S), "col0": (L, 1), "both0": (1, 1)}[c["bias"]]
        bias = rng.standard_normal(shape).astype(f) * 3
        if c["huge"]:  # score + bias stays exact
            bias = np.round(bias)
        if c["bias"] in ("full", "row") and S > 2:
            bias[..., rng.integers(0, S, S // 3)] = -np.inf  # masked keys
        strides = (shape[1] if shape[0] > 1 else 0, 1 if shape[1] > 1 else 0)
        full = np.broadcast_to(bias, (L, S)).astype(np.float64)
    o, obuf = attend(
        c["dtype"], c["isa"], q, k, v, scale=scale, causal=c["causal"], row0=c["row0"], bias=bias,
        bias_strides=strides, g=c["g"], s_x=c["s_x"], tile_major=c["tile_major"], ldq=E + c["pad"],
        ldo=Ev + c["pad"],
    )  # fmt: skip
    check(c["dtype"], o, obuf, reference(q, k, v, f(scale), c["causal"], c["row0"], full), Ev)


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_against_numpy(c):
    _run_case(c)


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("isa", ISAS)
def test_every_target_causal_bias_and_huge_logits(isa, dtype):
    """Each target once with the odd sizes: a causal slice with a row offset and huge logits, and a
    float bias with -inf entries (a fully masked row gives NaN, as torch's math)."""
    f = NP[dtype]
    rng = np.random.default_rng(5)
    L, S, E, Ev = 13, 37, 7, 11
    q = rng.integers(-400, 401, (L, E)).astype(f)  # integer scores up to ~3e4: exact in fp32
    k = rng.integers(-30, 31, (S, E)).astype(f)
    v = rng.standard_normal((S, Ev)).astype(f)
    o, obuf = attend(dtype, isa, q, k, v, scale=1.0, causal=True, row0=3, ldq=E + 1, ldo=Ev + 2)
    ref = reference(q, k, v, f(1.0), True, 3, None)
    assert np.abs(q @ k.T).max() > 1e4
    check(dtype, o, obuf, ref, Ev)
    bias = rng.standard_normal((L, S)).astype(f)
    bias[2] = -np.inf  # row 2: no key at all
    bias[:, ::3] = -np.inf
    o, obuf = attend(dtype, isa, q / 4000, k / 30, v, scale=0.5, bias=bias, bias_strides=(S, 1), tile_major=True,
                     scratch_offset=f().itemsize)  # fmt: skip
    ref = reference(q / 4000, k / 30, v, f(0.5), False, 0, bias.astype(np.float64))
    assert np.isnan(o[2]).all()
    check(dtype, o, obuf, ref, Ev)


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("isa", at.ISAS)
def test_listing_reassembles_to_the_code(isa, dtype):
    a = at.program(dtype, isa)
    assert llvm.assemble(a.listing()) == a.code()


@pytest.mark.skipif(NATIVE, reason="emulation only: the worker runs at 128 bits, the kernel is built for 256")
def test_sve_kernel_at_another_length_gives_nan():
    """A kernel built for 256-bit SVE in a 128-bit worker only sets o's block (rows ldo apart) to NaN."""
    q, k, v = np.ones((3, 2), np.float32), np.ones((5, 2), np.float32), np.ones((5, 2), np.float32)
    a = at.program("fp32", "sve256")
    from minijit.kernels.aarch64.common import load_kernel

    k128 = load_kernel(a, at.signature("float"), a.name, 128)
    mem = Memory(k128)
    o = np.full((3, 3), SENTINEL, np.float32)
    try:
        scratch = mem.alloc(at.scratch_bytes("fp32", "sve256", 2, 2))
        args = at.pack_args(L=3, S=5, E=2, Ev=2, ldq=2, ldkt=5, ldv=2, ldo=3, row0=0, causal=0, scratch=scratch)
        k128(q, np.ascontiguousarray(k.T), v, o, args, np.ones(1, np.float32))
    finally:
        mem.free()
    assert np.isnan(o[:, :2]).all() and np.all(o[:, 2] == SENTINEL)


def test_bad_arguments():
    with pytest.raises(ValueError, match="isa"):
        at.check_tiles("fp32", "sve1024")
    with pytest.raises(ValueError, match="dtype"):
        at.check_tiles("fp16", "neon")
    with pytest.raises(ValueError, match="g must"):
        at.check_tiles("fp32", "neon", g=9)
    with pytest.raises(ValueError, match="s_x must"):
        at.check_tiles("fp32", "sve256", s_x=12)
    with pytest.raises(ValueError, match="missing"):
        at.pack_args(L=1)
    with pytest.raises(ValueError, match="causal"):
        at.pack_args(L=1, S=1, E=1, Ev=1, ldq=1, ldkt=1, ldv=1, ldo=1, row0=0, causal=2, scratch=0)


def test_defaults_and_scratch_size():
    assert at.check_tiles("fp32", "neon") == (6, 16)
    assert at.check_tiles("fp64", "sve512") == (6, 32)
    # NEON keeps the Ev % 4 last columns one per slot; SVE one predicated vector
    neon, sve = at.scratch_bytes("fp32", "neon", 8, 11), at.scratch_bytes("fp32", "sve128", 8, 11)
    assert neon - sve == 512 - 320  # 6 rows x 5 slots (2 + 3 columns) vs 6 x 3 (2 + 1) of 16 bytes, 64-aligned
    assert at.ARGS == ("L", "S", "E", "Ev", "ldq", "ldkt", "ldv", "ldo", "row0", "causal", "scratch", "kt_tile",
                       "bias", "ldb", "ldb_c")  # fmt: skip


@pytest.mark.parametrize("isa", ISAS)
def test_empty_head_dim_and_no_keys(isa):
    """E = 0: every score 0, the mean of V; S = 0: no key, NaN rows (0/0)."""
    for dtype, f in NP.items():
        v = np.arange(10, dtype=f).reshape(5, 2)
        o, obuf = attend(dtype, isa, np.ones((3, 0), f), np.ones((5, 0), f), v, scale=1.0)
        check(dtype, o, obuf, np.tile(v.mean(axis=0), (3, 1)), 2)
        o, obuf = attend(dtype, isa, np.ones((3, 2), f), np.ones((0, 2), f), np.ones((0, 2), f), scale=1.0)
        assert np.isnan(o).all()


@pytest.mark.parametrize(("dtype", "isa"), [("fp32", "neon"), ("fp64", "sve256")])
def test_inner_loops_for_mca(dtype, isa):
    """The loops bench/results' llvm-mca estimates read: they reassemble, and the product loops hold
    g x cv FMAs a step."""
    loops = at.inner_loops(dtype, isa)
    assert set(loops) == {"scores", "pv", "exp"}
    for name, listing in loops.items():
        lines = [s.split()[0] for s in listing.splitlines() if s.strip() and not s.strip().endswith(":")]
        if name != "exp":
            assert lines.count("fmla") == 6 * 4, name
        assert len(llvm.assemble(listing)) == 4 * len(lines)  # llvm-mc takes every line


@pytest.mark.parametrize(("dtype", "isa"), [("fp32", i) for i in ISAS] + [("fp64", ISAS[-1])])
def test_largest_tiles(dtype, isa):
    """g = 8 and 7, s_x = 32 vectors: offsets past every immediate form, many key tiles, a row
    offset far down a causal triangle, a bias over several tiles."""
    f = NP[dtype]
    rng = np.random.default_rng(1)
    lanes = at.vtarget(dtype, isa).lanes
    L, S, E, Ev = 11, 700, 70, 75
    q, k = rng.standard_normal((L, E)).astype(f), rng.standard_normal((S, E)).astype(f)
    v, bias = rng.standard_normal((S, Ev)).astype(f), rng.standard_normal((L, S)).astype(f)
    o, obuf = attend(dtype, isa, q, k, v, scale=0.2, g=8, s_x=32 * lanes, bias=bias, bias_strides=(S, 1),
                     tile_major=True)  # fmt: skip
    check(dtype, o, obuf, reference(q, k, v, f(0.2), False, 0, bias.astype(np.float64)), Ev)
    o, obuf = attend(dtype, isa, q, k, v, scale=0.2, g=7, s_x=32 * lanes, causal=True, row0=600)
    check(dtype, o, obuf, reference(q, k, v, f(0.2), True, 600, None), Ev)


@pytest.mark.parametrize("isa", ["neon", ISAS[-1]])
def test_without_softmax(isa):
    """``softmax=False`` / the none epilogue (the bench's softmax-share measure, as on x86-64): the
    products and fills only; l stays 0, so every output is inf or NaN; other epilogues refused."""
    for kw in ({"softmax": False}, {"epilogue": "none"}):
        assert at.generate("fp32", isa, **kw).name.endswith("_nosoftmax")
    assert "#23" not in at.program("fp32", isa, softmax=False).listing()  # no exp: no shift by 23
    assert "#23" in at.program("fp32", isa).listing()
    k_ = at.generate("fp32", isa, softmax=False)
    mem = Memory(k_)
    q, k, v = (np.ones(s, np.float32) for s in ((4, 3), (5, 3), (5, 2)))
    o = np.full((4, 2), SENTINEL, np.float32)
    try:
        scratch = mem.alloc(at.scratch_bytes("fp32", isa, 3, 2))
        args = at.pack_args(L=4, S=5, E=3, Ev=2, ldq=3, ldkt=5, ldv=2, ldo=2, row0=0, causal=0, scratch=scratch)
        k_(q, np.ascontiguousarray(k.T), v, o, args, np.ones(1, np.float32))
    finally:
        mem.free()
    assert not np.isfinite(o).any()
    with pytest.raises(ValueError, match="attention"):
        at.program("fp32", isa, epilogue="relu")
    with pytest.raises(TypeError, match="softmax"):
        at.program("fp32", isa, softmax=1)
