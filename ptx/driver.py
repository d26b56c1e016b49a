"""CUDA driver API through ``cuda-bindings`` (``from cuda.bindings import driver``).

Imported lazily: nothing here needs cuda-bindings until a function is called.
:func:`available` says whether cuda-bindings imports and a device answers.
Checked against cuda-bindings 13.x (every call returns a tuple ``(CUresult, values...)``;
handles are ``CUdevice``/``CUcontext``/``CUdeviceptr``/... objects that ``int()`` accepts;
host buffers and ``kernelParams`` are passed as integer addresses). cuda-python before
12.6 (``from cuda import cuda``) is used when ``cuda.bindings`` does not import.
Without ``libcuda`` (no NVIDIA driver) cuda-bindings raises on the first call instead of
returning an error code; :func:`available` is then False.

    cubin = toolchain.compile(module.text(), arch=device().arch)
    fn = load(cubin).function("vadd", signature=kernel.signature)
    x = to_device(np.arange(n, dtype=np.float32))
    fn.launch(grid=(blocks,), block=(256,), args=(x, y, z, n))
    synchronize()
    z.to_host(np.float32, n)

Every failing call raises :class:`ptx.CudaError` carrying the driver's name
for the code (``cuGetErrorName``), e.g. ``CUDA_ERROR_INVALID_VALUE``.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from .errors import CudaError

_lock = threading.Lock()
_state: dict = {}

# parameter type -> ctypes type
_CTYPES = {
    "u8": ctypes.c_uint8,
    "s8": ctypes.c_int8,
    "b8": ctypes.c_uint8,
    "u16": ctypes.c_uint16,
    "s16": ctypes.c_int16,
    "b16": ctypes.c_uint16,
    "f16": ctypes.c_uint16,  # pass the bit pattern (np.float16 values are converted)
    "u32": ctypes.c_uint32,
    "s32": ctypes.c_int32,
    "b32": ctypes.c_uint32,
    "f32": ctypes.c_float,
    "u64": ctypes.c_uint64,
    "s64": ctypes.c_int64,
    "b64": ctypes.c_uint64,
    "f64": ctypes.c_double,
}

_NP_TO_PTX = {
    np.dtype(np.uint8): "u8",
    np.dtype(np.int8): "s8",
    np.dtype(np.uint16): "u16",
    np.dtype(np.int16): "s16",
    np.dtype(np.float16): "f16",
    np.dtype(np.uint32): "u32",
    np.dtype(np.int32): "s32",
    np.dtype(np.float32): "f32",
    np.dtype(np.uint64): "u64",
    np.dtype(np.int64): "s64",
    np.dtype(np.float64): "f64",
}


def _driver():
    try:
        from cuda.bindings import driver  # noqa: PLC0415 - optional dependency, imported lazily
    except ImportError:
        from cuda import cuda as driver  # noqa: PLC0415 - cuda-python < 12.6

    return driver


def _name(drv, err) -> str:
    try:
        e, name = drv.cuGetErrorName(err)
        if int(e) == 0 and name is not None:
            return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # pragma: no cover - best effort
        pass
    return getattr(err, "name", str(err))


def _desc(drv, err) -> str:
    try:
        e, s = drv.cuGetErrorString(err)
        if int(e) == 0 and s is not None:
            return s.decode() if isinstance(s, bytes) else str(s)
    except Exception:  # pragma: no cover
        pass
    return ""


def _call(fn_name: str, *args):
    """Call ``driver.<fn_name>(*args)``; raise CudaError unless CUDA_SUCCESS; return the results."""
    drv = _driver()
    res = getattr(drv, fn_name)(*args)
    if isinstance(res, tuple):
        err, rest = res[0], res[1:]
    else:
        err, rest = res, ()
    if int(err) != 0:
        raise CudaError(fn_name, int(err), _name(drv, err), _desc(drv, err))
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


# --------------------------------------------------------------------------- device and context


class Device:
    """Device ``ordinal`` with its primary context made current."""

    def __init__(self, ordinal: int = 0):
        drv = _driver()
        self.ordinal = ordinal
        self.handle = _call("cuDeviceGet", ordinal)
        raw = _call("cuDeviceGetName", 256, self.handle)
        self.name = raw.split(b"\0", 1)[0].decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        attr = drv.CUdevice_attribute
        self.cc = (
            int(_call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.handle)),
            int(_call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.handle)),
        )
        self.context = _call("cuDevicePrimaryCtxRetain", self.handle)
        self.make_current()

    @property
    def arch(self) -> str:
        return f"sm_{self.cc[0]}{self.cc[1]}"

    def attribute(self, name: str) -> int:
        """A ``CU_DEVICE_ATTRIBUTE_*`` value, e.g. ``attribute("MULTIPROCESSOR_COUNT")``."""
        attr = getattr(_driver().CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        return int(_call("cuDeviceGetAttribute", attr, self.handle))

    def make_current(self) -> None:
        _call("cuCtxSetCurrent", self.context)

    def __repr__(self) -> str:
        return f"Device({self.ordinal}: {self.name}, {self.arch})"


def init() -> None:
    with _lock:
        if not _state.get("init"):
            _call("cuInit", 0)
            _state["init"] = True


def device(ordinal: int = 0) -> Device:
    """The device (primary context retained and current on this thread)."""
    d = _state.get("devices", {}).get(ordinal)
    if d is not None:  # known device: only make its context current (another may be, on this thread)
        d.make_current()
        return d
    init()
    with _lock:
        devs = _state.setdefault("devices", {})
        if ordinal not in devs:
            devs[ordinal] = Device(ordinal)
    d = devs[ordinal]
    d.make_current()
    return d


def available() -> bool:
    """True when cuda-bindings imports, the driver initializes and a device exists (a positive
    answer is remembered: devices do not vanish from a process)."""
    if _state.get("available"):
        return True
    try:
        _driver()
    except Exception:
        return False
    try:
        init()
        found = int(_call("cuDeviceGetCount")) > 0
    except Exception:
        return False
    _state["available"] = found
    return found


def synchronize() -> None:
    _call("cuCtxSynchronize")


def version() -> int:
    """The CUDA version the driver supports, as 1000 * major + 10 * minor (``cuDriverGetVersion``)."""
    return int(_call("cuDriverGetVersion"))


# --------------------------------------------------------------------------- memory


class DeviceBuffer:
    """``nbytes`` of device memory (``cuMemAlloc``); freed by :meth:`free` or when collected."""

    def __init__(self, nbytes: int):
        device()
        if nbytes <= 0:
            raise ValueError(f"nbytes must be positive, got {nbytes}")
        self.nbytes = int(nbytes)
        self._ptr = _call("cuMemAlloc", self.nbytes)

    @property
    def ptr(self) -> int:
        if self._ptr is None:
            raise ValueError("buffer was freed")
        return int(self._ptr)

    def free(self) -> None:
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            _call("cuMemFree", ptr)

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass

    def copy_from(self, host: np.ndarray) -> None:
        """HtoD copy of a C-contiguous array (at most ``nbytes``)."""
        host = np.ascontiguousarray(host)
        if host.nbytes > self.nbytes:
            raise ValueError(f"host array has {host.nbytes} bytes, buffer {self.nbytes}")
        _call("cuMemcpyHtoD", self._ptr, host.ctypes.data, host.nbytes)

    def copy_to(self, host: np.ndarray) -> np.ndarray:
        """DtoH copy into a C-contiguous, writeable array (at most ``nbytes``)."""
        if not (host.flags.c_contiguous and host.flags.writeable):
            raise ValueError("destination must be C-contiguous and writeable")
        if host.nbytes > self.nbytes:
            raise ValueError(f"host array has {host.nbytes} bytes, buffer {self.nbytes}")
        _call("cuMemcpyDtoH", host.ctypes.data, self._ptr, host.nbytes)
        return host

    def to_host(self, dtype, shape) -> np.ndarray:
        return self.copy_to(np.empty(shape, dtype=dtype))

    def zero(self) -> None:
        _call("cuMemsetD8", self._ptr, 0, self.nbytes)


def to_device(host: np.ndarray) -> DeviceBuffer:
    buf = DeviceBuffer(max(1, np.asarray(host).nbytes))
    buf.copy_from(host)
    return buf


# --------------------------------------------------------------------------- modules and launch


class Function:
    """A kernel of a loaded module. ``signature``: PTX parameter types (``Kernel.signature``)."""

    def __init__(self, module: LoadedModule, name: str, handle, signature=None):
        self.module, self.name, self.handle = module, name, handle
        self.signature = tuple(signature) if signature is not None else None

    def _pack(self, args):
        """ctypes values for each argument and the void** array of their addresses."""
        if self.signature is not None and len(args) != len(self.signature):
            raise TypeError(f"{self.name} takes {len(self.signature)} arguments, got {len(args)}")
        values = []
        for i, a in enumerate(args):
            t = self.signature[i] if self.signature is not None else None
            if isinstance(a, DeviceBuffer):
                if t is not None and t not in ("u64", "s64", "b64"):
                    raise TypeError(f"{self.name}: argument {i} is a device buffer but the parameter is .{t}")
                values.append(ctypes.c_uint64(a.ptr))
                continue
            if t == "tensormap":  # 128 bytes by value (a __grid_constant__ CUtensorMap)
                raw = bytes(a) if isinstance(a, bytes | bytearray) else None
                if raw is None or len(raw) != 128:
                    raise TypeError(f"{self.name}: argument {i} must be the 128 bytes of a tensor map")
                values.append((ctypes.c_char * 128).from_buffer_copy(raw))
                continue
            if isinstance(a, tuple) and len(a) == 2 and isinstance(a[1], str):
                a, t = a  # explicit (value, "u32")
            elif isinstance(a, np.generic) and t is None:
                t = _NP_TO_PTX.get(a.dtype)
            if t is None:
                raise TypeError(
                    f"{self.name}: argument {i} ({a!r}) has no PTX type;"
                    " give signature=, a numpy scalar or (value, type)"
                )
            if t not in _CTYPES:
                raise TypeError(f"{self.name}: argument {i}: unsupported parameter type .{t}")
            if t == "f16":
                a = int(np.float16(a).view(np.uint16))
            elif t in ("f32", "f64"):
                a = float(a)
            else:
                a = int(a)
            values.append(_CTYPES[t](a))
        ptrs = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
        return values, ptrs

    def prepare(self, grid, block, args=(), shared: int = 0) -> PreparedLaunch:
        """Pack ``args`` once (and raise the function's dynamic shared memory limit when ``shared``
        is above 48 KB): the returned :class:`PreparedLaunch` re-issues the launch with the same
        grid, block and parameter values for about the cost of the driver call itself."""
        grid = (grid,) if isinstance(grid, int) else tuple(grid)
        block = (block,) if isinstance(block, int) else tuple(block)
        if not (1 <= len(grid) <= 3 and 1 <= len(block) <= 3):
            raise ValueError(f"grid {grid} / block {block} need 1-3 dimensions")
        g = tuple(int(x) for x in grid + (1,) * (3 - len(grid)))
        b = tuple(int(x) for x in block + (1,) * (3 - len(block)))
        values, ptrs = self._pack(list(args))
        if shared > 48 * 1024:
            drv = _driver()
            _call(
                "cuFuncSetAttribute",
                self.handle,
                drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                int(shared),
            )
        return PreparedLaunch(self, g, b, int(shared), values, ptrs)

    def launch(self, grid, block, args=(), shared: int = 0, stream=None) -> None:
        """``cuLaunchKernel`` with ``kernelParams`` = array of pointers to the argument values."""
        self.prepare(grid, block, args, shared)(stream)

    __call__ = launch

    def attribute(self, name: str) -> int:
        """A ``CU_FUNC_ATTRIBUTE_*`` value, e.g. ``attribute("NUM_REGS")``."""
        drv = _driver()
        attr = getattr(drv.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
        return int(_call("cuFuncGetAttribute", attr, self.handle))


def encode_tensor_map_tiled(
    dtype: str,
    rank: int,
    global_address: int,
    global_dim,
    global_strides,
    box_dim,
    element_strides,
    interleave: int = 0,
    swizzle: int = 0,
    l2_promotion: int = 0,
    oob_fill: int = 0,
) -> bytes:
    """``cuTensorMapEncodeTiled`` (arguments checked first by :class:`ptx.tensormap.TensorMapTiled`);
    the 128-byte ``CUtensorMap`` to pass as a "tensormap" kernel argument. dtype: a key of
    :data:`ptx.tensormap.DATA_TYPES`; strides in bytes; dimension 0 innermost."""
    from .tensormap import DATA_TYPES, TensorMapTiled

    TensorMapTiled(
        dtype,
        int(global_address),
        tuple(global_dim),
        tuple(global_strides),
        tuple(box_dim),
        tuple(element_strides),
        interleave,
        swizzle,
        l2_promotion,
        oob_fill,
    )
    drv = _driver()
    tm = _call(
        "cuTensorMapEncodeTiled",
        drv.CUtensorMapDataType(DATA_TYPES[dtype][0]),
        rank,
        int(global_address),
        [drv.cuuint64_t(int(x)) for x in global_dim],  # cuda-bindings takes no plain ints here
        [drv.cuuint64_t(int(x)) for x in global_strides],
        [drv.cuuint32_t(int(x)) for x in box_dim],
        [drv.cuuint32_t(int(x)) for x in element_strides],
        drv.CUtensorMapInterleave(interleave),
        drv.CUtensorMapSwizzle(swizzle),
        drv.CUtensorMapL2promotion(l2_promotion),
        drv.CUtensorMapFloatOOBfill(oob_fill),
    )
    return np.asarray(tm.opaque, dtype=np.uint64).tobytes()


class PreparedLaunch:
    """One kernel launch with its parameter block packed (:meth:`Function.prepare`); calling it
    (optionally with a stream) issues ``cuLaunchKernel``. Holds the ctypes values the parameter
    pointers point at, so the block stays valid as long as this object lives."""

    __slots__ = ("function", "grid", "block", "shared", "_values", "_ptrs", "_params")

    def __init__(self, function: Function, grid: tuple, block: tuple, shared: int, values: list, ptrs) -> None:
        self.function, self.grid, self.block, self.shared = function, grid, block, shared
        self._values, self._ptrs = values, ptrs
        self._params = ctypes.addressof(ptrs) if values else 0

    def __call__(self, stream=None) -> None:
        drv = _driver()
        g, b = self.grid, self.block
        h = self.function.handle
        s = stream if stream is not None else 0
        res = drv.cuLaunchKernel(h, g[0], g[1], g[2], b[0], b[1], b[2], self.shared, s, self._params, 0)
        err = res[0] if isinstance(res, tuple) else res
        if int(err) != 0:
            raise CudaError("cuLaunchKernel", int(err), _name(drv, err), _desc(drv, err))

    def __repr__(self) -> str:
        return f"PreparedLaunch({self.function.name}, grid={self.grid}, block={self.block}, shared={self.shared})"


class LoadedModule:
    """A cubin loaded with ``cuModuleLoadData``; unloaded by :meth:`unload` or when collected."""

    def __init__(self, image: bytes):
        device()
        self._image = bytes(image)  # keep the bytes alive during the call
        self.handle = _call("cuModuleLoadData", self._image)
        self._functions: dict[str, Function] = {}

    def function(self, name: str, signature=None) -> Function:
        if name not in self._functions:
            h = _call("cuModuleGetFunction", self.handle, name.encode())
            self._functions[name] = Function(self, name, h, signature)
        elif signature is not None:
            self._functions[name].signature = tuple(signature)
        return self._functions[name]

    def unload(self) -> None:
        if self.handle is not None:
            h, self.handle = self.handle, None
            _call("cuModuleUnload", h)

    def __del__(self):
        try:
            self.unload()
        except Exception:
            pass


def load_ptx(text: str, arch: str) -> LoadedModule:
    """Assemble PTX ``text`` for ``arch`` with ptxas (:func:`ptx.toolchain.compile`) and load it."""
    from . import toolchain

    return load(toolchain.compile(text, arch=arch))


#: what a driver module (this one, `ptx.simdriver`) offers to the code that launches kernels
API = ("available", "device", "synchronize", "DeviceBuffer", "to_device", "load", "load_ptx")


def resolve(driver=None):
    """``driver`` if it offers :data:`API` (TypeError naming what is missing), this module if None."""
    if driver is None:
        import sys

        return sys.modules[__name__]
    missing = [name for name in API if not callable(getattr(driver, name, None))]
    if missing:
        raise TypeError(
            f"driver {getattr(driver, '__name__', driver)!r} lacks {', '.join(missing)}; "
            "pass ptx.driver, ptx.simdriver or None"
        )
    return driver


def load(cubin) -> LoadedModule:
    """Load a :class:`ptx.toolchain.Cubin` (or raw cubin/PTX bytes)."""
    data = getattr(cubin, "data", cubin)
    if isinstance(data, str):
        data = data.encode() + b"\0"
    return LoadedModule(data)


# --------------------------------------------------------------------------- events


class Event:
    """A CUDA event for timing: ``e0.record(); ...; e1.record(); e1.elapsed_ms(e0)``."""

    def __init__(self):
        device()
        self.handle = _call("cuEventCreate", 0)

    def record(self, stream=None) -> None:
        _call("cuEventRecord", self.handle, stream if stream is not None else 0)

    def synchronize(self) -> None:
        _call("cuEventSynchronize", self.handle)

    def elapsed_ms(self, start: Event) -> float:
        """Milliseconds from ``start`` to this event (synchronizes on this event)."""
        self.synchronize()
        # cuEventElapsedTime exists in every version (13.x dropped the 12.8 alias cuEventElapsedTime_v2,
        # which an older driver under 12.9 bindings would lack)
        return float(_call("cuEventElapsedTime", start.handle, self.handle))

    def __del__(self):
        try:
            if self.handle is not None:
                h, self.handle = self.handle, None
                _call("cuEventDestroy", h)
        except Exception:
            pass
