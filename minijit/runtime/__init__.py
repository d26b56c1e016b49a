"""Runtime: host features, W^X executable memory, callable kernels, AArch64 emulation.

`load(code, signature, isa=...)` returns something callable with numpy arrays
and ints: a native `Kernel` when the code's ISA is the host's, otherwise (for
AArch64 code on another host) an `EmulatedKernel` running in a qemu worker.
Both check their arguments against the C signature before any code runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minijit.runtime.features import HostInfo, detected_host, host

if TYPE_CHECKING:
    from minijit.runtime.kernel import Kernel
    from minijit.runtime.signature import Signature

__all__ = ["HostInfo", "Kernel", "Signature", "host", "load", "runs_natively"]


def __getattr__(name: str) -> Any:
    """`Kernel` and `Signature` load on first use (cffi and its C parser with them), so loading a
    cached kernel's bytes (`minijit.runtime.codecache`) stays cheap."""
    if name == "Kernel":
        from minijit.runtime.kernel import Kernel

        return Kernel
    if name == "Signature":
        from minijit.runtime.signature import Signature

        return Signature
    raise AttributeError(f"module 'minijit.runtime' has no attribute {name!r}")


def runs_natively(isa: str) -> bool:
    """True when code for ``isa`` ("aarch64" or "x86_64") runs on this host without emulation."""
    return detected_host().isa == isa


def load(
    code: bytes,
    signature: str,
    *,
    isa: str,
    name: str = "kernel",
    listing: str = "",
    sve_vl: int = 128,
    unchecked: bool = False,
    sme_vl: int | None = None,
):
    """Make ``code`` callable: natively on a matching host, else AArch64 under emulation.

    ``sve_vl`` (bits) picks the emulation worker's SVE vector length, ``sme_vl`` (bits, None:
    qemu's default) its streaming (SME) vector length; both are ignored for native code. Raises
    ValueError for x86-64 code on a non-x86 host.
    """
    if runs_natively(isa):
        from minijit.runtime.kernel import Kernel

        return Kernel(code, signature, name=name, listing=listing, isa=isa, unchecked=unchecked)
    if isa == "aarch64":
        from minijit.runtime.emulator import EmulatedKernel

        return EmulatedKernel(
            code, signature, name=name, listing=listing, sve_vl=sve_vl, unchecked=unchecked, sme_vl=sme_vl
        )
    raise ValueError(f"cannot run {isa} code on this {detected_host().isa} host")
