"""The fused attention kernel's contract, shared by every ISA's generator
(`minijit.kernels.x86_64.attention`, `minijit.kernels.aarch64.attention`): its C signature, its
int64 arguments, the tile limits and their checks. The algorithm and the layouts are in the x86-64
module's docstring; `minijit.targets.base.Target.attention_kernel` hands a target's module out.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "ARGS",
    "CHAIN_ARGS",
    "DEFAULT_G",
    "DEFAULT_SX_VECTORS",
    "G_MAX",
    "SX_VECTORS_MAX",
    "check_tile",
    "kernel_name",
    "pack_args",
    "signature",
]

#: the int64 arguments every generator reads, in order (sizes and row strides in elements)
ARGS = (
    "L",
    "S",
    "E",
    "Ev",
    "ldq",
    "ldkt",
    "ldv",
    "ldo",
    "row0",
    "causal",
    "scratch",
    "kt_tile",
    "bias",
    "ldb",
    "ldb_c",
)
#: the arguments of a generator that resumes a row's state between key chunks, after `ARGS`
CHAIN_ARGS = ("lse", "chain")
#: the most query rows of a tile (the AArch64 generator's: one register block)
G_MAX = 8
#: the most keys of a tile, in vectors
SX_VECTORS_MAX = 32
#: default tile: 6 query rows, 4 vectors of keys
DEFAULT_G, DEFAULT_SX_VECTORS = 6, 4


def signature(ctype: str) -> str:
    """The C signature of the attention kernel for elements of ``ctype`` ("float", "double")."""
    return (
        f"void(const {ctype}* q, const {ctype}* kt, const {ctype}* v, {ctype}* o, const int64_t* args,"
        f" const {ctype}* params)"
    )


def kernel_name(dtype: str, isa: str, g: int, s_x: int, softmax: bool = True) -> str:
    """The kernel's name: dtype, ISA and tile (``_nosoftmax`` for the bench's variant)."""
    return f"attention_{dtype}_{isa}_g{g}_s{s_x}" + ("" if softmax else "_nosoftmax")


def check_tile(g: int | None, s_x: int | None, lanes: int, what: str, g_max: int = G_MAX) -> tuple[int, int]:
    """The validated tile ``(g, s_x)`` for vectors of ``lanes`` elements (``what``: the dtype and
    ISA, for the message): ``g`` query rows in 1..``g_max`` (the generator's most rows a tile,
    default `G_MAX`), ``s_x`` keys a multiple of the vector length, 1..`SX_VECTORS_MAX` vectors
    (defaults `DEFAULT_G` and `DEFAULT_SX_VECTORS` vectors). ValueError naming the parameter otherwise."""
    g = DEFAULT_G if g is None else g
    s_x = DEFAULT_SX_VECTORS * lanes if s_x is None else s_x
    if not isinstance(g, int) or isinstance(g, bool) or not 1 <= g <= g_max:
        raise ValueError(f"g must be an integer in 1..{g_max}, got {g!r}")
    if not isinstance(s_x, int) or isinstance(s_x, bool) or s_x % lanes or not 1 <= s_x // lanes <= SX_VECTORS_MAX:
        raise ValueError(
            f"s_x must be a multiple of the vector length {lanes} ({what}) in {lanes}..{SX_VECTORS_MAX * lanes},"
            f" got {s_x!r}"
        )
    return g, s_x


def pack_args(names: tuple[str, ...], **values: int) -> np.ndarray:
    """The ``args`` array of a generator whose arguments are ``names`` (`ARGS`, then `CHAIN_ARGS`
    where it chains) from keyword values (``kt_tile``, ``bias``, ``ldb``, ``ldb_c``, ``lse``,
    ``chain`` 0 when left out); ValueError naming a missing, unknown or non-int one, a negative
    size, a causal flag or ``ldb_c`` other than 0/1, or a chain without its ``lse``."""
    values = {n: 0 for n in ("kt_tile", "bias", "ldb", "ldb_c", *CHAIN_ARGS) if n in names} | values
    unknown = sorted(set(values) - set(names))
    missing = [n for n in names if n not in values]
    if unknown or missing:
        raise ValueError(f"attention args: unknown {unknown}, missing {missing}")
    for name, v in values.items():
        if not isinstance(v, int | np.integer) or isinstance(v, bool):
            raise ValueError(f"attention args: {name} must be an int, got {v!r}")
    for name in ("L", "S", "E", "Ev", "row0"):
        if not 0 <= values[name] < 1 << 40:
            raise ValueError(f"attention args: {name} must be in 0..2**40, got {values[name]}")
    for name in ("causal", "ldb_c"):
        if values[name] not in (0, 1):
            raise ValueError(f"attention args: {name} must be 0 or 1, got {values[name]}")
    if "chain" in names and (values["chain"] not in (0, 1, 2, 3) or (values["chain"] and not values["lse"])):
        raise ValueError(f"attention args: chain must be 0..3 (1 resume, 2 keep), and needs lse, got {values['chain']}")
    return np.array([values[n] for n in names], dtype=np.int64)
