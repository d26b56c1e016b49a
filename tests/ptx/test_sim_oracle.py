"""`ptx.sim`'s float instructions against an independent softfloat (tests/ptx/softfloat.py,
exact rationals, no code shared with `ptx`): every form of `ptx.hwcorpus.OPS` and the forms the
simulator adds (directed rounding, f16 fma and .ftz, 64-bit integer and bf16 conversions), over
the corpus's edge inputs, hypothesis-drawn operands (subnormals, infinities, NaN payloads, signed
zeros, ties of the result type, fma halfway cases) and `ORACLE_RANDOM` random operands per
form (``PTX_ORACLE_RANDOM=100000`` for the issue-51 sweep). Each rule has a mutation test: the
simulator with the rule broken fails the oracle.

NaN results are compared by bits where a rule fixes them (f32 and f16 arithmetic, f32 -> f16/bf16
conversion: the canonical NaN; tf32: the sign kept) and by NaN-ness only where neither the ISA
nor a recorded chip value decides (f64 arithmetic, widening cvt, cvt.rn.f32.f64, min/max of two
NaNs). Zeros are compared by value only where the sign is undecided: min/max of +0 and -0,
``.sat`` and ``.relu`` results of zero.
"""

from __future__ import annotations

import os
import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ptx import hwcorpus as H
from ptx import simdriver
from tests.conftest import examples
from tests.ptx import softfloat as S

ORACLE_RANDOM = int(os.environ.get("PTX_ORACLE_RANDOM", "300"))

CANON = {"f32": 0x7FFFFFFF, "f16": 0x7FFF}  # arithmetic NaN (f32: recorded on the chip; f16: the ISA)
NARROW_NAN = 0x7FFF  # cvt.rn.f16/bf16.f32 (recorded)
_FT = {"f16", "bf16", "tf32", "f32", "f64"}


# --------------------------------------------------------------------------- extra forms


def _emit(op: str, **kw):
    def emit(k, d, *srcs):
        getattr(k, op)(d, *srcs, **kw)

    return emit


def _cvt(dtype: str, atype: str, rnd: str | None, **kw):
    def emit(k, d, a):
        k.cvt(d, a, rnd=rnd, dtype=dtype, atype=atype, **kw)

    return emit


def _setp_ftz(cmp: str):
    def emit(k, d, a, b):
        p = k.reg("pred")
        k.setp(cmp, p, a, b, ftz=True)
        k.selp(d, 1, 0, p)

    return emit


def _setp_plain(cmp: str):
    def emit(k, d, a, b):
        p = k.reg("pred")
        k.setp(cmp, p, a, b)
        k.selp(d, 1, 0, p)

    return emit


def _none():
    return ()


def _extra() -> dict[str, H.OpCase]:
    cs = []
    for t in ("f32", "f64"):
        for rnd in ("rz", "rm", "rp"):
            for op in ("add", "sub", "mul", "div"):
                cs.append(H.OpCase(f"{op}.{rnd}.{t}", (t, t), t, _emit(op, rnd=rnd), _none))
            cs.append(H.OpCase(f"fma.{rnd}.{t}", (t,) * 3, t, _emit("fma", rnd=rnd), _none))
    cs.append(H.OpCase("fma.rn.ftz.f16", ("f16",) * 3, "f16", _emit("fma", ftz=True), _none))
    cs.append(H.OpCase("add.ftz.f16", ("f16",) * 2, "f16", _emit("add", ftz=True), _none))
    cs.append(H.OpCase("sub.ftz.f32", ("f32",) * 2, "f32", _emit("sub", ftz=True), _none))
    cs.append(H.OpCase("div.rn.ftz.f32", ("f32",) * 2, "f32", _emit("div", rnd="rn", ftz=True), _none))
    cs.append(H.OpCase("setp.lt.ftz.f32", ("f32",) * 2, "u32", _setp_ftz("lt"), _none))
    for d, a, r in (("f16", "f32", "rz"), ("f16", "f32", "rm"), ("bf16", "f32", "rp"), ("f32", "f64", "rz"),
                    ("f32", "f64", "rm"), ("f16", "f64", "rn"), ("f32", "s64", "rz"),
                    ("f32", "u64", "rp"), ("f16", "s32", "rn"), ("f64", "u64", "rn"),
                    ("f16", "u64", "rn"), ("f64", "s64", "rm")):  # fmt: skip
        cs.append(H.OpCase(f"cvt.{r}.{d}.{a}", (a,), d, _cvt(d, a, r), _none))
    for d, a, r in (("u64", "f64", "rzi"), ("s16", "f32", "rni"), ("s64", "f32", "rmi"), ("u16", "f16", "rpi"),
                    ("s32", "f64", "rzi")):  # fmt: skip
        cs.append(H.OpCase(f"cvt.{r}.{d}.{a}", (a,), d, _cvt(d, a, r), _none))
    cs.append(H.OpCase("cvt.rz.f16.u32", ("u32",), "f16", _cvt("f16", "u32", "rz"), _none))
    cs.append(H.OpCase("cvt.f64.f16", ("f16",), "f64", _cvt("f64", "f16", None), _none))
    cs.append(H.OpCase("add.sat.f16", ("f16",) * 2, "f16", _emit("add", sat=True), _none))
    cs.append(H.OpCase("mul.rn.sat.f32", ("f32",) * 2, "f32", _emit("mul", rnd="rn", sat=True), _none))
    cs.append(H.OpCase("setp.le.f64", ("f64",) * 2, "u32", _setp_plain("le"), _none))
    cs.append(H.OpCase("cvt.rn.ftz.f16.f32", ("f32",), "f16", _cvt("f16", "f32", "rn", ftz=True), _none))
    cs.append(H.OpCase("cvt.rn.ftz.f32.f64", ("f64",), "f32", _cvt("f32", "f64", "rn", ftz=True), _none))
    return {c.name: c for c in cs}


EXTRA = _extra()
FORMS = {**H.OPS, **EXTRA}


# --------------------------------------------------------------------------- the oracle


def _int_value(bits: int, t: str) -> int:
    w = int(t[1:])
    return bits - (1 << w) if t[0] == "s" and bits >> (w - 1) else bits


def _ftz_in(v: S.Val, t: str, ftz: bool) -> S.Val:
    return S.flush(v, t) if ftz else v


def expected(name: str, ins: list[int]) -> tuple[int, int, bool]:
    """(bits, mask of the bits compared, True when only NaN-ness is compared) of ``name`` over
    operand bit patterns ``ins``."""
    case = FORMS[name]
    parts = name.split(".")
    op, mods, out_t = parts[0], parts[1:], case.out
    full = (1 << S.STORAGE.get(out_t, int(re.sub(r"\D", "", out_t) or 32))) - 1
    ftz, sat = "ftz" in mods, "sat" in mods
    mode = next((m for m in mods if m in ("rn", "rz", "rm", "rp", "rna")), "rn")
    if op in ("add", "sub", "mul", "div", "fma", "mad", "min", "max"):
        t = case.ins[0]
        vals = [_ftz_in(S.decode(b, t), t, ftz) for b in ins]
        if op in ("min", "max"):
            a, b = vals
            if a.kind == S.NAN and b.kind == S.NAN:
                return 0, full, True
            pick = b if a.kind == S.NAN else a if b.kind == S.NAN else None
            if pick is None:
                if S.equal(a, b) and a.kind == "num":  # +0 / -0 (or equal values): value only
                    return S.round_to(a.x, t, "rn"), full >> 1, False
                pick = (a if S.less(a, b) else b) if op == "min" else (b if S.less(a, b) else a)
            src = ins[vals.index(pick)] if vals[0] is not vals[1] else ins[0]
            out = S.flush_bits(src, t) if ftz else src
            return out, full, False
        r = S.arith(op, t, mode, vals)
        if r == S.NAN:
            if sat:
                return 0, full, False
            return (CANON[t], full, False) if t in CANON else (0, full, True)
        if ftz:
            r = S.flush_bits(r, t)
        if sat:
            v = S.decode(r, t)
            if v.neg or (v.kind == "num" and v.x == 0):
                return 0, full >> 1, False
            if v.kind == "inf" or v.x > 1:
                return S.round_to(Fraction(1), t, "rn"), full, False
        return r, full, False
    if op == "setp":
        t = case.ins[0]
        a, b = (_ftz_in(S.decode(x, t), t, ftz) for x in ins)
        return int(S.compare(mods[0], a, b)), full, False
    if op == "cvt":
        dt, at = mods[-2], mods[-1]
        if dt in ("f16x2", "bf16x2"):
            one = dt[:-2]
            halves = []
            for x in ins:  # hi, lo
                v = S.decode(x, "f32")
                if v.kind == S.NAN:
                    halves.append((NARROW_NAN, 0xFFFF))
                    continue
                if "relu" in mods and v.neg:
                    halves.append((0, 0x7FFF))
                    continue
                halves.append((_finish_float(v, one, mode), 0xFFFF if not (v.kind == "num" and v.x == 0) or
                                                                       "relu" not in mods else 0x7FFF))  # fmt: skip
            return (halves[0][0] << 16) | halves[1][0], (halves[0][1] << 16) | halves[1][1], False
        if at in _FT:
            v = _ftz_in(S.decode(ins[0], at), at, ftz and at == "f32")
            if dt in _FT:
                if dt == "tf32":
                    if v.kind == S.NAN:
                        return (ins[0] & 0x80000000) | 0x7FC00000, full, False
                    if v.kind == "inf":
                        return ins[0], full, False
                    return S.tf32_bits(v.x, mode, v.neg), full, False
                if v.kind == S.NAN and sat:  # .sat: NaN results are flushed to +0 (the ISA, cvt)
                    return 0, full, False
                if v.kind == S.NAN:
                    return (NARROW_NAN, full, False) if dt in ("f16", "bf16") and at in ("f32",) else (0, full, True)
                if sat and (v.neg or (v.kind == "num" and v.x == 0)):
                    return 0, full >> 1, False
                if sat and (v.kind == "inf" or v.x > 1):
                    return S.round_to(Fraction(1), dt, "rn"), full, False
                r = _finish_float(v, dt, mode)
                # .ftz applies to .f32 inputs and results only (the ISA, cvt)
                return (S.flush_bits(r, dt) if ftz and dt == "f32" else r), full, False
            w = int(dt[1:])
            return S.to_int(v, mode if mode.endswith("i") else mods[0], w, dt[0] == "s"), full, False
        n = _int_value(ins[0], at)
        return S.round_to(Fraction(n), dt, mode), full, False
    raise ValueError(f"no oracle for {name}")


def _finish_float(v: S.Val, t: str, mode: str) -> int:
    fm = S.FMTS[t]
    if v.kind == "inf":
        return (int(v.neg) << (fm.nbits - 1)) | ((2**fm.e - 1) << fm.f)
    return S.round_to(v.x, t, mode, v.neg)


def check(name: str, inputs: list[np.ndarray], run=None) -> list[str]:
    """Rows where the simulator (``run``: default `hwcorpus.run` in `ptx.simdriver`) differs from
    the oracle, formatted; empty when all agree."""
    case = FORMS[name]
    got = (run or (lambda c, i: H.run(c, i, simdriver)))(case, inputs)
    bad = []
    cols = [a.tolist() for a in inputs]
    for i, g in enumerate(got.tolist()):
        ops = [c[i] for c in cols]
        want, mask, nan_only = expected(name, ops)
        if nan_only:
            ok = S.decode(g, case.out).kind == S.NAN
        else:
            ok = (g & mask) == (want & mask)
        if not ok:
            bad.append(f"{name}({', '.join(hex(x) for x in ops)}): simulator {g:#x}, oracle {want:#x}"
                       + (" (NaN)" if nan_only else ""))  # fmt: skip
    return bad


# --------------------------------------------------------------------------- operands


_BITS = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64, "s32": 32, "u32": 32, "s64": 64, "u64": 64, "s16": 16, "u16": 16}


def _special(t: str) -> list[int]:
    """Zeros, infinities, NaN payloads, subnormal and normal limits, 1 and its neighbours."""
    w = _BITS[t]
    if t[0] in "su":
        big = [(1 << 53) + 1, (1 << 54) + (1 << 30) + 1, (1 << 24) + 1, (1 << 25) + 3]
        return [0, 1, (1 << w) - 1, 1 << (w - 1), (1 << (w - 1)) - 1, *(b for b in big if b < 1 << w)]
    fm = S.FMTS[t]
    one = fm.bias << fm.f
    inf = (2**fm.e - 1) << fm.f
    base = [0, 1, 2, (1 << fm.f) - 1, 1 << fm.f, one, one + 1, one - 1, inf - 1, inf, inf + 1, inf | (1 << (fm.f - 1)),
            inf | (1 << (fm.f - 1)) | 0x23]  # fmt: skip
    return base + [b | (1 << (w - 1)) for b in base]


def operand(t: str) -> st.SearchStrategy[int]:
    """Bit patterns of type ``t``: any pattern, a special value, or a pattern near one."""
    w = _BITS[t]
    sp = _special(t)
    near = st.tuples(st.sampled_from(sp), st.integers(-3, 3)).map(lambda p: (p[0] + p[1]) % (1 << w))
    return st.one_of(st.integers(0, (1 << w) - 1), st.sampled_from(sp), near)


def _fma_tie(t: str) -> st.SearchStrategy[tuple[int, int, int]]:
    """(a, b, c) with a * b within a few units of the last place of a tie of the result plus a
    tiny c: a = b = 1 + 2^-k gives 1 + 2^(1-k) + 2^-2k (on or next to a tie for 2k = p + 1)."""
    fm = S.FMTS[t]
    one = fm.bias << fm.f
    half = (fm.f + 1) // 2

    def build(args):
        k, sa, sc, cexp, tweak = args
        a = one | (1 << (fm.f - k)) | tweak
        c = ((fm.bias - cexp) << fm.f) if cexp < fm.bias else cexp % (1 << fm.f)  # tiny or subnormal
        return a | (sa << (fm.nbits - 1)), a, c | (sc << (fm.nbits - 1))

    return st.tuples(st.integers(max(1, half - 1), half + 1), st.integers(0, 1), st.integers(0, 1),
                     st.integers(fm.f + 2, fm.bias + 3), st.integers(0, 3)).map(build)  # fmt: skip


def _random(case: H.OpCase, n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for t in case.ins:
        w = _BITS[t]
        raw = rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2) + rng.integers(0, 2, n, dtype=np.uint64)
        x = raw >> np.uint64(64 - w)
        if t in ("f32", "f64", "f16") and n > 4:  # a third near 1 (ties and cancellation matter there)
            fm = S.FMTS[t]
            m = n // 3
            x[:m] = (np.uint64(fm.bias - 2) << np.uint64(fm.f)) + (x[:m] >> np.uint64(fm.e - 1))
        out.append(x.astype(H.bits_dtype(t)))
    return out


def _arrays(case: H.OpCase, rows: list[tuple[int, ...]]) -> list[np.ndarray]:
    return [np.array([r[i] for r in rows], H.bits_dtype(t)) for i, t in enumerate(case.ins)]


def _edges(case: H.OpCase) -> list[np.ndarray]:
    """The corpus's inputs (its own forms; of the 16-bit sweeps every fifth), else every
    combination of the specials (at most about 3000)."""
    if case.name in H.OPS:  # over 4000 (every third 16-bit pattern): every fifth, and the last 64
        ins = list(case.inputs())
        n = ins[0].size
        keep = np.r_[0 : max(n - 64, 0) : 5 if n > 4000 else 1, max(n - 64, 0) : n]
        return [a[keep] for a in ins]
    sps = [_special(t) for t in case.ins]
    rows = [()]
    for sp in sps:
        rows = [r + (x,) for r in rows for x in sp]
    if len(rows) > 3000:
        rows = rows[:: len(rows) // 3000 + 1]
    return _arrays(case, rows)


# --------------------------------------------------------------------------- the checks


@pytest.mark.parametrize("name", sorted(FORMS))
def test_form_matches_the_oracle_on_edges_and_random_operands(name):
    case = FORMS[name]
    inputs = [np.concatenate(p) for p in zip(_edges(case), _random(case, ORACLE_RANDOM, len(name)), strict=True)]
    bad = check(name, inputs)
    assert not bad, f"{len(bad)} of {inputs[0].size} differ:\n" + "\n".join(bad[:8])


@pytest.mark.parametrize("name", sorted(FORMS))
@settings(max_examples=examples(4))
@given(data=st.data())
def test_form_matches_the_oracle_on_drawn_operands(name, data):
    case = FORMS[name]
    rows = data.draw(st.lists(st.tuples(*(operand(t) for t in case.ins)), min_size=1, max_size=40))
    if name.startswith(("fma", "mad")):
        rows += data.draw(st.lists(_fma_tie(case.ins[0]), min_size=1, max_size=20))
    bad = check(name, _arrays(case, rows))
    assert not bad, "\n".join(bad[:8])


def test_the_oracle_rounds_known_values():
    """The oracle itself on values worked out by hand: ties to even, overflow, subnormals."""
    assert S.round_to(Fraction(1) + Fraction(1, 2**24), "f32", "rn") == 0x3F800000  # tie: even
    assert S.round_to(Fraction(1) + Fraction(3, 2**24), "f32", "rn") == 0x3F800002  # tie: even (up)
    assert S.round_to(Fraction(1) + Fraction(1, 2**24), "f32", "rp") == 0x3F800001
    assert S.round_to(Fraction(65520), "f16", "rn") == 0x7C00 and S.round_to(Fraction(65519), "f16", "rn") == 0x7BFF
    assert S.round_to(Fraction(65520), "f16", "rz") == 0x7BFF
    assert S.round_to(-Fraction(1, 2**150), "f32", "rn") == 0x80000000  # a tie with 0: even
    assert S.round_to(-Fraction(3, 2**151), "f32", "rn") == 0x80000001
    assert S.round_to(Fraction(1, 2**150), "f32", "rp") == 0x00000001
    assert S.round_to(Fraction(1) + Fraction(1, 2**11), "tf32", "rna") == 0x1FC01  # 19-bit tf32 pattern
    assert S.tf32_bits(Fraction(1) + Fraction(1, 2**11), "rna") == 0x3F802000
    a = S.decode(0x3F800800, "f32")  # 1 + 2^-12: a * a = 1 + 2^-11 + 2^-24, a tie of f32
    assert S.arith("fma", "f32", "rn", [a, a, S.decode(0xA6800000, "f32")]) == 0x3F801000  # - 2^-50: down
    assert S.arith("fma", "f32", "rn", [a, a, S.decode(0x17800000, "f32")]) == 0x3F801001  # + 2^-80: up
    assert S.arith("fma", "f32", "rn", [a, a, S.decode(0x00000000, "f32")]) == 0x3F801000  # the tie: even
    assert S.arith("add", "f32", "rm", [S.decode(0x3F800000, "f32"), S.decode(0xBF800000, "f32")]) == 0x80000000


# --------------------------------------------------------------------------- mutations


def _fails_with(monkeypatch, target, attr, value, names) -> None:
    """The simulator with ``target.attr`` replaced fails the oracle on every form of ``names``
    (over its edges and 600 random operands) and passes it unchanged."""
    for name in names:
        case = FORMS[name]
        inputs = [np.concatenate(p) for p in zip(_edges(case), _random(case, 600, 7), strict=True)]
        assert not check(name, inputs), name
    with monkeypatch.context() as m:
        m.setattr(target, attr, value)
        for name in names:
            case = FORMS[name]
            inputs = [np.concatenate(p) for p in zip(_edges(case), _random(case, 600, 7), strict=True)]
            assert check(name, inputs), f"{name}: a simulator with {attr} broken passes the oracle"


def test_double_rounding_fma_fails_the_oracle(monkeypatch):
    import ptx.sim_float as F

    def twice(a, b, c):  # the old simulator: through float64, rounded again
        with np.errstate(all="ignore"):
            return (a.astype(np.float64) * b + c).astype(a.dtype)

    # f16 is not in the list: an f16 a * b + c whose result is finite spans at most 41 bits, so
    # its float64 sum is exact and one more rounding is the only one (the oracle checks fma.rn.f16)
    _fails_with(monkeypatch, F, "fma_rn_small", twice, ["fma.rn.f32", "mad.rn.f32"])


def test_unfused_f64_fma_fails_the_oracle(monkeypatch):
    import ptx.sim_float as F

    real = F.exact_arith

    def unfused(op, t, mode, nearest, *ops):
        return nearest if op == "fma" and mode == "rn" else real(op, t, mode, nearest, *ops)

    _fails_with(monkeypatch, F, "exact_arith", unfused, ["fma.rn.f64"])


def test_ignored_ftz_fails_the_oracle(monkeypatch):
    import ptx.sim_float as F

    _fails_with(monkeypatch, F, "flush", lambda x: x,
                ["add.ftz.f32", "mul.ftz.f32", "fma.rn.ftz.f32", "add.ftz.f16", "setp.lt.ftz.f32"])  # fmt: skip


def test_kept_f16_nan_payload_fails_the_oracle(monkeypatch):
    import ptx.sim_arith as A

    _fails_with(monkeypatch, A, "_ARITH_NAN", {"f32": A._ARITH_NAN["f32"]}, ["add.f16", "mul.f16", "fma.rn.f16"])


def test_double_rounding_int64_conversion_fails_the_oracle(monkeypatch):
    import ptx.sim_float as F

    def twice(v, dt):
        with np.errstate(over="ignore"):
            return np.asarray(v).astype(np.float64).astype(dt)

    _fails_with(monkeypatch, F, "int_to_float", twice, ["cvt.rn.f32.s64", "cvt.rn.f32.u64"])


def test_nearest_instead_of_directed_rounding_fails_the_oracle(monkeypatch):
    import ptx.sim_float as F

    real = F.exact_arith

    def nearest(op, t, mode, r, *ops):
        return real(op, t, "rn", r, *ops)

    _fails_with(monkeypatch, F, "exact_arith", nearest, ["add.rz.f32", "mul.rp.f32", "fma.rm.f32", "div.rz.f64"])
