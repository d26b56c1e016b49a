"""Shared by the minijit tests: the seed's layouts, the binary primitives' numpy references."""

from __future__ import annotations

import numpy as np


def seed_layout(m0: int, n0: int, k0: int, m1: int, n1: int, k1: int):
    """The (M, N, K, M, N, K) layout of docs/seeds/004_mini_jit_backend.txt section 5.3 at these
    sizes (32, 32, 8, 32, 32, 32 in the seed):
    A[m0,k0,k1,m1], B[n0,k0,n1,k1], C[m0,n0,n1,m1], dense row-major.
    Returns (dim types, sizes, in0 strides, in1 strides, out strides)."""
    sizes = (m0, n0, k0, m1, n1, k1)
    s0 = (k0 * k1 * m1, 0, k1 * m1, 1, 0, m1)
    s1 = (0, k0 * n1 * k1, n1 * k1, 0, k1, 1)
    so = (n0 * n1 * m1, n1 * m1, 0, 1, m1, 0)
    return ("m", "n", "k", "m", "n", "k"), sizes, s0, s1, so


def trus_args(ptype: str, T: int, R: int, U: int, S: int) -> tuple:
    """Setup arguments of the unary permutation trus -> turs (fp32, no touches) of
    docs/seeds/004_mini_jit_backend.txt section 5.6.2."""
    return (
        "fp32",
        "none",
        ptype,
        "none",
        "cccc",
        ("seq", "seq", "prim", "prim"),
        (T, R, U, S),
        (R * U * S, U * S, S, 1),
        (0, 0, 0, 0),
        (U * R * S, S, R * S, 1),
    )


# the binary primitives and the numpy ufuncs they compute, in the order the tests sweep them
UFUNCS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "min": np.minimum, "max": np.maximum}


def mapping_perms(address: int) -> str | None:
    """Permissions ("r-xp", ...) of the mapping containing ``address`` in /proc/self/maps, or None."""
    with open("/proc/self/maps") as f:
        for line in f:
            lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
            if lo <= address < hi:
                return line.split()[1]
    return None


#: the host class the packing and threading rules were measured on (a Zen 3 core: L1d 32 KiB 8-way,
#: L2 512 KiB 8-way, L3 32 MiB 16-way); tests of those rules pin it, so they decide the same on
#: every host (a Zen 4 guest has a 1 MiB L2 and AVX-512, and its native decisions differ)
ZEN3_CACHES = {1: (32 * 1024, 8, 64), 2: (512 * 1024, 8, 64), 3: (32 * 1024 * 1024, 16, 64)}
#: the x86-64 target of those rules (every x86-64 host these tests run on has AVX2 and FMA)
RULE_TARGET = "x86_64-avx2"


def pin_rule_host(monkeypatch) -> None:
    """Make the host's cache queries (`minijit.runtime.features`) answer `ZEN3_CACHES` for the rest
    of the test (the blocking model, packing and threading rules all read them there)."""
    from minijit.runtime import features

    caches = {level: features.CacheGeometry(*geo) for level, geo in ZEN3_CACHES.items()}
    monkeypatch.setattr(features, "_sysfs_caches", lambda: dict(caches))
