"""The :mod:`ptx.driver` interface backed by the PTX simulator (:mod:`ptx.sim`), no GPU needed.

Code written against ``ptx.driver`` (``to_device``, ``DeviceBuffer``, ``load(cubin)``,
``function(...).launch``, ``synchronize``, ``Event``, ``device()``) runs unchanged with this
module in its place: the tests run every kernel launch of the GPU tests through it in CI.
``load`` takes a :class:`ptx.toolchain.Cubin` (its ``ptx`` text is what runs) or PTX text.
Launches execute synchronously; events record nothing and report 0 ms (simulated code is
never timed). One process-wide simulated global memory backs all buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import sim
from . import tensormap as _tensormap

__all__ = [
    "DeviceBuffer",
    "Event",
    "Function",
    "LoadedModule",
    "PreparedLaunch",
    "available",
    "device",
    "load",
    "load_ptx",
    "synchronize",
]

MEMORY = sim.Memory()


@dataclass(frozen=True)
class Device:
    """The simulated device: reports ``sm_90`` so ptxas checks the Hopper encoding too."""

    ordinal: int = 0
    name: str = "ptx.sim (functional PTX simulator)"
    arch: str = "sm_90"

    def make_current(self) -> None:
        pass


def available() -> bool:
    return True


def device(ordinal: int = 0) -> Device:
    if ordinal != 0:
        raise ValueError(f"the simulator has one device (0), not {ordinal}")
    return Device()


def synchronize() -> None:
    pass


class DeviceBuffer:
    """``nbytes`` of simulated global memory (zeroed); the allocation is never reused."""

    def __init__(self, nbytes: int):
        if nbytes <= 0:
            raise ValueError(f"nbytes must be positive, got {nbytes}")
        self.nbytes = int(nbytes)
        self._ptr: int | None = MEMORY.alloc(self.nbytes)

    @property
    def ptr(self) -> int:
        if self._ptr is None:
            raise ValueError("buffer was freed")
        return self._ptr

    def free(self) -> None:
        self._ptr = None

    def copy_from(self, host: np.ndarray) -> None:
        host = np.ascontiguousarray(host)
        if host.nbytes > self.nbytes:
            raise ValueError(f"host array has {host.nbytes} bytes, buffer {self.nbytes}")
        MEMORY.write(self.ptr, host)

    def copy_to(self, host: np.ndarray) -> np.ndarray:
        if not (host.flags.c_contiguous and host.flags.writeable):
            raise ValueError("destination must be C-contiguous and writeable")
        if host.nbytes > self.nbytes:
            raise ValueError(f"host array has {host.nbytes} bytes, buffer {self.nbytes}")
        host.reshape(-1).view(np.uint8)[:] = MEMORY.read(self.ptr, np.uint8, host.nbytes)
        return host

    def to_host(self, dtype, shape) -> np.ndarray:
        return self.copy_to(np.empty(shape, dtype=dtype))

    def zero(self) -> None:
        MEMORY.write(self.ptr, np.zeros(self.nbytes, np.uint8))


def to_device(host: np.ndarray) -> DeviceBuffer:
    buf = DeviceBuffer(max(1, np.asarray(host).nbytes))
    buf.copy_from(host)
    return buf


class Function:
    """A kernel of a loaded module; ``launch`` runs it in the simulator (synchronously)."""

    def __init__(self, module: LoadedModule, name: str, signature=None):
        self.module, self.name = module, name
        self.signature = tuple(signature) if signature is not None else None
        self.last_stats: sim.LaunchStats | None = None

    def launch(self, grid, block, args=(), shared: int = 0, stream=None) -> None:
        if self.signature is not None and len(args) != len(self.signature):
            raise TypeError(f"{self.name} takes {len(self.signature)} arguments, got {len(args)}")
        values = [a.ptr if isinstance(a, DeviceBuffer) else a for a in args]
        self.last_stats = sim.launch(
            self.module.program, self.name, grid, block, values, MEMORY, shared_bytes=int(shared)
        )

    __call__ = launch

    def prepare(self, grid, block, args=(), shared: int = 0) -> PreparedLaunch:
        """The launch as a callable (``ptx.driver.Function.prepare``'s interface): calling it runs
        the kernel in the simulator with these arguments."""
        if self.signature is not None and len(args) != len(self.signature):
            raise TypeError(f"{self.name} takes {len(self.signature)} arguments, got {len(args)}")
        return PreparedLaunch(self, grid, block, shared, tuple(args))


class PreparedLaunch:
    """A launch with fixed geometry and arguments (``ptx.driver.PreparedLaunch``'s ``grid``,
    ``block``, ``shared`` and call); calling it runs the kernel in the simulator."""

    __slots__ = ("function", "grid", "block", "shared", "args")

    def __init__(self, function: Function, grid, block, shared: int, args: tuple) -> None:
        self.function, self.grid, self.block, self.shared, self.args = function, grid, block, shared, args

    def __call__(self, stream=None) -> None:
        self.function.launch(self.grid, self.block, self.args, self.shared, stream)


#: the simulator's tensor maps: same arguments as ``cuTensorMapEncodeTiled`` (ptx.driver.encode_tensor_map_tiled)
encode_tensor_map_tiled = _tensormap.encode_tiled


class LoadedModule:
    def __init__(self, text: str):
        self.program = sim.Program(text)
        self._functions: dict[str, Function] = {}

    def function(self, name: str, signature=None) -> Function:
        if name not in self.program.kernels:
            raise sim.SimError(f"no kernel {name!r} in the module (has {', '.join(self.program.kernels)})")
        if name not in self._functions:
            self._functions[name] = Function(self, name, signature)
        elif signature is not None:
            self._functions[name].signature = tuple(signature)
        return self._functions[name]

    def unload(self) -> None:
        pass


def load_ptx(text: str, arch: str = "sm_90") -> LoadedModule:
    """Load PTX ``text``; when ptxas is installed it must assemble for ``arch`` first."""
    from . import toolchain

    if toolchain.find_ptxas() is not None:
        toolchain.compile(text, arch=arch)
    return LoadedModule(text)


def load(cubin) -> LoadedModule:
    """Load a :class:`ptx.toolchain.Cubin` (its PTX source) or PTX text."""
    text = cubin if isinstance(cubin, str) else getattr(cubin, "ptx", "")
    if not text:
        raise ValueError("the simulator needs PTX text: a Cubin from ptx.compile or the module's text()")
    return LoadedModule(text)


class Event:
    """A no-op event: simulated code is never timed (``elapsed_ms`` is 0.0)."""

    def record(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def elapsed_ms(self, start: Event) -> float:
        return 0.0
