"""Labels, branches, RIP-relative fixups and listings (whole programs through llvm-mc), and operand errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asm import EncodingError, llvm
from asm.x86_64 import (
    Assembler,
    bcst,
    dword,
    eax,
    ebx,
    k0,
    k1,
    ptr,
    qword,
    r12,
    rax,
    rbx,
    rcx,
    rip,
    rsp,
    xmm0,
    xmm1,
    xmm2,
    ymm0,
    ymm1,
    ymm2,
    ymm16,
    zmm0,
    zmm1,
    zmm2,
    zmmword,
)
from asm.x86_64.base import COND
from asm.x86_64.registers import GPR64
from tests.asm.oracle import FORMS

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

BRANCHES = ["jmp", "call", *(f"j{c}" for c in sorted(COND))]


@st.composite
def programs(draw):
    """A straight-line program with labels, near/short branches, RIP-relative loads and padding."""
    n_labels = draw(st.integers(1, 5))
    items = draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("br"), st.sampled_from(BRANCHES), st.integers(0, n_labels - 1), st.booleans()),
                st.tuples(st.just("rip"), st.sampled_from(GPR64), st.integers(0, n_labels - 1), st.integers(-64, 64)),
                st.tuples(st.just("pad"), st.integers(0, 14)),
            ),
            min_size=1,
            max_size=40,
        )
    )
    where = [draw(st.integers(0, len(items))) for _ in range(n_labels)]
    return n_labels, items, where


def _build(n_labels: int, items: list, where: list[int]) -> Assembler:
    a = Assembler()
    labels = [a.new_label(f"t{i}") for i in range(n_labels)]
    for pos in range(len(items) + 1):
        for i, w in enumerate(where):
            if w == pos:
                a.bind(labels[i])
        if pos == len(items):
            break
        item = items[pos]
        if item[0] == "br":
            _, mn, li, short = item
            if mn == "call":
                a.call(labels[li])
            else:
                getattr(a, mn)(labels[li], short=short)
        elif item[0] == "rip":
            _, reg, li, off = item
            a.mov(reg, qword(rip + labels[li] + off))
        else:
            for _ in range(item[1]):
                a.mov(rax, 0x1122334455667788)  # 10 bytes
    a.ret()
    return a


@settings(max_examples=12)
@given(programs())
def test_programs_match_llvm_mc(prog) -> None:
    a = _build(*prog)
    try:
        ours = a.code()
    except EncodingError as e:
        assert "short (rel8)" in str(e)
        far = [
            i
            for i in a.instructions
            if i.fixup is not None
            and i.fixup.width == 1
            and not -128 <= i.fixup.label.pos - (i.pos + len(i.data)) <= 127
        ]
        assert far, "raised although every short branch is in range"
        return
    assert ours == llvm.assemble(a.listing(), triple=llvm.X86_64_TRIPLE, mattr="")
    assert b"".join(a.instruction_bytes()) == ours
    assert ours == llvm.assemble(a.listing(addresses=True), triple=llvm.X86_64_TRIPLE, mattr="")
    _record(a)


def _record(a: Assembler) -> None:
    """Count the pc-relative forms of ``a`` as checked against llvm-mc."""
    for inst in a.instructions:
        f = inst.fixup
        if f is not None:
            mn = inst.text.removeprefix("{disp32} ").split()[0]
            if mn in ("mov", "lea"):
                FORMS["x86_64"].add(f"{mn} r64, [rip + label]")
            else:
                mn = mn if mn in ("jmp", "call") else "jcc"
                FORMS["x86_64"].add(f"{mn} {'rel8' if f.width == 1 else 'rel32'} label")


def test_branch_kinds() -> None:
    a = Assembler()
    back = a.label("back")
    fwd = a.new_label("fwd")
    a.jne(fwd)
    a.jl(back, short=True)
    a.jmp(back, short=True)
    a.mov(r12, qword(rip + fwd + 8))
    a.lea(rax, ptr(fwd))
    for _ in range(40):
        a.mov(rcx, -(1 << 40))
    a.jmp(back)
    a.call(back)
    a.bind(fwd)
    a.ret()
    code = a.code()
    assert code == llvm.assemble(a.listing(), triple=llvm.X86_64_TRIPLE, mattr="")
    assert code[:2] == b"\x0f\x85" and int.from_bytes(code[2:6], "little") == 2 + 2 + 7 + 7 + 400 + 5 + 5
    assert code[6:8] == b"\x7c\xf8" and code[8:10] == b"\xeb\xf6"
    _record(a)


def test_short_out_of_range_raises() -> None:
    a = Assembler()
    target = a.new_label("t")
    a.jmp(target, short=True)
    for _ in range(13):
        a.mov(rax, 1 << 40)
    a.bind(target)
    with pytest.raises(EncodingError, match=r"jmp: short \(rel8\) offset .* -128\.\.127"):
        a.code()


def test_unbound_label_raises() -> None:
    a = Assembler()
    a.je(a.new_label("never"))
    with pytest.raises(EncodingError, match="never bound"):
        a.code()


def test_label_bound_twice_raises() -> None:
    a = Assembler()
    lbl = a.label()
    with pytest.raises(EncodingError, match="already bound"):
        a.bind(lbl)


def test_call_has_no_short_form() -> None:
    a = Assembler()
    with pytest.raises(EncodingError, match="call"):
        a._branch("call", a.new_label(), True, b"\xe8", None)


def test_listing_text() -> None:
    a = Assembler()
    a.vfmadd231ps(zmm0.maskz(k1), zmm1, bcst(rax + 64))
    a.vmovups(zmmword(rsp + rbx * 8 - 8).mask(k1), zmm2)
    a.add(dword(r12), 7)
    assert a.listing().splitlines() == [
        "    vfmadd231ps zmm0 {k1} {z}, zmm1, dword ptr [rax + 64]{1to16}",
        "    vmovups zmmword ptr [rsp + rbx*8 - 8] {k1}, zmm2",
        "    add dword ptr [r12], 7",
    ]
    assert len(a) == len(a.instruction_bytes()) == 3


def _bcst_of(m):
    from dataclasses import replace

    return replace(m, bcst=True)


ERRORS = [
    (lambda a: a.add(rax, ebx), r"add: operands must all be 64-bit or all 32-bit"),
    (lambda a: a.mov(rax, dword(rbx)), r"mov: src must be a qword ptr"),
    (lambda a: a.add(ptr(rax), 1), r"add: dst must be a sized memory operand \(dword/qword ptr\)"),
    (lambda a: a.add(rax, 1 << 31), r"add: imm must be in -2147483648\.\.2147483647"),
    (lambda a: a.add(eax, 1 << 32), r"add: imm must be in -2147483648\.\.4294967295"),
    (lambda a: a.shl(rax, 256), r"shl: count must be in 0\.\.255"),
    (lambda a: a.shl(rax, rbx), r"shl: count must be cl"),
    (lambda a: a.ret(-1), r"ret: imm must be in 0\.\.65535"),
    (lambda a: a.push(eax), r"push: src must be a register rax\.\.r15"),
    (lambda a: a.lea(rax, rbx), r"lea: src must be a memory operand"),
    (lambda a: a.vaddps(zmm0, ymm1, zmm2), r"vaddps: src1 must be zmm0\.\.zmm31"),
    (lambda a: a.vaddps(zmm0, zmm1, ymm2), r"vaddps: src2 must be zmm0\.\.zmm31"),
    (lambda a: a.vperm2f128(ymm16, ymm1, ymm2, 0), r"vperm2f128: dst must be ymm0\.\.ymm15"),
    (lambda a: a.vinsertf128(ymm0, ymm1, xmm2, 2), r"vinsertf128: imm must be in 0\.\.1"),
    (lambda a: a.vperm2f128(ymm0.mask(k1), ymm1, ymm2, 0), r"vperm2f128: dst must be unmasked"),
    (lambda a: a.vaddps(zmm0.mask(k0), zmm1, zmm2), r"vaddps: dst mask must be k1\.\.k7"),
    (lambda a: a.vmovups(zmmword(rax).mask(k1, zero=True), zmm0), r"vmovups: dst mask must be merging"),
    (lambda a: a.vmovups(zmm0, bcst(rax)), r"vmovups: src must be a register or memory operand without broadcast"),
    (lambda a: a.vaddpd(zmm0, zmm1, _bcst_of(dword(rax))), r"vaddpd: src2 must be a qword broadcast"),
    (lambda a: a.vshufps(xmm0, xmm1, xmm2, 256), r"vshufps: imm must be in 0\.\.255"),
    (lambda a: a.vcmpps(k1, zmm0, zmm1, 32), r"vcmpps: predicate must be in 0\.\.31"),
    (lambda a: a.vcmpps(zmm0, zmm0, zmm1, 0), r"vcmpps: dst must be an opmask register k0\.\.k7 or"),
    (lambda a: a.vinsertf32x4(zmm0, zmm1, xmm2, 4), r"vinsertf32x4: imm must be in 0\.\.3"),
    (lambda a: a.vinsertf32x4(ymm0, ymm1, xmm2, 2), r"vinsertf32x4: imm must be in 0\.\.1"),
    (lambda a: a.vbroadcastsd(xmm0, xmm1), r"vbroadcastsd: dst must be ymm0\.\.ymm31/zmm0\.\.zmm31"),
    (lambda a: a.kmovw(k1, rax), r"kmovw: src must be a register eax\.\.r15d"),
    (lambda a: a.kmovw(k1.mask(k1), eax), r"kmovw: dst must be k0\.\.k7"),
    (lambda a: a.vextractf128(xmm0.mask(k1), ymm1, 0), r"vextractf128: dst must be unmasked"),
]


@pytest.mark.parametrize("emit,message", ERRORS, ids=[m for _, m in ERRORS])
def test_invalid_operands_raise(emit, message) -> None:
    a = Assembler()
    with pytest.raises(EncodingError, match=message):
        emit(a)


@pytest.mark.parametrize(
    "build,message",
    [
        (lambda: rax + rbx * 3, r"scale must be 1, 2, 4 or 8"),
        (lambda: rax + rsp * 2, r"index must be a register other than rsp"),
        (lambda: rax + rsp, r"index must be a register other than rsp"),
        (lambda: eax + 4, r"base must be a 64-bit register"),
        (lambda: qword(rax + (1 << 31)), r"displacement must be in -2147483648\.\.2147483647"),
        (lambda: rax + rbx + rcx, r"at most one"),
        (lambda: rip + rax, r"rip"),
    ],
)
def test_invalid_addresses_raise(build, message) -> None:
    with pytest.raises(EncodingError, match=message):
        build()
