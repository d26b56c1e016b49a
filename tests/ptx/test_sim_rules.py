"""ptx.sim's state-space and alignment rules (the table ptx.sim_rules.RULES).

The sm_90a GEMM with the bug an H200 faulted on (issue 34: the tensor map's .param-space address
from ``mov`` instead of a generic one) and with the misplacements the rules forbid is refused,
each with its rule named; the fixed kernel passes. Small builder kernels exercise each rule and
the tracking of address state spaces through arithmetic and cvta.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from minijit.cuda import gemm_sm90 as G
from ptx import Module, addr, sim, sim_rules, sreg
from ptx.tensormap import encode_tiled
from tests.minijit.cuda.test_gemm_sm90 import _run

# --------------------------------------------------------------------------- the sm_90a GEMM

#: (mutation in tests/minijit/cuda/mutations.py, the rule that must refuse it)
MUTANTS = [
    ("no_cvta_param", "tensormap-generic"),  # the kernel of main at 213122a (issue 34)
    ("tma_dst_plus16", "tma-dst-align"),
    ("mbarrier_plus4", "mbarrier-object"),
    ("desc_x_plus16", "wgmma-desc-row"),  # K-major (B^T): the last K step leaves the swizzle row
    ("desc_y_plus16", "wgmma-desc-row"),  # MN-major (A "m"): every row leaves it
]
SPECS = [
    G.Sm90Spec("f16", bm=64, bn=64, stages=2),  # A M-major, B K-major
    G.Sm90Spec("tf32", bm=64, bn=64, stages=2, a_major="k"),  # both K-major
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_fixed_kernel_passes_every_rule(spec):
    pr, got = _run(spec, 70, 60, 100)  # 2 tiles in m, 1 in n, 2 (tf32: 4) K tiles through 2 stages
    pr.check(got)
    text = G.generate(spec).text
    assert len(re.findall(r"cvta\.param\.u64", text)) == 2


@pytest.mark.parametrize("mutation,rule", MUTANTS)
def test_mutated_gemm_fails_with_its_rule(mutation, rule):
    spec = SPECS[0]
    with pytest.raises(sim.SimError, match=rf"\[rule {rule}:") as e:
        _run(spec, 64, 64, 128, mutation=mutation)
    if mutation == "no_cvta_param":  # the message says what the operand holds and how to convert it
        assert "holds a param address" in str(e.value) and "cvta.param" in str(e.value)


def test_tf32_descriptor_off_by_16_fails():
    """tf32 (K-major A and B, 4-byte elements): four k8 steps walk the 128-byte row; +16 leaves it."""
    with pytest.raises(sim.SimError, match=r"\[rule wgmma-desc-row:"):
        _run(SPECS[1], 64, 64, 64, mutation="desc_x_plus16")


# --------------------------------------------------------------------------- the table


def test_every_rule_is_checked_and_cited():
    """The table is the one place the rules are written: each is used by the simulator, each
    simulator rule is in it, each cites its source."""
    import inspect

    from ptx import sim_arith, sim_async, sim_memops, sim_memory, sim_parse, sim_values, sim_warp, sim_wgmma

    parts = (sim, sim_memory, sim_parse, sim_values, sim_memops, sim_arith, sim_warp, sim_async, sim_wgmma)
    src = "".join(inspect.getsource(p) for p in parts) + inspect.getsource(sim_rules.check_space)
    used = set(re.findall(r'"([a-z0-9]+(?:-[a-z0-9]+)+)"', src)) & set(sim_rules.RULES) | {"state-space"}
    assert used == set(sim_rules.RULES), set(sim_rules.RULES) ^ used
    for r in sim_rules.RULES.values():
        assert ("PTX ISA" in r.cite or "CUDA" in r.cite) and r.space and r.align, r
        assert r.name in sim_rules.message(r.name, "x")


# --------------------------------------------------------------------------- small kernels


def _launch(mod: Module, name: str, args, block=32, **kw):
    mem = kw.pop("memory", None) or sim.Memory()
    return sim.launch(mod.text(), name, 1, block, args, mem, **kw)


def test_param_address_is_not_a_generic_address():
    """mov of a scalar parameter gives its .param-space address: a generic load through it is
    refused; ld.global through a pointer loaded from the parameter is fine."""
    m = Module()
    k = m.kernel("p")
    p_out = k.param("u64", "out")
    a, v = k.reg("u64"), k.reg("u32")
    k._emit(f"mov.u64 {a.name}, {p_out.name}")  # (the builder has no such mov: raw PTX)
    k.ld(None, v, addr(a))
    k.ret()
    mem = sim.Memory()
    out = mem.alloc(64)
    with pytest.raises(sim.SimError, match=r"holds a param address, not generic.*\[rule state-space:"):
        _launch(m, "p", (out,), memory=mem)


def _shared_kernel(how: str):
    """One thread stores 7 to a .shared word through an address made by ``how``, then copies it out."""
    m = Module()
    k = m.kernel("s")
    p_out = k.param("u64", "out")
    sm = k.shared("buf", "b32", 8, align=16)
    s32, s64, g, v, o = k.reg("u32"), k.reg("u64"), k.reg("u64"), k.reg("u32"), k.reg("u64")
    k.mov(v, 7)
    if how == "window":  # mov: the shared-window address
        k.mov(s32, sm)
        k.st("shared", addr(s32, 4), v)
        k.ld("shared", v, addr(s32, 4))
    elif how == "generic":  # cvta.shared: generic, through generic ld/st
        k.cvta(g, sm, space="shared", to=False)
        k.st(None, addr(g, 4), v)
        k.cvta(s64, g, space="shared")  # and back to the window
        k.ld("shared", v, addr(s64, 4))
    elif how == "generic_as_shared":  # bug: a generic address with .shared
        k.cvta(g, sm, space="shared", to=False)
        k.st("shared", addr(g, 4), v)
    elif how == "window_as_generic":  # bug: a window address with generic addressing
        k.mov(s32, sm)
        k.cvt(s64, s32)
        k.st(None, addr(s64, 4), v)
    elif how == "to_shared_of_window":  # bug: cvta.to.shared of a window address
        k.mov(s32, sm)
        k.cvt(s64, s32)
        k.cvta(g, s64, space="shared")
    k.ld_param(o, p_out)
    k.st("global", addr(o), v)
    k.ret()
    return m


@pytest.mark.parametrize("how", ["window", "generic"])
def test_shared_addresses_in_their_spaces(how):
    mem = sim.Memory()
    out = mem.alloc(4)
    _launch(_shared_kernel(how), "s", (out,), block=1, memory=mem)
    assert int(mem.read(out, np.uint32, 1)[0]) == 7


@pytest.mark.parametrize(
    "how,msg",
    [
        ("generic_as_shared", r"holds a generic address, not shared::cta"),
        ("window_as_generic", r"holds a shared::cta address, not generic \(cvta.shared makes it generic\)"),
        ("to_shared_of_window", r"holds a shared::cta address, not generic"),
    ],
)
def test_shared_addresses_in_the_wrong_space_are_refused(how, msg):
    with pytest.raises(sim.SimError, match=msg + r".*\[rule state-space:"):
        _launch(_shared_kernel(how), "s", (0,), block=1, memory=sim.Memory())


def test_untracked_shared_address_is_checked_by_value():
    """A generic shared address that arithmetic lost track of still is no .shared address."""
    m = Module()
    k = m.kernel("s")
    sm = k.shared("buf", "b32", 8, align=16)
    g, v = k.reg("u64"), k.reg("u32")
    k.cvta(g, sm, space="shared", to=False)
    k.xor(g, g, 0)  # not address arithmetic: the state space is forgotten
    k.mov(v, 1)
    k.st("shared", addr(g), v)
    k.ret()
    with pytest.raises(sim.SimError, match=r"is not a shared-window address.*\[rule state-space:"):
        _launch(m, "s", (), block=1)


@pytest.mark.parametrize("space,off,vec", [("global", 4, 4), ("global", 8, 4), ("shared", 4, 2), ("global", 2, 1)])
def test_vector_accesses_need_natural_alignment(space, off, vec):
    """ld.v4.f32 is a 16-byte access: 16-byte aligned (an address 4 or 8 bytes off faults); v2: 8."""
    m = Module()
    k = m.kernel("v")
    p_in = k.param("u64", "x")
    sm = k.shared("buf", "b32", 16, align=16)
    a, g = k.reg("u32"), k.reg("u64")
    vals = k.regs("f32", vec)
    if space == "shared":
        k.mov(a, sm)
        k.ld("shared", vals if vec > 1 else vals[0], addr(a, off))
    else:
        k.ld_param(g, p_in)
        k.cvta(g, g)
        k.ld("global", vals if vec > 1 else vals[0], addr(g, off))
    k.ret()
    mem = sim.Memory()
    x = mem.alloc(64)
    width = 4 * vec
    with pytest.raises(sim.SimError, match=rf"misaligned {space} (load|access) of {width} bytes.*\[rule access-align:"):
        _launch(m, "v", (x,), block=1, memory=mem)


def _cp_async_kernel(dst_off: int, src_off: int):
    m = Module()
    k = m.kernel("c")
    p_in = k.param("u64", "x")
    sm = k.shared("buf", "b32", 16, align=16)
    a, g = k.reg("u32"), k.reg("u64")
    k.mov(a, sm)
    k.ld_param(g, p_in)
    k.cvta(g, g)
    k.cp_async(addr(a, dst_off), addr(g, src_off), 16, cache="cg")
    k.cp_async_commit()
    k.cp_async_wait(0)
    k.ret()
    return m


@pytest.mark.parametrize("dst_off,src_off", [(8, 0), (0, 4)])
def test_cp_async_needs_cp_size_alignment(dst_off, src_off):
    mem = sim.Memory()
    x = mem.upload(np.arange(16, dtype=np.uint32))
    _launch(_cp_async_kernel(0, 0), "c", (x,), block=1, memory=mem)
    with pytest.raises(sim.SimError, match=r"misaligned.*\[rule cp-async-size:"):
        _launch(_cp_async_kernel(dst_off, src_off), "c", (x,), block=1, memory=mem)


def test_ldmatrix_rows_are_16_byte_aligned():
    def kern(off: int):
        m = Module()
        k = m.kernel("l")
        sm = k.shared("buf", "b16", 8 * 8 * 4 + 8, align=16)
        a, lane = k.reg("u32"), k.reg("u32")
        k.mov(lane, sreg.laneid)
        k.mov(a, sm)
        k.mad(a, lane, 16, a, mode="lo")
        k.add(a, a, off)
        d = k.regs("b32", 4)
        k.ldmatrix(d, addr(a))
        k.ret()
        return m

    _launch(kern(0), "l", ())
    with pytest.raises(sim.SimError, match=r"misaligned shared access of 16 bytes.*\[rule ldmatrix-row:"):
        _launch(kern(8), "l", ())


def _tma_kernel(align_map: bool):
    """Thread 0 loads one 64 x 16 f16 box (128-byte swizzle) with a scalar parameter first, so a
    tensor map declared without .align 64 sits at .param offset 8."""
    m = Module()
    k = m.kernel("t", reqntid=32)
    p_c0 = k.param("u64", "c0")
    tmap = k.tensormap_param("tmap")
    smem = k.extern_shared("dsmem", align=1024)
    assert p_c0.name == "c0"
    base, bar, tm = k.reg("u32"), k.reg("u32"), k.reg("u64")
    k.mov(base, smem)
    k.add(bar, base, 2048)
    k.param_address(tm, tmap)
    leader = k.reg("pred")
    tid = k.reg("u32")
    k.mov(tid, sreg.tid.x)
    k.setp("eq", leader, tid, 0)
    k.mbarrier_init(bar, 1, pred=leader)
    k.fence_mbarrier_init()
    k.bar_sync(0)
    k.mbarrier_arrive_expect_tx(bar, 2048, pred=leader)
    k.cp_async_bulk_tensor(base, tm, [0, 0], bar, pred=leader)
    done = k.reg("pred")
    wait = k.label("wait")
    k.place(wait)
    k.mbarrier_try_wait_parity(done, bar, 0)
    k.bra(wait, pred=~done)
    k.ret()
    text = m.text()
    if not align_map:
        text = text.replace(".param .align 64 .b8 tmap[128]", ".param .b8 tmap[128]")
        text = text.replace(".param .u64 c0", ".param .b8 c0[8]")
    return text


def test_tensor_map_parameter_must_be_64_byte_aligned():
    mem = sim.Memory()
    x = mem.upload(np.zeros((16, 64), np.float16))
    tm = encode_tiled("float16", 2, x, (64, 16), (128,), (64, 16), (1, 1), swizzle=3)
    sim.launch(_tma_kernel(True), "t", 1, 32, (0, tm), mem, shared_bytes=2048 + 64)
    with pytest.raises(sim.SimError, match=r"is not 64-byte aligned.*\[rule tensormap-generic:"):
        sim.launch(_tma_kernel(False), "t", 1, 32, (b"\0" * 8, tm), mem, shared_bytes=2048 + 64)


def test_cvta_param_round_trip_and_window():
    """cvta.param of a parameter's .param address, and cvta.to.param back, are inverse; a generic
    address outside the parameters' window is refused by cvta.to.param."""
    m = Module()
    k = m.kernel("q")
    p_out = k.param("u64", "out")
    g, pa, o = k.reg("u64"), k.reg("u64"), k.reg("u64")
    k.cvta(g, p_out, space="param", to=False)  # the var form: generic address of the parameter
    k.cvta(pa, g, space="param")  # back to its .param address: 0 (the first parameter)
    k.ld_param(o, p_out)
    k.st("global", addr(o), pa)
    k.cvta(pa, o, space="param")  # bug: a global pointer is no kernel-parameter address
    k.ret()
    text = m.text()
    assert ".version 7.7" in text and "cvta.param.u64" in text and "cvta.to.param.u64" in text
    mem = sim.Memory()
    out = mem.alloc(8)
    with pytest.raises(sim.SimError, match=r"does not fall within the address window of \.param"):
        sim.launch(text, "q", 1, 1, (out,), mem)
    assert int(mem.read(out, np.uint64, 1)[0]) == 0


def test_untracked_param_offset_is_refused_by_value():
    """A .param address that arithmetic lost track of is still no generic address (by its value)."""
    text = re.sub(r"cvta\.param\.u64 (%rd\d+), (%rd\d+);", r"xor.b64 \1, \2, 0;", _tma_kernel(True))
    assert "xor.b64" in text
    mem = sim.Memory()
    x = mem.upload(np.zeros((16, 64), np.float16))
    tm = encode_tiled("float16", 2, x, (64, 16), (128,), (64, 16), (1, 1), swizzle=3)
    with pytest.raises(sim.SimError, match=r"0x40 is not a generic address.*\[rule tensormap-generic:"):
        sim.launch(text, "t", 1, 32, (0, tm), mem, shared_bytes=2048 + 64)
