"""AArch64 code JIT'd by asm.aarch64 and executed (natively on ARM, in qemu elsewhere)."""

from __future__ import annotations

import signal
import struct
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asm import llvm
from asm.aarch64 import Assembler, d0, d1, mem, p0, p1, post, v0, v1, v2, x0, x1, x2, x3, x4, x8, x9, xzr, z0, z1, z2
from asm.aarch64.registers import ScalarReg
from minijit.runtime import emulator, load, runs_natively
from minijit.runtime.emulator import CODE_BASE, CODE_END, EmulatedKernel, EmulatorError, EmulatorFault, Worker, worker
from minijit.runtime.harness import CMD_CALL, harness_program

needs_emulation = pytest.mark.skipif(runs_natively("aarch64"), reason="host runs AArch64 natively")
SVE_VLS = [128, 256, 512]


def neon_axpy(dtype: str) -> Assembler:
    """f(n, alpha*, x*, y*): y += alpha * x, 128-bit vectors then a scalar tail."""
    es, lanes, size = ("s", 4, 4) if dtype == "fp32" else ("d", 2, 8)

    def vec(r):
        return getattr(r, f"{es}{lanes}")

    a = Assembler()
    a.ld1r(vec(v0), mem(x1))
    body, tail, done = a.new_label("body"), a.new_label("tail"), a.new_label("done")
    a.bind(body)  # vector loop: backward branch
    a.cmp(x0, lanes)
    a.b_lt(tail)
    a.ld1(vec(v1), post(x2, 16))
    a.ld1(vec(v2), mem(x3))
    a.fmla(vec(v2), vec(v1), vec(v0))
    a.st1(vec(v2), post(x3, 16))
    a.sub(x0, x0, lanes)
    a.b(body)
    a.bind(tail)  # scalar loop: forward exit
    a.cbz(x0, done)
    a.ldr(ScalarReg(1, es), post(x2, size))
    a.ldr(ScalarReg(2, es), mem(x3))
    a.fmla(vec(v2), vec(v1), vec(v0))  # upper lanes are zero and stay unused
    a.str(ScalarReg(2, es), post(x3, size))
    a.sub(x0, x0, 1)
    a.b(tail)
    a.bind(done)
    a.ret()
    return a


def neon_dot(dtype: str) -> Assembler:
    """T f(n, x*, y*): sum of x*y, returned in s0/d0."""
    es, lanes, size = ("s", 4, 4) if dtype == "fp32" else ("d", 2, 8)

    def vec(r):
        return getattr(r, f"{es}{lanes}")

    a = Assembler()
    a.movi(v0.d2, 0)
    body, tail, done = a.new_label("body"), a.new_label("tail"), a.new_label("done")
    a.bind(body)
    a.cmp(x0, lanes)
    a.b_lt(tail)
    a.ld1(vec(v1), post(x1, 16))
    a.ld1(vec(v2), post(x2, 16))
    a.fmla(vec(v0), vec(v1), vec(v2))
    a.sub(x0, x0, lanes)
    a.b(body)
    a.bind(tail)
    a.faddp(vec(v0), vec(v0), vec(v0))
    if lanes == 4:
        a.faddp(vec(v0), vec(v0), vec(v0))
    reduce_done = a.new_label("scalar")
    a.bind(reduce_done)
    a.cbz(x0, done)
    a.movi(v1.d2, 0)
    a.movi(v2.d2, 0)
    a.ldr(ScalarReg(1, es), post(x1, size))
    a.ldr(ScalarReg(2, es), post(x2, size))
    a.fmla(vec(v0), vec(v1), vec(v2))  # lane 0 only is non-zero
    a.sub(x0, x0, 1)
    a.b(reduce_done)
    a.bind(done)
    a.ret()
    return a


def sve_axpy(dtype: str) -> Assembler:
    """f(n, alpha*, x*, y*): vector-length-agnostic y += alpha * x with a whilelt tail."""
    es = "s" if dtype == "fp32" else "d"

    def z(r):
        return getattr(r, es)

    ld1, st1, ld1r = ("ld1w", "st1w", "ld1rw") if es == "s" else ("ld1d", "st1d", "ld1rd")
    shift = 2 if es == "s" else 3
    a = Assembler()
    a.ptrue(getattr(p0, es))
    getattr(a, ld1r)(z(z0), p0.z, mem(x1))
    a.mov(x4, 0)
    loop, done = a.new_label("loop"), a.new_label("done")
    a.bind(loop)
    a.whilelt(getattr(p1, es), x4, x0)
    a.b_none(done)
    getattr(a, ld1)(z(z1), p1.z, mem(x2, x4, "lsl", shift))
    getattr(a, ld1)(z(z2), p1.z, mem(x3, x4, "lsl", shift))
    a.fmla(z(z2), p1.m, z(z1), z(z0))
    getattr(a, st1)(z(z2), p1, mem(x3, x4, "lsl", shift))
    getattr(a, "incw" if es == "s" else "incd")(x4)
    a.b(loop)
    a.bind(done)
    a.ret()
    return a


DTYPES = {"fp32": np.float32, "fp64": np.float64}


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@settings(max_examples=10)
@given(n=st.integers(0, 300), seed=st.integers(0, 2**32 - 1))
def test_neon_axpy_and_dot(dtype, n, seed):
    rng = np.random.default_rng(seed)
    t = DTYPES[dtype]
    ctype = "float" if dtype == "fp32" else "double"
    axpy = _kernel(neon_axpy, dtype, f"void(int64_t, const {ctype}*, const {ctype}*, {ctype}*)")
    dot = _kernel(neon_dot, dtype, f"{ctype}(int64_t, const {ctype}*, const {ctype}*)")
    x, y = rng.standard_normal(n).astype(t), rng.standard_normal(n).astype(t)
    alpha = np.array([rng.standard_normal()], dtype=t)
    expect = y.astype(np.float64) + float(alpha[0]) * x.astype(np.float64)
    got_dot = dot(n, x, y)
    axpy(n, alpha, x, y)
    tol = 1e-5 if dtype == "fp32" else 1e-12
    np.testing.assert_allclose(y, expect, rtol=tol, atol=tol)
    y0 = expect - float(alpha[0]) * x.astype(np.float64)  # y before the axpy
    ref_dot = float(np.dot(x.astype(np.float64), y0))
    assert got_dot == pytest.approx(ref_dot, rel=1e-4 if dtype == "fp32" else 1e-10, abs=1e-4 * np.sqrt(n + 1))


_KERNELS: dict = {}


def _kernel(builder, dtype: str, signature: str, sve_vl: int = 128):
    key = (builder.__name__, dtype, sve_vl)
    if key not in _KERNELS:
        a = builder(dtype)
        _KERNELS[key] = load(a.code(), signature, isa="aarch64", listing=a.listing(), sve_vl=sve_vl, name=key[0])
    return _KERNELS[key]


@pytest.mark.parametrize("vl", SVE_VLS)
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_sve_axpy_every_length_up_to_1000(vl, dtype):
    """One vector-length-agnostic kernel, correct at every VL for n = 0..1000 (a sample of
    lengths around every multiple of the vector length, plus random ones)."""
    if runs_natively("aarch64") and vl != 128:
        pytest.skip("native host: its own vector length only")
    t = DTYPES[dtype]
    ctype = "float" if dtype == "fp32" else "double"
    k = _kernel(sve_axpy, dtype, f"void(int64_t, const {ctype}*, const {ctype}*, {ctype}*)", sve_vl=vl)
    rng = np.random.default_rng(vl)
    lanes = vl // (32 if dtype == "fp32" else 64)
    lengths = sorted({0, 1, 1000} | {m + d for m in range(0, 1001, lanes) for d in (-1, 0, 1) if 0 <= m + d <= 1000})
    lengths = lengths[:: max(1, len(lengths) // 60)] + [1000]
    for n in lengths:
        # guard zones on both sides catch writes past the predicate
        buf_y = rng.standard_normal(n + 64).astype(t)
        x = rng.standard_normal(n).astype(t)
        y = buf_y[32 : 32 + n]
        before = buf_y.copy()
        alpha = np.array([1.5], dtype=t)
        k(n, alpha, x, buf_y[32:])
        expect = before[32 : 32 + n].astype(np.float64) + 1.5 * x.astype(np.float64)
        np.testing.assert_allclose(y, expect, rtol=1e-6, atol=1e-6)
        assert np.array_equal(buf_y[:32], before[:32]) and np.array_equal(buf_y[32 + n :], before[32 + n :])


@needs_emulation
@pytest.mark.parametrize("vl", SVE_VLS + [2048])
def test_worker_runs_at_requested_vector_length(vl):
    assert worker(vl).vector_length() == vl


def collatz_steps() -> Assembler:
    """int64 f(n): Collatz steps to reach 1 (tbz forward, cbnz/b.ne backward)."""
    a = Assembler()
    a.mov(x1, 0)
    loop, even, done = a.new_label("loop"), a.new_label("even"), a.new_label("done")
    a.bind(loop)
    a.cmp(x0, 1)
    a.b_cond("ls", done)
    a.add(x1, x1, 1)
    a.tbz(x0, 0, even)
    a.add(x2, x0, x0, "lsl", 1)  # 3n + 1
    a.add(x0, x2, 1)
    a.b(loop)
    a.bind(even)
    a.lsr(x0, x0, 1)
    a.cbnz(x0, loop)
    a.bind(done)
    a.mov(x0, x1)
    a.ret()
    return a


@settings(max_examples=20)
@given(n=st.integers(1, 10**6))
def test_branches_forward_and_backward(n):
    if "collatz" not in _KERNELS:
        a = collatz_steps()
        assert llvm.assemble(a.listing()) == a.code()
        _KERNELS["collatz"] = load(a.code(), "int64_t(int64_t)", isa="aarch64")
    steps, m = 0, n
    while m > 1:
        m = 3 * m + 1 if m & 1 else m // 2
        steps += 1
    assert _KERNELS["collatz"](n) == steps


@needs_emulation
def test_fault_raises_names_signal_and_pc_then_fresh_worker_succeeds():
    # stores into y, then loads from address 0
    a = Assembler()
    a.str(xzr, mem(x0))
    a.mov(x1, 0)
    a.ldr(x1, mem(x1))
    a.ret()
    bad = EmulatedKernel(a.code(), "void(double*, int64_t)", name="bad")
    y = np.arange(4, dtype=np.float64)
    with pytest.raises(EmulatorFault) as info:
        bad(y, 0)
    assert info.value.signo == signal.SIGSEGV
    assert info.value.pc == bad.address + 8 and info.value.address == 0
    assert "SIGSEGV" in str(info.value) and f"{bad.address + 8:#x}" in str(info.value)
    np.testing.assert_array_equal(y, np.arange(4.0))  # nothing copied back
    # illegal instruction
    u = Assembler()
    u.inst(0)
    with pytest.raises(EmulatorFault, match="SIGILL"):
        EmulatedKernel(u.code(), "void(void)")()
    # the next call runs on a fresh worker; kernels are placed again at their old address
    collatz = EmulatedKernel(collatz_steps().code(), "int64_t(int64_t)")
    assert collatz(6) == 8
    assert bad.address == info.value.pc - 8


@needs_emulation
def test_runaway_code_times_out_and_worker_recovers():
    a = Assembler()
    a.b(0)
    spin = EmulatedKernel(a.code(), "void(void)", sve_vl=256)
    w = worker(256)
    old = w.timeout
    w.timeout = 0.5
    try:
        with pytest.raises(EmulatorError, match="did not answer"):
            spin()
    finally:
        w.timeout = old
    assert w.vector_length() == 256


@needs_emulation
def test_aliasing_arrays_alias_in_the_worker():
    """in-place y = y + y through two pointers to the same buffer."""
    a = Assembler()
    a.ldr(d0, mem(x0))
    a.ldr(d1, mem(x1))
    a.fadd(v0.d2, v0.d2, v1.d2)
    a.str(d0, mem(x1, 8))
    a.ret()
    k = EmulatedKernel(a.code(), "void(const double*, double*)")
    buf = np.array([1.0, 2.0, 3.0])
    k(buf[:1], buf[1:])
    np.testing.assert_array_equal(buf, [1.0, 2.0, 3.0])
    k(buf, buf[1:])
    np.testing.assert_array_equal(buf, [1.0, 2.0, 3.0])


def test_harness_listing_reassembles_to_its_bytes():
    h = harness_program()
    assert llvm.assemble(h.listing()) == h.code()


def test_emulated_kernel_checks_arguments_before_running():
    a = Assembler()
    a.inst(0)  # would fault if it ever ran
    k = EmulatedKernel(a.code(), "void(float*, int64_t)")
    with pytest.raises(TypeError):
        k(np.zeros(3, dtype=np.float64), 1)
    with pytest.raises(TypeError):
        k(np.zeros(3, dtype=np.float32))
    ro = np.zeros(3, dtype=np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError):
        k(ro, 1)
    with pytest.raises(ValueError, match="sve_vl"):
        worker(100)


def returns(value: int) -> Assembler:
    a = Assembler()
    a.mov(x0, value)
    a.ret()
    return a


def udf() -> Assembler:
    a = Assembler()
    a.inst(0)  # udf #0: SIGILL
    return a


@needs_emulation
def test_restart_places_old_kernels_at_their_old_addresses_after_new_ones():
    """The order that used to fail: kernels placed, a fault restarts the worker, new kernels
    and data are placed first in the fresh worker, then the old kernels run at their old
    addresses, including one that is only ever reached by absolute address."""
    w = worker(128)
    olds = [EmulatedKernel(returns(v).code(), "int64_t(void)", name=f"ret{v}") for v in (11, 22, 33)]
    callee = olds[2]
    a = Assembler()
    a.mov(x9, callee.address)
    a.br(x9)  # tail call by absolute address, like the compiled loop nest
    caller = EmulatedKernel(a.code(), "int64_t(void)", name="caller")
    before = [k.address for k in olds] + [caller.address]
    assert [k() for k in olds] == [11, 22, 33] and caller() == 33
    for _ in range(2):  # twice: each fresh worker sees new kernels placed before the old ones run
        with pytest.raises(EmulatorFault, match="SIGILL"):
            EmulatedKernel(udf().code(), "void(void)")()
        generation = w.generation
        news = [EmulatedKernel(returns(v).code(), "int64_t(void)") for v in (44, 55)]
        assert [k() for k in news] == [44, 55]
        data = [w.mmap(3 * 4096) for _ in range(3)]  # placed by qemu: never in the code range
        assert w.generation == generation + 1
        assert caller() == 33  # its callee was placed again although nothing touched it since
        assert [k() for k in olds] == [11, 22, 33]
        assert [k.address for k in olds] + [caller.address] == before
        codes = [k.address for k in olds + news + [caller]]
        assert len(set(codes)) == len(codes)
        assert all(CODE_BASE <= c < CODE_END and c % 4096 == 0 for c in codes)
        assert not any(CODE_BASE <= d < CODE_END for d in data)
        for d in data:
            w.munmap(d, 3 * 4096)


@pytest.fixture
def private_worker():
    """A worker of its own (not the process-wide one) with short watchdog limits."""
    w = Worker(128, timeout=60, idle_timeout=0.2)
    yield w
    w.close()


@needs_emulation
def test_fixed_address_that_is_taken_raises(private_worker):
    w = private_worker
    addr = w.load_code(returns(1).code())
    with pytest.raises(EmulatorError, match=f"could not map 8 bytes at {addr:#x}"):
        w.load_code(returns(2).code(), addr)
    assert w.call(addr)[0] == 1


@needs_emulation
def test_fault_reply_is_read_from_a_worker_that_already_exited(private_worker):
    """The worker replies FAULT and exits; its reply must still be read from its own pipe
    (this used to start a fresh worker and wait the full timeout for a reply)."""
    w = private_worker
    addr = w.load_code(udf().code())
    with w.lock:
        w._send(CMD_CALL, addr)
        w._proc.wait(timeout=30)
        start = time.monotonic()
        with pytest.raises(EmulatorFault, match="SIGILL") as info:
            w._reply()
    assert time.monotonic() - start < 5 and info.value.pc == addr
    assert w.call(w.load_code(returns(7).code()))[0] == 7


def nanosleep_kernel() -> Assembler:
    """void f(const struct timespec*): nanosleep; blocks in the kernel without using CPU."""
    a = Assembler()
    a.mov(x1, 0)
    a.mov(x8, 101)  # nanosleep
    a.svc(0)
    a.ret()
    return a


def _sleeping_call(w: Worker) -> None:
    ts = w.mmap(16)
    w.write(ts, struct.pack("<qq", 3600, 0))
    w.call(w.load_code(nanosleep_kernel().code()), ts)


@needs_emulation
def test_blocked_worker_is_detected_in_seconds(private_worker):
    w = private_worker
    start = time.monotonic()
    with pytest.raises(EmulatorError, match="idle: no CPU time used") as info:
        _sleeping_call(w)
    elapsed = time.monotonic() - start
    assert not isinstance(info.value, EmulatorFault)
    assert 0.2 <= elapsed < 10  # idle limit 0.2 s; the plain timeout (60 s) did not fire
    assert w._proc is None  # killed
    assert w.vector_length() == 128  # and a fresh worker serves the next request


@needs_emulation
def test_cpu_busy_call_outlives_the_idle_limit(private_worker):
    """A call that computes for 3.5x the idle limit is slow, not hung: it is left alone."""
    w = private_worker
    f = Assembler()
    f.inst(0xD53BE000)  # mrs x0, cntfrq_el0
    f.ret()
    freq = w.call(w.load_code(f.code()))[0]
    a = Assembler()  # int64 f(ticks): spin until cntvct_el0 has advanced by ticks; returns iterations
    a.inst(0xD53BE041)  # mrs x1, cntvct_el0
    a.add(x2, x1, x0)
    a.mov(x3, 0)
    loop = a.new_label("spin")
    a.bind(loop)
    a.add(x3, x3, 1)
    a.inst(0xD53BE041)  # mrs x1, cntvct_el0
    a.cmp(x1, x2)
    a.b_cond("lo", loop)
    a.mov(x0, x3)
    a.ret()
    spin = w.load_code(a.code())
    start = time.monotonic()
    iterations = w.call(spin, int(freq * 0.7))[0]
    assert time.monotonic() - start >= 0.7 > 3 * w.idle_timeout
    assert iterations > 1000


@needs_emulation
def test_without_proc_only_the_plain_timeout_applies(private_worker, monkeypatch):
    monkeypatch.setattr(emulator, "_cpu_and_state", lambda pid: None)  # as on a host without /proc
    w = private_worker
    w.timeout = 0.5
    start = time.monotonic()
    with pytest.raises(EmulatorError, match="did not answer within 0.5 s"):
        _sleeping_call(w)
    assert time.monotonic() - start >= 0.5
    assert w.vector_length() == 128


def test_cpu_and_state_reads_proc_or_gives_none():
    import os

    sample = emulator._cpu_and_state(os.getpid())
    if sample is not None:  # Linux
        cpu, state = sample
        assert cpu >= 0 and state == "R"
    assert emulator._cpu_and_state(-1) is None


def test_timeouts_from_the_environment(monkeypatch):
    monkeypatch.setenv("MINIJIT_EMU_IDLE_TIMEOUT", "2.5")
    assert emulator._env_seconds("MINIJIT_EMU_IDLE_TIMEOUT", 5.0, zero_ok=True) == 2.5
    monkeypatch.setenv("MINIJIT_EMU_IDLE_TIMEOUT", "0")
    assert emulator._env_seconds("MINIJIT_EMU_IDLE_TIMEOUT", 5.0, zero_ok=True) == 0
    monkeypatch.setenv("MINIJIT_EMU_IDLE_TIMEOUT", "")
    assert emulator._env_seconds("MINIJIT_EMU_IDLE_TIMEOUT", 5.0, zero_ok=True) == 5.0
    for bad in ("soon", "-1", "nan", "inf"):
        monkeypatch.setenv("MINIJIT_EMU_IDLE_TIMEOUT", bad)
        with pytest.raises(ValueError, match="MINIJIT_EMU_IDLE_TIMEOUT"):
            emulator._env_seconds("MINIJIT_EMU_IDLE_TIMEOUT", 5.0, zero_ok=True)
    monkeypatch.setenv("MINIJIT_EMU_TIMEOUT", "0")
    with pytest.raises(ValueError, match="MINIJIT_EMU_TIMEOUT"):
        emulator._env_seconds("MINIJIT_EMU_TIMEOUT", 120.0, zero_ok=False)
    assert Worker(128, timeout=7, idle_timeout=0).idle_timeout == 0


@needs_emulation
def test_workers_are_stopped_at_exit() -> None:
    """A process that used the emulator, through `worker()` and a Worker of its own, exits without
    a qemu process or pipe left over: no ResourceWarning (dev mode shows them), no process alive."""
    code = (
        "import numpy as np\n"
        "from minijit.runtime import emulator\n"
        "from minijit.sparseauto.api import sparse_einsum\n"
        "from minijit.sparseauto.tensor import SparseTensor\n"
        "a = SparseTensor.from_dense(np.eye(4))\n"
        "assert sparse_einsum('ik,kj->ij', a, np.ones((4, 3)), target='aarch64-neon').sum() == 12\n"
        "own = emulator.Worker(256)\n"
        "print(emulator.worker(128).proc.pid, own.proc.pid, flush=True)\n"
    )
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-X", "dev", "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "ResourceWarning" not in done.stderr, done.stderr
    for pid in map(int, done.stdout.split()):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        with open(f"/proc/{pid}/stat") as f:  # reaped or a zombie of a dead parent, never running
            assert f.read().split()[2] == "Z", f"qemu worker {pid} still running"
