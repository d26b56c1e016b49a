"""Native kernels: machine code in W^X memory, callable from Python through cffi.

``Kernel(code, "void(const float*, float*, int64_t)")`` places the code in an
:class:`ExecutableBuffer`, casts its address to a cffi function pointer of the
signature, and calls it with numpy arrays (as pointers to their first element)
and Python numbers, after :meth:`Signature.check` has validated every argument.
cffi releases the GIL during the call, so threads run kernels in parallel.

Only code for the host ISA runs here; AArch64 code on other hosts goes to the
emulator worker.
"""

from __future__ import annotations

import threading
from typing import Any

import cffi
import numpy as np

from minijit.runtime.features import detected_host, normalize_isa
from minijit.runtime.memory import ExecutableBuffer
from minijit.runtime.signature import Signature

__all__ = ["Kernel"]

_ffi = cffi.FFI()


class Kernel:
    """A callable native function.

    ``code`` is the machine code (bytes; entry at offset 0). ``signature`` is
    its C signature (text or :class:`Signature`). ``listing`` is the assembly
    text kept for inspection. ``isa`` defaults to the host's; another ISA
    raises ValueError. With ``unchecked=True`` pointer arguments may also be
    raw integer addresses (nothing is checked behind them).

    Attributes: ``name``, ``signature`` (Signature), ``code``, ``listing``,
    ``isa``, ``unchecked``, ``address`` (int), ``size`` (code bytes).
    """

    def __init__(
        self,
        code: bytes,
        signature: str | Signature,
        *,
        name: str = "kernel",
        listing: str = "",
        isa: str | None = None,
        unchecked: bool = False,
    ) -> None:
        self.signature = Signature.parse(signature)
        self.isa = normalize_isa(isa) if isa is not None else detected_host().isa
        if self.isa != detected_host().isa:
            raise ValueError(
                f"kernel {name!r}: cannot run {self.isa} code natively on a {detected_host().isa} host"
                " (use the emulator)"
            )
        self.name = name
        self.code = bytes(code)
        self.listing = listing
        self.unchecked = unchecked
        self._buffer = ExecutableBuffer(self.code)
        self._fn = _ffi.cast(self.signature.c_function_pointer(), self._buffer.address)
        self._ptr_types = tuple(_ffi.typeof(a.ctype) if a.kind == "ptr" else None for a in self.signature.args)
        self._cond = threading.Condition(threading.Lock())
        self._active = 0
        self._closed = False

    @property
    def address(self) -> int:
        """Entry address of the code. Raises ValueError once closed."""
        return self._buffer.address

    @property
    def size(self) -> int:
        """Code length in bytes."""
        return len(self.code)

    @property
    def closed(self) -> bool:
        return self._closed

    def __call__(self, *args: Any) -> Any:
        """Check the arguments, then run the code; returns the C result (None for void)."""
        values = self.signature.check(args, unchecked=self.unchecked)
        cargs = []
        for value, ptype in zip(values, self._ptr_types, strict=True):
            if ptype is None:
                cargs.append(value)
            elif isinstance(value, np.ndarray):
                cargs.append(_ffi.cast(ptype, value.ctypes.data))
            else:
                cargs.append(_ffi.cast(ptype, value))
        with self._cond:
            if self._closed:
                raise ValueError(f"kernel {self.name!r} is closed")
            self._active += 1
        try:
            # `values` keeps the arrays alive until the call returns.
            return self._fn(*cargs)
        finally:
            with self._cond:
                self._active -= 1
                if self._active == 0:
                    self._cond.notify_all()

    def close(self) -> None:
        """Free the executable memory, after calls in flight return. Idempotent."""
        with self._cond:
            self._closed = True
            while self._active:
                self._cond.wait()
        self._buffer.close()

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = "closed" if self._closed else f"at {self._buffer.address:#x}"
        return f"<Kernel {self.name!r} {self.signature} {self.isa}, {self.size} bytes {where}>"
