"""`CudaTensorOperation.execute` end to end through the real cuda-bindings, with the stub
``libcuda.so.1`` of ``tests/ptx/fake_libcuda.c`` standing in for the driver (no GPU needed).

The stub records the geometry, dynamic shared memory and parameter bytes of the last launch, so
these tests check what the simulator cannot: that each kernel family's arguments survive the real
bindings' marshalling (tensor maps by value, byte strides, device pointers) exactly as the kernel
signature expects. The script runs in a subprocess because the driver library is chosen when
cuda-bindings first loads it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

_SCRIPT = r"""
import ctypes, sys, time
import numpy as np
from ptx import driver
from minijit.cuda import gemm, gemm_sm90
from minijit.cuda.operation import CudaTensorOperation, _generated

fake = ctypes.CDLL("libcuda.so.1")  # the library cuda-bindings loaded (same file, same state)
SIZES = {"u64": 8, "s64": 8, "b64": 8, "u32": 4, "s32": 4, "b32": 4, "f32": 4, "tensormap": 128}


class Dev:
    # a device array by __cuda_array_interface__ (the stub's device memory is host memory)
    def __init__(self, nbytes, typestr, shape, readonly=False):
        self.buf = driver.DeviceBuffer(nbytes)
        self.__cuda_array_interface__ = {
            "shape": shape, "typestr": typestr, "data": (self.buf.ptr, readonly), "version": 3, "strides": None
        }


def announce(signature):
    sizes = [SIZES[t] for t in signature]
    fake.fake_set_param_sizes(len(sizes), (ctypes.c_int * len(sizes))(*sizes))


def last(signature):
    geom, raw = (ctypes.c_uint * 7)(), (ctypes.c_ubyte * 4096)()
    count = fake.fake_last_launch(geom, raw)
    raw, out, off = bytes(raw), [], 0
    for t in signature:
        n = SIZES[t]
        chunk = raw[off : off + n]
        out.append(chunk if t == "tensormap" else int.from_bytes(chunk, "little", signed=t.startswith("s")))
        off += n
    return count, tuple(geom), out


m, n, k = 304, 200, 160  # ragged tiles; leading dims multiples of 16 bytes (TMA)
a = Dev(m * k * 2, "<f2", (k, m))  # column-major A (m contiguous), B (k contiguous), C (m contiguous)
b = Dev(k * n * 2, "<f2", (n, k))
c = Dev(m * n * 4, "<f4", (n, m))
setup = ("fp16", "none", "gemm", "none", ["m", "n", "k"], ["undefined"] * 3, [m, n, k], [1, 0, m], [0, k, 1], [1, m, 0])
pa, pb, pc = a.buf.ptr, b.buf.ptr, c.buf.ptr

# mma.sync family: pointers, sizes and byte strides as the kernel's 12 parameters
op = CudaTensorOperation(family="mma.sync")
op.setup(*setup)
gk = _generated(op.kernel_spec(pa, pb))
announce(gk.signature)
op.execute(a, b, c)
count, geom, p = last(gk.signature)
assert count == 1 and geom[:6] == gk.grid(m, n, 1) + gk.block and geom[6] == 0, geom
assert p[0:3] == [pa, pb, pc] and p[5:9] == [m, n, k, 1] and p[9:12] == [m * 2, k * 2, m * 4], p
bt = np.frombuffer(ctypes.string_at(p[3], 24), np.int64)
rt = np.frombuffer(ctypes.string_at(p[4], 16), np.int64)
assert not bt.any() and not rt.any(), (bt, rt)  # one batch entry, one reduction step, zero offsets

# a bad array is refused before anything is launched
try:
    op.execute(a, b, Dev(m * n * 4, "<f4", (n, m), readonly=True))
except ValueError as e:
    assert "read-only" in str(e), e
else:
    raise AssertionError("read-only out accepted")
assert last(gk.signature)[0] == 1

# the prepared launch is reused for the same addresses (and still launches every time); new
# addresses get their own entry, with their own parameters
op.execute(a, b, c)
assert len(op._launches) == 1 and last(gk.signature)[0] == 2
c2 = Dev(m * n * 4, "<f4", (n, m))
op.execute(a, b, c2)
count, _, p = last(gk.signature)
assert count == 3 and p[2] == c2.buf.ptr and len(op._launches) == 2, (count, p)
op.setup(*setup)  # a new setup forgets them
assert not op._launches

# sm90a family: two 128-byte tensor maps by value, C, sizes, ldc; dynamic shared memory above 48 KB
op = CudaTensorOperation(family="sm90a")
op.setup(*setup)
spec = op.sm90_spec()
kern = gemm_sm90.generate(spec)
announce(kern.signature)
op.execute(a, b, c)
count, geom, p = last(kern.signature)
# persistent: one CTA per SM of the device model (the stub refuses MULTIPROCESSOR_COUNT: the H100's 132)
assert spec.persistent and op.gpu.sms == 132
assert count == 4 and geom[:6] == kern.grid(m, n, 1, ctas=132) + kern.block, geom
assert geom[6] == spec.smem_bytes > 48 * 1024, geom
ta, tb = (np.frombuffer(t, np.uint64) for t in p[:2])
# stub encoding: address, rank, dims, strides (rank - 1), box, element strides, ..., swizzle at 10
assert list(ta[:7]) == [pa, 2, m, k, m * 2, 64, gemm_sm90.BK] and ta[10] == 3, ta
assert list(tb[:7]) == [pb, 2, k, n, k * 2, gemm_sm90.BK, spec.bn] and tb[10] == 3, tb
assert p[2:] == [pc, m, n, k, 1, m * 4], p  # Z = 1 (the batch count) before ldc

# host time per execute on device arrays (stub launches cost ~nothing): printed, not asserted
for fam in ("mma.sync", "sm90a"):
    op = CudaTensorOperation(family=fam)
    op.setup(*setup)
    op.execute(a, b, c, sync=False)
    ts = []
    for _ in range(300):
        t = time.perf_counter()
        op.execute(a, b, c, sync=False)
        ts.append(time.perf_counter() - t)
    print(f"{fam}: execute host time median {sorted(ts)[150] * 1e6:.1f} us")
print("stub-op-ok")
"""


def test_execute_marshals_both_families_through_real_bindings(tmp_path):
    pytest.importorskip("cuda.bindings.driver")
    from ptx import toolchain

    if toolchain.find_ptxas() is None:
        pytest.skip("no ptxas (nvidia-cuda-nvcc wheel) to build the cubins")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler for the stub libcuda")
    src = ROOT / "tests" / "ptx" / "fake_libcuda.c"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "libcuda.so.1"), str(src)], check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path), PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "stub-op-ok" in r.stdout, r.stdout + r.stderr
