"""SME BRGEMM (`minijit.kernels.aarch64.sme_brgemm`) and the ``aarch64-sme`` target: correct at
every streaming vector length.

Kernels run in the qemu worker at streaming vector lengths 128..2048 bits (qemu's
``sme-default-vector-length``); results are compared with numpy in float64, and guard values
around every matrix catch reads of the wrong elements and stores outside C. A wrapper kernel
checks the AAPCS64 contract: x19-x28 and d8-d15 survive, and streaming mode and ZA are off again
(SVCR = 0) when the kernel returns. The worker has no FEAT_SME_FA64, so streaming code that
strays into NEON or gathers faults. The target runs the seed's configurations through
`TensorOperation` and a GEMM through `minijit.einsum`.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import minijit
from asm import llvm
from asm.aarch64 import Assembler, V, X, mem, sp, x0, x9, x10, x29, x30
from minijit import targets
from minijit.kernels.aarch64.common import brgemm_signature
from minijit.kernels.aarch64.sme_brgemm import SmeBrgemm
from minijit.runtime import load, runs_natively
from minijit.runtime.emulator import EmulatorFault
from minijit.targets import AArch64SmeTarget
from tests.conftest import examples
from tests.minijit.test_tensor_operation import SEED_SIZES, SEED_VARIANTS, op_for, run_seed, seed_case

pytestmark = pytest.mark.skipif(
    runs_natively("aarch64"), reason="SME kernels are checked in qemu (every streaming vector length)"
)

SVLS = [128, 256, 512, 1024, 2048]  # every streaming vector length qemu offers (powers of two)
MATTR = "+sve,+sme,+sme2,+sme-f64f64,+sme-i16i64"
NP = {"fp32": np.float32, "fp64": np.float64}
SENTINEL = -7777.0
GUARD = 8
#: (trans_a, trans_b, trans_c): every combination
FORMS = [(ta, tb, tc) for ta in (False, True) for tb in (False, True) for tc in (False, True)]

_kernels: dict = {}
D = [v.D for v in V]  # d0..d31


def _kernel(m, n, k, br, form, dtype, svl):
    """The kernel at ``svl``, loaded from bytes that llvm-mc reassembles from its listing."""
    key = (m, n, k, br, form, dtype, svl)
    if key not in _kernels:
        a = SmeBrgemm.program(m, n, k, br, *form, dtype)
        assert llvm.assemble(a.listing(), mattr=MATTR) == a.code()
        _kernels[key] = load(a.code(), brgemm_signature(dtype), isa="aarch64", name=a.name, sme_vl=svl)
    return _kernels[key]


def _store(rng, rows, cols, ld, trans, count, t):
    """``count`` logical rows x cols matrices stored column-major (row-major with ``trans``) with
    leading dimension ``ld``, one after the other (batch stride returned), sentinels in between."""
    inner, outer = (cols, rows) if trans else (rows, cols)
    stride = ld * outer + GUARD
    buf = np.full(stride * count + GUARD, SENTINEL, dtype=t)
    mats = rng.standard_normal((count, rows, cols)).astype(t)
    for i in range(count):
        view = buf[i * stride : i * stride + ld * outer].reshape(outer, ld)[:, :inner]
        view[...] = mats[i].T if not trans else mats[i]
    return buf, mats, stride


def _run(m, n, k, br, form, dtype, svl, pads, seed):
    ta, tb, tc = form
    t = NP[dtype]
    rng = np.random.default_rng(seed)
    lda = (k if ta else m) + pads[0]
    ldb = (n if tb else k) + pads[1]
    ldc = (n if tc else m) + pads[2]
    a_buf, a_mats, sa = _store(rng, m, k, lda, ta, br, t)
    b_buf, b_mats, sb = _store(rng, k, n, ldb, tb, br, t)
    c_buf, c_mats, _ = _store(rng, m, n, ldc, tc, 1, t)
    want_c = c_mats[0].astype(np.float64) + sum(
        a_mats[i].astype(np.float64) @ b_mats[i].astype(np.float64) for i in range(br)
    )
    want = np.full(c_buf.size, SENTINEL)  # sentinels outside C stay as they were
    inner, outer = (n, m) if tc else (m, n)
    want[: ldc * outer].reshape(outer, ldc)[:, :inner] = want_c if tc else want_c.T
    _kernel(m, n, k, br, form, dtype, svl)(a_buf, b_buf, c_buf, lda, ldb, ldc, sa, sb)
    tol = (1e-5 if dtype == "fp32" else 1e-12) * (k * br + 1)
    np.testing.assert_allclose(c_buf, want, rtol=tol, atol=tol * 4)


@pytest.mark.parametrize("svl", SVLS)
def test_streaming_vector_length(svl):
    """The worker runs streaming code at the chosen length: rdsvl gives SVL/8 bytes, cntw SVL/32."""
    a = Assembler()
    a.smstart("sm")
    a.rdsvl(x0, 1)
    a.cntw(x9)
    a.add(x0, x0, x9, "lsl", 16)
    a.smstop("sm")
    a.ret()
    kern = load(a.code(), "int64_t()", isa="aarch64", sme_vl=svl)
    assert kern() == svl // 8 + (svl // 32 << 16)


def test_streaming_mode_refuses_neon():
    """The worker at a streaming length has no FEAT_SME_FA64 (as the M4): NEON in streaming mode
    faults, so the kernels' streaming code is checked to be legal without it."""
    a = Assembler()
    a.smstart("sm")
    a.fadd(V[0].s4, V[0].s4, V[1].s4)
    a.smstop("sm")
    a.ret()
    with pytest.raises(EmulatorFault, match="SIGILL"):
        load(a.code(), "void()", isa="aarch64", sme_vl=256)()


@pytest.mark.parametrize("svl", SVLS)
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_one_by_one(svl, dtype):
    """1x1x1 at every length (all but one lane of every predicate off)."""
    _run(1, 1, 1, 1, FORMS[0], dtype, svl, (0, 0, 0), 1)


@settings(max_examples=examples(30), deadline=None)
@given(
    m=st.integers(1, 40),
    n=st.integers(1, 40),
    k=st.integers(1, 24),
    br=st.integers(1, 3),
    form=st.sampled_from(FORMS),
    dtype=st.sampled_from(["fp32", "fp64"]),
    svl=st.sampled_from(SVLS),
    pads=st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
    seed=st.integers(0, 2**16),
)
@example(m=35, n=17, k=19, br=2, form=FORMS[0], dtype="fp32", svl=128, pads=(1, 2, 3), seed=0)
@example(m=13, n=9, k=5, br=3, form=FORMS[0], dtype="fp64", svl=256, pads=(0, 1, 0), seed=0)
@example(m=33, n=40, k=7, br=1, form=(False, False, True), dtype="fp32", svl=512, pads=(0, 0, 1), seed=0)
@example(m=7, n=31, k=3, br=2, form=(True, True, True), dtype="fp64", svl=128, pads=(2, 0, 1), seed=0)
@example(m=37, n=6, k=21, br=2, form=(True, False, False), dtype="fp32", svl=128, pads=(1, 0, 2), seed=0)
@example(m=13, n=9, k=19, br=3, form=(True, False, True), dtype="fp64", svl=256, pads=(0, 3, 1), seed=0)
def test_brgemm_matches_numpy(m, n, k, br, form, dtype, svl, pads, seed):
    _run(m, n, k, br, form, dtype, svl, pads, seed)


def _count_ne(a: Assembler, reg, other) -> None:
    """x0 += 1 when ``reg`` differs from ``other`` (a register or an immediate)."""
    same = a.new_label("same")
    a.cmp(reg, other)
    a.b_eq(same)
    a.add(x0, x0, 1)
    a.bind(same)


def _saved_pairs():
    """(register pair, byte offset) of the wrapper's frame: x19-x28, d8-d15, x29/x30."""
    regs = [X[r] for r in range(19, 29)] + [D[r] for r in range(8, 16)] + [x29, x30]
    return [((regs[i], regs[i + 1]), 8 * i) for i in range(0, len(regs), 2)]


@pytest.mark.parametrize("svl", [128, 512])
def test_callee_saved_and_streaming_state(svl):
    """A caller sets x19-x28 and d8-d15, calls the kernel (same worker, by address) and reads SVCR:
    it returns how many of those registers changed, plus 100 if streaming mode or ZA is still on."""
    m, n, k = 5, 3, 2
    kern = _kernel(m, n, k, 1, FORMS[0], "fp32", svl)
    a = Assembler()
    a.sub(sp, sp, 160)
    for pair, off in _saved_pairs():
        a.stp(*pair, mem(sp, off))
    for r in range(19, 29):
        a.mov(X[r], 1000 + r)
    for r in range(8, 16):
        a.mov(x9, 0x4000_0000_0000_0000 + r)
        a.ins(V[r].d[0], x9)
    a.mov(x9, kern.address)
    a.blr(x9)
    a.mov(x0, 0)
    for r in range(19, 29):
        _count_ne(a, X[r], 1000 + r)
    for r in range(8, 16):
        a.umov(x9, V[r].d[0])
        a.mov(x10, 0x4000_0000_0000_0000 + r)
        _count_ne(a, x9, x10)
    a.inst(0xD53B4249)  # mrs x9, svcr
    off = a.new_label("svcr_off")
    a.cbz(x9, off)
    a.add(x0, x0, 100)
    a.bind(off)
    for pair, off in _saved_pairs():
        a.ldp(*pair, mem(sp, off))
    a.add(sp, sp, 160)
    a.ret()
    sig = brgemm_signature("fp32").replace("void(", "int64_t(")
    wrapper = load(a.code(), sig, isa="aarch64", sme_vl=svl)
    rng = np.random.default_rng(3)
    a_, b_, c_ = (rng.standard_normal(s).astype(np.float32) for s in (m * k, k * n, m * n))
    want = c_.reshape(n, m).T + a_.reshape(k, m).T.astype(np.float64) @ b_.reshape(n, k).T
    assert wrapper(a_, b_, c_, m, k, m, 0, 0) == 0
    np.testing.assert_allclose(c_.reshape(n, m).T, want, rtol=1e-5)


def test_bad_arguments():
    with pytest.raises(ValueError, match="m must be"):
        SmeBrgemm.program(0, 4, 4)
    with pytest.raises(ValueError, match="dtype must be"):
        SmeBrgemm.program(4, 4, 4, dtype="fp16")
    with pytest.raises(ValueError, match="sme_vl must be"):
        SmeBrgemm.generate(4, 4, 4, sme_vl=384)


def test_listing_names_the_stages():
    """The kernel enters and leaves streaming mode once, saves d8-d15, and does one fmopa per tile
    per k step (3 fp32 variants: 3 + 2 + 1 outer products in the K loops)."""
    text = SmeBrgemm.program(40, 40, 40, 2).listing()
    assert text.count("smstart") == 1 and text.count("smstop") == 1
    assert "stp d8, d9" in text and "ldp d8, d9" in text
    assert text.count("fmopa") == 6
    assert "mova z31.s, p3/m, za3h.s[w13, 0]" in text


# -- the aarch64-sme target ------------------------------------------------------------------
def test_target_name_lengths_and_kernels():
    t = targets.get("aarch64-sme")
    assert isinstance(t, AArch64SmeTarget) and t.name == "aarch64-sme" and t.sme_vl == 512
    assert targets.get(AArch64SmeTarget("sme", sme_vl=128)).sme_vl == 128
    with pytest.raises(ValueError, match="sme_vl must be one of"):
        AArch64SmeTarget("sme", sme_vl=384)
    with pytest.raises(ValueError, match="isa must be 'sme'"):
        AArch64SmeTarget("sve")
    small = AArch64SmeTarget("sme", sme_vl=128)
    assert small.brgemm(5, 4, 3, 2).name.startswith("sme_brgemm_")
    assert small.brgemm(5, 4, 3, trans_a=True, trans_b=True).name.startswith("sme_brgemm_")
    assert small.brgemm(5, 4, 3, trans_a=True, trans_c=True).name.startswith("sme_brgemm_")
    assert small.unary(5, 4).name.startswith("neon_unary")
    with pytest.raises(ValueError, match="zero_c: x86-64 kernel options"):
        small.brgemm(5, 4, 3, zero_c=True)
    # every kernel of the target shares one worker: loop nests call kernels by address
    assert small.brgemm(5, 4, 3).worker is small.unary(5, 4).worker
    assert small.brgemm(5, 4, 3).worker.sme_vl == 128


@pytest.mark.parametrize("svl", [128, 256, 512])
def test_seed_configurations_small(svl):
    """docs/seeds/004 section 5.3 configurations through TensorOperation, at sizes with remainders
    in every kernel loop; the main kernel is the SME BRGEMM."""
    target = AArch64SmeTarget("sme", sme_vl=svl)
    for variant in sorted(SEED_VARIANTS):
        for shared in (False, True):
            run_seed(target, variant, shared, (3, 2, 3, 19, 7, 5), seed=1)
            run_seed(target, variant, shared, (2, 3, 2, 8, 4, 16), seed=2)
    args, _ = seed_case("brgemm", True, (3, 2, 3, 19, 7, 5))
    assert "main: sme_brgemm_" in op_for(target, *args).listing()


def test_seed_configuration_full_size():
    run_seed("aarch64-sme", "zero_brgemm_relu", True, SEED_SIZES)


def test_einsum_on_the_target():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((37, 23)).astype(np.float32)
    b = rng.standard_normal((23, 19)).astype(np.float32)
    got = minijit.einsum("ik,kj->ij", a, b, target="aarch64-sme")
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_code_cache_keeps_the_streaming_length(tmp_path, monkeypatch):
    """A kernel of the target read back from the disk cache lands in the worker at its streaming
    vector length (the one its loop nest runs in) and computes the same."""
    from minijit.runtime import codecache

    monkeypatch.delenv("MINIJIT_CACHE", raising=False)
    monkeypatch.setenv("MINIJIT_CACHE_DIR", str(tmp_path / "code"))
    t = AArch64SmeTarget("sme", sme_vl=128)
    args = {"m": 7, "n": 5, "k": 3, "br_size": 1}
    made = codecache.cached("brgemm", t, args, lambda: t.brgemm(7, 5, 3))
    back = codecache.cached("brgemm", t, args, lambda: pytest.fail("not read from the cache"))
    assert back is not made and back.code == made.code
    assert back.worker is made.worker and back.worker.sme_vl == 128
    rng = np.random.default_rng(9)
    a_, b_ = rng.standard_normal(21).astype(np.float32), rng.standard_normal(15).astype(np.float32)
    c_ = np.zeros(35, np.float32)
    back(a_, b_, c_, 7, 3, 7, 0, 0)
    np.testing.assert_allclose(c_.reshape(5, 7).T, a_.reshape(3, 7).T @ b_.reshape(5, 3).T, rtol=1e-5)


# -- the stated performance model ------------------------------------------------------------
def test_model_numbers_follow_the_public_figures():
    """2.3 fp32 TFLOPS at SVL 512 and 4.4 GHz: 2300e9 / (2 * 16^2) / 4.4e9 = 1.02 outer products a
    cycle; a K step of 3 fmopa takes 3 / 1.02 = 2.94 cycles and loads 4 vectors of 64 bytes; a prim
    of whole tiles predicts the peak, 17 x 16 wastes 15 of 32 rows (2300 * 17 / 32 = 1222)."""
    from minijit.kernels.aarch64.sme_brgemm import model

    text = model(32, 32, 32, "fp32", sme_vl=512)
    assert "a model, not a measurement" in text and "arXiv:2409.18779" in text
    assert "outer products per cycle per SVL: 1.02" in text
    assert "2.94 cycles predicted" in text and "3.92 if the peak needs 4 tiles" in text
    assert "256 B per K step = 87.1 B/cycle" in text
    assert "predicted at 4.4 GHz: 2300 GFLOPS" in text and "(1725 under the 4-tile assumption" in text
    assert "predicted at 4.4 GHz: 1222 GFLOPS" in model(17, 16, 8)
    # at SVL 256: 8 x 8 tiles, 3 A vectors + 1 B column of 32 bytes; the rate is stated as assumed
    small = model(24, 8, 4, sme_vl=256)
    assert "assumed per outer product at SVL 256" in small and "128 B per K step" in small
    neon = next(line for line in text.splitlines() if "NEON kernel, llvm-mca -mcpu=apple-m4" in line)
    assert "unavailable" in neon or re.search(r"\d+ GFLOPS at 4.4 GHz \(an estimate\)", neon)
    assert "fp64: not modelled" in model(8, 8, 8, "fp64")
    for kwargs, name in (
        ({"m": 0}, "m"),
        ({"dtype": "int32"}, "dtype"),
        ({"sme_vl": 384}, "sme_vl"),
        ({"core": "x"}, "core"),
    ):
        args = {"m": 4, "n": 4, "k": 4, **kwargs}
        with pytest.raises(ValueError, match=f"^{name} must be"):
            model(**args)


def test_disasm_prints_the_model_for_the_sme_target(capsys):
    """``minijit disasm --target aarch64-sme`` prints the listing and the stated model of its main
    kernel (the seed's gemm: 32 x 32 x 32); an NEON target prints no model."""
    from minijit import cli

    assert cli.main(["disasm", "--config", "gemm", "--target", "aarch64-sme", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "fmopa" in out and "smstart" in out
    assert "// SME BRGEMM performance model (apple-m4, 32x32x32 fp32, SVL 512): a model, not a measurement" in out
    assert "predicted at 4.4 GHz: 2300 GFLOPS" in out and "NEON kernel, llvm-mca -mcpu=apple-m4" in out
    assert cli.main(["disasm", "--config", "gemm", "--target", "aarch64-neon", "--threads", "1"]) == 0
    assert "performance model" not in capsys.readouterr().out
