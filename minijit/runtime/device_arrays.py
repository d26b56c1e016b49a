"""Arrays from other libraries, in one place: where they live, what they hold, how to read them.

Every public entry point of minijit that takes arrays asks this module (docs/decisions.md, "Targets
are objects; devices follow data"):

* `device_kind` says where an array lives: ``"host"`` (numpy, torch CPU tensors, host DLPack
  producers, anything ``np.asarray`` takes) or ``"cuda"`` (torch CUDA tensors, cupy arrays,
  anything with ``__cuda_array_interface__`` (CAI), DLPack producers on a CUDA device).
* `host_array` gives a host array as numpy without a copy where its layout allows (a torch CPU
  tensor through ``Tensor.numpy()``, other producers through DLPack); `like_input` /
  `host_result` turn a numpy result back into the caller's type (torch in, torch out; numpy in,
  numpy out).
* `describe` reads a device array's address, shape, byte strides and element type without
  touching its memory. Element types are named as numpy names them ("float16", "float32",
  "int32", "int64") plus "bfloat16". bf16 has no standard CAI typestr: torch >= 2.5 reports bf16
  tensors as ``<f2`` (the same as float16), so a torch tensor's type is read from
  ``tensor.dtype``; other CAI objects declare bf16 as ``<V2`` (the ml_dtypes/JAX spelling). A
  DLPack-only producer is read from its capsule (no torch needed) and comes back as a
  `CudaArrayView`, a plain CAI object over the same memory that keeps the producer alive.
* `device_matrix` / `read_vector` check a device matrix for a kernel (one dense block in any
  axis order), copy a device vector to the host.
"""

from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "DEVICE_ALIGN",
    "CudaArrayView",
    "DeviceView",
    "describe",
    "device_kind",
    "device_matrix",
    "host_array",
    "host_result",
    "is_device_array",
    "is_torch_tensor",
    "like_input",
    "read_vector",
]

#: device pointers of B and C must be this aligned (the kernels read B rows with 128-bit loads)
DEVICE_ALIGN = 16

_TYPESTR = {"<f2": "float16", "<f4": "float32", "<f8": "float64", "<V2": "bfloat16", "<i4": "int32", "<i8": "int64"}
_TYPESTR_OF = {name: ts for ts, name in _TYPESTR.items()}
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8}
INDEX_DTYPES = ("int32", "int64")
VALUE_DTYPES = ("float16", "bfloat16", "float32", "float64")

#: DLPack device types (dlpack.h): host memory, and memory of a CUDA device
_DLPACK_HOST = {1: "CPU", 3: "CUDA host (pinned)"}
_DLPACK_CUDA = {2: "CUDA", 13: "CUDA managed"}
#: DLPack (type code, bits) -> element type name (codes: 0 int, 1 uint, 2 float, 4 bfloat)
_DLPACK_DTYPES = {(2, 16): "float16", (2, 32): "float32", (2, 64): "float64", (4, 16): "bfloat16",
                  (0, 32): "int32", (0, 64): "int64"}  # fmt: skip


@dataclass(frozen=True)
class DeviceView:
    """What a device array declares: ``ptr`` (device address), ``shape``, byte ``strides`` (None:
    C-contiguous), element ``dtype`` name, ``read_only``; ``obj`` keeps the owner alive (the
    torch tensor, the CAI object, or a `CudaArrayView` of a DLPack producer)."""

    ptr: int
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    dtype: str
    read_only: bool
    obj: object

    def __post_init__(self) -> None:
        if self.dtype not in _ITEMSIZE and not self.dtype.startswith("?"):
            raise ValueError(f"unknown element type {self.dtype!r}")

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE.get(self.dtype, 0)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


class CudaArrayView:
    """A ``__cuda_array_interface__`` (version 3) over device memory another object owns: what a
    DLPack producer on a CUDA device becomes. ``owner`` (and the DLPack capsule) stay alive with it."""

    def __init__(self, ptr: int, shape: tuple[int, ...], strides: tuple[int, ...] | None, dtype: str, owner: Any):
        self.owner = owner
        self.__cuda_array_interface__ = {
            "shape": tuple(shape),
            "strides": None if strides is None else tuple(strides),
            "typestr": _TYPESTR_OF.get(dtype, "|V0"),
            "data": (int(ptr), False),
            "version": 3,
        }

    def __repr__(self) -> str:
        cai = self.__cuda_array_interface__
        return f"CudaArrayView({cai['data'][0]:#x}, shape={cai['shape']}, typestr={cai['typestr']!r})"


def buffer_array(buf: Any, shape: tuple[int, ...], dtype: str) -> CudaArrayView:
    """A C-order ``dtype`` array of ``shape`` over driver buffer ``buf`` (`ptx.driver.DeviceBuffer`,
    whose ``ptr`` is the device address); ``.owner`` is ``buf`` (it keeps the allocation alive)."""
    return CudaArrayView(int(buf.ptr), tuple(shape), None, dtype, buf)


def array_library(operands: tuple | list) -> str | None:
    """``"torch"`` or ``"cupy"`` when an operand is such an array (a device result is allocated
    like it, `device_empty`), else None."""
    mods = [type(x).__module__ for x in operands]
    for kind in ("torch", "cupy"):
        if any(m.startswith(kind) for m in mods):
            return kind
    return None


def device_empty(operands: tuple | list, shape: tuple[int, ...]) -> Any:
    """A float32 device array of ``shape`` of the operands' library (torch on the first torch
    operand's device, else cupy on the current device)."""
    for x in operands:
        if is_torch_tensor(x) and hasattr(x, "device"):
            import torch  # type: ignore[import-not-found]  # noqa: PLC0415 - x is a torch tensor

            return torch.empty(shape, dtype=torch.float32, device=x.device)
    import cupy  # type: ignore[import-not-found]  # noqa: PLC0415 - array_library said cupy

    return cupy.empty(shape, dtype=cupy.float32)


def is_torch_tensor(obj: object) -> bool:
    """True for torch tensors (recognized without importing torch)."""
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr") and hasattr(obj, "stride")


def is_device_array(obj: object) -> bool:
    """True for objects that speak a device-array protocol: ``__cuda_array_interface__`` or
    (non-numpy) ``__dlpack__`` (which device they are on: `device_kind`)."""
    return not isinstance(obj, np.ndarray) and (hasattr(obj, "__cuda_array_interface__") or hasattr(obj, "__dlpack__"))


def device_kind(obj: object, name: str) -> str:
    """``"host"`` or ``"cuda"``: where ``obj`` lives (see the module docstring). TypeError naming
    ``name`` for arrays on other devices (a torch tensor on "mps", a DLPack producer on ROCm)."""
    if isinstance(obj, np.ndarray):
        return "host"
    if is_torch_tensor(obj):
        kind = getattr(getattr(obj, "device", None), "type", "cpu")
        if kind in ("cpu", "cuda"):
            return "host" if kind == "cpu" else "cuda"
        raise TypeError(f"{name} is a torch tensor on {obj.device}: minijit runs on the CPU and on CUDA devices")
    if hasattr(obj, "__cuda_array_interface__"):
        return "cuda"
    dl_device = getattr(obj, "__dlpack_device__", None)
    if dl_device is not None:
        code = int(dl_device()[0])
        if code in _DLPACK_HOST:
            return "host"
        if code in _DLPACK_CUDA:
            return "cuda"
        raise TypeError(f"{name} is a DLPack array on device type {code}: minijit reads host and CUDA memory")
    return "host"


def host_array(obj: object, name: str) -> np.ndarray:
    """``obj`` (a host array, `device_kind` "host") as numpy, sharing its memory where the layout
    allows: numpy arrays as they are, torch CPU tensors through ``Tensor.numpy()`` (detached;
    a conjugate or negative view is resolved first, a copy), DLPack producers through
    ``np.from_dlpack``, anything else through ``np.asarray``. TypeError naming ``name`` for
    device arrays and for tensors numpy cannot hold (bfloat16)."""
    if isinstance(obj, np.ndarray):
        return obj
    if device_kind(obj, name) != "host":
        raise TypeError(f"{name} is on a CUDA device, not in host memory")
    if is_torch_tensor(obj):
        t = obj.detach()
        if t.is_conj():
            t = t.resolve_conj()
        if t.is_neg():
            t = t.resolve_neg()
        try:
            return t.numpy()
        except (TypeError, RuntimeError) as e:
            raise TypeError(f"{name} is a torch tensor of {obj.dtype} that numpy cannot view ({e})") from None
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        try:
            return np.from_dlpack(obj)
        except (TypeError, ValueError, BufferError, RuntimeError):
            pass  # numpy does not take this producer's dtype or layout: its __array__, if any
    return np.asarray(obj)


def like_input(operands: tuple | list) -> object | None:
    """The operand whose type a host result takes: the first torch tensor, else None (numpy)."""
    for x in operands:
        if is_torch_tensor(x):
            return x
    return None


def host_result(result: np.ndarray, like: object | None) -> Any:
    """``result`` as the caller's type: a torch CPU tensor over the same memory when ``like`` is
    a torch tensor (`like_input`), else ``result`` itself."""
    if like is None:
        return result
    import torch  # type: ignore[import-not-found]  # noqa: PLC0415 - like is a torch tensor: torch is there

    return torch.from_numpy(result)


# -- DLPack capsules, read with ctypes (dlpack.h, the unversioned "dltensor" capsule) ---------------
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.argtypes, _capsule_valid.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_int
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.argtypes, _capsule_pointer.restype = [ctypes.py_object, ctypes.c_char_p], ctypes.c_void_p


def _dlpack_view(obj: object, name: str) -> DeviceView:
    """The `DeviceView` of a DLPack producer on a CUDA device, read from its capsule: a
    `CudaArrayView` keeps the capsule (so the producer's memory) alive; the capsule is not
    consumed, so its own destructor releases it."""
    code, ordinal = (int(x) for x in obj.__dlpack_device__())
    if code not in _DLPACK_CUDA:
        where = _DLPACK_HOST.get(code, f"device type {code}")
        raise TypeError(f"{name} is a DLPack array in {where} memory, not on a CUDA device: pass a numpy array")
    capsule = obj.__dlpack__()
    if not _capsule_valid(capsule, b"dltensor"):
        raise TypeError(f"{name}: __dlpack__() did not return an unused 'dltensor' capsule")
    t = _DLManagedTensor.from_address(_capsule_pointer(capsule, b"dltensor")).dl_tensor
    if t.dtype.lanes != 1:
        raise TypeError(f"{name}: DLPack vector types ({t.dtype.lanes} lanes) are not supported")
    dtype = _DLPACK_DTYPES.get((t.dtype.code, t.dtype.bits), f"?dlpack{t.dtype.code}:{t.dtype.bits}")
    shape = tuple(int(t.shape[i]) for i in range(t.ndim))
    item = t.dtype.bits // 8
    strides = None if not t.strides else tuple(int(t.strides[i]) * item for i in range(t.ndim))
    ptr = int(t.data or 0) + int(t.byte_offset)
    view = CudaArrayView(ptr, shape, strides, dtype, (obj, capsule))
    return DeviceView(ptr, shape, strides, dtype, False, view)


def describe(obj: object, name: str) -> DeviceView:
    """The `DeviceView` of device array ``obj``; TypeError naming ``name`` for anything else."""
    if is_torch_tensor(obj):
        if not getattr(obj, "is_cuda", False):
            raise TypeError(f"{name} is a torch tensor on {obj.device}, not on a CUDA device: pass a numpy array")
        dtype = str(obj.dtype).removeprefix("torch.")
        item = obj.element_size()
        strides = tuple(int(s) * item for s in obj.stride())
        return DeviceView(int(obj.data_ptr()), tuple(obj.shape), strides, dtype if dtype in _ITEMSIZE else f"?{dtype}",
                          False, obj)  # fmt: skip
    if not hasattr(obj, "__cuda_array_interface__"):
        if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
            return _dlpack_view(obj, name)
        raise TypeError(f"{name} is not a device array (got {type(obj).__name__})")
    try:
        cai = obj.__cuda_array_interface__
    except (AttributeError, RuntimeError, TypeError) as e:
        raise TypeError(f"{name} is not a device array ({e}): pass a numpy array or a CUDA tensor") from None
    typestr = cai.get("typestr")
    dtype = _TYPESTR.get(typestr, f"?{typestr}")
    strides = cai.get("strides")
    ptr, read_only = cai["data"]
    shape = tuple(int(x) for x in cai.get("shape", ()))
    if not ptr and math.prod(shape):
        raise ValueError(f"{name} is a device array with a null data pointer")
    return DeviceView(int(ptr), shape, tuple(strides) if strides is not None else None, dtype, bool(read_only), obj)


def _dtype_error(name: str, want: str, got: str) -> TypeError:
    got = got.removeprefix("?")
    return TypeError(f"{name} must hold {want}, got {got}")


def device_matrix(obj: object, name: str, shape: tuple[int, int], dtype: str, writable: bool = False) -> DeviceView:
    """The checked `DeviceView` of a ``shape`` matrix of ``dtype`` elements ("float16",
    "bfloat16", "float32") that fills one dense block in any axis order (C order, F order;
    `minijit.arrays`), 16-byte aligned. A kernel reads a C-contiguous one in place; the caller
    reorders any other through a C-order buffer (`minijit.cuda.reorder`). Checked before any
    launch: TypeError/ValueError naming ``name`` and the fix."""
    from minijit.arrays import require_dense  # noqa: PLC0415 - layout rule shared with the CPU

    v = describe(obj, name)
    if v.dtype != dtype:
        raise _dtype_error(name, dtype, v.dtype)
    if v.shape != shape:
        raise ValueError(f"shape mismatch: {name} must be {shape}, got {v.shape}")
    require_dense(name, shape, v.strides, v.itemsize)
    if writable and v.read_only:
        raise ValueError(f"{name} is read-only")
    if v.ptr % DEVICE_ALIGN:
        raise ValueError(f"{name} must start on a {DEVICE_ALIGN}-byte boundary, got address {v.ptr:#x}")
    return v


def vector_view(obj: object, name: str, dtypes: tuple[str, ...]) -> DeviceView:
    """The view of a 1-D contiguous device array of one of ``dtypes`` (TypeError/ValueError naming ``name``)."""
    v = describe(obj, name)
    if v.dtype not in dtypes:
        raise _dtype_error(name, " or ".join(dtypes), v.dtype)
    if len(v.shape) != 1:
        raise ValueError(f"{name} must be 1-D, got shape {v.shape}")
    if v.strides is not None and v.shape[0] > 1 and v.strides[0] != v.itemsize:
        raise ValueError(f"{name} must be contiguous, got a byte stride of {v.strides[0]}")
    return v


def read_vector(obj: object, name: str, dtypes: tuple[str, ...], driver) -> np.ndarray:
    """A host copy of the 1-D contiguous device array ``obj`` whose element type is one of
    ``dtypes`` (checked first; only the bytes the array declares are read). bfloat16 comes back
    as float32. ``driver``: `ptx.driver` or `ptx.simdriver`, whose memory the address is in."""
    v = vector_view(obj, name, dtypes)
    np_dtype = np.uint16 if v.dtype == "bfloat16" else np.dtype(v.dtype)
    host = np.empty(v.shape, np_dtype)
    if host.size:
        _copy_to_host(v, host, driver)
    if v.dtype == "bfloat16":
        from ptx.mma import bf16_bits_to_f32  # noqa: PLC0415

        return bf16_bits_to_f32(host)
    return host


def _copy_to_host(v: DeviceView, host: np.ndarray, driver) -> None:
    """DtoH copy of ``host.nbytes`` bytes at ``v.ptr``. ``ptx.driver``/``ptx.simdriver`` copy only
    between their own buffers, so torch and cupy owners copy themselves; other CAI objects are
    read through the simulator's memory or ``cuMemcpyDtoH`` (see the report on issue 16)."""
    if is_torch_tensor(v.obj):
        import torch  # type: ignore[import-not-found]  # noqa: PLC0415

        src = v.obj.view(torch.int16) if v.dtype == "bfloat16" else v.obj
        host[...] = src.cpu().numpy().view(host.dtype)
        return
    if type(v.obj).__module__.startswith("cupy"):
        host[...] = v.obj.get().view(host.dtype)
        return
    memory = getattr(driver, "MEMORY", None)
    if memory is not None:  # ptx.simdriver
        host.view(np.uint8).reshape(-1)[:] = memory.read(v.ptr, np.uint8, host.nbytes)
        return
    from ptx import driver as cuda_driver  # noqa: PLC0415

    if driver is not cuda_driver:
        raise TypeError(f"cannot read device memory through driver {driver!r}")
    cuda_driver._call("cuMemcpyDtoH", host.ctypes.data, v.ptr, host.nbytes)
