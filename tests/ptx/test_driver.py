"""Driver layer pieces that run without a GPU: availability, error names, argument packing."""

from __future__ import annotations

import ctypes
import enum

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
