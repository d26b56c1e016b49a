"""Driver layer pieces that run without a GPU: availability, error names, argument packing."""

from __future__ import annotations

import ctypes
import enum
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ptx import CudaError, driver


def test_available_is_a_bool():
    assert isinstance(driver.available(), bool)


class _Res(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1


class _FakeDriver:
    def cuMemAlloc(self, n):
        return (_Res.CUDA_ERROR_INVALID_VALUE, None)

    def cuDeviceGetCount(self):
        return (_Res.CUDA_SUCCESS, 3)

    def cuCtxSynchronize(self):
        return (_Res.CUDA_SUCCESS,)

    def cuGetErrorName(self, err):
        return (_Res.CUDA_SUCCESS, err.name.encode())

    def cuGetErrorString(self, err):
        return (_Res.CUDA_SUCCESS, b"invalid argument")


def test_errors_carry_the_driver_name(monkeypatch):
    fake = _FakeDriver()
    monkeypatch.setattr(driver, "_driver", lambda: fake)
    assert driver._call("cuDeviceGetCount") == 3
    assert driver._call("cuCtxSynchronize") is None
    with pytest.raises(CudaError, match=r"cuMemAlloc failed: CUDA_ERROR_INVALID_VALUE \(1\): invalid argument") as e:
        driver._call("cuMemAlloc", 16)
    assert e.value.name == "CUDA_ERROR_INVALID_VALUE" and e.value.code == 1


def test_kernel_params_are_pointers_to_typed_values():
    fn = driver.Function(None, "k", None, signature=("u64", "u32", "f32", "s32", "f16"))
    buf = driver.DeviceBuffer.__new__(driver.DeviceBuffer)
    buf._ptr, buf.nbytes = 0xDEAD0000, 16
    values, ptrs = fn._pack([buf, 7, 1.5, -2, 1.0])
    assert [type(v) for v in values] == [
        ctypes.c_uint64,
        ctypes.c_uint32,
        ctypes.c_float,
        ctypes.c_int32,
        ctypes.c_uint16,
    ]
    assert ctypes.cast(ptrs[0], ctypes.POINTER(ctypes.c_uint64)).contents.value == 0xDEAD0000
    assert ctypes.cast(ptrs[1], ctypes.POINTER(ctypes.c_uint32)).contents.value == 7
    assert ctypes.cast(ptrs[2], ctypes.POINTER(ctypes.c_float)).contents.value == 1.5
    assert ctypes.cast(ptrs[3], ctypes.POINTER(ctypes.c_int32)).contents.value == -2
    assert ctypes.cast(ptrs[4], ctypes.POINTER(ctypes.c_uint16)).contents.value == 0x3C00
    buf._ptr = None  # nothing to free


def test_kernel_param_checks():
    fn = driver.Function(None, "k", None, signature=("u32",))
    with pytest.raises(TypeError, match="takes 1 arguments"):
        fn._pack([1, 2])
    untyped = driver.Function(None, "k", None)
    with pytest.raises(TypeError, match="no PTX type"):
        untyped._pack([3])
    values, _ = untyped._pack([np.float32(2.0), (5, "u64")])
    assert [type(v) for v in values] == [ctypes.c_float, ctypes.c_uint64]


def test_launch_passes_grid_block_and_a_void_pointer_array(monkeypatch):
    seen = {}

    class Fake(_FakeDriver):
        def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            arr = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
            seen["dims"] = (gx, gy, gz, bx, by, bz, smem, stream, extra)
            seen["u32"] = ctypes.cast(arr[1], ctypes.POINTER(ctypes.c_uint32)).contents.value
            seen["f32"] = ctypes.cast(arr[0], ctypes.POINTER(ctypes.c_float)).contents.value
            return (_Res.CUDA_SUCCESS,)

    monkeypatch.setattr(driver, "_driver", lambda: Fake())
    fn = driver.Function(None, "k", "handle", signature=("f32", "u32"))
    fn.launch(grid=4, block=(128, 2), args=(0.25, 9))
    assert seen == {"dims": (4, 1, 1, 128, 2, 1, 0, 0, 0), "u32": 9, "f32": 0.25}


class _MemDriver(_FakeDriver):
    """Host memory as device memory; argument kinds as cuda-bindings takes them (``CUdeviceptr``
    or int for device pointers, an int address for host buffers)."""

    def __init__(self):
        self.blocks, self.calls = {}, []

    def cuMemAlloc(self, n):
        b = ctypes.create_string_buffer(n)
        self.blocks[ctypes.addressof(b)] = b
        return (_Res.CUDA_SUCCESS, ctypes.addressof(b))

    def cuMemFree(self, ptr):
        del self.blocks[int(ptr)]
        return (_Res.CUDA_SUCCESS,)

    def cuMemcpyHtoD(self, dst, src, n):
        assert isinstance(src, int) and int(dst) in self.blocks
        self.calls.append("HtoD")
        ctypes.memmove(int(dst), src, n)
        return (_Res.CUDA_SUCCESS,)

    def cuMemcpyDtoH(self, dst, src, n):
        assert isinstance(dst, int) and int(src) in self.blocks
        self.calls.append("DtoH")
        ctypes.memmove(dst, int(src), n)
        return (_Res.CUDA_SUCCESS,)

    def cuMemsetD8(self, dst, value, n):
        ctypes.memset(int(dst), value, n)
        return (_Res.CUDA_SUCCESS,)

    def cuEventCreate(self, flags):
        return (_Res.CUDA_SUCCESS, [None])

    def cuEventRecord(self, ev, stream):
        ev[0] = len(self.calls)
        self.calls.append("record")
        return (_Res.CUDA_SUCCESS,)

    def cuEventSynchronize(self, ev):
        return (_Res.CUDA_SUCCESS,)

    def cuEventElapsedTime(self, start, end):  # 13.x has no cuEventElapsedTime_v2
        return (_Res.CUDA_SUCCESS, float(end[0] - start[0]))

    def cuEventDestroy(self, ev):
        return (_Res.CUDA_SUCCESS,)


def test_copies_and_events_against_a_host_memory_driver(monkeypatch):
    fake = _MemDriver()
    monkeypatch.setattr(driver, "_driver", lambda: fake)
    monkeypatch.setattr(driver, "device", lambda ordinal=0: None)
    x = np.arange(10, dtype=np.float32)
    start, stop = driver.Event(), driver.Event()
    start.record()
    buf = driver.to_device(x)
    np.testing.assert_array_equal(buf.to_host(np.float32, 10), x)
    stop.record()
    assert stop.elapsed_ms(start) == 3.0  # record, HtoD, DtoH, record
    buf.zero()
    assert (buf.to_host(np.int32, 10) == 0).all()
    with pytest.raises(ValueError, match="C-contiguous"):
        buf.copy_to(np.empty((4, 4), np.float32).T)
    buf.free()
    assert not fake.blocks


def _driver_calls() -> set[str]:
    src = Path(driver.__file__).read_text()
    direct = set(re.findall(r"drv\.(cu\w+)\(", src))  # hot paths call the bindings directly
    return set(re.findall(r"_call\(\s*\"(cu\w+)\"", src)) | direct | {"cuGetErrorName", "cuGetErrorString"}


def test_every_driver_call_exists_in_cuda_bindings():
    real = pytest.importorskip("cuda.bindings.driver")
    calls = _driver_calls()
    assert {"cuLaunchKernel", "cuMemcpyHtoD", "cuEventElapsedTime"} <= calls
    assert sorted(c for c in calls if not hasattr(real, c)) == []
    assert real.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR is not None
    assert real.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES is not None


_STUB_SCRIPT = """
import numpy as np
from ptx import CudaError, driver
assert driver.available()
dev = driver.device()
assert (dev.name, dev.arch) == ("Fake H200", "sm_90"), dev
n = 1000
a, b = np.arange(n, dtype=np.float32), np.ones(n, np.float32)
da, db, dc = driver.to_device(a), driver.to_device(b), driver.to_device(np.full(n + 64, 7.0, np.float32))
fn = driver.load(b"\\x7fELF" + bytes(60)).function("vadd", signature=("u64", "u64", "u64", "u32"))
assert fn.attribute("NUM_REGS") == 42
e0, e1 = driver.Event(), driver.Event()
e0.record()
fn.launch(grid=((n + 255) // 256,), block=(256,), args=(da, db, dc, n))
fn.launch(grid=1, block=1, args=(da, db, dc, 0), shared=64 * 1024)
dc2 = driver.to_device(np.zeros(n, np.float32))
again = fn.prepare(grid=((n + 255) // 256,), block=(256,), args=(da, da, dc2, n))
again()
again()  # the packed parameter block stays valid across calls
assert (dc2.to_host(np.float32, n) == 2 * a).all()
e1.record()
assert e1.elapsed_ms(e0) == 0.5
driver.synchronize()
out = dc.to_host(np.float32, n + 64)
assert (out[:n] == a + b).all() and (out[n:] == 7.0).all()
# tensor maps through the real cuda-bindings marshalling (it takes cuuint64_t/cuuint32_t lists)
from ptx.tensormap import DATA_TYPES, SWIZZLE_128B
tm = driver.encode_tensor_map_tiled(
    dtype="float16", rank=2, global_address=da.ptr, global_dim=(300, 70), global_strides=(640,),
    box_dim=(64, 32), element_strides=(1, 1), swizzle=SWIZZLE_128B,
)
words = np.frombuffer(tm, np.uint64)
assert len(tm) == 128 and list(words[:12]) == [da.ptr, 2, 300, 70, 640, 64, 32, 1, 1, 0, SWIZZLE_128B, 0], words
assert words[12] == 0 and words[13] == DATA_TYPES["float16"][0], words
try:
    driver.load(b"not a cubin")
except CudaError as e:
    assert e.name == "CUDA_ERROR_INVALID_IMAGE" and e.code == 200, e
else:
    raise AssertionError("no CudaError")
print("stub-ok")
"""


def test_real_cuda_bindings_against_a_stub_libcuda(tmp_path):
    """The real cuda-bindings marshalling (handles, CUdeviceptr, host addresses, kernelParams,
    error names) end to end, with ``fake_libcuda.c`` standing in for the driver."""
    pytest.importorskip("cuda.bindings.driver")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler for the stub libcuda")
    src = Path(__file__).with_name("fake_libcuda.c")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "libcuda.so.1"), str(src)], check=True)
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, LD_LIBRARY_PATH=str(tmp_path), PYTHONPATH=root)
    r = subprocess.run([sys.executable, "-c", _STUB_SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "stub-ok" in r.stdout, r.stdout + r.stderr
