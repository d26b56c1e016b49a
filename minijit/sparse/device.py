"""Device arrays the CUDA SpMM takes: torch CUDA tensors, cupy arrays, anything with
``__cuda_array_interface__`` (CAI), or DLPack providers (read through ``torch.from_dlpack``).

`describe` reads an object's address, shape, byte strides and element type without touching
its memory. Element types are named as numpy names them ("float16", "float32", "int32",
"int64") plus "bfloat16". bf16 has no standard CAI typestr: torch >= 2.5 reports bf16 tensors
as ``<f2`` (the same as float16), so a torch tensor's type is read from ``tensor.dtype``; other
CAI objects declare bf16 as ``<V2`` (the ml_dtypes/JAX spelling of a 2-byte bfloat16).

`read_vector` copies a validated 1-D device array to the host (CSR given on the device is
validated and planned on the host, once per pattern).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DEVICE_ALIGN", "DeviceView", "describe", "device_matrix", "host_csr", "is_device_array", "read_vector"]

#: device pointers of B and C must be this aligned (the kernels read B rows with 128-bit loads)
DEVICE_ALIGN = 16

_TYPESTR = {"<f2": "float16", "<f4": "float32", "<f8": "float64", "<V2": "bfloat16", "<i4": "int32", "<i8": "int64"}
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int32": 4, "int64": 8}
INDEX_DTYPES = ("int32", "int64")
VALUE_DTYPES = ("float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class DeviceView:
    """What a device array declares: ``ptr`` (device address), ``shape``, byte ``strides`` (None:
    C-contiguous), element ``dtype`` name, ``read_only``; ``obj`` keeps the owner alive."""

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


def is_device_array(obj: object) -> bool:
    """True for objects exposing ``__cuda_array_interface__`` or (non-numpy) ``__dlpack__``."""
    return not isinstance(obj, np.ndarray) and (hasattr(obj, "__cuda_array_interface__") or hasattr(obj, "__dlpack__"))


def _is_torch_tensor(obj: object) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr") and hasattr(obj, "stride")


def describe(obj: object, name: str) -> DeviceView:
    """The `DeviceView` of device array ``obj``; TypeError naming ``name`` for anything else."""
    if not _is_torch_tensor(obj) and not hasattr(obj, "__cuda_array_interface__"):
        if not hasattr(obj, "__dlpack__"):
            raise TypeError(f"{name} is not a device array (got {type(obj).__name__})")
        try:
            import torch  # type: ignore[import-not-found]
        except ImportError:
            raise TypeError(f"{name}: a DLPack object needs torch (torch.from_dlpack) to be read") from None
        obj = torch.from_dlpack(obj)
    if _is_torch_tensor(obj):
        if not getattr(obj, "is_cuda", False):
            raise TypeError(f"{name} is a torch tensor on {obj.device}, not on a CUDA device: pass a numpy array")
        dtype = str(obj.dtype).removeprefix("torch.")
        item = obj.element_size()
        strides = tuple(int(s) * item for s in obj.stride())
        return DeviceView(int(obj.data_ptr()), tuple(obj.shape), strides, dtype if dtype in _ITEMSIZE else f"?{dtype}",
                          False, obj)  # fmt: skip
    try:
        cai = obj.__cuda_array_interface__
    except (AttributeError, RuntimeError, TypeError) as e:
        raise TypeError(f"{name} is not a device array ({e}): pass a numpy array or a CUDA tensor") from None
    typestr = cai.get("typestr")
    dtype = _TYPESTR.get(typestr, f"?{typestr}")
    strides = cai.get("strides")
    ptr, read_only = cai["data"]
    shape = tuple(int(x) for x in cai.get("shape", ()))
    return DeviceView(int(ptr), shape, tuple(strides) if strides is not None else None, dtype, bool(read_only), obj)


def _dtype_error(name: str, want: str, got: str) -> TypeError:
    got = got.removeprefix("?")
    return TypeError(f"{name} must hold {want}, got {got}")


def device_matrix(obj: object, name: str, shape: tuple[int, int], dtype: str, writable: bool = False) -> int:
    """The device address of a C-contiguous ``shape`` matrix of ``dtype`` elements ("float16",
    "bfloat16", "float32"), 16-byte aligned. Checked before any launch: TypeError/ValueError
    naming ``name`` and the fix."""
    from minijit.arrays import require_c_contiguous

    v = describe(obj, name)
    if v.dtype != dtype:
        raise _dtype_error(name, dtype, v.dtype)
    if v.shape != shape:
        raise ValueError(f"shape mismatch: {name} must be {shape}, got {v.shape}")
    require_c_contiguous(name, shape, v.strides, v.itemsize)
    if writable and v.read_only:
        raise ValueError(f"{name} is read-only")
    if v.ptr % DEVICE_ALIGN:
        raise ValueError(f"{name} must start on a {DEVICE_ALIGN}-byte boundary, got address {v.ptr:#x}")
    return v.ptr


def _vector(obj: object, name: str, dtypes: tuple[str, ...]) -> DeviceView:
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
    v = _vector(obj, name, dtypes)
    np_dtype = np.uint16 if v.dtype == "bfloat16" else np.dtype(v.dtype)
    host = np.empty(v.shape, np_dtype)
    if host.size:
        _copy_to_host(v, host, driver)
    if v.dtype == "bfloat16":
        from ptx.mma import bf16_bits_to_f32

        return bf16_bits_to_f32(host)
    return host


def _copy_to_host(v: DeviceView, host: np.ndarray, driver) -> None:
    """DtoH copy of ``host.nbytes`` bytes at ``v.ptr``. ``ptx.driver``/``ptx.simdriver`` copy only
    between their own buffers, so torch and cupy owners copy themselves; other CAI objects are
    read through the simulator's memory or ``cuMemcpyDtoH`` (see the report on issue 16)."""
    if _is_torch_tensor(v.obj):
        import torch  # type: ignore[import-not-found]

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
    from ptx import driver as cuda_driver

    if driver is not cuda_driver:
        raise TypeError(f"cannot read device memory through driver {driver!r}")
    cuda_driver._call("cuMemcpyDtoH", host.ctypes.data, v.ptr, host.nbytes)


def _is_torch_sparse_csr(x: object) -> bool:
    return str(getattr(x, "layout", "")) == "torch.sparse_csr" and callable(getattr(x, "crow_indices", None))


def host_csr(x: object, driver) -> tuple | None:
    """``(indptr, indices, data, shape)`` as host numpy arrays when ``x`` is a CSR matrix on the
    device: a torch ``sparse_csr`` tensor, or ``(indptr, indices, data, shape)`` whose arrays are
    device arrays (indices int32/int64; values float16/bfloat16/float32/float64). None for
    anything else (host CSR goes to `minijit.sparse.csr.as_csr` as it is). Element types, rank
    and contiguity are checked before anything is read; values (monotone indptr, indices in
    range, lengths) are then checked by ``as_csr`` on the copies, before any launch."""
    if _is_torch_sparse_csr(x):
        parts = (x.crow_indices(), x.col_indices(), x.values())
        shape = tuple(int(d) for d in x.shape)
    elif isinstance(x, tuple | list) and any(is_device_array(p) for p in x[:3]):
        if len(x) != 4:
            raise ValueError(f"a CSR tuple is (indptr, indices, data, shape); got {len(x)} items")
        *parts, shape = x
        for nm, p in zip(("indptr", "indices", "data"), parts, strict=True):
            if not is_device_array(p):
                raise TypeError(f"{nm} is a {type(p).__name__} while other CSR arrays are on the device: "
                                "pass all three on the device or all three as numpy arrays")  # fmt: skip
    else:
        return None
    names = ("indptr", "indices", "data")
    kinds = (INDEX_DTYPES, INDEX_DTYPES, VALUE_DTYPES)
    for nm, p, ok in zip(names, parts, kinds, strict=True):  # every array's kind before any read
        _vector(p, nm, ok)
    host = [read_vector(p, nm, ok, driver) for nm, p, ok in zip(names, parts, kinds, strict=True)]
    return (*host, shape)
