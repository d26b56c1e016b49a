"""The x86-64 assembler's encoding cache and the objects it keys on: a cached form emits exactly what
encoding it again would, checks still raise for bad operands, and registers, addresses and memory
operands keep their value semantics (interned registers, cached hashes) through copies and pickles."""

from __future__ import annotations

import copy
import pickle
from dataclasses import replace

import pytest

from asm import EncodingError
from asm.x86_64 import (
    Addr,
    Assembler,
    Gpr,
    KReg,
    Mem,
    Vec,
    bcst,
    dword,
    k1,
    ptr,
    qword,
    r8,
    r12,
    rax,
    rbx,
    rcx,
    rip,
    rsi,
    xmm1,
    ymm0,
    ymm1,
    ymm2,
    ymm9,
    ymmword,
    zmm3,
    zmm4,
    zmmword,
)
from asm.x86_64 import assembler as assembler_module


def _program(a: Assembler) -> None:
    """A few forms of each encoder family, some of them twice, with labels and fixups between."""
    top = a.label("top")
    a.vfmadd231ps(ymm0, ymm1, ymm2)
    a.vfmadd231ps(ymm0, ymm1, ymm9)  # commuted for the 2-byte VEX prefix
    a.vbroadcastss(ymm2, dword(r12 + r8 * 2 + 8))
    a.vfmadd231ps(zmm3.maskz(k1), zmm4, bcst(rsi + 64))
    a.vmovups(zmmword(rax + rbx * 8 - 64).mask(k1), zmm3)
    a.add(rax, 8)
    a.mov(qword(rcx + 16), rax)
    a.lea(rbx, ptr(rip + top + 4))  # a fixup: never cached
    a.vfmadd231ps(ymm0, ymm1, ymm2)
    a.add(rax, 8)
    a.dec(rcx)
    a.jnz(top)
    a.vmovss(xmm1, dword(rax))
    a.vmaskmovps(ymm1, ymm2, ymmword(rax))
    a.ret()


def _result(a: Assembler) -> tuple:
    return a.code(), a.listing(), a.listing(addresses=True), a.instruction_bytes()


def test_cached_forms_emit_what_encoding_emits() -> None:
    assembler_module.encoding_cache_clear()
    cold = Assembler()
    _program(cold)  # fills the cache (and hits it for the repeated forms)
    assert assembler_module._ENCODED
    warm = Assembler()
    _program(warm)  # every form without a fixup from the cache
    assert _result(cold) == _result(warm)
    uncached = _encoded_without_cache()
    assert _result(uncached) == _result(warm)
    assert [(i.data, i.text, i.pos) for i in warm.instructions] == [(i.data, i.text, i.pos) for i in cold.instructions]
    assert [i.fixup is not None for i in warm.instructions].count(True) == 2


def _encoded_without_cache() -> Assembler:
    """`_program` through the unwrapped encoders (what every call did before the cache)."""

    class Raw(Assembler):
        pass

    for name in dir(Assembler):
        fn = getattr(Assembler, name)
        if hasattr(fn, "__wrapped__"):
            setattr(Raw, name, fn.__wrapped__)
    a = Raw()
    _program(a)
    return a


def test_cache_hits_do_not_skip_checks() -> None:
    a = Assembler()
    a.add(rax, 1)
    with pytest.raises(EncodingError, match="add: src must be .* or an int, got True"):
        a.add(rax, True)  # equal to 1 and hashing alike, but not an immediate
    a.vshufps(ymm0, ymm1, ymm2, 1)
    with pytest.raises(EncodingError, match="vshufps: imm must be an int"):
        a.vshufps(ymm0, ymm1, ymm2, 1.0)
    with pytest.raises(EncodingError, match="vaddps: src2 must be"):
        a.vaddps(ymm0, ymm1, [ymm2])  # unhashable: to the encoder, which names the operand
    assert a.listing().splitlines() == ["    add rax, 1", "    vshufps ymm0, ymm1, ymm2, 1"]


def test_keyword_calls_and_fixups_are_encoded_each_time() -> None:
    a = Assembler()
    back = a.label("back")
    a.jne(back, short=True)
    a.jne(back, short=True)
    a.jne(back)
    a.xadd(qword(rax), rbx, lock=True)
    a.xadd(qword(rax), rbx, lock=False)
    assert a.code() == bytes.fromhex("75fe 75fc 0f85f6ffffff f0480fc118 480fc118".replace(" ", ""))


def test_cache_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(assembler_module, "ENCODED_MAX", 4)
    assembler_module.encoding_cache_clear()
    a = Assembler()
    for disp in range(10):
        a.add(rax, disp)
        assert len(assembler_module._ENCODED) <= 4
    assert a.listing().splitlines() == [f"    add rax, {d}" for d in range(10)]


def test_labels_in_listing_and_instructions() -> None:
    a = Assembler()
    first = a.label("a")
    a.label("b")  # two labels at one position, in bind order
    a.nop()
    a.jmp(first)
    a.label("c")
    a.label("d")  # labels at the end
    assert a.listing().splitlines() == [".La_1:", ".Lb_2:", "    nop", "    {disp32} jmp .La_1", ".Lc_3:", ".Ld_4:"]
    assert [(i.pos, len(i.data)) for i in a.instructions] == [(0, 1), (1, 5)]
    a.ret()
    assert [i.text for i in a.instructions] == ["nop", "{disp32} jmp .La_1", "ret"]
    assert a.instructions[1].fixup.label is first and len(a) == 3


def test_registers_are_interned() -> None:
    assert Vec(1, 256) is ymm1 and Gpr(0, 64) is rax and KReg(1) is k1 and Gpr(1, 32) is rcx.r32
    assert ymm1.xmm is xmm1 and ymm1.ymm is ymm1 and rax.r64 is rax
    for r in (ymm1, rax, k1, Vec(40, 512)):
        assert copy.copy(r) is r and copy.deepcopy(r) is r and pickle.loads(pickle.dumps(r)) is r
        assert replace(r) is r
    assert {ymm1: 1}[Vec(1, 256)] == 1 and Vec(1, 256) == ymm1 != Vec(1, 128)
    assert str(Vec(40, 512)) == "zmm40" and repr(rax) == "rax"
    with pytest.raises(IndexError):  # not a register: its name fails as it did
        str(Gpr(20, 64))


def test_addresses_keep_value_semantics() -> None:
    a1, a2 = rax + rbx * 8 + 16, Addr(rax, rbx, 8, 16)
    assert a1 == a2 and hash(a1) == hash(a2) and a1 is not a2
    assert a1 + 0 == a1 and a1 - 16 == Addr(rax, rbx, 8) and str(a1) == str(a2) == "[rax + rbx*8 + 16]"
    assert rax + Addr(index=rbx, scale=2) == Addr(rax, rbx, 2) and r12 + Addr(disp=4) == Addr(r12, disp=4)
    m = qword(a1)
    for x in (a1, m, bcst(a1)):
        assert pickle.loads(pickle.dumps(x)) == x and copy.copy(x) == x
        assert hash(pickle.loads(pickle.dumps(x))) == hash(x)
    assert replace(m, size=4) == dword(a1) and Mem(a1, 8) == m and {m: 1}[Mem(Addr(rax, rbx, 8, 16), 8)] == 1
