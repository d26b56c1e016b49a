"""SVE BRGEMM, unary and binary generators: the same bytes, correct at SVE VL 128, 256 and 512.

Kernels run natively on an AArch64 host (its own vector length only), otherwise
in the qemu worker at each length. Results are compared with numpy in float64;
guard values in the padding between columns and after the last one catch
stores outside the matrix.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from asm import llvm
from asm.aarch64 import Assembler, V, X, Z, mem, post, pre, sp, x0, x9, x10, x11, x29, x30
from minijit.kernels.aarch64.binary import SveBinary as sve_binary
from minijit.kernels.aarch64.brgemm import SveBrgemm as sve_brgemm
from minijit.kernels.aarch64.unary import SveUnary as sve_unary
from minijit.runtime import load, runs_natively
from tests.minijit.helpers import UFUNCS

VLS = [128] if runs_natively("aarch64") else [128, 256, 512]
NP = {"fp32": np.float32, "fp64": np.float64}
GUARD = 16  # guard elements after the last column
SENTINEL = -7777.0
D = [v.D for v in V]  # d0..d31

_programs: dict = {}
_kernels: dict = {}


def _program(module, *args):
    """The generated program, cached, after checking that its listing reassembles to its bytes."""
    key = (module.__name__, args)
    if key not in _programs:
        a = module.program(*args)
        assert llvm.assemble(a.listing()) == a.code()
        _programs[key] = a
    return _programs[key]


def _kernels_for(module, signature: str, *args):
    """One kernel per vector length, all loaded from the same bytes."""
    a = _program(module, *args)
    out = []
    for vl in VLS:
        key = (module.__name__, args, vl)
        if key not in _kernels:
            _kernels[key] = load(a.code(), signature, isa="aarch64", name=a.name, listing=a.listing(), sve_vl=vl)
        out.append(_kernels[key])
    return out


def _matrix(rng, rows: int, cols: int, ld: int, t, fill: float | None = None) -> np.ndarray:
    """Column-major storage of ``cols`` columns with leading dimension ``ld`` plus a trailing guard."""
    buf = np.full(ld * (cols - 1) + rows + GUARD, SENTINEL, dtype=t)
    view = _view(buf, rows, cols, ld)
    view[...] = rng.standard_normal((rows, cols)) if fill is None else fill
    return buf


def _view(buf: np.ndarray, rows: int, cols: int, ld: int) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(buf, (rows, cols), (buf.itemsize, ld * buf.itemsize))


def _outside(buf: np.ndarray, rows: int, cols: int, ld: int) -> np.ndarray:
    mask = np.ones(buf.size, dtype=bool)
    for j in range(cols):
        mask[j * ld : j * ld + rows] = False
    return buf[mask]


# -- BRGEMM ---------------------------------------------------------------------------
def _brgemm_case(m, n, k, br, dtype, dlda, dldb, dldc, seed):
    t = NP[dtype]
    rng = np.random.default_rng(seed)
    lda, ldb, ldc = m + dlda, k + dldb, m + dldc
    size_a, size_b = lda * (k - 1) + m, ldb * (n - 1) + k
    stride_a, stride_b = size_a + 3, size_b + 1
    a = rng.standard_normal(stride_a * (br - 1) + size_a).astype(t)
    b = rng.standard_normal(stride_b * (br - 1) + size_b).astype(t)
    c0 = _matrix(rng, m, n, ldc, t)
    expect = _view(c0, m, n, ldc).astype(np.float64)
    for i in range(br):
        ai = _view(a[i * stride_a :], m, k, lda).astype(np.float64)
        bi = _view(b[i * stride_b :], k, n, ldb).astype(np.float64)
        expect = expect + ai @ bi
    sig = sve_brgemm.signature(dtype)
    eps = 1e-6 if dtype == "fp32" else 1e-14
    for kern in _kernels_for(sve_brgemm, sig, m, n, k, br, False, False, False, dtype):
        c = c0.copy()
        kern(a, b, c, lda, ldb, ldc, stride_a, stride_b)
        tol = eps * (k * br + 1) * 4
        np.testing.assert_allclose(_view(c, m, n, ldc), expect, rtol=tol, atol=tol, err_msg=str(kern))
        assert np.all(_outside(c, m, n, ldc) == SENTINEL), f"{kern}: wrote outside C"


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@settings(max_examples=40)
@given(
    m=st.integers(1, 64),
    n=st.integers(1, 64),
    k=st.integers(1, 256),
    br=st.integers(1, 16),
    dlda=st.integers(0, 5),
    dldb=st.integers(0, 5),
    dldc=st.integers(0, 5),
    seed=st.integers(0, 2**31),
)
@example(m=1, n=1, k=1, br=1, dlda=0, dldb=0, dldc=0, seed=0)
@example(m=17, n=13, k=5, br=3, dlda=1, dldb=2, dldc=3, seed=1)
def test_brgemm_hypothesis(dtype, m, n, k, br, dlda, dldb, dldc, seed):
    if k * br > 512:  # keep emulation time bounded; long K is covered below
        br = max(1, 512 // k)
    _brgemm_case(m, n, k, br, dtype, dlda, dldb, dldc, seed)


@pytest.mark.parametrize(
    "m,n,k,br,dtype",
    [
        (300, 7, 3, 1, "fp32"),  # many M steps of 4 vectors, ragged tail
        (129, 25, 2, 2, "fp64"),
        (64, 48, 64, 1, "fp32"),
        (3, 300, 4, 1, "fp32"),  # many N blocks
        (33, 5, 1024, 1, "fp64"),  # long K
        (16, 6, 8, 16, "fp32"),
        (2048, 3, 2, 1, "fp32"),  # the largest sizes
        (5, 2048, 1, 1, "fp64"),
        (3, 2, 2048, 2, "fp64"),
    ],
)
def test_brgemm_shapes(m, n, k, br, dtype):
    _brgemm_case(m, n, k, br, dtype, 1, 2, 3, m * n + k)


def _abi_wrapper(kernel: bytes) -> Assembler:
    """int64_t f(the kernel's args): call ``kernel`` with x19..x28 and d8..d15 set to markers and
    return the OR of (value XOR marker) over them: 0 when the kernel preserved them all."""
    a = Assembler(name="abi_check")
    saved_x = [X[i] for i in range(19, 29)]
    a.stp(x29, x30, pre(sp, -96))
    for i in range(0, 10, 2):
        a.stp(saved_x[i], saved_x[i + 1], mem(sp, 16 + 8 * i))
    a.sub(sp, sp, 64)
    for i in range(8, 16, 2):
        a.stp(D[i], D[i + 1], mem(sp, 4 * (i - 8)))
    for r in saved_x:
        a.mov(r, 0x1000 + r.idx)
    for i in range(8, 16):
        a.mov(Z[i].d, i)  # low 64 bits: the integer i
    kernel_label = a.new_label("kernel")
    a.bl(kernel_label)
    a.mov(x0, 0)
    for r in saved_x:
        a.mov(x9, 0x1000 + r.idx)
        a.eor(x10, r, x9)
        a.orr(x0, x0, x10)
    for i in range(8, 16, 2):  # d8..d15 through memory into x registers
        a.stp(D[i], D[i + 1], pre(sp, -16))
        a.ldp(x10, x11, post(sp, 16))
        for r, want in ((x10, i), (x11, i + 1)):
            a.mov(x9, want)
            a.eor(r, r, x9)
            a.orr(x0, x0, r)
    for i in range(8, 16, 2):
        a.ldp(D[i], D[i + 1], mem(sp, 4 * (i - 8)))
    a.add(sp, sp, 64)
    for i in range(0, 10, 2):
        a.ldp(saved_x[i], saved_x[i + 1], mem(sp, 16 + 8 * i))
    a.ldp(x29, x30, post(sp, 96))
    a.ret()
    a.bind(kernel_label)
    for i in range(0, len(kernel), 4):
        a.inst(int.from_bytes(kernel[i : i + 4], "little"))
    return a


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("m,n,k,br", [(64, 7, 3, 2), (3, 9, 2, 1), (1, 1, 1, 1)])
def test_brgemm_preserves_callee_saved_registers(dtype, m, n, k, br):
    """x19..x28 and d8..d15 survive the kernel (it uses them for pointers and accumulators)."""
    kernel = _program(sve_brgemm, m, n, k, br, False, False, False, dtype).code()
    w = _abi_wrapper(kernel)
    sig = sve_brgemm.signature(dtype).replace("void(", "int64_t(")
    t = NP[dtype]
    a, b, c = np.ones(m * k * br, t), np.ones(k * n * br, t), np.zeros(m * n, t)
    for vl in VLS:
        f = load(w.code(), sig, isa="aarch64", name=w.name, sve_vl=vl)
        assert f(a, b, c, m, k, m, m * k, k * n) == 0, f"SVE {vl}: a callee-saved register changed"
    np.testing.assert_array_equal(c, br * k * len(VLS))


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_unary_and_binary_preserve_callee_saved_registers(dtype):
    t = NP[dtype]
    x, y = np.ones(64, t), np.zeros(64, t)
    for trans_b in (False, True):
        w = _abi_wrapper(_program(sve_unary, 5, 7, trans_b, dtype, "relu").code())
        sig = sve_unary.signature(dtype).replace("void(", "int64_t(")
        for vl in VLS:
            assert load(w.code(), sig, isa="aarch64", sve_vl=vl)(x, y, 5, 7 if trans_b else 5) == 0
    w = _abi_wrapper(_program(sve_binary, 9, 5, dtype, "max").code())
    sig = sve_binary.signature(dtype).replace("void(", "int64_t(")
    for vl in VLS:
        assert load(w.code(), sig, isa="aarch64", sve_vl=vl)(x, x, y, 9, 9, 9) == 0


def test_brgemm_parameters_checked():
    with pytest.raises(ValueError, match="m must"):
        sve_brgemm.program(0, 1, 1)
    with pytest.raises(ValueError, match="br_size"):
        sve_brgemm.program(1, 1, 1, br_size=0)
    with pytest.raises(ValueError, match="dtype"):
        sve_brgemm.program(1, 1, 1, dtype="fp16")
    for flag in ("trans_a", "trans_b", "trans_c"):  # the transposed forms: test_aarch64_transposed.py
        with pytest.raises(ValueError, match=flag):
            sve_brgemm.program(4, 4, 4, **{flag: 1})


def test_brgemm_kloop_body_is_fma_bound_text():
    body = sve_brgemm.kloop_body("fp32", 4)
    assert body.count("fmla") == 4 * 6 * sve_brgemm.UNROLL_K
    assert llvm.assemble(body)
    assert "ld1rw" in body and "ld1w" in body


# -- unary and binary ---------------------------------------------------------------
SPECIALS = [np.nan, np.inf, -np.inf, -0.0, 0.0]


def _with_specials(rng, x: np.ndarray) -> np.ndarray:
    """``x`` with about one element in eight replaced by NaN, ±inf or ±0.0."""
    mask = rng.random(x.shape) < 0.125
    x[mask] = rng.choice(SPECIALS, size=int(mask.sum()))
    return x


def _same(got: np.ndarray, expect: np.ndarray, what: str, signed_zero: np.ndarray | None = None) -> None:
    """Equal values, NaN where NaN, and the sign of every zero (where ``signed_zero``)."""
    np.testing.assert_array_equal(got, expect, err_msg=what)
    check = (expect == 0) if signed_zero is None else (expect == 0) & signed_zero
    assert np.array_equal(np.signbit(got[check]), np.signbit(expect[check])), f"{what}: sign of zero"


UNARY_REF = {
    "zero": lambda x: np.zeros_like(x),
    "copy": lambda x: x,
    "identity": lambda x: x,
    "relu": lambda x: np.maximum(x, 0),
}


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("trans_b", [False, True])
@settings(max_examples=25)
@given(
    m=st.integers(1, 64),
    n=st.integers(1, 64),
    ptype=st.sampled_from(sve_unary.PTYPES),
    dlda=st.integers(0, 4),
    dldb=st.integers(0, 4),
    seed=st.integers(0, 2**31),
)
@example(m=1, n=1, ptype="relu", dlda=0, dldb=0, seed=0)
@example(m=300, n=9, ptype="relu", dlda=1, dldb=3, seed=2)
@example(m=7, n=301, ptype="copy", dlda=3, dldb=1, seed=3)
def test_unary(dtype, trans_b, m, n, ptype, dlda, dldb, seed):
    t = NP[dtype]
    rng = np.random.default_rng(seed)
    lda = m + dlda
    a = _matrix(rng, m, n, lda, t)
    _with_specials(rng, _view(a, m, n, lda))
    rows, cols = (n, m) if trans_b else (m, n)
    ldb = rows + dldb
    ref = UNARY_REF[ptype](_view(a, m, n, lda))
    expect = ref.T if trans_b else ref
    for kern in _kernels_for(sve_unary, sve_unary.signature(dtype), m, n, trans_b, dtype, ptype):
        b = _matrix(rng, rows, cols, ldb, t, fill=SENTINEL)
        kern(a, b, lda, ldb)
        _same(_view(b, rows, cols, ldb), expect, str(kern))
        assert np.all(_outside(b, rows, cols, ldb) == SENTINEL), f"{kern}: wrote outside B"


def test_relu_nan_inf_and_signed_zero():
    x = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, -1.5, 2.5, -1e-45, 1e-45], dtype=np.float32)
    for trans_b in (False, True):
        for kern in _kernels_for(sve_unary, sve_unary.signature("fp32"), x.size, 1, trans_b, "fp32", "relu"):
            b = np.full(x.size, SENTINEL, dtype=np.float32)
            kern(x, b, x.size, x.size if not trans_b else 1)
            _same(b, np.maximum(x, 0), str(kern))


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("ptype", sve_binary.PTYPES)
@settings(max_examples=10)
@given(
    m=st.integers(1, 64),
    n=st.integers(1, 64),
    broadcast=st.booleans(),
    d0=st.integers(0, 4),
    d1=st.integers(0, 4),
    do=st.integers(0, 4),
    seed=st.integers(0, 2**31),
)
@example(m=1, n=1, broadcast=False, d0=0, d1=0, do=0, seed=0)
@example(m=300, n=3, broadcast=True, d0=1, d1=2, do=3, seed=1)
def test_binary(dtype, ptype, m, n, broadcast, d0, d1, do, seed):
    t = NP[dtype]
    rng = np.random.default_rng(seed)
    ld0, ldo = m + d0, m + do
    ld1 = 0 if broadcast else m + d1
    in0 = _matrix(rng, m, n, ld0, t)
    in1 = _matrix(rng, m, 1 if broadcast else n, m + d1, t)
    x0 = _with_specials(rng, _view(in0, m, n, ld0))
    x1 = _with_specials(rng, _view(in1, m, n, ld1))
    with np.errstate(all="ignore"):
        expect = UFUNCS[ptype](x0, x1)
    # fmin/fmax order zeros of opposite sign (-0 < +0); numpy returns its second argument
    signed = ~((x0 == 0) & (x1 == 0)) if ptype in ("min", "max") else None
    for kern in _kernels_for(sve_binary, sve_binary.signature(dtype), m, n, dtype, ptype):
        out = _matrix(rng, m, n, ldo, t, fill=SENTINEL)
        kern(in0, in1, out, ld0, ld1, ldo)
        _same(_view(out, m, n, ldo), expect, str(kern), signed)
        assert np.all(_outside(out, m, n, ldo) == SENTINEL), f"{kern}: wrote outside out"


def test_min_max_signed_zero_follow_ieee_order():
    x0 = np.array([-0.0, 0.0, np.nan, 1.0], dtype=np.float64)
    x1 = np.array([0.0, -0.0, 1.0, np.nan], dtype=np.float64)
    for ptype, zero_sign in (("min", True), ("max", False)):
        for kern in _kernels_for(sve_binary, sve_binary.signature("fp64"), 4, 1, "fp64", ptype):
            out = np.zeros(4)
            kern(x0, x1, out, 4, 4, 4)
            assert np.all(np.signbit(out[:2]) == zero_sign) and np.all(np.isnan(out[2:])), str(kern)


def test_unary_and_binary_parameters_checked():
    with pytest.raises(ValueError, match="n must"):
        sve_unary.program(1, 0)
    with pytest.raises(ValueError, match="ptype"):
        sve_unary.program(1, 1, ptype="gelu")
    with pytest.raises(ValueError, match="dtype"):
        sve_binary.program(1, 1, dtype="int8")
    with pytest.raises(ValueError, match="ptype"):
        sve_binary.program(1, 1, ptype="pow")
