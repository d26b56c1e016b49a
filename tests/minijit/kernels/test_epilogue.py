"""Fused epilogues (`minijit.kernels.epilogue`): the description (validation, value semantics, its
text), its emission on x86-64 and AArch64 registers checked byte for byte against llvm-mc, and the
kernels that take one run against numpy: the x86-64 BRGEMM and GEMV natively, the generic-tier
GEMM natively on x86-64 and in the emulator on AArch64 NEON (bit for bit: relu of the same FMA
chains as the kernel without epilogue)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asm import llvm
from asm.aarch64 import Assembler as A64Assembler
from asm.x86_64 import Assembler as X86Assembler
from minijit import kernels, targets
from minijit.kernels import generic as spec
from minijit.kernels.aarch64 import common as a64
from minijit.kernels.aarch64 import generic as a64_generic
from minijit.kernels.epilogue import KINDS, Epilogue, Kind
from minijit.kernels.x86_64 import brgemm, gemv
from minijit.kernels.x86_64 import common as x86
from minijit.kernels.x86_64 import generic as x86_generic
from minijit.runtime import detected_host
from minijit.runtime.kernel import Kernel
from tests.conftest import examples
from tests.minijit.kernels.test_generic_aarch64 import UINT, buffer, fma, indices, layout, pointer

X86 = detected_host().isa == "x86_64"
NATIVE = targets.native().isa if X86 else None
NP = {"fp32": np.float32, "fp64": np.float64}
needs_x86 = pytest.mark.skipif(not X86, reason="runs x86-64 code")


def _llvm() -> None:
    try:
        llvm.find_tool("llvm-mc")
    except llvm.LlvmError as e:  # pragma: no cover - the test command installs llvm
        pytest.skip(str(e))


# -- the description ---------------------------------------------------------------------------------
def test_epilogue_is_a_validated_value():
    assert Epilogue() == Epilogue.NONE and not Epilogue.NONE and Epilogue.RELU
    assert Epilogue(("relu",)) == Epilogue.RELU and hash(Epilogue(("relu",))) == hash(Epilogue.RELU)
    assert len({Epilogue.NONE, Epilogue.RELU, Epilogue(("relu",)), Epilogue.ONLINE_SOFTMAX}) == 3
    assert (str(Epilogue.NONE), str(Epilogue.RELU), str(Epilogue.ONLINE_SOFTMAX)) == ("none", "relu", "online_softmax")
    assert (Epilogue.NONE.tag, Epilogue.RELU.tag, Epilogue.ONLINE_SOFTMAX.tag) == ("", "_r", "_osm")
    for ep in (Epilogue.NONE, Epilogue.RELU, Epilogue.ONLINE_SOFTMAX):
        assert Epilogue.parse(str(ep)) == ep and Epilogue.of(str(ep)) == ep and Epilogue.of(ep) is ep
    assert Epilogue.of(None) == Epilogue.parse("") == Epilogue.parse(" none ") == Epilogue.NONE
    assert Epilogue.RELU.elementwise and Epilogue.NONE.elementwise and not Epilogue.ONLINE_SOFTMAX.elementwise
    assert Epilogue.ONLINE_SOFTMAX.kinds == (KINDS["online_softmax"],)
    assert KINDS["online_softmax"].state == ("m", "l")
    assert KINDS["online_softmax"].stages == ("row_max", "exp", "row_sum", "rescale")
    with pytest.raises(AttributeError):
        Epilogue.RELU.ops = ()  # type: ignore[misc]


@pytest.mark.parametrize(
    "make,error,match",
    [
        (lambda: Epilogue(("gelu",)), ValueError, "unknown operation"),
        (lambda: Epilogue(("relu", "relu")), ValueError, "repeated"),
        (lambda: Epilogue(("relu", "online_softmax")), ValueError, "row reduction"),
        (lambda: Epilogue("relu"), TypeError, "tuple of str"),  # type: ignore[arg-type]
        (lambda: Epilogue((1,)), TypeError, "tuple of str"),  # type: ignore[arg-type]
        (lambda: Epilogue.parse("relu+gelu"), ValueError, "unknown operation"),
        (lambda: Epilogue.of(3), TypeError, "Epilogue or its text"),  # type: ignore[arg-type]
        (lambda: Kind("x y", "t", True), ValueError, "identifier"),
        (lambda: Kind("x", "t", True, state=("m",)), ValueError, "no row state"),
        (lambda: Epilogue.ONLINE_SOFTMAX.reference(np.zeros(2)), ValueError, "row reduction"),
        (lambda: Epilogue.ONLINE_SOFTMAX.require(frozenset({"relu"}), "brgemm"), ValueError, "brgemm"),
    ],
)
def test_bad_descriptions_are_refused(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_last_touches_map_to_epilogues():
    assert Epilogue.for_last_touch("relu") == Epilogue.RELU
    for ptype in ("zero", "copy", "none", "add"):
        assert Epilogue.for_last_touch(ptype) is None


def test_relu_reference_is_numpy_maximum_without_negative_zero():
    x = np.array([-1.5, -0.0, 0.0, 2.0, np.nan, -np.inf, np.inf], np.float32)
    got = Epilogue.RELU.reference(x)
    np.testing.assert_array_equal(got, np.maximum(x, 0))
    assert not np.signbit(got).any() and got.dtype == x.dtype
    np.testing.assert_array_equal(Epilogue.NONE.reference(x), x)
    assert Epilogue.RELU.reference(x) is not x


# -- emission: byte for byte against llvm-mc ---------------------------------------------------------
@pytest.mark.parametrize("isa", ["avx2", "avx512"])
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_x86_emission_reassembles_and_reads_as_relu(isa, dtype):
    """`EpilogueCode` on vector accumulators (every register of the file but the scratch) and on
    scalars: a zero into the scratch once, then vmax(zero, x) and vadd(x, zero) per register; the
    none epilogue emits nothing. llvm-mc assembles the listing to the same bytes."""
    _llvm()
    t = x86.Target.of(dtype, isa)
    regs = t.vregs
    for ep, scratch in ((Epilogue.RELU, len(regs) - 1), (Epilogue.parse("relu"), 0), (Epilogue.RELU, 8)):
        others = [r for i, r in enumerate(regs) if i != scratch]
        a = X86Assembler(name="epilogue")
        code = x86.EpilogueCode(a, t, ep, regs[scratch])
        code.emit(others)
        code.apply(others[3].xmm, scalar=True)
        assert llvm.assemble(a.listing(), triple="x86_64", mattr="") == a.code()
        lines = [line.split() for line in a.listing().splitlines() if not line.endswith(":")]
        p, s = ("ps", "ss") if dtype == "fp32" else ("pd", "sd")
        assert [line[0] for line in lines] == [f"vxor{p}"] + [f"vmax{p}", f"vadd{p}"] * len(others) + [
            f"vmax{s}",
            f"vadd{s}",
        ]
        zero = re.compile(rf"\b[xyz]mm{scratch}\b")
        assert all(zero.search(" ".join(line)) for line in lines)  # every instruction uses the scratch
        assert ".Lepilogue_relu" in a.listing()
    a = X86Assembler(name="none")
    x86.EpilogueCode(a, t, Epilogue.NONE, regs[-1]).emit(list(regs[:-1]))
    assert a.code() == b""
    with pytest.raises(ValueError, match="x86-64 kernels"):
        x86.EpilogueCode(a, t, Epilogue.ONLINE_SOFTMAX, regs[-1])


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_aarch64_emission_reassembles_and_reads_as_relu(dtype):
    _llvm()
    t = a64.dtype_info(dtype)
    a = A64Assembler(name="epilogue")
    a64.EpilogueCode(a, t, Epilogue.RELU, 4).emit(range(16, 32))
    assert llvm.assemble(a.listing()) == a.code()
    lines = [line.strip() for line in a.listing().splitlines() if line.strip() and not line.strip().endswith(":")]
    arr = "4s" if dtype == "fp32" else "2d"
    assert lines[0] == "movi v4.2d, #0x0"
    assert lines[1:] == [f"fmax v{r}.{arr}, v{r}.{arr}, v4.{arr}" for r in range(16, 32)]
    none = A64Assembler(name="none")
    a64.EpilogueCode(none, t, Epilogue.NONE, 4).emit(range(16, 32))
    assert none.code() == b""
    with pytest.raises(ValueError, match="AArch64 kernels"):
        a64.EpilogueCode(none, t, Epilogue.ONLINE_SOFTMAX, 4)


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_x86_kernels_with_relu_reassemble(isa):
    """BRGEMM blocks (plain, masked, copied A, N outer), GEMV forms and the generic GEMM with the
    relu epilogue: llvm-mc gives the same bytes; the text spelling makes the same kernel as the
    description; the epilogue is named in the kernel name and the listing."""
    _llvm()
    for dtype in ("fp32", "fp64"):
        made = [
            brgemm.generate(37, 13, 9, 3, dtype=dtype, isa=isa, epilogue=Epilogue.RELU),
            brgemm.generate(70, 13, 9, 2, dtype=dtype, isa=isa, zero_c=True, a_copy=True, epilogue=Epilogue.RELU),
            brgemm.generate(33, 7, 5, 1, dtype=dtype, isa=isa, n_outer=True, epilogue=Epilogue.RELU),
            gemv.generate(37, 21, 3, True, True, dtype, isa, trans_c=True, epilogue=Epilogue.RELU),
            gemv.generate(4200, 7, 2, False, True, dtype, isa, zero_c=True, epilogue=Epilogue.RELU),
            x86_generic.generate(dtype, isa, Epilogue.RELU),
        ]
        for kern in made:
            assert llvm.assemble(kern.listing, triple="x86_64", mattr="") == kern.code, kern.name
            assert re.search(r"_r(_|$)", kern.name) and ".Lepilogue_relu" in kern.listing, kern.name
        again = brgemm.generate(37, 13, 9, 3, dtype=dtype, isa=isa, epilogue="relu")
        assert again.code == made[0].code and again.name == made[0].name
        plain = brgemm.generate(37, 13, 9, 3, dtype=dtype, isa=isa)
        assert "epilogue" not in plain.listing and not plain.name.endswith("_r")


def test_x86_generators_refuse_epilogues_they_cannot_fuse():
    with pytest.raises(ValueError, match="brgemm: epilogue online_softmax not supported"):
        brgemm.generate(8, 4, 4, 1, dtype="fp32", isa="avx2", epilogue=Epilogue.ONLINE_SOFTMAX)
    with pytest.raises(ValueError, match="gemv: epilogue online_softmax"):
        gemv.generate(8, 4, 1, dtype="fp32", isa="avx2", epilogue="online_softmax")
    with pytest.raises(ValueError, match="brgemm: epilogue: unknown operation"):
        brgemm.generate(8, 4, 4, 1, dtype="fp32", isa="avx2", epilogue="gelu")
    with pytest.raises(TypeError, match="brgemm: epilogue must be"):
        brgemm.generate(8, 4, 4, 1, dtype="fp32", isa="avx2", epilogue=True)
    with pytest.raises(ValueError, match="generic GEMM"):
        x86_generic.program("fp32", "avx2", "online_softmax")
    with pytest.raises(ValueError, match="fused touches"):
        brgemm.generate(8, 4, 4, 1, trans_a=True, dtype="fp32", isa="avx2", epilogue="relu")


def test_targets_name_the_epilogues_they_fuse_and_refuse_others():
    x86_target, neon, sve = (targets.get_cpu(n) for n in ("x86_64-avx2", "aarch64-neon", "aarch64-sve"))
    assert x86_target.epilogue_ops == x86_target.generic_epilogue_ops == x86.EPILOGUE_OPS == {"relu"}
    assert neon.epilogue_ops == frozenset() and neon.generic_epilogue_ops == a64.EPILOGUE_OPS == {"relu"}
    with pytest.raises(ValueError, match="epilogue: x86-64 kernel options, not ones of aarch64-sve"):
        kernels.brgemm(16, 4, 8, target=sve, epilogue="relu")
    with pytest.raises(ValueError, match="unknown operation"):
        kernels.generic_gemm("fp32", target=neon, epilogue="gelu")


# -- kernels with the epilogue against numpy ---------------------------------------------------------
@needs_x86
@settings(max_examples=examples(25), deadline=None)
@given(
    m=st.integers(1, 70),
    n=st.integers(1, 14),
    k=st.integers(1, 12),
    br=st.integers(1, 3),
    zero_c=st.booleans(),
    n_outer=st.booleans(),
    dtype=st.sampled_from(["fp32", "fp64"]),
    seed=st.integers(0, 2**16),
)
def test_brgemm_relu_epilogue_matches_numpy(m, n, k, br, zero_c, n_outer, dtype, seed):
    """C = relu((C or 0) + sum A B) through the kernels cache (`kernels.brgemm`, the text and the
    description giving one cached kernel); a NaN row of A stays NaN, -0 never appears, the padding
    rows of C are untouched. N = 1 reaches the GEMV kernel."""
    rng = np.random.default_rng(seed)
    dt = NP[dtype]
    lda, ldb, ldc = m + 1, k + 2, m + 3
    A = rng.uniform(-1, 1, (br, k, lda)).astype(dt)
    if m > 2:
        A[0, :, m // 2] = np.nan  # a NaN row of C
    B = rng.uniform(-1, 1, (br, n, ldb)).astype(dt)
    C = rng.uniform(-1, 1, (n, ldc)).astype(dt)
    C0 = C.copy()
    acc = np.zeros((m, n)) if zero_c else C0[:, :m].T.astype(np.float64)
    for i in range(br):
        acc = acc + A[i, :, :m].T.astype(np.float64) @ B[i, :, :k].T.astype(np.float64)
    want = np.maximum(acc, 0)
    opts = {"zero_c": zero_c, "n_outer": n_outer and n > 1}
    target = f"x86_64-{NATIVE}"
    kern = kernels.brgemm(m, n, k, br, dtype=dtype, target=target, epilogue="relu", **opts)
    assert kernels.brgemm(m, n, k, br, dtype=dtype, target=target, epilogue=Epilogue.RELU, **opts) is kern
    assert re.search(r"_r(_|$)", kern.name), kern.name
    kern(A.ravel(), B.ravel(), C.ravel(), lda, ldb, ldc, k * lda, n * ldb)
    got = C[:, :m].T
    tol = 4 * np.finfo(dt).eps * (k * br + 1)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1.0, np.nanmax(np.abs(want), initial=0)))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert not np.signbit(got[~np.isnan(got)]).any()
    np.testing.assert_array_equal(C[:, m:], C0[:, m:])


def _generic_case(rng, m, n, k, batch, pad, accumulate, dt):
    lda = ldc = m + pad
    a = rng.uniform(-1, 1, max(1, batch * lda * k)).astype(dt)
    b = rng.uniform(-1, 1, max(1, batch * k * n)).astype(dt)
    c = rng.uniform(-1, 1, max(1, batch * ldc * n)).astype(dt)
    args = spec.pack_args(
        m=m, n=n, k=k, lda=lda, ldb_k=1, ldb_n=k, ldc=ldc, batch=batch,
        batch_a=lda * k, batch_b=k * n, batch_c=ldc * n, accumulate=accumulate,
    )  # fmt: skip
    return a, b, c, args


@needs_x86
@settings(max_examples=examples(40), deadline=None)
@given(
    m=st.integers(0, 70),
    n=st.integers(0, 14),
    k=st.integers(0, 12),
    batch=st.integers(0, 2),
    pad=st.integers(0, 3),
    accumulate=st.integers(0, 1),
    dtype=st.sampled_from(["fp32", "fp64"]),
    seed=st.integers(0, 2**16),
)
def test_x86_generic_relu_is_relu_of_the_same_fma_chains(m, n, k, batch, pad, accumulate, dtype, seed):
    """The generic GEMM with the relu epilogue writes, bit for bit, relu of what the kernel without
    one writes (the same FMA chains), which is close to float64 numpy; padding rows untouched."""
    rng = np.random.default_rng(seed)
    dt = NP[dtype]
    a, b, c, args = _generic_case(rng, m, n, k, batch, pad, accumulate, dt)
    target = f"x86_64-{NATIVE}"
    plain, relu = (kernels.generic_gemm(dtype, target=target, epilogue=e) for e in ("none", Epilogue.RELU))
    assert plain is kernels.generic_gemm(dtype, target=target) and relu.name == x86_generic.name(dtype, NATIVE, "relu")
    c_plain, c_relu = c.copy(), c.copy()
    plain(a, b, c_plain, args)
    relu(a, b, c_relu, args)
    want = Epilogue.RELU.reference(c_plain)
    written = np.zeros(c.size, bool)
    for t in range(batch):
        written[t * (m + pad) * n : (t + 1) * (m + pad) * n].reshape(n, m + pad)[:, :m] = True
    np.testing.assert_array_equal(c_relu[written], want[written])
    np.testing.assert_array_equal(c_relu[~written], c[~written])
    assert not np.signbit(c_relu[written]).any()
    lda = m + pad
    for t in range(batch):
        at = a[t * lda * k : (t + 1) * lda * k].reshape(k, lda)[:, :m].astype(np.float64)
        bt = b[t * k * n : (t + 1) * k * n].reshape(n, k).T.astype(np.float64)
        ct = c[t * lda * n : (t + 1) * lda * n].reshape(n, lda)[:, :m].T.astype(np.float64)
        ref = np.maximum(at.T @ bt + (ct if accumulate else 0), 0)
        got = c_relu[t * lda * n : (t + 1) * lda * n].reshape(n, lda)[:, :m].T
        tol = 1e-5 if dtype == "fp32" else 1e-12
        np.testing.assert_allclose(got, ref, rtol=0, atol=tol * (k + 1))


@needs_x86
def test_x86_generic_relu_keeps_nan_and_clears_negative_zero():
    dtype = "fp32"
    target = f"x86_64-{NATIVE}"
    kern = kernels.generic_gemm(dtype, target=target, epilogue="relu")
    m, n, k = 19, 3, 1
    a = np.array([-1.0, 1.0, np.nan, 0.0] * 5, np.float32)[:m]
    b = np.array([1.0, -1.0, 0.0], np.float32)  # k x n
    c = np.full(m * n, 7.0, np.float32)
    args = spec.pack_args(
        m=m, n=n, k=k, lda=m, ldb_k=1, ldb_n=1, ldc=m, batch=1, batch_a=0, batch_b=0, batch_c=0, accumulate=0
    )
    raw = Kernel(kern.code, spec.signature("float"), unchecked=True, isa="x86_64")
    raw(a.ctypes.data, b.ctypes.data, c.ctypes.data, args)
    want = np.maximum(np.outer(a, b).T.ravel(), 0) + np.float32(0)
    np.testing.assert_array_equal(c, want)
    assert not np.signbit(c).any()  # -1 * 0 = -0 and 0 * -1 = -0 -> +0


@settings(max_examples=examples(12), deadline=None, derandomize=True)
@given(dtype=st.sampled_from(["fp32", "fp64"]), data=st.data())
def test_neon_generic_relu_is_relu_of_the_fma_chains(dtype, data):
    """The NEON generic GEMM with the relu epilogue (in the emulator off ARM): C is relu of the
    exact FMA chains bit for bit (`test_generic_aarch64.fma`), -0 never appears, and nothing
    outside C's block is written."""
    draw_ = data.draw
    size = st.one_of(st.integers(0, 20), st.integers(1, 40))
    m, n, k = draw_(size), draw_(st.integers(0, 9)), draw_(st.integers(0, 6))
    batch = draw_(st.integers(0, 2))
    v = layout(m, n, k, batch, draw_) | {"accumulate": draw_(st.integers(0, 1))}
    args = spec.pack_args(m=m, n=n, k=k, batch=batch, **v)
    rng = np.random.default_rng(m + 7 * n + 13 * k)
    ia, ib, ic = indices(v | {"m": m, "n": n, "k": k, "batch": batch})
    (abuf, a0), (bbuf, b0), (cbuf, c0) = (buffer(i, dtype) for i in (ia, ib, ic))
    for buf, base, idx in ((abuf, a0, ia), (bbuf, b0, ib), (cbuf, c0, ic)):
        buf[base + idx] = rng.standard_normal(idx.shape).astype(NP[dtype])
    a, b, c_in = abuf[a0 + ia], bbuf[b0 + ib], cbuf[c0 + ic]
    before = cbuf.copy()
    kern = kernels.generic_gemm(dtype, target="aarch64-neon", epilogue="relu")
    assert kern is kernels.generic_gemm(dtype, target="aarch64-neon", epilogue=Epilogue.RELU)
    kern(pointer(abuf, a0), pointer(bbuf, b0), pointer(cbuf, c0), args)
    chains = c_in.copy() if v["accumulate"] else np.zeros_like(c_in)
    for kk in range(k):
        chains = fma(a[:, :, kk, None], b[:, None, kk, :], chains)
    want = Epilogue.RELU.reference(chains)
    u = UINT[dtype]
    outside = np.ones(cbuf.size, bool)
    outside[c0 + ic] = False
    np.testing.assert_array_equal(cbuf[outside].view(u), before[outside].view(u), "written outside C's block")
    np.testing.assert_array_equal(cbuf[c0 + ic].view(u), want.view(u), "not relu of the exact FMA chains")


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_neon_generic_relu_listing(dtype):
    """The relu kernel is a separate kernel with its own name; the listing reassembles; the default
    kernel's name and code are those of the kernel without epilogue."""
    _llvm()
    prog = a64_generic.program(dtype, "relu")
    assert llvm.assemble(prog.listing()) == prog.code()
    assert ".Lepilogue_relu" in prog.listing() and "fmax" in prog.listing()
    assert a64_generic.name(dtype, Epilogue.RELU) == f"neon_generic_gemm_{dtype}_r"
    assert a64_generic.name(dtype) == f"neon_generic_gemm_{dtype}"
    assert a64_generic.program(dtype, Epilogue.NONE).code() == a64_generic.program(dtype).code()
    assert "fmax" not in a64_generic.program(dtype).listing()


# -- cache keys ----------------------------------------------------------------------------------------
def test_cache_keys_without_epilogue_are_unchanged():
    """The generic GEMM without epilogue is stored under ``{"dtype": ...}`` as before epilogues
    existed (`minijit.jit` loads it by that key); the relu kernel under its own key with the text."""
    from minijit.runtime import codecache

    if codecache.directory() is None:
        pytest.fail("the test session's code cache (tests/conftest.py) is off")
    target = targets.native()
    kernels.cache_clear()
    plain = kernels.generic_gemm("fp32", target=target)
    relu = kernels.generic_gemm("fp32", target=target, epilogue=Epilogue.RELU)
    sig = spec.signature("float")
    assert codecache.load_code("generic_gemm", target, {"dtype": "fp32"}, sig) == plain.code
    assert codecache.load_code("generic_gemm", target, {"dtype": "fp32", "epilogue": "relu"}, sig) == relu.code
    assert plain.code != relu.code
    assert codecache.entry_key("generic_gemm", target, {"dtype": "fp32", "epilogue": Epilogue.RELU}) is None


# -- the attention kernel's epilogue -------------------------------------------------------------------
def test_attention_takes_the_online_softmax_epilogue_only():
    """The fused attention kernel's first product ends in the online softmax; `Epilogue.NONE`
    leaves that stage out exactly as ``softmax=False`` does; any other epilogue is refused before
    anything is emitted."""
    from minijit.kernels.epilogue import attention_softmax
    from minijit.kernels.x86_64 import attention

    assert attention_softmax() is True and attention_softmax("online_softmax") is True
    assert attention_softmax(Epilogue.NONE) is False and attention_softmax(softmax=False) is False
    default = attention.program("fp32", "avx2").code()
    assert attention.program("fp32", "avx2", epilogue=Epilogue.ONLINE_SOFTMAX).code() == default
    without = attention.program("fp32", "avx2", epilogue=Epilogue.NONE).code()
    assert without == attention.program("fp32", "avx2", softmax=False).code() and without != default
    with pytest.raises(ValueError, match="attention: epilogue relu not supported"):
        attention.program("fp32", "avx2", epilogue="relu")
    with pytest.raises(TypeError, match="attention: epilogue must be"):
        attention.generate("fp32", "avx2", epilogue=1)
    with pytest.raises(TypeError, match="softmax must be a bool"):
        attention_softmax(softmax=1)
