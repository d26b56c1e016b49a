"""The device follows the data and the type follows the input (docs/decisions.md, "Targets are
objects; devices follow data"): with no ``target=``, host arrays (numpy, host DLPack producers,
torch CPU tensors) run on the CPU and come back as their own type; CUDA device arrays
(``__cuda_array_interface__``, DLPack on a CUDA device) run on the GPU path, here in the PTX
simulator; mixing them is refused naming the operands; an explicit target wins. torch-only checks
run where torch is installed."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import minijit
from minijit.einsum.cuda import CudaEinsumPlan
from minijit.runtime import device_arrays
from ptx import simdriver
from tests.minijit.host_arrays import HostDLPack

rng = np.random.default_rng(0)


class Cai:
    """A bare ``__cuda_array_interface__`` over simulator memory (what cupy or numba expose)."""

    def __init__(self, host: np.ndarray) -> None:
        self.buf = simdriver.to_device(host)
        self.__cuda_array_interface__ = {
            "shape": host.shape, "typestr": host.dtype.str, "data": (self.buf.ptr, False), "version": 3,
            "strides": None,
        }  # fmt: skip


class CudaDLPack:
    """A CUDA array that speaks only DLPack: ``__dlpack__`` returns a real "dltensor" capsule over
    simulator memory (built with ctypes, as a C producer would)."""

    _CODES = {np.dtype(np.float16): (2, 16), np.dtype(np.float32): (2, 32)}

    def __init__(self, host: np.ndarray) -> None:
        self.buf = simdriver.to_device(host)
        self.shape = (ctypes.c_int64 * host.ndim)(*host.shape)
        t = device_arrays._DLManagedTensor()
        t.dl_tensor.data = self.buf.ptr
        t.dl_tensor.device.device_type, t.dl_tensor.device.device_id = 2, 0
        t.dl_tensor.ndim = host.ndim
        (t.dl_tensor.dtype.code, t.dl_tensor.dtype.bits), t.dl_tensor.dtype.lanes = self._CODES[host.dtype], 1
        t.dl_tensor.shape = self.shape
        self.managed = t
        self.consumed = 0

    def __dlpack__(self, stream=None, **kwargs):
        new = ctypes.pythonapi.PyCapsule_New
        new.argtypes, new.restype = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p], ctypes.py_object
        self.consumed += 1
        return new(ctypes.addressof(self.managed), b"dltensor", None)

    def __dlpack_device__(self):
        return (2, 0)


def _check(got, subs, ops, tol):
    want = np.einsum(subs, *[np.asarray(o, np.float64) for o in ops])
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=tol, atol=tol)


def test_numpy_in_numpy_out_on_the_cpu():
    a, b = rng.standard_normal((5, 4)), rng.standard_normal((4, 3)).astype(np.float32)
    got = minijit.einsum("ij,jk->ik", a, b)
    assert type(got) is np.ndarray and got.dtype == np.float64
    _check(got, "ij,jk->ik", [a, b], 1e-6)
    assert minijit.EinsumPlan("ij,jk->ik", a.shape, b.shape).target == "native"  # a plan: built for the CPU


def test_host_dlpack_producers_run_on_the_cpu_and_are_read_in_place():
    a = rng.standard_normal((6, 5)).astype(np.float32)
    b = rng.standard_normal((5, 7)).astype(np.float32)
    wa = HostDLPack(a)
    assert device_arrays.device_kind(wa, "a") == "host"
    view = device_arrays.host_array(wa, "a")
    assert np.shares_memory(view, a)  # no copy
    got = minijit.einsum("ij,jk->ik", wa, HostDLPack(b))
    assert type(got) is np.ndarray
    _check(got, "ij,jk->ik", [a, b], 1e-5)
    plan = minijit.EinsumPlan("ij,jk->ik", a.shape, b.shape)
    _check(plan(wa, b), "ij,jk->ik", [a, b], 1e-5)


@pytest.mark.parametrize("kind", [Cai, CudaDLPack])
def test_cuda_device_arrays_run_on_the_gpu_path_without_target(kind, monkeypatch):
    a = rng.uniform(-1, 1, (2, 8, 6)).astype(np.float16)
    b = rng.uniform(-1, 1, (2, 6, 10)).astype(np.float16)
    dev = [kind(a), kind(b)]
    assert all(device_arrays.device_kind(x, "x") == "cuda" for x in dev)
    launched = []
    real = CudaEinsumPlan.execute
    monkeypatch.setattr(CudaEinsumPlan, "execute", lambda self, *a, **k: (launched.append(1),
                        real(self, *a, **k))[1])  # fmt: skip
    got = minijit.einsum("bij,bjk->bik", *dev, driver=simdriver)
    assert launched == [1] and type(got) is np.ndarray and got.dtype == np.float32  # bare device arrays: numpy
    _check(got, "bij,bjk->bik", [a, b], 4e-3)
    out_buf = simdriver.to_device(np.full((2, 8, 10), np.nan, np.float32))
    out = Cai(np.zeros((2, 8, 10), np.float32))
    out.buf, out.__cuda_array_interface__["data"] = out_buf, (out_buf.ptr, False)
    assert minijit.einsum("bij,bjk->bik", *dev, out=out, driver=simdriver) is out  # written on the device
    _check(out_buf.to_host(np.float32, (2, 8, 10)), "bij,bjk->bik", [a, b], 4e-3)
    if kind is CudaDLPack:
        assert dev[0].consumed >= 1


def test_dlpack_device_arrays_are_described_from_their_capsule():
    x = CudaDLPack(np.arange(12, dtype=np.float32).reshape(3, 4))
    v = device_arrays.describe(x, "x")
    assert (v.ptr, v.shape, v.strides, v.dtype) == (x.buf.ptr, (3, 4), None, "float32")
    cai = v.obj.__cuda_array_interface__
    assert cai["data"] == (x.buf.ptr, False) and cai["typestr"] == "<f4" and v.obj.owner[0] is x
    with pytest.raises(TypeError, match="x is a DLPack array in CPU memory, not on a CUDA device"):
        device_arrays.describe(HostDLPack(np.ones(3)), "x")


def test_mixing_host_and_device_arrays_names_the_operands():
    a = rng.standard_normal((4, 3)).astype(np.float32)
    dev = Cai(rng.standard_normal((3, 5)).astype(np.float32))
    with pytest.raises(TypeError, match=r"operand 1 on a CUDA device and operand 0 in host memory"):
        minijit.einsum("ij,jk->ik", a, dev, driver=simdriver)
    host_b = np.ones((3, 5), np.float32)
    with pytest.raises(TypeError, match=r"out on a CUDA device and operand 0, operand 1 in host memory"):
        minijit.einsum("ij,jk->ik", a, host_b, out=Cai(np.zeros((4, 5), np.float32)))
    with pytest.raises(TypeError, match="DLPack array on device type 10"):
        minijit.einsum("ij->ji", type("Rocm", (), {"__dlpack__": None, "__dlpack_device__": lambda s: (10, 0)})())


def test_an_explicit_target_wins():
    a = rng.uniform(-1, 1, (8, 6)).astype(np.float32)
    b = rng.uniform(-1, 1, (6, 4)).astype(np.float32)
    # host arrays on the GPU path: uploaded, the result comes back as numpy
    got = minijit.einsum("ij,jk->ik", a, Cai(b), target="cuda", driver=simdriver)
    _check(got, "ij,jk->ik", [a, b], 4e-3)
    # device arrays on the CPU: refused naming the operand
    with pytest.raises(TypeError, match="einsum: operand 1 is on a CUDA device"):
        minijit.einsum("ij,jk->ik", a, Cai(b), target="native")
    plan = minijit.EinsumPlan("ij,jk->ik", a.shape, b.shape)
    with pytest.raises(TypeError, match="operand 1 is on a CUDA device"):
        plan(a, Cai(b))
    with pytest.raises(TypeError, match="target='cuda' only"):
        minijit.einsum("ij,jk->ik", a, b, target="native", driver=simdriver)
    assert type(minijit.EinsumPlan("ij,jk->ik", a.shape, b.shape, driver=simdriver)).__name__ == "CudaEinsumPlan"


# -- torch (where installed) ----------------------------------------------------------------------
def test_torch_cpu_tensors_in_torch_out_without_copies():
    torch = pytest.importorskip("torch")
    a = torch.randn(6, 5, dtype=torch.float32)
    b = torch.randn(5, 4, dtype=torch.float32, requires_grad=True)
    got = minijit.einsum("ij,jk->ik", a, b)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32 and got.device.type == "cpu"
    _check(got.numpy(), "ij,jk->ik", [a.numpy(), b.detach().numpy()], 1e-5)
    out = torch.full((6, 4), float("nan"), dtype=torch.float32)
    assert minijit.einsum("ij,jk->ik", a, b, out=out) is out
    _check(out.numpy(), "ij,jk->ik", [a.numpy(), b.detach().numpy()], 1e-5)
    t = torch.randn(5, 6, dtype=torch.float64).T  # a transposed view: read in place, not copied
    assert np.shares_memory(device_arrays.host_array(t, "t"), t.numpy())
    plan = minijit.EinsumPlan("ij,jk->ik", (6, 5), (5, 4), dtype="float64")
    res = plan(t, b.detach().double())
    assert isinstance(res, torch.Tensor)
    _check(res.numpy(), "ij,jk->ik", [t.numpy(), b.detach().double().numpy()], 1e-10)


def test_torch_cuda_tensors_run_on_the_gpu_and_stay_there():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    from ptx import driver

    if not driver.available():
        pytest.skip("no CUDA driver for minijit")
    a = torch.randn(64, 32, device="cuda", dtype=torch.float16)
    b = torch.randn(32, 48, device="cuda", dtype=torch.float16)
    got = minijit.einsum("ij,jk->ik", a, b)
    assert isinstance(got, torch.Tensor) and got.device == a.device
    _check(got.cpu().numpy(), "ij,jk->ik", [a.cpu().numpy(), b.cpu().numpy()], 2e-2)
    with pytest.raises(TypeError, match="operand 1 on a CUDA device and operand 0 in host memory"):
        minijit.einsum("ij,jk->ik", a.cpu(), b)


def test_buffer_array_and_array_library():
    """The device helpers einsum shares with the rest of minijit: a driver buffer as a C-order
    ``__cuda_array_interface__`` that keeps the buffer alive, and which library allocates a result."""
    buf = simdriver.DeviceBuffer(24)
    arr = device_arrays.buffer_array(buf, (2, 3), "float32")
    cai = arr.__cuda_array_interface__
    assert cai["shape"] == (2, 3) and cai["strides"] is None and cai["typestr"] == "<f4"
    assert cai["data"] == (int(buf.ptr), False) and arr.owner is buf
    view = device_arrays.describe(arr, "x")
    assert (view.ptr, view.shape, view.dtype) == (int(buf.ptr), (2, 3), "float32")

    class FakeCupy:
        pass

    FakeCupy.__module__ = "cupy._core.core"
    assert device_arrays.array_library([np.zeros(1), FakeCupy()]) == "cupy"
    assert device_arrays.array_library([np.zeros(1), arr]) is None
