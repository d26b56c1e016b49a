"""PTX scalar types, operand compatibility and version/target requirements.

Facts (checked against ptxas 13.0, which reports "Feature X requires PTX ISA
.version V / .target sm_N"):

- .f16/.f16x2 registers and f16 arithmetic: PTX 4.2, sm_53.
- .bf16/.bf16x2 are instruction types only; registers holding them are
  declared .b16/.b32 (``.reg .bf16`` is a syntax error in every PTX version).
- .b128 (type and ld/st): PTX 8.3, sm_70.
- shfl.sync: PTX 6.0. ldmatrix and mma m16n8k8 f16: PTX 6.5, sm_75.
- cp.async, mma with .bf16/.tf32, m16n8k16, cvt.rna.tf32.f32, cvt to
  f16x2/bf16x2/bf16: PTX 7.0, sm_80. cvt.f32.bf16: PTX 7.1, sm_80.
- add/sub/mul .bf16: PTX 7.8, sm_90 (fma.rn.bf16: PTX 7.0, sm_80).
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from .errors import PtxVersionError

# name -> (bits, kind) ; kind: b (untyped bits), u, s, f, pred
TYPES: dict[str, tuple[int, str]] = {
    "pred": (1, "pred"),
    "b8": (8, "b"),
    "b16": (16, "b"),
    "b32": (32, "b"),
    "b64": (64, "b"),
    "b128": (128, "b"),
    "u8": (8, "u"),
    "u16": (16, "u"),
    "u32": (32, "u"),
    "u64": (64, "u"),
    "s8": (8, "s"),
    "s16": (16, "s"),
    "s32": (32, "s"),
    "s64": (64, "s"),
    "f16": (16, "f"),
    "f16x2": (32, "f"),
    "bf16": (16, "f"),
    "bf16x2": (32, "f"),
    "tf32": (32, "f"),
    "f32": (32, "f"),
    "f64": (64, "f"),
}

#: types a virtual register may have (8-bit and tf32 exist only as instruction types)
REG_TYPES = (
    "pred",
    "b16",
    "b32",
    "b64",
    "b128",
    "u16",
    "u32",
    "u64",
    "s16",
    "s32",
    "s64",
    "f16",
    "f16x2",
    "bf16",
    "bf16x2",
    "f32",
    "f64",
)

#: how a register type is declared in PTX
DECL_TYPE = {"bf16": "b16", "bf16x2": "b32"}

PACKED = ("f16x2", "bf16x2")


def bits(t: str) -> int:
    return TYPES[t][0]


def kind(t: str) -> str:
    return TYPES[t][1]


def is_int(t: str) -> bool:
    return kind(t) in ("u", "s")


def is_float(t: str) -> bool:
    return kind(t) == "f"


def compatible(inst_type: str, reg_type: str) -> bool:
    """May a register of ``reg_type`` be an operand of an instruction typed ``inst_type``?

    PTX rules: identical types; any two types of the same size when one of them
    is a bit-size type (.bN); signed and unsigned integers of the same size.
    """
    if inst_type == reg_type:
        return True
    ib, ik = TYPES[inst_type]
    rb, rk = TYPES[reg_type]
    if ib != rb or "pred" in (ik, rk):
        return False
    if ik == "b" or rk == "b":
        return True
    return ik in ("u", "s") and rk in ("u", "s")


def int_range(t: str) -> tuple[int, int]:
    n = bits(t)
    k = kind(t)
    if k == "u":
        return 0, (1 << n) - 1
    if k == "s":
        return -(1 << (n - 1)), (1 << (n - 1)) - 1
    return -(1 << (n - 1)), (1 << n) - 1


def float_literal(value: float, t: str) -> str:
    """PTX hex float literal: 0fXXXXXXXX (f32) or 0dXXXXXXXXXXXXXXXX (f64)."""
    if t == "f64":
        return "0d{:016X}".format(struct.unpack("<Q", struct.pack("<d", float(value)))[0])
    return "0f{:08X}".format(struct.unpack("<I", struct.pack("<f", float(value)))[0])


# --------------------------------------------------------------------------- versions and targets

Version = tuple[int, int]


@dataclass(frozen=True, order=True)
class Req:
    """What a feature needs: a PTX ISA version and a minimum sm number."""

    version: Version = (6, 0)
    sm: int = 50
    why: str = "baseline"
    suffix: str = ""  #: "a": an architecture-specific feature (sm_90a), not in later targets

    def __str__(self) -> str:
        return f"{self.why} (PTX {self.version[0]}.{self.version[1]}, sm_{self.sm}{self.suffix})"


#: floor of every module: PTX 6.0 (CUDA 9), the first with the .sync warp
#: primitives (shfl.sync, bar.sync semantics of Volta); sm_50 is the oldest
#: target current ptxas still accepts in a .target line.
BASE = Req((6, 0), 50, "baseline")

#: the first PTX version that knows each target
TARGET_MIN_VERSION: dict[int, Version] = {
    50: (4, 0),
    52: (4, 1),
    53: (4, 2),
    60: (5, 0),
    61: (5, 0),
    62: (5, 0),
    70: (6, 0),
    72: (6, 1),
    75: (6, 3),
    80: (7, 0),
    86: (7, 1),
    87: (7, 4),
    89: (7, 8),
    90: (7, 8),
    100: (8, 6),
    101: (8, 6),
    103: (8, 8),
    120: (8, 7),
    121: (8, 8),
}

_TARGET_RE = re.compile(r"^sm_(\d+)([af]?)$")


def parse_target(target: str) -> tuple[int, str]:
    m = _TARGET_RE.match(target)
    if not m:
        raise PtxVersionError(f"target {target!r} is not of the form sm_NN (e.g. sm_80, sm_90a)")
    return int(m.group(1)), m.group(2)


def target_min_version(target: str) -> Version:
    sm, suffix = parse_target(target)
    if sm not in TARGET_MIN_VERSION:
        raise PtxVersionError(f"unknown target {target!r}; known: {sorted(TARGET_MIN_VERSION)}")
    v = TARGET_MIN_VERSION[sm]
    if suffix == "a" and sm == 90:
        v = max(v, (8, 0))
    elif suffix == "f":
        v = max(v, (8, 8))
    return v


def parse_version(version) -> Version:
    if isinstance(version, tuple) and len(version) == 2:
        return int(version[0]), int(version[1])
    if isinstance(version, str):
        m = re.match(r"^(\d+)\.(\d+)$", version)
        if m:
            return int(m.group(1)), int(m.group(2))
    raise PtxVersionError(f"version {version!r} is not 'X.Y' or (X, Y)")


def format_version(v: Version) -> str:
    return f"{v[0]}.{v[1]}"


# feature requirements used by the builder
F16 = Req((4, 2), 53, "f16 types")
B128 = Req((8, 3), 70, ".b128")
SHFL_SYNC = Req((6, 0), 30, "shfl.sync")
LDMATRIX = Req((6, 5), 75, "ldmatrix")
MMA_M16N8K8_F16 = Req((6, 5), 75, "mma.m16n8k8 f16")
SM80_70 = Req((7, 0), 80, "sm_80 feature")
CP_ASYNC = Req((7, 0), 80, "cp.async")
CVT_F32_BF16 = Req((7, 1), 80, "cvt.f32.bf16")
BF16_ARITH = Req((7, 8), 90, "add/sub/mul .bf16")
MBARRIER_TRY_WAIT = Req((7, 8), 90, "mbarrier.try_wait")
HOPPER_ASYNC = Req((8, 0), 90, "mbarrier expect_tx / cp.async.bulk.tensor / fence.proxy.async")
WGMMA = Req((8, 0), 90, "wgmma / setmaxnreg", "a")
