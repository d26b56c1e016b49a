"""ptx.sim on Hopper instructions: mbarrier, cp.async.bulk.tensor (TMA), wgmma, fences, setmaxnreg.

Expectations come from numpy and from the PTX ISA's formulas written out here (the 128-byte
swizzle, the canonical K-/MN-major layouts, the accumulator fragment), not from ptx.wgmma.
"""

import numpy as np
import pytest

from ptx import Module, addr, sim, sreg, toolchain
from ptx.mma import bf16_bits_to_f32, f32_to_bf16_bits
from ptx.tensormap import TensorMapError, encode_tiled


def _swz128(off: np.ndarray) -> np.ndarray:
    """ISA: 128-byte swizzle, 16-byte chunk (bits 4-6) XOR row-in-atom (bits 7-9)."""
    return (off & ~0x70) | ((((off >> 4) & 7) ^ ((off >> 7) & 7)) << 4)


def _ptxas(text: str) -> None:
    if toolchain.find_ptxas() is None:
        pytest.skip("ptxas not found")
    toolchain.compile(text, arch="sm_90a")


# --------------------------------------------------------------------------- TMA + mbarrier


def _tma_kernel(box_bytes_announced: int, box: tuple[int, int]):
    """Thread 0 loads one box through TMA; everyone waits on the mbarrier, then copies the raw
    shared bytes to ``out`` (4 bytes per thread per step)."""
    nbytes = box[0] * box[1] * 2
    mod = Module()
    k = mod.kernel("tma", reqntid=128)
    tmap = k.tensormap_param("tmap")
    p_out, p_c0, p_c1 = k.param("u64", "out"), k.param("s32", "c0"), k.param("s32", "c1")
    smem = k.extern_shared("dsmem", align=1024)
    base, bar, tm = k.reg("u32"), k.reg("u32"), k.reg("u64")
    k.mov(base, smem)
    k.add(bar, base, nbytes)
    k.param_address(tm, tmap)
    tid, c0, c1 = k.reg("u32"), k.reg("s32"), k.reg("s32")
    k.mov(tid, sreg.tid.x)
    k.ld_param(c0, p_c0)
    k.ld_param(c1, p_c1)
    leader = k.reg("pred")
    k.setp("eq", leader, tid, 0)
    k.mbarrier_init(bar, 1, pred=leader)
    k.fence_mbarrier_init()
    k.bar_sync(0)
    k.mbarrier_arrive_expect_tx(bar, box_bytes_announced, pred=leader)
    k.cp_async_bulk_tensor(base, tm, [c0, c1], bar, pred=leader)
    done = k.reg("pred")
    wait = k.label("wait")
    k.place(wait)
    k.mbarrier_try_wait_parity(done, bar, 0)
    k.bra(wait, pred=~done)
    out, word, sa, ga = k.reg("u64"), k.reg("b32"), k.reg("u32"), k.reg("u64")
    k.ld_param(out, p_out)
    for i in range(nbytes // 4 // 128):
        k.mad(sa, tid, 4, base, mode="lo")
        k.ld("shared", word, addr(sa, 512 * i))
        k.mul(ga, tid, 4, mode="wide")
        k.add(ga, ga, out)
        k.st("global", addr(ga, 512 * i), word)
    k.ret()
    return mod.text(), nbytes


@pytest.mark.parametrize("c0,c1", [(0, 0), (64, 8), (-8, -3)])
def test_tma_128b_swizzle_and_zero_fill(c0, c1):
    rows, cols, box = 21, 100, (64, 16)  # tensor 21 x 100 f16 (row stride 208 bytes), box 16 rows x 64
    rng = np.random.default_rng(1)
    x = rng.standard_normal((rows, 104)).astype(np.float16)
    text, nbytes = _tma_kernel(box[0] * box[1] * 2, box)
    mem = sim.Memory()
    xa, out = mem.upload(x), mem.alloc(nbytes)
    tm = encode_tiled("float16", 2, xa, (cols, rows), (104 * 2,), box, (1, 1), swizzle=3)
    sim.launch(text, "tma", 1, 128, (tm, out, c0, c1), mem, shared_bytes=nbytes + 64)
    got = mem.read(out, np.uint16, nbytes // 2)
    want = np.zeros(nbytes // 2, np.uint16)
    for r in range(box[1]):
        for c in range(box[0]):
            gr, gc = c1 + r, c0 + c
            v = x[gr, gc].view(np.uint16) if 0 <= gr < rows and 0 <= gc < cols else 0
            want[_swz128(np.int64(r * 128 + c * 2)) // 2] = v
    np.testing.assert_array_equal(got, want)
    _ptxas(text)


def test_tma_expect_tx_mismatch_is_a_detected_deadlock():
    box = (64, 16)
    for announced in (box[0] * box[1] * 2 + 16, box[0] * box[1] * 2 - 16):
        text, nbytes = _tma_kernel(announced, box)
        mem = sim.Memory()
        x = mem.upload(np.zeros((16, 64), np.float16))
        tm = encode_tiled("float16", 2, x, (64, 16), (128,), box, (1, 1), swizzle=3)
        with pytest.raises(sim.SimError, match="deadlock.*transaction count"):
            sim.launch(text, "tma", 1, 128, (tm, mem.alloc(nbytes), 0, 0), mem, shared_bytes=nbytes + 64)


def test_tensor_map_validation_and_params():
    with pytest.raises(TensorMapError, match="multiple of 16"):
        encode_tiled("float16", 2, 1 << 40, (100, 10), (200,), (64, 8), (1, 1))
    with pytest.raises(TensorMapError, match="swizzle span"):
        encode_tiled("float16", 2, 1 << 40, (100, 10), (208,), (128, 8), (1, 1), swizzle=3)
    with pytest.raises(TensorMapError, match="box_dim"):
        encode_tiled("float32", 2, 1 << 40, (100, 10), (400,), (64, 300), (1, 1))
    text, nbytes = _tma_kernel(2048, (64, 16))
    with pytest.raises(sim.SimError, match="tensor map"):
        sim.launch(text, "tma", 1, 128, (b"x" * 12, 1 << 40, 0, 0), sim.Memory(), shared_bytes=nbytes + 64)


def _pingpong(arrive_count: int):
    """Warp 0 produces a value per round into shared memory; warp 1 consumes it. full/empty mbarriers."""
    mod = Module()
    k = mod.kernel("pp", reqntid=64)
    p_out = k.param("u64", "out")
    sm = k.shared("buf", "b32", 8, align=16)
    full, empty, base = k.reg("u32"), k.reg("u32"), k.reg("u32")
    k.mov(base, sm)
    k.add(full, base, 0)
    k.add(empty, base, 8)
    tid, lane, warp = k.reg("u32"), k.reg("u32"), k.reg("u32")
    k.mov(tid, sreg.tid.x)
    k.and_(lane, tid, 31)
    k.shr(warp, tid, 5)
    first = k.reg("pred")
    k.setp("eq", first, tid, 0)
    k.mbarrier_init(full, 1, pred=first)
    k.mbarrier_init(empty, arrive_count, pred=first)
    k.bar_sync(0)
    one = k.reg("pred")
    k.setp("eq", one, lane, 0)
    is_cons = k.reg("pred")
    k.setp("ne", is_cons, warp, 0)
    cons = k.label("consumer")
    k.bra(cons, pred=is_cons)
    # producer: 3 rounds, each waits for an empty slot (parity starts at 1: passes at once)
    i, par, ok, v = k.reg("u32"), k.reg("u32"), k.reg("pred"), k.reg("u32")
    k.mov(i, 0)
    k.mov(par, 1)
    ploop, pwait = k.label("ploop"), k.label("pwait")
    k.place(ploop)
    k.place(pwait)
    k.mbarrier_try_wait_parity(ok, empty, par)
    k.bra(pwait, pred=~ok)
    k.xor(par, par, 1)
    k.mad(v, i, 10, 7, mode="lo")
    k.st("shared", addr(base, 16), v, pred=one)
    k.mbarrier_arrive(full, pred=one)
    k.add(i, i, 1)
    more = k.reg("pred")
    k.setp("lt", more, i, 3)
    k.bra(ploop, pred=more)
    k.ret()
    # consumer: adds the 3 values
    k.place(cons)
    j, cp, acc, w, ok2 = k.reg("u32"), k.reg("u32"), k.reg("u32"), k.reg("u32"), k.reg("pred")
    k.mov(j, 0)
    k.mov(cp, 0)
    k.mov(acc, 0)
    cloop, cwait = k.label("cloop"), k.label("cwait")
    k.place(cloop)
    k.place(cwait)
    k.mbarrier_try_wait_parity(ok2, full, cp)
    k.bra(cwait, pred=~ok2)
    k.xor(cp, cp, 1)
    k.ld("shared", w, addr(base, 16))
    k.add(acc, acc, w)
    k.mbarrier_arrive(empty, pred=one)
    k.add(j, j, 1)
    more2 = k.reg("pred")
    k.setp("lt", more2, j, 3)
    k.bra(cloop, pred=more2)
    o = k.reg("u64")
    k.ld_param(o, p_out)
    k.st("global", addr(o), acc, pred=one)
    k.ret()
    return mod.text()


def test_mbarrier_phases_producer_consumer():
    mem = sim.Memory()
    out = mem.alloc(4)
    text = _pingpong(1)
    sim.launch(text, "pp", 1, 64, (out,), mem)
    assert int(mem.read(out, np.uint32, 1)[0]) == 7 + 17 + 27
    with pytest.raises(sim.SimError, match="deadlock.*pending arrivals 1 of 2"):
        sim.launch(_pingpong(2), "pp", 1, 64, (out,), mem)  # empty expects 2 arrivals, gets 1
    _ptxas(text)


# --------------------------------------------------------------------------- wgmma


def _canonical(mn: int, kk: int, es: int, mn_major: bool, lbo: int, sbo: int) -> np.ndarray:
    """ISA canonical layout, 128-byte swizzle: byte offset (before swizzling) of element (mn, k)."""
    t = 16 // es
    m = np.arange(mn)[:, None]
    k = np.arange(kk)[None, :]
    if mn_major:  # ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO))
        return ((m % (8 * t)) + (k % 8) * 8 * t) * es + (m // (8 * t)) * lbo + (k // 8) * sbo
    return ((m % 8) * 8 * t + k) * es + (m // 8) * sbo  # ((8,m),(T,2k)):((8T,SBO),(1,T))


def _wgmma_kernel(n: int, dtype: str, ta: int, tb: int, ksteps: int, nbytes: int, boff: int, a_desc, b_desc, mutate=""):
    mod = Module()
    k = mod.kernel("wg", reqntid=128)
    p_img, p_out = k.param("u64", "img"), k.param("u64", "out")
    smem = k.extern_shared("dsmem", align=1024)
    base, tid = k.reg("u32"), k.reg("u32")
    k.mov(base, smem)
    k.mov(tid, sreg.tid.x)
    img, ga, sa = k.reg("u64"), k.reg("u64"), k.reg("u32")
    k.ld_param(img, p_img)
    vals = k.regs("b32", 4)
    for i in range(nbytes // 2048):  # copy the shared image, 16 bytes per thread per step
        k.mul(ga, tid, 16, mode="wide")
        k.add(ga, ga, img)
        k.ld("global", vals, addr(ga, 2048 * i))
        k.mad(sa, tid, 16, base, mode="lo")
        k.st("shared", addr(sa, 2048 * i), vals)
    if mutate != "no_proxy_fence":
        k.fence_proxy_async()
    k.bar_sync(0)
    acc = k.regs("f32", n // 2)
    for r in acc:
        k.mov(r, 0.0)
    descs = []
    for off, (lbo, sbo) in ((0, a_desc), (boff, b_desc)):
        d, s64 = k.reg("b64"), k.reg("u64")
        k.cvt(s64, base)
        k.add(s64, s64, off)
        k.shr(s64, s64, 4)
        k.or_(d, s64, (1 << 62) | ((sbo >> 4) << 32) | ((lbo >> 4) << 16))
        descs.append(d)
    yes = k.reg("pred")
    k.setp("eq", yes, tid, tid)
    if mutate != "no_wgmma_fence":
        k.wgmma_fence()
    es = 4 if dtype == "tf32" else 2
    step_a = 32 if not ta else 2048  # K-major: one k16 (tf32: k8) is 32 bytes of a row; MN-major: 16 rows
    step_b = 32 if not tb else 2048
    for s in range(ksteps):
        da, db = k.reg("b64"), k.reg("b64")
        k.add(da, descs[0], (s * step_a) >> 4, type="u64")
        k.add(db, descs[1], (s * step_b) >> 4, type="u64")
        k.wgmma(f"m64n{n}k{32 // es}", dtype, acc, da, db, yes, trans_a=ta, trans_b=tb)
        if mutate.startswith("chained"):  # one group per k step on the same accumulators, one in flight
            k.wgmma_commit()
            k.wgmma_wait(1)
    if not mutate.startswith("chained"):
        k.wgmma_commit()
    if mutate not in ("no_wait", "chained_early_read"):
        k.wgmma_wait(0)
    out = k.reg("u64")
    k.ld_param(out, p_out)
    k.mul(ga, tid, 4 * (n // 2), mode="wide")
    k.add(ga, ga, out)
    for i, r in enumerate(acc):
        k.st("global", addr(ga, 4 * i), r)
    if mutate == "no_wait":
        k.wgmma_wait(0)
    k.ret()
    return mod.text()


def _region(rows: int, kk: int, mn_major: bool) -> tuple[int, int, int]:
    """(bytes, LBO, SBO) of an MN x K f16 operand in the 128-byte-swizzled canonical layout."""
    if mn_major:  # 64-element MN blocks of kk rows of 128 bytes; 8-row atoms at SBO, blocks at LBO
        return (rows // 64 or 1) * kk * 128, kk * 128, 1024
    return rows * 128, 16, 1024  # one 128-byte row per MN index; 8-row atoms at SBO; LBO unused


def _image(a: np.ndarray, b: np.ndarray, dtype: str, ta: int, tb: int):
    """Shared image: A (64 x K) at 0, B (N x K) after it (1024-aligned), 128-byte swizzled."""
    es = 4 if dtype == "tf32" else 2
    bits = {
        "f16": lambda x: x.astype(np.float16).view(np.uint16),
        "bf16": f32_to_bf16_bits,
        "tf32": lambda x: x.astype(np.float32).view(np.uint32),
    }[dtype]
    word = np.uint16 if es == 2 else np.uint32
    sizes = [_region(*m.shape, bool(t)) for m, t in ((a, ta), (b, tb))]
    boff = sizes[0][0]
    img = np.zeros(boff + sizes[1][0], np.uint8)
    descs = []
    for base, mat, mnmaj, (_, lbo, sbo) in ((0, a, ta, sizes[0]), (boff, b, tb, sizes[1])):
        off = base + _swz128(_canonical(*mat.shape, es, bool(mnmaj), lbo, sbo))
        img.view(word)[off // es] = bits(mat.astype(np.float32)).astype(word)
        descs.append((lbo, sbo))
    return img, boff, descs


def _frag_to_matrix(out: np.ndarray, n: int) -> np.ndarray:
    """ISA accumulator fragment: thread t, register i -> (row, col) of the 64 x N result."""
    d = np.zeros((64, n), np.float32)
    for t in range(128):
        w, lane = t // 32, t % 32
        for i in range(n // 2):
            row = 16 * w + lane // 4 + 8 * ((i % 4) // 2)
            col = 8 * (i // 4) + 2 * (lane % 4) + i % 2
            d[row, col] = out[t, i]
    return d


@pytest.mark.parametrize(
    "dtype,n,ta,tb",
    [("f16", 64, 0, 0), ("bf16", 64, 0, 1), ("f16", 32, 1, 0), ("f16", 128, 1, 1)],
)
@pytest.mark.parametrize("mutate", ["", "chained"])  # chained: a group per k step, wait_group 1 between
def test_wgmma_matches_numpy(dtype, n, ta, tb, mutate):
    ks = 2  # two chained k16 steps: the descriptor start advances inside the swizzle atom
    rng = np.random.default_rng(n + ta + 2 * tb)
    a = rng.standard_normal((64, 16 * ks)).astype(np.float32)
    b = rng.standard_normal((16 * ks, n)).astype(np.float32)
    q = (
        (lambda x: x.astype(np.float16).astype(np.float64))
        if dtype == "f16"
        else (lambda x: bf16_bits_to_f32(f32_to_bf16_bits(x)).astype(np.float64))
    )
    # operands as (MN, K) matrices; K- or MN-major is the shared layout only
    img, boff, descs = _image(a, b.T, dtype, ta, tb)
    text = _wgmma_kernel(n, dtype, ta, tb, ks, img.size, boff, *descs, mutate=mutate)
    mem = sim.Memory()
    ia, out = mem.upload(img), mem.alloc(128 * n // 2 * 4)
    sim.launch(text, "wg", 1, 128, (ia, out), mem, shared_bytes=img.size)
    got = _frag_to_matrix(mem.read(out, np.float32, 128 * n // 2).reshape(128, n // 2), n)
    want = q(a) @ q(b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    _ptxas(text)


def _tf32_exact(x: np.ndarray) -> np.ndarray:
    """Values with the low 13 mantissa bits clear: tf32 reads them exactly, whatever its rounding."""
    return (x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


@pytest.mark.parametrize("n", [64, 96])  # the image copy moves whole 2 KB chunks
def test_wgmma_tf32_k_major_matches_numpy(n):
    """tf32: K-major A and B only (4-byte elements, 32 per 128-byte swizzle row, k8 per wgmma:
    four chained steps walk the whole row)."""
    ks = 4
    rng = np.random.default_rng(n)
    a = _tf32_exact(rng.standard_normal((64, 8 * ks)))
    b = _tf32_exact(rng.standard_normal((8 * ks, n)))
    img, boff, descs = _image(a, b.T, "tf32", 0, 0)
    text = _wgmma_kernel(n, "tf32", 0, 0, ks, img.size, boff, *descs)
    assert "k8.f32.tf32.tf32" in text
    mem = sim.Memory()
    ia, out = mem.upload(img), mem.alloc(128 * n // 2 * 4)
    sim.launch(text, "wg", 1, 128, (ia, out), mem, shared_bytes=img.size)
    got = _frag_to_matrix(mem.read(out, np.float32, 128 * n // 2).reshape(128, n // 2), n)
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)
    _ptxas(text)
    # the tf32 form has no transpose immediates; a kernel that passes them is rejected
    bad = "\n".join(line.replace("1, 1;", "1, 1, 0, 1;") if "mma_async" in line else line for line in text.splitlines())
    assert bad != text
    with pytest.raises(sim.SimError, match="no imm-trans"):
        sim.launch(bad, "wg", 1, 128, (ia, out), mem, shared_bytes=img.size)


@pytest.mark.parametrize("ta,tb", [(0, 1), (1, 0)])
def test_wgmma_transpose_immediate_selects_the_layout(ta, tb):
    """The same shared image read with one imm-trans flipped gives a different product: the
    simulator follows the immediate, not the data."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((64, 32)).astype(np.float32)
    img, boff, descs = _image(a, b, "f16", ta, tb)
    text = _wgmma_kernel(64, "f16", ta, tb, 2, img.size, boff, *descs)
    flip = f", {ta}, {tb};", f", {ta}, {1 - tb};"  # imm-trans-b only: descriptors and steps stay
    flipped = "\n".join(line.replace(*flip) if "mma_async" in line else line for line in text.splitlines())
    assert flipped != text
    outs = []
    for t in (text, flipped):
        mem = sim.Memory()
        ia, out = mem.upload(img), mem.alloc(128 * 32 * 4)
        try:
            sim.launch(t, "wg", 1, 128, (ia, out), mem, shared_bytes=img.size)
        except sim.SimError as e:  # an MN-major read of a K-major region: refused by a descriptor rule
            assert "rule wgmma-desc-start" in str(e) or "rule wgmma-desc-row" in str(e)
            outs.append(None)
            continue
        outs.append(_frag_to_matrix(mem.read(out, np.float32, 128 * 32).reshape(128, 32), 64))
    q = a.astype(np.float16).astype(np.float64) @ b.astype(np.float16).astype(np.float64).T
    np.testing.assert_allclose(outs[0], q, rtol=1e-5, atol=1e-4)
    assert outs[1] is None or np.abs(outs[1] - q).max() > 0.1


@pytest.mark.parametrize(
    "mutate,msg",
    [
        ("no_wgmma_fence", "missing wgmma.fence"),
        ("no_proxy_fence", "fence.proxy.async"),
        ("no_wait", "not yet waited for"),
        ("chained_early_read", "not yet waited for"),
    ],
)
def test_wgmma_ordering_rules_are_enforced(mutate, msg):
    """(and ``chained_early_read``: groups chained on one accumulator set, read after
    wait_group 1: the last group is still in flight although the earlier ones retired)"""
    a = np.ones((64, 32), np.float32)
    b = np.ones((64, 32), np.float32)
    img, boff, descs = _image(a, b, "f16", 0, 0)
    text = _wgmma_kernel(64, "f16", 0, 0, 2, img.size, boff, *descs, mutate=mutate)
    mem = sim.Memory()
    with pytest.raises(sim.SimError, match=msg):
        sim.launch(text, "wg", 1, 128, (mem.upload(img), mem.alloc(128 * 32 * 4)), mem, shared_bytes=img.size)


def test_setmaxnreg_checks():
    from ptx import PtxTypeError

    mod = Module()
    k = mod.kernel("r", reqntid=256, minnctapersm=1)
    with pytest.raises(PtxTypeError, match="multiple of 8"):
        k.setmaxnreg(250, inc=True)
    k.setmaxnreg(240, inc=True)
    k.ret()
    assert mod.target == "sm_90a"
    sim.launch(mod.text(), "r", 1, 256, (), sim.Memory())
    bad = mod.text().replace("240", "300")
    with pytest.raises(sim.SimError, match="multiple of 8 in 24..256"):
        sim.launch(bad, "r", 1, 256, (), sim.Memory())
    part = mod.text().replace("reqntid 256", "reqntid 96")
    with pytest.raises(sim.SimError, match="part of a warpgroup"):
        sim.launch(part, "r", 1, 96, (), sim.Memory())
