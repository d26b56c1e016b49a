"""Resource bounds checked at setup, before anything is allocated.

``MAX_BYTES`` bounds every buffer a plan allocates for itself (packing buffers, einsum
intermediates, sparse temporaries, GPU workspaces): half of the host's physical memory, at most
2**40 bytes (1 TiB), or the byte count in the environment variable ``MINIJIT_MAX_BYTES``.
:func:`check_alloc` refuses a larger request with a :class:`~minijit.errors.SetupError` naming
what would be allocated, the dimension behind it where known, and the bound.
"""

from __future__ import annotations

import os

from minijit.errors import SetupError, error_t

__all__ = ["MAX_BYTES", "ADDRESS_BITS", "check_alloc", "default_max_bytes"]

#: byte offsets must stay below 2**ADDRESS_BITS (a signed 64-bit pointer difference)
ADDRESS_BITS = 63
_CEILING = 1 << 40


def default_max_bytes() -> int:
    """The bound in bytes: ``MINIJIT_MAX_BYTES`` when set (a positive integer), else half of the
    physical memory capped at 2**40 (2**40 when the memory size is unknown)."""
    env = os.environ.get("MINIJIT_MAX_BYTES")
    if env:
        try:
            value = int(env, 0)
        except ValueError:
            raise ValueError(f"MINIJIT_MAX_BYTES must be a positive integer (bytes), got {env!r}") from None
        if value < 1:
            raise ValueError(f"MINIJIT_MAX_BYTES must be a positive integer (bytes), got {env!r}")
        return value
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return _CEILING
    return min(_CEILING, physical // 2) if physical > 0 else _CEILING


#: the largest allocation (bytes) a plan may make for itself; read at each check (tests patch it)
MAX_BYTES: int = default_max_bytes()


def _human(nbytes: int) -> str:
    for unit, shift in (("PiB", 50), ("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.3g} {unit}"
    return f"{nbytes} B"


def check_alloc(nbytes: int, what: str, dim: int | None = None) -> None:
    """SetupError(too_large) unless ``nbytes`` (an int >= 0) fits :data:`MAX_BYTES`.

    ``what`` names the buffer ("in0 packing buffer"); ``dim`` the dimension index whose size
    makes it large, when the caller knows it.
    """
    bound = MAX_BYTES
    if nbytes < 0:
        raise SetupError(error_t.too_large, f"{what}: negative allocation size {nbytes} bytes", dim=dim)
    if nbytes <= bound:
        return
    where = f" (driven by dim {dim})" if dim is not None else ""
    raise SetupError(
        error_t.too_large,
        f"{what}{where} would allocate {nbytes} bytes ({_human(nbytes)}), more than the bound "
        f"minijit.limits.MAX_BYTES = {bound} bytes ({_human(bound)})",
        dim=dim,
    )
