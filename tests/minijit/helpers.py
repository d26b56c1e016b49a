"""Shared by the minijit tests: the seed's layouts, the binary primitives' numpy references, the
host the decision tests are pinned to.

Decision tests and execution tests (issue 49): a test that asserts a decision (a listing, a
blocking, a packing choice, chunks, a thread split or grid, a kernel choice, a prim size) pins
both the target (``target="x86_64-avx2"``, `RULE_TARGET`, never ``"native"``) and the host profile
(the ``pin_host`` fixture of tests/conftest.py, `RULE_HOST` where the expected values were derived
on the Zen 3 guest), so it decides the same on every machine; where the expected value is a
property every recorded host shares it is parametrized over `minijit.runtime.profiles.X86_PROFILES`
instead, so a developer on one CPU sees what another would decide. Execution is native: code runs
on this machine (`minijit.runtime.features.detected_host`), a test skips, with its reason, what
this machine cannot run (`runs_avx2`; a decision test that sets up x86-64 kernels without running
them needs only an x86-64 machine to load them on, `x86_machine`), and a test on ``"native"`` asserts only what holds on
every host (results, and properties true of every target).
"""

from __future__ import annotations

import numpy as np
import pytest

from minijit.runtime import features


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


#: the host profile (`minijit.runtime.profiles.PROFILES`) the packing, chunking and threading rules
#: were measured on, and the decision tests' expected values derived on: the Zen 3 guest (L1d 32 KiB
#: 8-way, L2 512 KiB 8-way, L3 32 MiB 16-way over 2 CPUs, AVX2, 2 cores); pin it with
#: ``pin_host(RULE_HOST)``
RULE_HOST = "zen3"
#: the x86-64 target of those rules (every x86-64 host these tests run on has AVX2 and FMA)
RULE_TARGET = "x86_64-avx2"

_machine = features.detected_host()
#: skips a test that sets up x86-64 kernels (they load only where x86-64 code runs) on other machines
x86_machine = pytest.mark.skipif(
    _machine.isa != "x86_64", reason="sets up x86-64 kernels, which load only on an x86-64 machine"
)
#: skips a test that runs `RULE_TARGET` code where this machine cannot (not x86-64, or no AVX2/FMA)
runs_avx2 = pytest.mark.skipif(
    not (_machine.isa == "x86_64" and _machine.avx2 and _machine.fma),
    reason="runs x86-64 AVX2 code; this machine is not an x86-64 host with AVX2 and FMA",
)
