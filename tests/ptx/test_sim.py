"""The PTX simulator (`ptx.sim`): instruction semantics against Python reference formulas (the
same tests run on the GPU, which checks the simulator against the hardware), each kind of
defect it must report, and mutated GEMM/SpMM kernels it must reject."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ptx import Module, addr, sim, simdriver, sreg
from tests.conftest import CudaBackend

SIM = CudaBackend("sim", simdriver, simdriver.device())
N = 128  # threads (4 warps), one value per thread


# --------------------------------------------------------------------------- semantics


def _wrap(x: int, bits: int, signed: bool) -> int:
    x %= 1 << bits
    return x - (1 << bits) if signed and x >= 1 << (bits - 1) else x


def _kernel(name: str, ta: str, tb: str, td: str, emit):
    """out[i] = emit(a[i], b[i]) for N threads; types of the operands and the result."""
    m = Module()
    k = m.kernel(name, reqntid=N)
    ps = [k.param("u64", n) for n in ("a", "b", "out")]
    g = []
    for p in ps:
        r, q = k.reg("u64"), k.reg("u64")
        k.ld_param(r, p)
        k.cvta(q, r)
        g.append(q)
    tid = k.reg("u32")
    k.mov(tid, sreg.tid.x)
    regs = []
    for base, t in ((g[0], ta), (g[1], tb)):
        off, ptr, r = k.reg("u64"), k.reg("u64"), k.reg(t)
        k.mul(off, tid, _size(t), mode="wide")
        k.add(ptr, base, off)
        k.ld("global", r, addr(ptr))
        regs.append(r)
    d = k.reg(td)
    emit(k, d, *regs)
    off, ptr = k.reg("u64"), k.reg("u64")
    k.mul(off, tid, _size(td), mode="wide")
    k.add(ptr, g[2], off)
    k.st("global", addr(ptr), d)
    k.ret()
    return m, k


def _size(t: str) -> int:
    return {"b16": 2, "f16": 2}.get(t, 8 if t.endswith("64") else 4)


_NP = {"s32": np.int32, "u32": np.uint32, "s64": np.int64, "u64": np.uint64, "f32": np.float32, "b32": np.uint32}


def _run(be: CudaBackend, name, ta, tb, td, emit, a, b):
    m, k = _kernel(name, ta, tb, td, emit)
    mod, fn = be.load(m.text(), k.name, k.signature)
    drv = be.driver
    da, db = drv.to_device(np.asarray(a, _NP[ta])), drv.to_device(np.asarray(b, _NP[tb]))
    out_t = np.uint16 if td == "b16" else _NP[td]
    dout = drv.DeviceBuffer(N * np.dtype(out_t).itemsize)
    fn.launch((1,), (N,), args=(da, db, dout))
    drv.synchronize()
    return dout.to_host(out_t, N)


def _ints(seed: int, t: str) -> np.ndarray:
    bits, signed = int(t[1:]), t[0] == "s"
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    rng = np.random.default_rng(seed)
    edge = [lo, hi, 0, 1, -1 if signed else 2, lo + 1, hi - 1, 31, 32, 33, 63, 64]
    vals = [
        int(v) for v in rng.integers(lo, hi, N, dtype=np.int64 if bits < 64 or signed else np.uint64, endpoint=True)
    ]
    vals[: len(edge)] = edge
    rng.shuffle(vals)
    return np.array(vals, dtype=object)


INT_OPS = {
    # name: (a type, b type, d type, emit, reference on Python ints)
    "add.s32": ("s32", "s32", "s32", lambda k, d, a, b: k.add(d, a, b), lambda a, b: _wrap(a + b, 32, True)),
    "sub.u32": ("u32", "u32", "u32", lambda k, d, a, b: k.sub(d, a, b), lambda a, b: _wrap(a - b, 32, False)),
    "mul.lo.s32": ("s32", "s32", "s32", lambda k, d, a, b: k.mul(d, a, b, mode="lo"), lambda a, b: _wrap(a * b, 32, 1)),
    "mul.hi.s32": ("s32", "s32", "s32", lambda k, d, a, b: k.mul(d, a, b, mode="hi"), lambda a, b: (a * b) >> 32),
    "mul.hi.u32": ("u32", "u32", "u32", lambda k, d, a, b: k.mul(d, a, b, mode="hi"), lambda a, b: (a * b) >> 32),
    "mul.wide.s32": ("s32", "s32", "s64", lambda k, d, a, b: k.mul(d, a, b, mode="wide"), lambda a, b: a * b),
    "mul.wide.u32": ("u32", "u32", "u64", lambda k, d, a, b: k.mul(d, a, b, mode="wide"), lambda a, b: a * b),
    "add.s64": ("s64", "s64", "s64", lambda k, d, a, b: k.add(d, a, b), lambda a, b: _wrap(a + b, 64, True)),
    "mul.lo.u64": ("u64", "u64", "u64", lambda k, d, a, b: k.mul(d, a, b, mode="lo"), lambda a, b: _wrap(a * b, 64, 0)),
    "mul.hi.u64": ("u64", "u64", "u64", lambda k, d, a, b: k.mul(d, a, b, mode="hi"), lambda a, b: (a * b) >> 64),
    "mul.hi.s64": ("s64", "s64", "s64", lambda k, d, a, b: k.mul(d, a, b, mode="hi"), lambda a, b: (a * b) >> 64),
    "div.s32": ("s32", "s32", "s32", lambda k, d, a, b: k.div(d, a, b, rnd=None), lambda a, b: _tdiv(a, b)),
    "div.u64": ("u64", "u64", "u64", lambda k, d, a, b: k.div(d, a, b, rnd=None), lambda a, b: a // b),
    "min.s32": ("s32", "s32", "s32", lambda k, d, a, b: k.min(d, a, b), min),
    "max.u32": ("u32", "u32", "u32", lambda k, d, a, b: k.max(d, a, b), max),
    "max.s64": ("s64", "s64", "s64", lambda k, d, a, b: k.max(d, a, b), max),
    "shl.b32": ("u32", "u32", "u32", lambda k, d, a, b: k.shl(d, a, b), lambda a, b: (a << min(b, 32)) % 2**32),
    "shr.s32": ("s32", "u32", "s32", lambda k, d, a, b: k.shr(d, a, b), lambda a, b: a >> min(b, 32)),
    "shr.u32": ("u32", "u32", "u32", lambda k, d, a, b: k.shr(d, a, b), lambda a, b: a >> min(b, 32)),
    "xor.b32": ("u32", "u32", "u32", lambda k, d, a, b: k.xor(d, a, b), lambda a, b: a ^ b),
    "and.b64": ("u64", "u64", "u64", lambda k, d, a, b: k.and_(d, a, b), lambda a, b: a & b),
}


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return -q if (a < 0) != (b < 0) else q


def _setp_selp(cmp):
    def emit(k, d, a, b):
        p = k.reg("pred")
        k.setp(cmp, p, a, b)
        k.selp(d, a, b, p)

    return emit


INT_OPS["setp.lt.s32+selp"] = ("s32", "s32", "s32", _setp_selp("lt"), lambda a, b: a if a < b else b)
INT_OPS["setp.hi.u32+selp"] = ("u32", "u32", "u32", _setp_selp("hi"), lambda a, b: a if a > b else b)


@pytest.mark.parametrize("op", sorted(INT_OPS))
@settings(max_examples=3, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_integer_semantics(op, seed):
    ta, tb, td, emit, ref = INT_OPS[op]
    _check_int(SIM, op, ta, tb, td, emit, ref, seed)


@pytest.mark.gpu
@pytest.mark.parametrize("op", sorted(INT_OPS))
def test_integer_semantics_on_gpu(dev, op):
    from ptx import driver

    ta, tb, td, emit, ref = INT_OPS[op]
    for seed in range(3):
        _check_int(CudaBackend("gpu", driver, dev), op, ta, tb, td, emit, ref, seed)


def _check_int(be, op, ta, tb, td, emit, ref, seed):
    a, b = _ints(seed, ta), _ints(seed + 1, tb)
    if op.startswith("sh"):
        b = np.array([int(x) % 40 for x in b], dtype=object)  # shift amounts incl. >= 32 (clamped)
    if op.startswith("div"):  # no division by zero, no INT_MIN / -1 (both unspecified)
        b = np.array([7 if int(x) in (0, -1) else x for x in b], dtype=object)
    got = _run(be, re.sub(r"\W", "_", op), ta, tb, td, emit, a, b)
    want = [ref(int(x), int(y)) for x, y in zip(a, b, strict=True)]
    np.testing.assert_array_equal(got.astype(object), np.array(want, dtype=object), err_msg=op)


def _f32(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(N) * 10.0 ** rng.integers(-6, 6, N)).astype(np.float32)
    x[:10] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, 65504.0, 65520.0, 3.0e38, 1e-40]
    x[10:12] = np.array([0x7FC00123, 0xFFC00000], np.uint32).view(np.float32)  # NaNs with other payloads
    return x


def _tf32_ref(x: np.ndarray) -> np.ndarray:
    """cvt.rna.tf32.f32 by comparing both tf32 neighbours; ties away from zero; inf kept; a NaN
    becomes 0x7fc00000 with its sign (as an H200 returns it: 0x7fc00123 -> 0x7fc00000)."""
    u = x.view(np.uint32)
    lo = u & np.uint32(0xFFFFE000)
    hi = lo + np.uint32(0x2000)
    dl = np.abs(lo.view(np.float32).astype(np.float64) - x)
    dh = np.abs(hi.view(np.float32).astype(np.float64) - x)
    r = np.where(dh <= dl, hi, lo)
    nan = (u & np.uint32(0x80000000)) | np.uint32(0x7FC00000)
    return np.where(np.isnan(x), nan, np.where(np.isfinite(x), r, u)).view(np.float32)


def _bf16_ref(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even f32 -> bf16 by comparing both neighbours (NaN: canonical 0x7FC0)."""
    u = x.view(np.uint32)
    lo = u & np.uint32(0xFFFF0000)
    hi = lo + np.uint32(0x10000)
    dl = np.abs(lo.view(np.float32).astype(np.float64) - x)
    dh = np.abs(hi.view(np.float32).astype(np.float64) - x)
    even_hi = ((hi >> np.uint32(16)) & np.uint32(1)) == 0
    pick_hi = (dh < dl) | ((dh == dl) & even_hi)
    r = (np.where(pick_hi, hi, lo) >> np.uint32(16)).astype(np.uint16)
    r = np.where(np.isinf(x), (u >> np.uint32(16)).astype(np.uint16), r)
    return np.where(np.isnan(x), np.uint16(0x7FC0), r)


def _cvt(dtype, atype, rnd):
    def emit(k, d, a, b):
        k.cvt(d, a, rnd=rnd, dtype=dtype, atype=atype)

    return emit


def _canon32(f):
    """f32 arithmetic as the GPU does it: a NaN result is the canonical NaN 0x7fffffff (H100)."""

    def ref(a, b):
        r = np.asarray(f(a, b), np.float32)
        return np.where(np.isnan(r), np.uint32(0x7FFFFFFF).view(np.float32), r)

    return ref


def _canon16(f):
    """A narrowing cvt as the GPU does it: NaN becomes 0x7fff (f16 and bf16, H100)."""
    return lambda a, b: np.where(np.isnan(a), np.uint16(0x7FFF), f(a, b))


FLOAT_OPS = {
    "add.f32": ("f32", lambda k, d, a, b: k.add(d, a, b), _canon32(lambda a, b: a + b)),
    "mul.f32": ("f32", lambda k, d, a, b: k.mul(d, a, b), _canon32(lambda a, b: a * b)),
    "min.f32": ("f32", lambda k, d, a, b: k.min(d, a, b), np.fmin),
    "max.f32": ("f32", lambda k, d, a, b: k.max(d, a, b), np.fmax),
    "div.rn.f32": ("f32", lambda k, d, a, b: k.div(d, a, b, rnd="rn"), _canon32(lambda a, b: a / b)),
    "cvt.rna.tf32.f32": ("b32", _cvt("tf32", "f32", "rna"), lambda a, b: _tf32_ref(a).view(np.uint32)),
    "cvt.rn.bf16.f32": ("b16", _cvt("bf16", "f32", "rn"), _canon16(lambda a, b: _bf16_ref(a))),
    "cvt.rn.f16.f32": ("b16", _cvt("f16", "f32", "rn"), _canon16(lambda a, b: a.astype(np.float16).view(np.uint16))),
    "cvt.rzi.s32.f32": ("s32", _cvt("s32", "f32", "rzi"), None),
}


@pytest.mark.parametrize("op", sorted(FLOAT_OPS))
def test_float_semantics(cuda_backend, op):
    td, emit, ref = FLOAT_OPS[op]
    a, b = _f32(1), _f32(2)[::-1].copy()
    got = _run(cuda_backend, re.sub(r"\W", "_", op), "f32", "f32", td, emit, a, b)
    with np.errstate(all="ignore"):
        if ref is None:  # float -> s32: truncate, saturate, NaN -> 0
            want = np.clip(np.nan_to_num(np.trunc(a.astype(np.float64)), nan=0), -(2**31), 2**31 - 1).astype(np.int32)
        else:
            want = ref(a, b)
    if td == "f32":
        np.testing.assert_array_equal(got.view(np.uint32), np.asarray(want, np.float32).view(np.uint32), err_msg=op)
    else:
        np.testing.assert_array_equal(got, want, err_msg=op)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_semantics_kernels_assemble(arch):
    """Every kernel above, and each div form the builder emits, is accepted by ptxas."""
    from ptx import toolchain

    if toolchain.find_ptxas() is None:
        pytest.skip("ptxas not found")
    kernels = [(op, *INT_OPS[op][:4]) for op in INT_OPS]
    kernels += [(op, "f32", "f32", *FLOAT_OPS[op][:2]) for op in FLOAT_OPS]

    def divs(k, d, a, b):
        k.div(d, a, b, rnd="approx")
        k.div(d, a, b, rnd="full", ftz=True)
        k.div(d, a, b, rnd="rz")

    kernels.append(("div_forms", "f32", "f32", "f32", divs))
    for op, ta, tb, td, emit in kernels:
        m, k = _kernel(re.sub(r"\W", "_", op), ta, tb, td, emit)
        cub = toolchain.compile(m.text(), arch=arch)
        assert cub[k.name].spills == 0, op


def test_drivers_offer_the_same_api():
    from ptx import driver

    for name in driver.API:
        assert callable(getattr(simdriver, name)), name
    assert driver.resolve(None) is driver and driver.resolve(simdriver) is simdriver
    with pytest.raises(TypeError, match="lacks available, device, synchronize"):
        driver.resolve(object())


# --------------------------------------------------------------------------- defects it reports


def _launch_sim(m, k, grid, block, args):
    mem = sim.Memory()
    ptrs = [mem.upload(a) if isinstance(a, np.ndarray) else a for a in args]
    return sim.launch(m.text(), k.name, grid, block, ptrs, mem), mem, ptrs


def _base_kernel(name, threads=64, shared=0):
    m = Module()
    k = m.kernel(name, reqntid=threads)
    p = k.param("u64", "x")
    raw, g = k.reg("u64"), k.reg("u64")
    k.ld_param(raw, p)
    k.cvta(g, raw)
    tid = k.reg("u32")
    k.mov(tid, sreg.tid.x)
    s = k.shared("buf", "b32", shared, align=16) if shared else None
    return m, k, g, tid, s


def test_out_of_bounds_global_load_is_reported():
    from tests.ptx import kernels as K

    m, k = K.vadd()
    mem = sim.Memory()
    a, b = mem.upload(np.zeros(100, np.float32)), mem.upload(np.zeros(128, np.float32))
    c = mem.alloc(4 * 128)
    with pytest.raises(sim.SimError, match=r"vadd: line \d+: `ld.global.f32.*outside every allocation"):
        sim.launch(m.text(), "vadd", (1,), (128,), (a, b, c, 128), mem)
    sim.launch(m.text(), "vadd", (1,), (128,), (a, b, c, 100), mem)  # the predicated tail is fine


def test_misaligned_and_undefined_are_reported():
    m, k, g, tid, _ = _base_kernel("misaligned")
    x = k.reg("f32")
    k.ld("global", x, addr(g, 2))
    k.ret()
    with pytest.raises(sim.SimError, match="misaligned global load of 4 bytes"):
        _launch_sim(m, k, 1, 64, [np.zeros(64, np.float32)])
    m, k, g, tid, _ = _base_kernel("undefined")
    y, z = k.reg("f32"), k.reg("f32")
    k.add(z, y, y)
    k.ret()
    with pytest.raises(
        sim.SimError, match=r"`add.f32 %f1, %f0, %f0;`: reads %f0 before it is written.*threads \[0, 1, 2, 3\]\.\.\."
    ):
        _launch_sim(m, k, 1, 64, [np.zeros(1, np.float32)])


def _exchange(barrier: bool, shift: int = 32):
    """Thread t stores t to buf[t], (bar.sync), loads buf[(t + shift) % 64] and stores it to x[t]."""
    m, k, g, tid, s = _base_kernel("exchange", 64, shared=64)
    base, a, j, v = k.reg("u32"), k.reg("u32"), k.reg("u32"), k.reg("u32")
    k.mov(base, s)
    k.shl(a, tid, 2)
    k.add(a, a, base)
    k.st("shared", addr(a), tid)
    if barrier:
        k.bar_sync(0)
    k.add(j, tid, shift)
    k.and_(j, j, 63)
    k.shl(j, j, 2)
    k.add(j, j, base)
    k.ld("shared", v, addr(j))
    off, p = k.reg("u64"), k.reg("u64")
    k.mul(off, tid, 4, mode="wide")
    k.add(p, g, off)
    k.st("global", addr(p), v)
    k.ret()
    return m, k


def test_shared_memory_race_is_reported_whatever_the_order():
    m, k = _exchange(barrier=False)
    with pytest.raises(sim.SimError, match=r"race: warp \d reads shared byte \d+ that warp \d wrote with no bar.sync"):
        _launch_sim(m, k, 1, 64, [np.zeros(64, np.uint32)])
    m, k = _exchange(barrier=False, shift=1)  # within a warp, except across the warp boundary
    with pytest.raises(sim.SimError, match="race"):
        _launch_sim(m, k, 1, 64, [np.zeros(64, np.uint32)])
    m, k = _exchange(barrier=True)
    _, mem, (x,) = _launch_sim(m, k, 1, 64, [np.zeros(64, np.uint32)])
    np.testing.assert_array_equal(mem.read(x, np.uint32, 64), (np.arange(64) + 32) % 64)


def test_cp_async_read_before_wait_is_reported():
    from tests.ptx import kernels as K

    m, k = K.stage_reverse(threads=64)
    text = m.text().replace("cp.async.wait_group 0;", "")
    mem = sim.Memory()
    x, y = mem.upload(np.arange(256, dtype=np.float32)), mem.alloc(1024)
    with pytest.raises(sim.SimError, match="reads shared memory that a cp.async has not completed"):
        sim.launch(text, k.name, 1, 64, (x, y), mem)


def test_warp_collectives_need_their_warp():
    from tests.ptx import kernels as K

    m, k = K.warp_sum_pack()
    bad = _changed(lambda t: re.sub(r"(shfl\.sync\.bfly\.b32 [^;]*), 0xFFFFFFFF;", r"\1, 0x0000FFFF;", t), m.text())
    mem = sim.Memory()
    x, s, p = mem.upload(np.ones(32, np.float32)), mem.alloc(4), mem.alloc(4)
    with pytest.raises(sim.SimError, match="outside membermask"):
        sim.launch(bad, k.name, 1, 32, (x, s, p), mem)
    m, k = K.mma_ldmatrix_f16()
    lines = m.text().splitlines()
    i = next(i for i, line in enumerate(lines) if "mma.sync" in line)
    # only lanes 0..15 reach the mma
    lines[i] = "\tsetp.lt.u32 %p_half, %r_lane, 16;\n\t@%p_half " + lines[i].strip()
    text = "\n".join(lines).replace(
        "{\n", "{\n\t.reg .pred %p_half;\n\t.reg .u32 %r_lane;\n\tmov.u32 %r_lane, %laneid;\n", 1
    )
    mem = sim.Memory()
    bufs = [mem.upload(np.zeros(n, t)) for n, t in ((256, np.float16), (128, np.float16), (128, np.float32))]
    with pytest.raises(sim.SimError, match="executed by part of a warp"):
        sim.launch(text, k.name, 1, 32, (*bufs, mem.alloc(512)), mem)


def test_barrier_deadlock_and_endless_loop_are_reported():
    m, k, g, tid, _ = _base_kernel("split_barrier")
    p = k.reg("pred")
    k.setp("lt", p, tid, 32)
    other = k.label("other")
    k.bra(other, pred=p)
    k.bar_sync(1)
    k.ret()
    k.place(other)
    k.bar_sync(0)
    k.ret()
    with pytest.raises(sim.SimError, match="deadlock"):
        _launch_sim(m, k, 1, 64, [np.zeros(1, np.float32)])
    m, k, g, tid, _ = _base_kernel("spin")
    top = k.label("top")
    k.place(top)
    k.bra(top)
    mem = sim.Memory()
    with pytest.raises(sim.SimError, match="no end after 1000 instructions"):
        sim.launch(m.text(), k.name, 1, 64, (mem.alloc(4),), mem, max_steps=1000)


def test_launch_arguments_are_checked():
    from tests.ptx import kernels as K

    m, k = K.vadd()
    mem = sim.Memory()
    with pytest.raises(sim.SimError, match="takes 4 parameters"):
        sim.launch(m.text(), "vadd", 1, 32, (0, 0, 0), mem)
    with pytest.raises(sim.SimError, match="does not fit in 32 bits"):
        sim.launch(m.text(), "vadd", 1, 32, (0, 0, 0, 2**40), mem)
    with pytest.raises(sim.SimError, match="not in module"):
        sim.launch(m.text(), "nope", 1, 32, (0, 0, 0, 1), mem)
    with pytest.raises(ValueError, match="grid must be"):
        sim.launch(m.text(), "vadd", (0,), 32, (0, 0, 0, 1), mem)


# --------------------------------------------------------------------------- mutated kernels


def _gemm_case(text_fn):
    from minijit.cuda import gemm
    from tests.minijit.cuda.helpers import check_result, gemm_problem

    spec, p = gemm_problem(gemm.default_spec("f16", 136, 72, 50), 136, 72, 50, 1, 1, 0, (0, 0, 0))
    gk = gemm.generate(spec)
    text = text_fn(gk.text)
    mem = sim.Memory()
    ha, hb = gemm.encode(spec.dtype, p.A), gemm.encode(spec.dtype, p.B)
    bt, rt = gemm.tables(p.bt, p.rt)
    da, db, dbt, drt = (mem.upload(x) for x in (ha, hb, bt, rt))
    dc = mem.upload(p.C)
    args = (da, db, dc, dbt, drt, 136, 72, 50, 1, p.lda * spec.es, p.ldb * spec.es, p.ldc * 4)
    sim.launch(text, gk.name, gk.grid(136, 72, 1), gk.block, args, mem)
    out = mem.read(dc, np.float32, p.C.size).reshape(p.C.shape)
    check_result(spec, p, out, rtol=1e-4, atol=1e-3)


MUTATIONS = {
    "no cp.async.wait_group": (lambda t: re.sub(r"cp\.async\.wait_group \d+;", "", t, count=1), "not completed"),
    "bar.sync removed": (lambda t: t.replace("bar.sync 0;", "", 1), "race"),
    "ldmatrix without .trans": (lambda t: t.replace(".x4.trans.", ".x4.", 1), "Not equal"),
    "swizzle xor -> or": (lambda t: t.replace("xor.b32", "or.b32", 1), "Not equal|race"),
    "store 16 bytes off": (
        lambda t: re.sub(r"st\.global\.f32 \[(%\w+)\]", r"st.global.f32 [\1+16]", t, count=1),
        "Not equal|outside",
    ),
    "wait for one group less": (
        lambda t: re.sub(r"cp\.async\.wait_group (\d+);", lambda m: f"cp.async.wait_group {int(m.group(1)) + 1};", t),
        "not completed",
    ),
}


def test_unmutated_gemm_passes():
    _gemm_case(lambda t: t)


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_mutated_gemm_is_rejected(name):
    """Each defect is caught: by a SimError (races, pending copies, bounds) or by a wrong result."""
    fn, match = MUTATIONS[name]
    with pytest.raises((sim.SimError, AssertionError), match=match):
        _gemm_case(lambda t: _changed(fn, t))


def _changed(fn, t):
    out = fn(t)
    assert out != t, "the mutation did not apply"
    return out


def test_mutated_spmm_reduction_is_rejected(monkeypatch):
    """TCA-SpMM's diagonal reduction with one shuffle step fewer gives wrong sums."""
    from minijit.sparse import SpMM, tca
    from tests.minijit.sparse.helpers import csr_with_lengths

    rng = np.random.default_rng(3)
    s = csr_with_lengths([5, 40, 70, 0, 300], 600, rng)
    b = rng.standard_normal((600, 16)).astype(np.float16)
    build = tca.build

    class Mutated:
        def __init__(self, mod):
            self.kernels, self._t = mod.kernels, mod.text()

        def text(self):
            return _changed(lambda t: re.sub(r"\n\s*shfl\.sync\.bfly\.b32 [^\n]*", "", t, count=1), self._t)

    op = SpMM(s, 16, target="cuda", driver=simdriver, strategy="tca")  # (auto may pick row windows)
    c = np.empty((5, 16), np.float32)
    op.execute(b, c)
    np.testing.assert_allclose(c, op.model(b.astype(np.float32)), rtol=1e-3, atol=1e-2)
    monkeypatch.setattr(tca, "build", lambda *a, **kw: Mutated(build(*a, **kw)))
    bad = SpMM(s, 16, target="cuda", driver=simdriver, strategy="tca")
    assert bad.strategy == "tca"
    try:
        bad.execute(b, c)
    except sim.SimError as e:  # a register the removed shuffle wrote is read unwritten
        assert "before it is written" in str(e)
        return
    assert not np.allclose(c, op.model(b.astype(np.float32)), rtol=1e-3, atol=1e-2)
