"""SME encoders, byte for byte against llvm-mc (``-mattr=+sme,+sme2,+sme-f64f64,+sme-i16i64``).

Every form (mnemonic x operand form x element size) draws a batch of operand tuples over its full
legal range (tiles, slice registers w12..w15 and offsets, predicates, Z registers, bases with sp,
index registers with xzr); each hypothesis example emits all forms and compares them with one
llvm-mc run. ``sme-f64f64`` (fp64 ``fmopa``) and ``sme-i16i64`` (64-bit ``addha``) are the
optional features those forms need; qemu's ``-cpu max`` has both.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asm import llvm
from asm.aarch64 import (
    Assembler,
    mem,
    p0,
    p1,
    p2,
    p8,
    sp,
    w0,
    w11,
    w12,
    w15,
    x0,
    x1,
    x2,
    z0,
    z1,
    z2,
    za,
    za0,
    za0h,
    za0v,
    za1,
    za2,
    za3h,
    za4,
    za4h,
    za7v,
)
from asm.aarch64.registers import PReg, WReg
from asm.aarch64.sme import SLICE_IMM, TILES, ZaDir, ZaReg
from asm.errors import EncodingError
from tests.asm.aarch64.strategies import xregs, zvecs
from tests.asm.oracle import FORMS as ORACLE_FORMS

SME_MATTR = "+sme,+sme2,+sme-f64f64,+sme-i16i64"
BATCH = 24
EXAMPLES = 4
SIZES = ["b", "h", "s", "d"]

pm = st.integers(0, 7).map(lambda i: PReg(i).m)
pz = st.integers(0, 7).map(lambda i: PReg(i).z)
p07 = st.integers(0, 7).map(PReg)
p15 = st.integers(0, 15).map(PReg)
slice_regs = st.integers(12, 15).map(WReg)


def tiles(es: str) -> st.SearchStrategy:
    return st.integers(0, TILES[es] - 1).map(lambda i: getattr(ZaReg(i), es))


def slices(es: str, vertical: bool) -> st.SearchStrategy:
    return st.builds(
        lambda t, ws, off: getattr(ZaDir(t, vertical), es)[ws, off],
        st.integers(0, TILES[es] - 1),
        slice_regs,
        st.integers(0, SLICE_IMM[es] - 1),
    )


def addresses(es: str, reg: bool) -> st.SearchStrategy:
    shift = {"s": 2, "d": 3}[es]
    if reg:
        return st.builds(lambda b, i: mem(b, i, "lsl", shift), xregs(sp=True), xregs())
    return xregs(sp=True).map(mem)


def zero_lists() -> st.SearchStrategy:
    """Non-empty sets of tiles of one size, or za alone."""
    sized = st.sampled_from(["h", "s", "d"]).flatmap(
        lambda es: st.sets(st.integers(0, TILES[es] - 1), min_size=1).map(
            lambda ids: tuple(getattr(ZaReg(i), es) for i in sorted(ids))
        )
    )
    return st.one_of(sized, st.just((za,)), st.just((za0.b,)), st.just(()))


#: form name -> (operand tuple strategy, emit(a, *ops))
FORMS: dict[str, tuple[st.SearchStrategy, object]] = {}


def form(name: str, ops: st.SearchStrategy, emit) -> None:
    FORMS[name] = (ops, emit)


for _mn in ("smstart", "smstop"):
    form(f"sme.{_mn}", st.tuples(st.sampled_from([None, "sm", "za"])), getattr(Assembler, _mn))
form("sme.rdsvl", st.tuples(xregs(), st.integers(-32, 31)), Assembler.rdsvl)
form("sme.zero", st.tuples(zero_lists()), lambda a, ts: a.zero(*ts))
for _mn, _t, _z in [
    ("fmopa", "s", "s"),
    ("fmops", "s", "s"),
    ("fmopa", "d", "d"),
    ("fmops", "d", "d"),
    ("fmopa", "s", "h"),
    ("fmops", "s", "h"),
    ("bfmopa", "s", "h"),
    ("bfmops", "s", "h"),
]:
    form(f"sme.{_mn}.{_t}.{_z}", st.tuples(tiles(_t), pm, pm, zvecs(_z), zvecs(_z)), getattr(Assembler, _mn))
for _mn in ("addha", "addva"):
    for _es in ("s", "d"):
        form(f"sme.{_mn}.{_es}", st.tuples(tiles(_es), pm, pm, zvecs(_es)), getattr(Assembler, _mn))
for _mn in ("ld1w", "ld1d", "st1w", "st1d"):
    _es = "s" if _mn.endswith("w") else "d"
    for _v in (False, True):
        for _reg in (False, True):
            _ops = st.tuples(slices(_es, _v), pz if _mn.startswith("ld") else p07, addresses(_es, _reg))
            form(f"sme.{_mn}.{'v' if _v else 'h'}.{'ss' if _reg else 's'}", _ops, getattr(Assembler, _mn))
for _es in SIZES:
    for _v in (False, True):
        d = "v" if _v else "h"
        form(f"sme.mova.z_from_{d}.{_es}", st.tuples(zvecs(_es), pm, slices(_es, _v)), Assembler.mova)
        form(f"sme.mova.{d}_from_z.{_es}", st.tuples(slices(_es, _v), pm, zvecs(_es)), Assembler.mova)
    _pelems = st.builds(
        lambda i, ws, k, es=_es: getattr(PReg(i), es)[ws, k],
        st.integers(0, 15),
        slice_regs,
        st.integers(0, 16 // (1 << SIZES.index(_es)) - 1),
    )
    form(f"sme.psel.{_es}", st.tuples(p15, p15, _pelems), Assembler.psel)


def _check(programs: list[tuple[str, Assembler]]) -> None:
    lines, ours, names = [], [], []
    for name, a in programs:
        text = [ln.strip() for ln in a.listing().splitlines()]
        assert len(text) == len(a.words), name
        lines += text
        ours += [w.to_bytes(4, "little") for w in a.words]
        names += [name] * len(text)
    theirs = llvm.encode_lines(lines, mattr=SME_MATTR)
    bad = [(n, t, o.hex(), e.hex()) for n, t, o, e in zip(names, lines, ours, theirs, strict=True) if o != e]
    assert not bad, "encodings differ from llvm-mc (form, text, ours, llvm):\n" + "\n".join(map(str, bad[:20]))
    ORACLE_FORMS["aarch64"].update(name for name, _ in programs)  # counted in the run's summary


@settings(max_examples=EXAMPLES, deadline=None)
@given(data=st.data())
def test_forms(data) -> None:
    """Every SME form over drawn operands, one llvm-mc run per example."""
    programs = []
    for name, (ops, emit) in FORMS.items():
        a = Assembler()
        for tup in data.draw(st.lists(ops, min_size=1, max_size=BATCH), label=name):
            emit(a, *tup)
        programs.append((name, a))
    _check(programs)


def test_every_form_listed() -> None:
    """The forms the issue names are all drawn (a typo in the table would drop one silently)."""
    mns = {name.split(".")[1] for name in FORMS}
    want = {"smstart", "smstop", "rdsvl", "zero", "fmopa", "fmops", "bfmopa", "bfmops", "addha", "addva"}
    want |= {"ld1w", "ld1d", "st1w", "st1d", "mova", "psel"}
    assert mns == want
    assert len(FORMS) == 2 + 1 + 1 + 8 + 4 + 16 + 16 + 4


def test_text_forms() -> None:
    a = Assembler()
    a.smstart()
    a.smstop("sm")
    a.zero(za0.s, za1.s)
    a.ld1w(za0v.s[w12, 0], p1.z, mem(x0))
    a.mova(z0.s, p0.m, za3h.s[w15, 3])
    a.psel(p0, p1, p2.d[w12, 1])
    assert a.listing().splitlines() == [
        "    smstart",
        "    smstop sm",
        "    zero {za0.s, za1.s}",
        "    ld1w {za0v.s[w12, 0]}, p1/z, [x0]",
        "    mova z0.s, p0/m, za3h.s[w15, 3]",
        "    psel p0, p1, p2.d[w12, 1]",
    ]


ILLEGAL = [
    (lambda a: a.fmopa(za4.s, p0.m, p0.m, z0.s, z1.s), r"^fmopa: ZAda tile number must be in 0\.\.3, got 4"),
    (lambda a: a.fmopa(za0.d, p0.m, p0.m, z0.s, z1.s), "fmopa: operands"),
    (lambda a: a.fmopa(za0.s, p0.m, p0.m, z0.s, z1.d), "element sizes"),
    (lambda a: a.fmopa(za0.s, p8.m, p0.m, z0.s, z1.s), r"^fmopa: Pn must be a predicate p0/m\.\.p7/m, got p8/m"),
    (lambda a: a.fmopa(za0.s, p0.m, p0.z, z0.s, z1.s), "Pm"),
    (lambda a: a.bfmopa(za0.s, p0.m, p0.m, z0.s, z1.s), "Zn"),
    (lambda a: a.bfmopa(za0.d, p0.m, p0.m, z0.h, z1.h), "ZAda"),
    (lambda a: a.fmopa(za0h.s, p0.m, p0.m, z0.s, z1.s), "ZAda"),
    (lambda a: a.ld1w(za0h.s[w11, 0], p0.z, mem(x0)), r"^ld1w: ZAt slice index register must be w12\.\.w15, got w11"),
    (lambda a: a.ld1w(za0h.s[w12, 4], p0.z, mem(x0)), r"^ld1w: ZAt slice offset must be in 0\.\.3, got 4"),
    (lambda a: a.ld1d(za0h.d[w12, 2], p0.z, mem(x0)), r"slice offset must be in 0\.\.1"),
    (lambda a: a.ld1w(za4h.s[w12, 0], p0.z, mem(x0)), r"ZAt tile number must be in 0\.\.3, got 4"),
    (lambda a: a.ld1w(za0h.d[w12, 0], p0.z, mem(x0)), "ZAt"),
    (lambda a: a.ld1w(za0h.s[w12, 0], p0.m, mem(x0)), "Pg"),
    (lambda a: a.ld1w(za0h.s[w12, 0], p8.z, mem(x0)), "Pg"),
    (lambda a: a.st1w(za0h.s[w12, 0], p0.z, mem(x0)), "Pg"),
    (lambda a: a.ld1w(za0h.s[w12, 0], p0.z, mem(x0, x1, "lsl", 3)), "address"),
    (lambda a: a.ld1w(za0h.s[w12, 0], p0.z, mem(x0, 4)), "address"),
    (lambda a: a.ld1w(za0h.s[w12, 0], p0.z, mem(x0, vl=1)), "address"),
    (lambda a: a.st1d(za7v.d[w0, 0], p0, mem(x0)), "slice index register"),
    (lambda a: a.mova(z0.s, p0.m, za0h.d[w12, 0]), "ZAn"),
    (lambda a: a.mova(za0h.s[w12, 0], p0.m, z1.d), "Zn"),
    (lambda a: a.mova(z0.s, p0.z, za0h.s[w12, 0]), "Pg"),
    (lambda a: a.mova(za7v.s[w12, 0], p0.m, z1.s), r"ZAd tile number must be in 0\.\.3, got 7"),
    (lambda a: a.psel(p0, p1, p2.s[w12, 4]), r"^psel: Pm index must be in 0\.\.3, got 4"),
    (lambda a: a.psel(p0, p1, p2.b[w12, 16]), r"Pm index must be in 0\.\.15"),
    (lambda a: a.psel(p0, p1, p2.s[w0, 0]), r"slice index register must be w12\.\.w15"),
    (lambda a: a.psel(p0.s, p1, p2.s[w12, 0]), "Pd"),
    (lambda a: a.psel(p0, p1, p2.s), "Pm"),
    (lambda a: a.addha(za4.s, p0.m, p0.m, z0.s), "tile number"),
    (lambda a: a.addva(za0.s, p0.m, p0.m, z0.d), "Zn"),
    (lambda a: a.zero(za0.s, za1.d), "one element size"),
    (lambda a: a.zero(za2.h), r"tile number must be in 0\.\.1, got 2"),
    (lambda a: a.zero(z0.s), "tile 0"),
    (lambda a: a.smstart("zz"), "mode"),
    (lambda a: a.rdsvl(x0, 32), r"^rdsvl: imm must be in -32\.\.31, got 32"),
    (lambda a: a.rdsvl(sp, 1), "Rd"),
]


@pytest.mark.parametrize(("call", "needle"), ILLEGAL)
def test_illegal_operands(call, needle) -> None:
    a = Assembler()
    with pytest.raises(EncodingError, match=needle):
        call(a)
    assert len(a) == 0


def test_bad_slice_index_shape() -> None:
    with pytest.raises(EncodingError, match="w12..w15, offset"):
        za0h.s[w12]
    with pytest.raises(EncodingError, match="w12..w15, imm"):
        p0.s[w12]


def test_listing_reassembles() -> None:
    """A streaming-mode program round-trips through llvm-mc (the listing is valid input)."""
    a = Assembler()
    a.smstart()
    a.rdsvl(x2, 1)
    a.zero(za)
    a.ptrue(p0.s)
    a.whilelt(p1.s, x0, x1)
    a.ld1w(z0.s, p1.z, mem(x0))
    a.ld1w(z1.s, p0.z, mem(x1, vl=1))
    a.fmopa(za0.s, p1.m, p0.m, z0.s, z1.s)
    a.fmopa(za1.d, p1.m, p0.m, z0.d, z1.d)
    a.mova(z2.s, p0.m, za0h.s[w12, 0])
    a.st1w(za0v.s[w12, 0], p1, mem(x2, x1, "lsl", 2))
    a.smstop()
    assert llvm.assemble(a.listing(), mattr=SME_MATTR) == a.code()
