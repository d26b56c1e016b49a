"""The ``exp`` primitive's numbers, shared by every ISA's generator (`minijit.kernels.x86_64.vexp`,
`minijit.kernels.aarch64.vexp`): the range reduction's constants, the clamp bounds and the minimax
coefficients (with their derivation, ``python -m minijit.kernels.exp``). The algorithm and its
error bound are in `minijit.kernels.x86_64.vexp`'s docstring; both generators perform the same
floating-point operations in the same order, so they give the same bits."""

from __future__ import annotations

__all__ = ["CLAMP", "COEFFICIENTS", "REDUCED", "REDUCTION", "derive_coefficients"]

#: Remez interval: [-A, A] covers |r| <= ln2/2 = 0.34657 with room for the rounding of n
REDUCED = 0.35

#: minimax coefficients c2..cd of ``exp(r) ~ 1 + r + c2 r^2 + ... + cd r^d`` (relative error on
#: [-0.35, 0.35]), exactly as `derive_coefficients` gives them, rounded to the dtype
COEFFICIENTS = {
    "fp32": (
        "0x1.fffffcp-2",
        "0x1.55548ap-3",
        "0x1.555916p-5",
        "0x1.123fb4p-7",
        "0x1.6a1a8ep-10",
    ),
    "fp64": (
        "0x1.000000000000bp-1",
        "0x1.55555555554f0p-3",
        "0x1.555555555025dp-5",
        "0x1.1111111129941p-7",
        "0x1.6c16c185981adp-10",
        "0x1.a01a01233f917p-13",
        "0x1.a01995fa20f5ep-16",
        "0x1.71df2eb5a22f7p-19",
        "0x1.28b15bae90642p-22",
        "0x1.ad7ace96d5a64p-26",
    ),
}

#: clamp bounds, past the underflow/overflow thresholds. At LO, ``n_a = floor(n/2)`` is -127 /
#: -1023: the exponent build gives ``2^n_a = +0`` exactly (a zero exponent field over a zero
#: mantissa), so -inf and every x <= LO (masked attention scores) come out as ``p * 0 * 0 = +0``
#: without an underflowing multiply (an underflow costs a microcode assist on Zen 3: 2.2x the time
#: of a normal result). At HI, ``n_a`` is 65 / 512 and ``p 2^n`` overflows to +inf.
CLAMP = {"fp32": (-176.0, 90.0), "fp64": (-1418.0, 710.0)}


#: log2(e), and ln 2 = ln2_hi + ln2_lo (Cody-Waite: ln2_hi = ln 2 rounded to the dtype, ln2_lo =
#: the rest rounded), each correctly rounded from mpmath at 60 digits
REDUCTION = {
    "fp32": {"log2e": "0x1.715476p0", "ln2_hi": "0x1.62e430p-1", "ln2_lo": "-0x1.05c610p-29"},
    "fp64": {"log2e": "0x1.71547652b82fep0", "ln2_hi": "0x1.62e42fefa39efp-1", "ln2_lo": "0x1.abc9e3b39803fp-56"},
}


# -- derivation of the coefficients --------------------------------------------------------------


def derive_coefficients(dtype: str, grid: int = 4000, dps: int = 50) -> tuple[str, ...]:
    """Re-derive `COEFFICIENTS` [dtype] (needs mpmath): the Remez exchange for
    ``exp(r) ~ 1 + r + r^2 q(r)`` minimizing the relative error on [-0.35, 0.35], i.e. ``q``
    (degree 4 for fp32, 9 for fp64) the weighted minimax approximation of
    ``g(r) = (e^r - 1 - r) / r^2`` with weight ``r^2 e^-r``; reference points start at the
    Chebyshev extrema and move to the extrema of the error on a ``grid``-interval mesh until the
    error levels agree to 1e-6. Each coefficient is then rounded to nearest in the dtype's
    precision. Returns the coefficients (floats), c2 first."""
    import mpmath as mp

    degree, bits = {"fp32": (6, 24), "fp64": (11, 53)}[dtype]
    m = degree - 2
    with mp.workdps(dps):
        a = mp.mpf(REDUCED)

        def g(r):
            return mp.mpf(1) / 2 if r == 0 else (mp.exp(r) - 1 - r) / r**2

        def w(r):
            return r * r * mp.exp(-r)

        xs = [a * mp.cos(mp.pi * (m + 1 - i) / (m + 1)) for i in range(m + 2)]
        xs = [x if abs(x) > a / 100 else a / (4 * (m + 2)) for x in xs]  # the weight is 0 at 0
        mesh = [-a + 2 * a * i / grid for i in range(grid + 1)]
        g_mesh, w_mesh = [g(r) for r in mesh], [w(r) for r in mesh]
        for _ in range(40):
            lhs, rhs = mp.matrix(m + 2, m + 2), mp.matrix(m + 2, 1)
            for i, x in enumerate(xs):
                for j in range(m + 1):
                    lhs[i, j] = x**j
                lhs[i, m + 1] = (-1) ** i / w(x)
                rhs[i] = g(x)
            sol = mp.lu_solve(lhs, rhs)
            coef, level = [sol[j] for j in range(m + 1)], abs(sol[m + 1])
            err = [wk * (mp.polyval(coef[::-1], r) - gk) for r, gk, wk in zip(mesh, g_mesh, w_mesh, strict=True)]
            extrema, k = [], 0
            while k < len(mesh):  # the largest |error| of each run of one sign
                if err[k] == 0:
                    k += 1
                    continue
                sign, best = mp.sign(err[k]), k
                while k < len(mesh) and (err[k] == 0 or mp.sign(err[k]) == sign):
                    best = k if abs(err[k]) > abs(err[best]) else best
                    k += 1
                extrema.append(best)
            while len(extrema) > m + 2:
                extrema.pop(0 if abs(err[extrema[0]]) < abs(err[extrema[-1]]) else -1)
            xs = [mesh[k] for k in extrema]
            if abs(max(abs(e) for e in err) - level) < level * mp.mpf("1e-6"):
                break
        out = []
        for ck in coef:
            with mp.workprec(bits):
                out.append(float(+ck))
    return tuple(out)


if __name__ == "__main__":  # pragma: no cover - prints the derivation
    for _dtype in COEFFICIENTS:
        _derived = derive_coefficients(_dtype)
        _same = _derived == tuple(float.fromhex(c) for c in COEFFICIENTS[_dtype])
        print(_dtype, "matches COEFFICIENTS" if _same else "DIFFERS:", *(c.hex() for c in _derived))
