"""TensorOperation backend: setup/execute against numpy on every CPU target.

Targets: the host's native one (x86-64 AVX-512/AVX2 here) and the AArch64 targets
(NEON, SVE), which run in the qemu worker on a non-ARM host. Emulated sweeps use
smaller sizes; the seed's full configurations run natively and once emulated.
Every result is compared with ``np.einsum``/numpy on the logical tensors, and the
generated contractions also with ``op.execute_iter`` (the reference path).
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

from minijit import kernels
from minijit import plan as plans
from minijit.errors import SetupError
from minijit.runtime import host, profiles, runs_natively
from minijit.tensor_operation import TensorOperation
from tests.minijit.helpers import RULE_HOST, RULE_TARGET, UFUNCS, runs_avx2, seed_layout, trus_args

ON_X86 = host().isa == "x86_64"
NATIVE = kernels.native_target()
EMULATED = () if runs_natively("aarch64") else ("aarch64-neon", "aarch64-sve")
TARGETS = tuple(dict.fromkeys((NATIVE, "aarch64-neon", "aarch64-sve")))
if ON_X86 and host().avx2 and NATIVE != "x86_64-avx2":
    TARGETS += ("x86_64-avx2",)
NP = {"fp32": np.float32, "fp64": np.float64}


def emulated(target: str) -> bool:
    return target in EMULATED


@functools.lru_cache(maxsize=256)
def op_for(target: str, *args, num_threads: int = 2, sve_vl: int = 128, **kwargs) -> TensorOperation:
    """A set-up operation, cached (setup args must be hashable: tuples/strings)."""
    op = TensorOperation(target, num_threads=num_threads, sve_vl=sve_vl)
    op.setup(*args, **kwargs)
    return op


def rand(rng: np.random.Generator, shape, dtype=np.float32) -> np.ndarray:
    return rng.uniform(-1.0, 1.0, shape).astype(dtype)


def elem_strides(view: np.ndarray) -> list[int]:
    assert all(s % view.itemsize == 0 for s in view.strides)
    return [s // view.itemsize for s in view.strides]


# ---------------------------------------------------------------------------------------------
# docs/seeds/004_mini_jit_backend.txt section 5.3 configurations
# ---------------------------------------------------------------------------------------------
SEED_VARIANTS = {
    "gemm": ("none", "gemm", "none", 3),
    "brgemm": ("none", "brgemm", "none", 2),
    "zero_brgemm_relu": ("zero", "brgemm", "relu", 2),
}


def seed_case(variant: str, shared: bool, s: tuple[int, int, int, int, int, int]):
    """The seed's (M, N, K, M, N, K) configuration at sizes ``s`` (32, 32, 8, 32, 32, 32 in the seed):
    A[m0,k0,k1,m1], B[n0,k0,n1,k1], C[m0,n0,n1,m1], dense row-major."""
    first, main, last, n_seq = SEED_VARIANTS[variant]
    m0, n0, k0, m1, n1, k1 = s
    outer = ("shared", "shared") if shared else ("seq", "seq")
    exec_types = outer + ("seq",) * (n_seq - 2) + ("prim",) * (6 - n_seq)
    _, _, strides_in0, strides_in1, strides_out = seed_layout(*s)
    return (
        ("fp32", first, main, last, "mnkmnk", exec_types, s, strides_in0, strides_in1, strides_out),
        ((m0, k0, k1, m1), (n0, k0, n1, k1), (m0, n0, n1, m1)),
    )


def run_seed(target: str, variant: str, shared: bool, sizes, seed: int = 0, **kw) -> None:
    args, (sa, sb, sc) = seed_case(variant, shared, sizes)
    op = op_for(target, *args, **kw)
    rng = np.random.default_rng(seed)
    A, B, C = rand(rng, sa), rand(rng, sb), rand(rng, sc)
    expected = np.einsum("akcb,dkec->adeb", A.astype(np.float64), B.astype(np.float64))
    if args[1] == "none":
        expected += C
    if args[3] == "relu":
        expected = np.maximum(expected, 0)
    op.execute(A, B, C)
    np.testing.assert_allclose(C, expected, rtol=1e-4, atol=1e-4)
    if args[3] == "relu":
        assert (C == 0).any() and (C > 0).any()


SEED_SIZES = (32, 32, 8, 32, 32, 32)


@pytest.mark.parametrize("shared", [False, True], ids=["seq", "shared"])
@pytest.mark.parametrize("variant", sorted(SEED_VARIANTS))
def test_seed_configurations_native(variant, shared):
    run_seed(NATIVE, variant, shared, SEED_SIZES)


@pytest.mark.parametrize("target", EMULATED)
def test_seed_configuration_full_size_emulated(target):
    # one full-size run per emulated target (about a second each)
    run_seed(target, "zero_brgemm_relu", True, SEED_SIZES)


@pytest.mark.parametrize("shared", [False, True], ids=["seq", "shared"])
@pytest.mark.parametrize("variant", sorted(SEED_VARIANTS))
@pytest.mark.parametrize("target", TARGETS)
def test_seed_configurations_small(target, variant, shared):
    # the same layout at sizes with remainders in every kernel loop
    run_seed(target, variant, shared, (3, 2, 3, 19, 7, 5), seed=1)
    run_seed(target, variant, shared, (2, 3, 2, 8, 4, 16), seed=2)


@pytest.mark.parametrize("sve_vl", [256, 512])
def test_seed_configuration_sve_vector_lengths(sve_vl):
    if "aarch64-sve" not in EMULATED:
        pytest.skip("the host runs SVE natively at its own vector length")
    for variant in sorted(SEED_VARIANTS):
        run_seed("aarch64-sve", variant, True, (2, 2, 3, 37, 9, 6), seed=3, sve_vl=sve_vl)


# ---------------------------------------------------------------------------------------------
# docs/seeds/004_mini_jit_backend.txt section 5.6.2: unary permutation trus -> turs
# ---------------------------------------------------------------------------------------------
TRUS = list(itertools.product((3, 4, 7), repeat=4))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ptype", ["identity", "copy", "relu", "zero"])
def test_unary_permutation(target, ptype):
    rng = np.random.default_rng(5)
    for T, R, U, S in TRUS:
        op = TensorOperation(target)
        op.setup(*trus_args(ptype, T, R, U, S))
        A = rng.uniform(-10, 10, (T, R, U, S)).astype(np.float32)
        C = np.full((T, U, R, S), 99.0, np.float32)
        if ptype == "zero":
            op.execute(None, None, C)
            np.testing.assert_array_equal(C, 0)
            continue
        op.execute(A, None, C)
        expected = A.transpose(0, 2, 1, 3)
        if ptype == "relu":
            expected = np.maximum(expected, 0)
        np.testing.assert_array_equal(C, expected)


@pytest.mark.parametrize("target", TARGETS)
def test_unary_transposition_of_prim_dims(target):
    # the two prim dims swap: in0 unit stride on the last, out unit stride on the one before
    rng = np.random.default_rng(6)
    for ptype, (a, b, c) in itertools.product(["copy", "relu"], [(2, 5, 3), (3, 17, 9), (1, 33, 4), (4, 1, 8)]):
        A = rand(rng, (a, b, c))  # out[x, z, y] = A[x, y, z]
        C = np.zeros((a, c, b), np.float32)
        op = op_for(
            target, "fp32", "none", ptype, "none", "ccc", ("seq", "prim", "prim"), (a, b, c),
            tuple(elem_strides(A)), (0, 0, 0), (b * c, 1, b),
        )  # fmt: skip
        op.execute(A, None, C)
        expected = A.transpose(0, 2, 1)
        np.testing.assert_array_equal(C, np.maximum(expected, 0) if ptype == "relu" else expected)


# ---------------------------------------------------------------------------------------------
# binary ops, with and without broadcast of in1
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ptype", sorted(UFUNCS))
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_binary(target, ptype, dtype):
    rng = np.random.default_rng(7)
    dt = NP[dtype]
    for s0, s1, s2 in [(3, 17, 5), (2, 4, 64), (1, 1, 1), (5, 33, 7)]:
        X = rand(rng, (s0, s1, s2), dt)  # [c0, n, m], m unit stride
        Y = rand(rng, (s0, s1, s2), dt)
        Y[np.abs(Y) < 0.1] = 0.5
        row = rand(rng, (s0, 1, s2), dt) + 3.0  # broadcast over n (stride 0)
        col = rand(rng, (1, s1, s2), dt) + 3.0  # broadcast over the seq dim (stride 0)
        for name, in1 in [("full", Y), ("bcast_n", row), ("bcast_seq", col)]:
            strides_in1 = tuple(
                0 if in1.shape[i] == 1 and X.shape[i] > 1 else s for i, s in enumerate(elem_strides(in1))
            )
            op = op_for(
                target, dtype, "none", ptype, "none", "cnm", ("seq", "prim", "prim"), (s0, s1, s2),
                tuple(elem_strides(X)), strides_in1, tuple(elem_strides(X)),
            )  # fmt: skip
            out = np.full_like(X, 42.0)
            op.execute(X, in1, out)
            with np.errstate(divide="ignore"):
                expected = UFUNCS[ptype](X, in1)
            np.testing.assert_allclose(out, expected, rtol=1e-6 if dtype == "fp32" else 1e-13, err_msg=name)
            # and with a shared outer loop
            op = op_for(
                target, dtype, "none", ptype, "none", "cnm", ("shared", "prim", "prim"), (s0, s1, s2),
                tuple(elem_strides(X)), strides_in1, tuple(elem_strides(X)),
            )  # fmt: skip
            out2 = np.full_like(X, 42.0)
            op.execute(X, in1, out2)
            np.testing.assert_array_equal(out2, out)


@pytest.mark.parametrize("target", TARGETS)
def test_binary_with_touches(target):
    rng = np.random.default_rng(8)
    X, Y = rand(rng, (6, 20)), rand(rng, (6, 20))
    for first, last in [("zero", "relu"), ("relu", "none"), ("copy", "zero"), ("none", "relu")]:
        op = op_for(target, "fp32", first, "sub", last, "nm", ("prim", "prim"), (6, 20), (20, 1), (20, 1), (20, 1))
        out = np.full_like(X, -3.0)
        op.execute(X, Y, out)
        expected = X - Y
        if last == "relu":
            expected = np.maximum(expected, 0)
        elif last == "zero":
            expected = np.zeros_like(X)
        np.testing.assert_allclose(out, expected, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# generated contractions
# ---------------------------------------------------------------------------------------------
PRESENT = {"in0": "cmk", "in1": "cnk", "out": "cmn"}
LETTERS = "abcdefghijklmnopqrstuvwxyz"


class Case:
    """A generated operation: setup arguments and the numpy views to pass to execute."""

    def __init__(self, args, views, bufs, bases):
        self.args, self.views, self.bufs, self.bases = args, views, bufs, bases

    def __repr__(self) -> str:
        return f"Case{self.args}"

    def run(self, method, out_buf: np.ndarray) -> None:
        """``op.execute`` / ``op.execute_iter`` on the C-contiguous buffers the views are taken
        from, with the views' first elements as offsets (the rule of `minijit.arrays`)."""
        offsets = tuple(self.bases[t] for t in ("in0", "in1", "out"))
        method(self.bufs["in0"], self.bufs["in1"], out_buf, offsets=offsets)


def _tensor(draw, rng, dtype, types, sizes, tensor, unit, allow_negative, scalar_for_absent=True):
    """A random layout of the dims of ``tensor``: dense with ``unit`` innermost (if given), the
    others in random order, random padding, random flips (negative strides) of non-unit dims.
    Returns (view with one axis per dim of the tensor, its element strides per dim index, buffer, base)."""
    ids = [i for i, t in enumerate(types) if t in PRESENT[tensor]]
    rest = [i for i in ids if i != unit]
    order = ([unit] if unit is not None else []) + draw(st.permutations(rest))
    strides: dict[int, int] = {}
    step = 1
    for i in order:
        strides[i] = step
        step = step * sizes[i] + draw(st.sampled_from([0, 0, 0, 1, 3]))
    base = 0
    for i in order:
        if i != unit and allow_negative and sizes[i] > 1 and draw(st.integers(0, 3)) == 0:
            strides[i] = -strides[i]
            base += (sizes[i] - 1) * -strides[i]
    pad = draw(st.integers(0, 2))
    buf = rand(rng, step + 2 * pad, dtype)
    base += pad
    view = as_strided(
        buf[base:], shape=tuple(sizes[i] for i in ids), strides=tuple(strides[i] * buf.itemsize for i in ids)
    )
    return view, strides, buf, base


def shrink(sizes: list[int], loops: list[int], max_elems: int, max_leaves: int) -> None:
    """Halve the largest sizes until the operation and its loop nest are small enough."""
    while math.prod(sizes) > max_elems or math.prod(sizes[i] for i in loops) > max_leaves:
        big = max(range(len(sizes)), key=lambda i: sizes[i])
        sizes[big] = max(1, sizes[big] // 2)


def setup_args(draw, dtype, main, types, order, execs, sizes, strides) -> tuple:
    """The setup arguments of a generated case, with random first and last touches, dims in ``order``."""
    first = draw(st.sampled_from(["none", "zero", "relu", "copy"]))
    last = draw(st.sampled_from(["none", "zero", "relu", "copy"]))
    return (
        dtype,
        first,
        main,
        last,
        "".join(types[i] for i in order),
        tuple(execs),
        tuple(sizes[i] for i in order),
        *(tuple(strides[t].get(i, 0) for i in order) for t in ("in0", "in1", "out")),
    )


@st.composite
def contractions(draw, max_size: int, max_elems: int, max_leaves: int, emulated: bool = False):
    """A GEMM/BRGEMM contraction with random C/M/N/K dims, sizes, layouts, prim/shared/seq dims."""
    dtype = draw(st.sampled_from(["fp32", "fp64"]))
    main = draw(st.sampled_from(["gemm", "brgemm"]))
    counts = {"c": draw(st.integers(0, 2)), "m": draw(st.integers(1, 2)), "n": draw(st.integers(1, 2))}
    counts["k"] = draw(st.integers(2 if main == "brgemm" else 1, 3))
    types = draw(st.permutations([t for t, n in counts.items() for _ in range(n)]))
    sizes = [draw(st.integers(1, max_size)) for _ in types]
    pick = {t: draw(st.sampled_from([i for i, u in enumerate(types) if u == t])) for t in "mnk"}
    br = None
    if main == "brgemm":
        br = draw(st.sampled_from([i for i, u in enumerate(types) if u == "k" and i != pick["k"]]))
    prims = {pick["m"], pick["n"], pick["k"]} | ({br} if br is not None else set())
    loops = [i for i in range(len(types)) if i not in prims]
    shrink(sizes, loops, max_elems, max_leaves)
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    neg = draw(st.booleans())
    units = {
        "in0": draw(st.sampled_from([pick["m"], pick["k"]])),  # M unit: A column-major; K unit: transposed
        "in1": draw(st.sampled_from([pick["k"], pick["n"]])),
        "out": pick["m"],
    }
    dt = NP[dtype]
    views, strides, bufs, bases = {}, {}, {}, {}
    for t in ("in0", "in1", "out"):
        views[t], strides[t], bufs[t], bases[t] = _tensor(draw, rng, dt, types, sizes, t, units[t], neg)
    # exec types: some non-K loops shared (first), the other loops seq, prim dims last (BR before K)
    shared = [i for i in loops if types[i] != "k" and draw(st.booleans())]
    seq = [i for i in loops if i not in shared]
    prim_order = draw(st.permutations(sorted(prims)))
    if br is not None and prim_order.index(br) > prim_order.index(pick["k"]):
        prim_order = [pick["k"] if i == br else br if i == pick["k"] else i for i in prim_order]
    order = draw(st.permutations(shared)) + draw(st.permutations(seq)) + prim_order
    execs = ["shared"] * len(shared) + ["seq"] * len(seq) + ["prim"] * len(prim_order)
    args = setup_args(draw, dtype, main, types, order, execs, sizes, strides)
    return Case(args, views, bufs, bases), types


def expected_contraction(case: Case, types) -> np.ndarray:
    first, last = case.args[1], case.args[3]
    ids = {t: [i for i, u in enumerate(types) if u in PRESENT[t]] for t in PRESENT}
    sub = ",".join("".join(LETTERS[i] for i in ids[t]) for t in ("in0", "in1"))
    sub += "->" + "".join(LETTERS[i] for i in ids["out"])
    out = case.bufs["out"].copy()
    c = as_strided(out[case.bases["out"] :], shape=case.views["out"].shape, strides=case.views["out"].strides)
    if first == "zero":
        c[...] = 0
    elif first == "relu":
        c[...] = np.maximum(c, 0)
    c += np.einsum(sub, case.views["in0"].astype(np.float64), case.views["in1"].astype(np.float64))
    if last == "relu":
        c[...] = np.maximum(c, 0)
    elif last == "zero":
        c[...] = 0
    return out


def out_copy(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """A fresh copy of the output buffer and the output view into it."""
    buf = case.bufs["out"].copy()
    v = case.views["out"]
    return buf, as_strided(buf[case.bases["out"] :], shape=v.shape, strides=v.strides)


def check_contraction(target: str, case: Case, types, num_threads: int, reference: bool = True, **setup_kw) -> None:
    """Set up ``case`` (with ``setup_kw``) and compare ``execute`` with numpy and, if ``reference``,
    with ``execute_iter``."""
    op = TensorOperation(target, num_threads=num_threads)
    op.setup(*case.args, **setup_kw)
    expected = expected_contraction(case, types)
    ksize = math.prod(s for s, t in zip(case.args[6], case.args[4], strict=True) if t == "k")
    tol = {"rtol": 1e-4, "atol": 1e-5 * (1 + ksize)} if case.args[0] == "fp32" else {"rtol": 1e-10, "atol": 1e-12}
    buf, _ = out_copy(case)
    case.run(op.execute, buf)
    np.testing.assert_allclose(buf, expected, **tol)
    if reference:
        ref, _ = out_copy(case)
        case.run(op.execute_iter, ref)
        np.testing.assert_allclose(buf, ref, **tol)


@pytest.mark.usefixtures("parallel_always")
@pytest.mark.parametrize("target", TARGETS)
def test_contractions(target):
    emu = emulated(target)

    @settings(max_examples=150 if emu else 300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
    @given(
        contractions(max_size=12 if emu else 40, max_elems=20_000 if emu else 400_000, max_leaves=300, emulated=emu),
        st.integers(1, 3),
    )
    def run(case_types, num_threads):
        case, types = case_types
        check_contraction(target, case, types, num_threads)

    run()


@st.composite
def elementwise(draw, max_size: int, max_elems: int, max_leaves: int):
    """A unary or binary op over C/M/N dims with random layouts; transposing unary ops included."""
    dtype = draw(st.sampled_from(["fp32", "fp64"]))
    main = draw(st.sampled_from(["copy", "relu", "zero", *UFUNCS]))
    types = [draw(st.sampled_from("cmn")) for _ in range(draw(st.integers(1, 4)))]
    sizes = [draw(st.integers(1, max_size)) for _ in types]
    nprim = draw(st.integers(1, min(2, len(types))))
    prims = draw(st.permutations(range(len(types))))[:nprim]
    loops = [i for i in range(len(types)) if i not in prims]
    shrink(sizes, loops, max_elems, max_leaves)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    neg = draw(st.booleans())
    dt = NP[dtype]
    # unit strides: binary ops need one prim dim with unit stride in all tensors; copy/relu a unit
    # stride in in0 and in out (the same dim, or the other prim dim: a transposition)
    unit0 = prims[0]
    unit_out = unit0 if main not in ("copy", "relu") else draw(st.sampled_from(prims))
    views, strides, bufs, bases = {}, {}, {}, {}
    for t, unit in (("in0", unit0), ("in1", unit0), ("out", unit_out)):
        if (t == "in1" and main in ("copy", "relu", "zero")) or (t == "in0" and main == "zero"):
            views[t], strides[t], bufs[t], bases[t] = None, {}, None, 0
            continue
        sub = ["c"] * len(types)  # every dim is present in every tensor
        views[t], strides[t], bufs[t], bases[t] = _tensor(draw, rng, dt, sub, sizes, "out", unit, neg)
    if main in ("div",):
        views["in1"][np.abs(views["in1"]) < 0.05] = 0.5
    shared = [i for i in loops if draw(st.booleans())]
    seq = [i for i in loops if i not in shared]
    order = draw(st.permutations(shared)) + draw(st.permutations(seq)) + list(prims)
    execs = ["shared"] * len(shared) + ["seq"] * len(seq) + ["prim"] * nprim
    args = setup_args(draw, dtype, main, types, order, execs, sizes, strides)
    return Case(args, views, bufs, bases)


def expected_elementwise(case: Case) -> np.ndarray:
    first, main, last = case.args[1:4]
    out, c = out_copy(case)
    if first == "zero":
        c[...] = 0
    elif first == "relu":
        c[...] = np.maximum(c, 0)
    a, b = case.views["in0"], case.views["in1"]
    if main == "zero":
        c[...] = 0
    elif main == "copy":
        c[...] = a
    elif main == "relu":
        c[...] = np.maximum(a, 0)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            c[...] = UFUNCS[main](a, b)
    if last == "relu":
        c[...] = np.maximum(c, 0)
    elif last == "zero":
        c[...] = 0
    return out


def check_elementwise(target: str, case: Case, reference: bool = True, **setup_kw) -> None:
    """Set up ``case`` (with ``setup_kw``) and compare ``execute`` with numpy and, if ``reference``,
    with ``execute_iter``, bit for bit."""
    op = TensorOperation(target, num_threads=2)
    op.setup(*case.args, **setup_kw)
    expected = expected_elementwise(case)
    buf, _ = out_copy(case)
    case.run(op.execute, buf)
    np.testing.assert_array_equal(buf, expected)
    if reference:
        ref, _ = out_copy(case)
        case.run(op.execute_iter, ref)
        np.testing.assert_array_equal(buf, ref)


@pytest.mark.usefixtures("parallel_always")
@pytest.mark.parametrize("target", TARGETS)
def test_elementwise(target):
    emu = emulated(target)

    @settings(max_examples=150 if emu else 300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
    @given(elementwise(max_size=12 if emu else 40, max_elems=20_000 if emu else 200_000, max_leaves=300))
    def run(case):
        check_elementwise(target, case)

    run()


# ---------------------------------------------------------------------------------------------
# invalid configurations
# ---------------------------------------------------------------------------------------------
GEMM_OK = ("fp32", "none", "gemm", "none", "mnk", ("prim",) * 3, (4, 3, 2), (1, 0, 4), (0, 2, 1), (1, 4, 0))
FIELDS = ("dtype", "first", "main", "last", "types", "execs", "sizes", "s0", "s1", "so")


def changed(base=GEMM_OK, **kw):
    args = list(base)
    for name, value in kw.items():
        args[FIELDS.index(name)] = value
    return tuple(args)


INVALID = {
    "lengths": changed(types="mn"),
    "lengths_strides": changed(s1=(0, 2)),
    "zero_size": changed(sizes=(4, 0, 2)),
    "negative_size": changed(sizes=(-4, 3, 2)),
    "float_size": changed(sizes=(4.0, 3, 2)),
    "bool_size": changed(sizes=(4, True, 2)),
    "none_size": changed(sizes=(4, None, 2)),
    "str_size": changed(sizes=(4, "3", 2)),
    "huge_size": changed(sizes=(4, 3, 2**70)),
    "huge_stride": changed(s1=(0, 2**70, 1)),
    "float_stride": changed(s0=(1, 0, 4.5)),
    "none_stride": changed(s0=(1, 0, None)),
    "dtype": changed(dtype="fp16"),
    "dtype_none": changed(dtype=None),
    "main_unknown": changed(main="conv"),
    "main_none": changed(main="none"),
    "first_gemm": changed(first="gemm"),
    "last_add": changed(last="add"),
    "touch_unknown": changed(last="tanh"),
    "dim_type": changed(types="mxk"),
    "dim_type_int": changed(types=(0, 1, 2)),
    "exec_type": changed(execs=("prim", "parallel", "prim")),
    "exec_none": changed(execs=("prim", None, "prim")),
    "shared_k": (
        "fp32", "none", "gemm", "none", "kmnk", ("shared", "prim", "prim", "prim"), (2, 4, 3, 2),
        (8, 1, 0, 4), (6, 0, 2, 1), (0, 1, 4, 0),
    ),
    "gemm_two_prim_k": (
        "fp32", "none", "gemm", "none", "kmnk", ("prim",) * 4, (2, 4, 3, 2), (8, 1, 0, 4), (6, 0, 2, 1), (0, 1, 4, 0),
    ),
    "brgemm_one_prim_k": changed(main="brgemm"),
    "gemm_missing_n": changed(execs=("prim", "seq", "prim")),
    "gemm_prim_c": (
        "fp32", "none", "gemm", "none", "cmnk", ("prim",) * 4, (2, 4, 3, 2), (8, 1, 0, 4), (6, 0, 2, 1), (12, 1, 4, 0),
    ),
    "unary_three_prims": (
        "fp32", "none", "copy", "none", "ccc", ("prim",) * 3, (2, 3, 4), (12, 4, 1), (0, 0, 0), (12, 4, 1),
    ),
    "unary_k_dim": ("fp32", "none", "relu", "none", "ck", ("prim",) * 2, (2, 3), (1, 2), (0, 0), (1, 0)),
    "binary_k_dim": ("fp32", "none", "add", "none", "ck", ("seq", "prim"), (2, 3), (1, 2), (1, 2), (1, 0)),
    "unary_in1_stride": ("fp32", "none", "copy", "none", "cc", ("prim",) * 2, (2, 3), (3, 1), (3, 1), (3, 1)),
    "overlap_out_same_stride": (
        "fp32", "none", "copy", "none", "ccc", ("seq", "prim", "prim"), (2, 3, 4), (12, 4, 1), (0, 0, 0), (4, 4, 1),
    ),
    "overlap_out_m_n": changed(so=(1, 2, 0)),
    "overlap_out_shared": (
        "fp32", "none", "copy", "none", "ccc", ("shared", "prim", "prim"), (3, 3, 4), (12, 4, 1), (0, 0, 0),
        (5, 4, 1),
    ),
    "out_stride_zero": changed(so=(1, 0, 0)),
    "k_out_stride": changed(so=(1, 4, 1)),
    "n_in0_stride": changed(s0=(1, 3, 4)),
    "m_in1_stride": changed(s1=(5, 2, 1)),
    "prim_m_not_unit_in_out": changed(so=(3, 12, 0)),
    "prim_not_unit_in_in0": changed(s0=(2, 0, 8)),
    "prim_not_unit_in_in1": changed(s1=(0, 4, 2)),
    "order_prim_seq": changed(execs=("prim", "prim", "seq"), types="mkn", sizes=(4, 2, 3), s0=(1, 4, 0),
                              s1=(0, 1, 2), so=(1, 0, 4)),
    "order_seq_shared": (
        "fp32", "none", "copy", "none", "ccc", ("seq", "shared", "prim"), (2, 3, 4), (12, 4, 1), (0, 0, 0),
        (12, 4, 1),
    ),
    "undefined_with_prims": (
        "fp32", "none", "copy", "none", "ccc", ("undefined", "prim", "prim"), (2, 3, 4), (12, 4, 1), (0, 0, 0),
        (12, 4, 1),
    ),
    "binary_m_not_unit": ("fp32", "none", "add", "none", "mn", ("prim",) * 2, (4, 3), (1, 4), (2, 8), (1, 4)),
    "unary_no_unit_in0": ("fp32", "none", "copy", "none", "cc", ("prim",) * 2, (4, 3), (2, 8), (0, 0), (1, 4)),
    "unary_trans_no_unit_out": (
        "fp32", "none", "copy", "none", "cc", ("prim",) * 2, (4, 3), (1, 4), (0, 0), (3, 12),
    ),
    "not_a_list": changed(sizes=5),
    "none_list": changed(s0=None),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(INVALID))
@pytest.mark.parametrize("target", TARGETS)
def test_invalid_configurations(target, name):
    op = TensorOperation(target)
    op.setup(*GEMM_OK)
    with pytest.raises(SetupError):
        op.setup(*INVALID[name])
    assert op.config is None  # a failed setup leaves no configuration behind
    with pytest.raises(RuntimeError):
        op.execute(np.zeros(64, np.float32), np.zeros(64, np.float32), np.zeros(64, np.float32))


GARBAGE = st.one_of(
    st.none(), st.booleans(), st.floats(allow_nan=True), st.text(max_size=3), st.integers(-(2**70), 2**70)
)


@st.composite
def garbage_setups(draw):
    n = draw(st.integers(0, 5))

    def one(valid):
        return draw(st.one_of(valid, GARBAGE) if draw(st.integers(0, 9)) == 0 else valid)

    def lst(valid):
        k = n if draw(st.integers(0, 19)) else draw(st.integers(0, 6))
        return tuple(one(valid) for _ in range(k))

    ptypes = st.sampled_from(["none", "zero", "relu", "copy", "identity", "gemm", "brgemm", *UFUNCS, "ZERO"])
    return (
        one(st.sampled_from(["fp32", "fp64", "FP32"])),
        one(ptypes),
        one(ptypes),
        one(ptypes),
        lst(st.sampled_from("cmnk")),
        lst(st.sampled_from(["seq", "shared", "prim", "prim", "undefined"])),
        lst(st.integers(-1, 5)),
        lst(st.integers(-12, 12)),
        lst(st.integers(-12, 12)),
        lst(st.integers(-12, 12)),
    )


#: elements of the largest array `agrees_with_reference` allocates (garbage setups may be valid with
#: strides or prim sizes in the billions: arrays of their reach would take all memory)
MAX_REACH = 1 << 22


def agrees_with_reference(op: TensorOperation, seed: int, max_leaves: int = 2000) -> None:
    """Run a set-up ``op`` on arrays just large enough for its strides (negative ones included)
    and compare with ``execute_iter``. An operation whose strides reach more than `MAX_REACH`
    elements instead gets one-element arrays, which ``execute`` must refuse before running."""
    cfg = op.config
    rng = np.random.default_rng(seed)
    ranges = [cfg.offset_range(t) for t in ("in0", "in1", "out")]
    if max(hi - lo + 1 for lo, hi in ranges) > MAX_REACH:
        tiny = [rand(rng, 1, cfg.dtype.numpy) for _ in ranges]
        before = tiny[2].copy()
        with pytest.raises(ValueError, match="in0|in1|out"):
            op.execute(*tiny)
        np.testing.assert_array_equal(tiny[2], before)  # nothing ran on the output
        return
    if math.prod(d.size for d in cfg.loop_dims) > max_leaves:
        return  # the reference would take too long
    bufs, offsets = [], []
    for lo, hi in ranges:
        bufs.append(rand(rng, hi - lo + 1, cfg.dtype.numpy))
        offsets.append(-lo)  # negative strides reach back from the offset
    ref = bufs[2].copy()
    op.execute_iter(bufs[0], bufs[1], ref, offsets=tuple(offsets))
    op.execute(*bufs, offsets=tuple(offsets))
    tol = {"rtol": 1e-4, "atol": 1e-4} if cfg.dtype.name == "fp32" else {"rtol": 1e-9, "atol": 1e-9}
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(bufs[2], ref, equal_nan=True, **tol)


def setup_fails_cleanly_or_agrees(target: str, args, optimize: bool, seed: int) -> None:
    """``args`` either raise SetupError (leaving no configuration) or run like the reference."""
    op = TensorOperation(target, num_threads=2)
    try:
        op.setup(*args, optimize=optimize or None)
    except SetupError:
        assert op.config is None
        return
    agrees_with_reference(op, seed)


@pytest.mark.parametrize("target", TARGETS)
def test_setups_that_reach_gigabytes_refuse_small_arrays(target):
    """Valid setups whose strides reach billions of elements (a 60000 x 60000 copy prim, a GEMM
    with a K stride of 2^33): garbage draws of that kind once made the reference comparison
    allocate 24 GB; `agrees_with_reference` gives them one-element arrays, which execute refuses."""
    huge = [
        ("fp32", "none", "copy", "none", "cc", ("prim", "prim"), (60000, 60000), (1, 60000), (0, 0), (1, 60000)),
        ("fp32", "none", "gemm", "none", "mnk", ("prim",) * 3, (5, 5, 5), (1, 0, 2**33), (0, 5, 1), (1, 5, 0)),
    ]
    for args in huge:
        op = TensorOperation(target, num_threads=2)
        op.setup(*args)
        assert max(hi - lo + 1 for lo, hi in map(op.config.offset_range, ("in0", "in1", "out"))) > MAX_REACH
        agrees_with_reference(op, 0)


@pytest.mark.parametrize("target", TARGETS)
def test_garbage_setups_raise_setup_error_or_run(target):
    emu = emulated(target)

    @settings(max_examples=150 if emu else 400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
    @given(garbage_setups(), st.booleans(), st.integers(0, 2**32 - 1))
    def run(args, optimize, seed):
        setup_fails_cleanly_or_agrees(target, args, optimize, seed)

    run()


@st.composite
def mutated(draw, cases):
    """A valid generated case with one to three random edits (most of them make it invalid)."""
    case = draw(cases)
    case = case[0] if isinstance(case, tuple) else case
    args = list(case.args)
    n = len(args[4])
    for _ in range(draw(st.integers(1, 3))):
        field = draw(st.integers(0, 9))
        if field < 4:
            pool = ["fp32", "fp64"] if field == 0 else ["none", "zero", "relu", "copy", "gemm", "brgemm", "add", "max"]
            args[field] = draw(st.sampled_from(pool))
            continue
        values = list(args[field])
        pos = draw(st.integers(0, n - 1))
        if field == 4:
            values[pos] = draw(st.sampled_from("cmnk"))
            values = "".join(values)
        elif field == 5:
            values[pos] = draw(st.sampled_from(["seq", "shared", "prim", "undefined"]))
        elif field == 6:
            values[pos] = draw(st.integers(1, 6))
        else:
            values[pos] = draw(
                st.sampled_from([0, 1, -1, values[pos] + 1, values[pos] - 1, -values[pos], 2 * values[pos]])
            )
        args[field] = values if isinstance(values, str) else tuple(values)
    return tuple(args)


@pytest.mark.parametrize("target", TARGETS)
def test_mutated_setups_raise_setup_error_or_run(target):
    emu = emulated(target)
    cases = st.one_of(
        contractions(max_size=8, max_elems=5000, max_leaves=200),
        elementwise(max_size=8, max_elems=5000, max_leaves=200),
    )

    @settings(max_examples=150 if emu else 400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
    @given(mutated(cases), st.booleans(), st.integers(0, 2**32 - 1))
    def run(args, optimize, seed):
        setup_fails_cleanly_or_agrees(target, args, optimize, seed)

    run()


# ---------------------------------------------------------------------------------------------
# optimizer end to end
# ---------------------------------------------------------------------------------------------
def matmul_args(n: int, execs, main: str = "gemm"):
    # column-major C (M x N) += A (M x K) B (K x N), all n x n
    return ("fp32", "none", main, "none", "mnk", execs, (n, n, n), (1, 0, n), (0, n, 1), (1, n, 0))


def test_optimizer_matmul_1600_native():
    n = 1600
    rng = np.random.default_rng(11)
    A, B = rand(rng, (n, n)), rand(rng, (n, n))  # row-major arrays = column-major transposes
    expected = (A.T.astype(np.float64) @ B.T.astype(np.float64)).T  # C^T as a row-major array
    results = []
    for execs, optimize in [(("prim",) * 3, None), (("seq",) * 3, None), (("undefined",) * 3, True)]:
        op = TensorOperation(NATIVE)
        op.setup(*matmul_args(n, execs), optimize=optimize)
        if execs[0] != "prim":
            assert any(d.exec.name == "prim" for d in op.config.dims) and len(op.config.dims) > 3
        C = np.zeros((n, n), np.float32)
        op.execute(A, B, C)
        np.testing.assert_allclose(C, expected, rtol=1e-3, atol=2e-3)
        results.append(C)
    np.testing.assert_allclose(results[1], results[0], rtol=1e-4, atol=1e-3)


def permuted(args, order):
    """Setup arguments with the dims in another order."""
    lists = [tuple(args[f][i] for i in order) for f in range(4, 10)]
    lists[0] = "".join(lists[0])
    return (*args[:4], *lists)


MMNNKK = (
    "fp32", "none", "gemm", "none", "mmnnkk", None, (64, 25, 64, 25, 64, 25),
    (25, 1, 0, 0, 40000, 1600), (0, 0, 40000, 1600, 25, 1), (25, 1, 40000, 1600, 0, 0),
)  # fmt: skip


def test_optimizer_mmnnkk_native():
    rng = np.random.default_rng(12)
    A, B = rand(rng, (1600, 1600)), rand(rng, (1600, 1600))
    expected = (A.T.astype(np.float64) @ B.T.astype(np.float64)).T
    results = []
    # unoptimized: a 25^3 GEMM in 64^3 seq loops (dims reordered so that the prim dims come last)
    plain = permuted(changed(MMNNKK, execs=("seq", "prim") * 3), (0, 2, 4, 1, 3, 5))
    for args in [plain, changed(MMNNKK, execs=("seq",) * 6), changed(MMNNKK, execs=("undefined",) * 6)]:
        op = TensorOperation(NATIVE)
        op.setup(*args)
        C = np.zeros((1600, 1600), np.float32)
        op.execute(A, B, C)
        np.testing.assert_allclose(C, expected, rtol=1e-3, atol=2e-3)
        results.append(C)
    np.testing.assert_allclose(results[1], results[0], rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(results[1], results[2])  # undefined == seq


@pytest.mark.parametrize("target", TARGETS)
def test_optimizer_small(target):
    # 96^3 written as (M, N, K) and as (M, M, N, N, K, K): optimized with small kernels vs plain GEMM
    n = 96
    rng = np.random.default_rng(13)
    A, B = rand(rng, (n, n)), rand(rng, (n, n))
    expected = (A.T.astype(np.float64) @ B.T.astype(np.float64)).T
    split = (
        "fp32", "zero", "gemm", "relu", "mmnnkk", ("seq",) * 6, (8, 12, 4, 24, 6, 16),
        (12, 1, 0, 0, 16 * n, n), (0, 0, 24 * n, n, 16, 1), (12, 1, 24 * n, n, 0, 0),
    )  # fmt: skip
    for args, kw in [
        (matmul_args(n, ("prim",) * 3), {}),
        (matmul_args(n, ("seq",) * 3), {"max_kernel_size": 32, "min_kernel_size": 8, "thread_target": 4}),
        (matmul_args(n, ("undefined",) * 3, "brgemm"), {"max_kernel_size": 24}),
        (split, {"max_kernel_size": 16, "min_kernel_size": 4}),
    ]:
        op = TensorOperation(target, num_threads=3)
        op.setup(*args, optimize=True if args[5][0] != "prim" else None, **kw)
        C = np.full((n, n), 2.0, np.float32)
        op.execute(A, B, C)
        want = expected + (0 if args[1] == "zero" else 2.0)
        if args[3] == "relu":
            want = np.maximum(want, 0)
        np.testing.assert_allclose(C, want, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# shared loops: any number of threads gives the same bits
# ---------------------------------------------------------------------------------------------
THREADS = (1, 2, 3, 7)


def test_shared_loops_are_deterministic_seed_config():
    args, (sa, sb, sc) = seed_case("zero_brgemm_relu", True, SEED_SIZES)
    rng = np.random.default_rng(14)
    A, B = rand(rng, sa), rand(rng, sb)
    results = []
    for t in THREADS:
        op = op_for(NATIVE, *args, num_threads=t)
        C = rand(rng, sc)
        op.execute(A, B, C)
        results.append(C)
    for r in results[1:]:
        assert np.array_equal(r, results[0])


@pytest.fixture
def parallel_always(monkeypatch):
    """Split even tiny operations over the threads (normally they run on the calling thread)."""
    from minijit import schedule

    monkeypatch.setattr(schedule, "PARALLEL_MIN_ELEMENTS", 0)
    monkeypatch.setattr(schedule, "PARALLEL_MIN_BYTES", 0)


@pytest.mark.usefixtures("parallel_always")
def test_shared_loops_are_deterministic():
    rng = np.random.default_rng(15)
    configs = [
        seed_case("brgemm", True, (5, 3, 2, 16, 8, 8))[0],
        seed_case("gemm", True, (7, 1, 3, 5, 3, 2))[0],
        trus_args("relu", 7, 4, 3, 7)[:5] + (("shared", "shared", "prim", "prim"),) + trus_args("relu", 7, 4, 3, 7)[6:],
        ("fp64", "none", "max", "none", "mcn", ("shared", "shared", "prim"), (5, 3, 7),
         (21, 7, 1), (7, 0, 1), (21, 7, 1)),
    ]  # fmt: skip
    for args in configs:
        ops = [op_for(NATIVE, *args, num_threads=t) for t in THREADS]
        cfg = ops[0].config
        bufs = {}
        for name in ("in0", "in1", "out"):
            lo, hi = cfg.offset_range(name)
            assert lo == 0
            bufs[name] = rand(rng, hi + 1, cfg.dtype.numpy)
        results = []
        for op in ops:
            out = bufs["out"].copy()
            op.execute(bufs["in0"], bufs["in1"] if cfg.uses_in1 else None, out)
            results.append(out)
        ref = bufs["out"].copy()
        ops[0].execute_iter(bufs["in0"], bufs["in1"] if cfg.uses_in1 else None, ref)
        np.testing.assert_allclose(results[0], ref, rtol=1e-5, atol=1e-5)
        for r in results[1:]:
            assert np.array_equal(r, results[0])


@runs_avx2
@pytest.mark.usefixtures("parallel_always")
@pytest.mark.parametrize("profile", profiles.X86_PROFILES)
def test_two_shared_dims_balance_the_threads_and_give_the_same_bits(pin_host, profile):
    """M 64 x N 60 x K 16 in prims of at most 32 (N: 5 x 12): 5 N blocks alone would split 3
    against 2 over 2 threads, so the optimizer shares the 2 M blocks too (10 iterations, 5 each).
    `RULE_TARGET` on each x86-64 profile."""
    pin_host(profile)
    args = ("fp32", "none", "gemm", "none", "mnk", ("undefined",) * 3, (64, 60, 16), (1, 0, 64), (0, 16, 1), (1, 64, 0))
    rng = np.random.default_rng(17)
    A, B, C0 = rand(rng, 64 * 16), rand(rng, 16 * 60), rand(rng, 64 * 60)
    results = []
    for t in (1, 2, 3):
        op = TensorOperation(RULE_TARGET, num_threads=t)
        op.setup(*args, optimize=True, max_kernel_size=32)
        if t == 2:
            assert [(d.type.name, d.size) for d in op.config.shared_dims] == [("n", 5), ("m", 2)]
        C = C0.copy()
        op.execute(A, B, C)
        results.append(C)
    want = C0.reshape(60, 64).T + A.reshape(16, 64).T.astype(np.float64) @ B.reshape(60, 16).T
    np.testing.assert_allclose(results[0].reshape(60, 64).T, want, rtol=1e-5, atol=1e-5)
    for r in results[1:]:
        assert np.array_equal(r, results[0])


@runs_avx2
@pytest.mark.parametrize("profile", profiles.X86_PROFILES)
@pytest.mark.parametrize("n", [64, 96, 100])
def test_operations_too_small_to_split_are_shaped_for_one_thread(pin_host, n, profile):
    """A GEMM under `PARALLEL_MIN_ELEMENTS` multiply-adds runs on the calling thread whatever
    ``num_threads`` says, so it is set up as for one thread: the same optimized config and kernels
    (before, 96^3 fp32 on 2 threads ran two 48-row halves and a packing pass on one thread: 0.70x
    the one-thread operation on a Zen 4 core); and it computes the same bits. `RULE_TARGET` on
    each x86-64 profile."""
    import minijit.tensor_operation as to

    pin_host(profile)

    assert n**3 < to.PARALLEL_MIN_ELEMENTS
    args = ("fp32", "none", "gemm", "none", "mnk", ("undefined",) * 3, (n,) * 3, (1, 0, n), (0, n, 1), (1, n, 0))
    ops = []
    for threads in (1, 2, 3):
        op = TensorOperation(RULE_TARGET, num_threads=threads)
        op.setup(*args)
        ops.append(op)
    one = ops[0]
    for op in ops[1:]:
        assert op.threads_used == 1 and not op.config.shared_dims
        assert op.config == one.config and op.listing().split("at 0x")[0] == one.listing().split("at 0x")[0]
    rng = np.random.default_rng(n)
    A, B, C0 = rand(rng, n * n), rand(rng, n * n), rand(rng, n * n)
    results = []
    for op in ops:
        C = C0.copy()
        op.execute(A, B, C)
        results.append(C)
    want = C0.reshape(n, n).T + A.reshape(n, n).T.astype(np.float64) @ B.reshape(n, n).T
    np.testing.assert_allclose(results[0].reshape(n, n).T, want, rtol=1e-4, atol=1e-4)
    assert all(np.array_equal(r, results[0]) for r in results[1:])


@runs_avx2
def test_elementwise_ops_split_by_bytes_moved_and_gemms_by_multiply_adds(pin_host):
    """A 512^2 fp32 copy (2 MiB read and written) runs on two threads, a 256^2 one (512 KiB) on
    one; a GEMM splits from 2^20 multiply-adds; the packing copies of a 512^3 GEMM follow the
    copy rule (`RULE_TARGET` on the rules' host, `RULE_HOST`: with a 1 MiB L2 that GEMM packs
    nothing), and the copy is right."""
    pin_host(RULE_HOST)

    def op(n, ptype, dims, threads=2):
        op = TensorOperation(RULE_TARGET, num_threads=threads)
        if ptype == "copy":
            op.setup("fp32", "none", "copy", "none", "cc", ("undefined",) * 2, (n, n), (1, n), (0, 0), (1, n))
        else:
            op.setup(
                "fp32", "zero", "gemm", "none", "mnk", ("undefined",) * 3, (n,) * 3, (1, 0, n), (0, n, 1), (1, n, 0)
            )
        return op

    copies = {n: op(n, "copy", 2) for n in (256, 512)}
    assert copies[256].threads_used == 1 and copies[512].threads_used == 2
    assert op(64, "gemm", 3).threads_used == 1 and op(128, "gemm", 3).threads_used == 2  # 2^18 / 2^21 multiply-adds
    gemm = op(512, "gemm", 3)
    packs = [c.plan for f in plans.head_pack(gemm.plan).fills if f.tensor in gemm.panel_plans for c in f.copies]
    assert packs and all(plans.head(p).threads == 2 for p in packs)
    rng = np.random.default_rng(18)
    A = rand(rng, 512 * 512)
    out = np.full(512 * 512, np.nan, np.float32)
    copies[512].execute(A, None, out)
    assert np.array_equal(out, A)


# ---------------------------------------------------------------------------------------------
# execute: argument checks before any machine code runs
# ---------------------------------------------------------------------------------------------
SMALL_GEMM = ("fp32", "relu", "gemm", "zero", "mnk", ("prim",) * 3, (4, 3, 2), (1, 0, 4), (0, 2, 1), (1, 4, 0))


def gemm_arrays(dtype=np.float32):
    rng = np.random.default_rng(16)
    return rand(rng, 8, dtype), rand(rng, 6, dtype), np.full(12, 5.0, dtype)


@pytest.mark.parametrize("target", TARGETS)
def test_execute_rejects_bad_arrays(target):
    op = op_for(target, *SMALL_GEMM)  # last touch zero: any run of machine code zeroes out
    a, b, out = gemm_arrays()
    a64, b64, out64 = gemm_arrays(np.float64)
    ro = out.copy()
    ro.flags.writeable = False
    cases = [
        ((a64, b, out), TypeError, "in0"),
        ((a, b64, out), TypeError, "in1"),
        ((a, b, out64), TypeError, "out"),
        ((list(a), b, out), TypeError, "in0"),
        ((a, b, ro), ValueError, "out"),
        ((a[:7], b, out), ValueError, "in0"),
        ((a, b[:5], out), ValueError, "in1"),
        ((a, b, out[:11]), ValueError, "out"),
        ((a, b, out[1:]), ValueError, "out"),
        ((a[::-1], b, out), ValueError, "in0"),  # the first element is the last in memory
        ((a, None, out), TypeError, "in1"),
        ((None, b, out), TypeError, "in0"),
    ]
    for args, exc, name in cases:
        out_arg = args[2]
        before = out_arg.copy() if isinstance(out_arg, np.ndarray) else None
        with pytest.raises(exc, match=name):
            op.execute(*args)
        if before is not None:
            assert np.array_equal(out_arg, before)
    with pytest.raises(ValueError, match="in0"):
        op.execute_iter(a[:7], b, out)
    assert (out == 5.0).all() and (ro == 5.0).all()
    op.execute(a, b, out)
    assert (out == 0).all()


@pytest.mark.parametrize("target", TARGETS)
def test_execute_negative_strides_bounds(target):
    # out[i, j] = in0[-4i + j]: rows reversed; the strides reach 20 elements before in0's origin
    op = op_for(target, "fp32", "none", "copy", "none", "cc", ("seq", "prim"), (6, 4), (-4, 1), (0, 0), (4, 1))
    a = np.arange(24, dtype=np.float32)
    out = np.zeros((6, 4), np.float32)
    expected = a.reshape(6, 4)[::-1]
    # the array's own memory counts, not its base's: a[20:] is rejected like a copy of it
    for bad, offsets in ((a, None), (a, (19, 0, 0)), (a[19:], (1, 0, 0)), (a[20:], None), (a[20:23], (0, 0, 0))):
        with pytest.raises(ValueError, match="in0"):
            op.execute(bad, None, out, offsets=offsets)
        assert (out == 0).all()
    # a reversed view is not one dense block with non-negative strides: rejected, not read as the memory it spans
    with pytest.raises(ValueError, match="in0 is not one dense block"):
        op.execute(a.reshape(6, 4)[::-1], None, out)
    assert (out == 0).all()
    op.execute(a, None, out, offsets=(20, 0, 0))  # the buffer, with the origin at its last row
    np.testing.assert_array_equal(out, expected)
    out[...] = 0
    op.execute_iter(a.reshape(6, 4), None, out, offsets=(20, 0, 0))
    np.testing.assert_array_equal(out, expected)
    for bad in ((20, 0), (20, 0, -1), (20.0, 0, 0), (True, 0, 0), "abc"):
        with pytest.raises(ValueError, match="offsets"):
            op.execute(a, None, out, offsets=bad)


#: column-major GEMM 4 x 5 x 6 on C-order arrays At (k x m), Bt (n x k), Ct (n x m)
VIEW_M, VIEW_N, VIEW_K = 4, 5, 6
VIEW_GEMM = ("fp32", "none", "gemm", "none", "mnk", ("prim",) * 3, (VIEW_M, VIEW_N, VIEW_K),
             (1, 0, VIEW_M), (0, VIEW_K, 1), (1, VIEW_M, 0))  # fmt: skip


def block(v: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The dense block ``v`` fills, in memory order, as a C-order array of ``shape`` (a view)."""
    flat = np.ravel(v, order="K")
    assert np.shares_memory(flat, v)
    return flat.reshape(shape)


@pytest.mark.parametrize("target", TARGETS)
def test_views_with_gaps_are_rejected_never_read_as_raw_memory(target):
    """A view with steps, with negative strides, a slice of a larger array: ValueError naming the
    argument, nothing written (execute and execute_iter)."""
    m, n, k = VIEW_M, VIEW_N, VIEW_K
    op = op_for(target, *VIEW_GEMM)
    rng = np.random.default_rng(3)
    A, B = rand(rng, (k, m)), rand(rng, (n, k))
    big = rand(rng, 3 * m * n)
    cases = {
        "in0": [np.arange(3 * m * k, dtype=np.float32)[::3], A[:, ::-1], rand(rng, (k, 2 * m))[:, :m], A.T[::-1]],
        "in1": [B[::-1], np.repeat(B, 2, axis=1)[:, ::2], np.asfortranarray(rand(rng, (2 * n, k)))[:n]],
        "out": [big[::3], np.zeros((n, 2 * m), np.float32)[:, ::2], np.zeros((n + 1, m), np.float32, order="F")[:n]],
    }
    for name, views in cases.items():
        for v in views:
            assert not v.flags.c_contiguous and not v.flags.f_contiguous and v.flags.writeable
            args = {"in0": A, "in1": B, "out": np.zeros((n, m), np.float32), name: v}
            base = v.base if v.base is not None else v
            before, out_before = base.copy(), args["out"].copy()
            for run in (op.execute, op.execute_iter):
                with pytest.raises(ValueError, match=f"{name} is not one dense block"):
                    run(args["in0"], args["in1"], args["out"])
                np.testing.assert_array_equal(base, before)  # not a byte written through a view
                np.testing.assert_array_equal(args["out"], out_before)
    # the fix the message names computes the view's result
    out = np.zeros((n, m), np.float32)
    op.execute(np.ascontiguousarray(A[:, ::-1]), B, out)
    np.testing.assert_allclose(out, (A[:, ::-1].T.astype(np.float64) @ B.T).T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_dense_blocks_in_any_axis_order_are_read_as_their_memory(target):
    """F-order and permuted-axes arrays fill one dense block: accepted for in0, in1 and out, and
    the configured strides count elements of that block from its lowest address (an F-order
    (m, k) array is the memory of a C-order (k, m) one). ``out`` in F order inside a larger buffer
    is written and nothing around it; a dense block too small for the strides is refused."""
    m, n, k = VIEW_M, VIEW_N, VIEW_K
    op = op_for(target, *VIEW_GEMM)
    rng = np.random.default_rng(4)
    A, B = rand(rng, (k, m)), rand(rng, (n, k))
    guard = np.full(n * m + 2, 7.0, np.float32)
    variants = [  # (in0, in1, out): each not C-contiguous
        (np.asfortranarray(A.T), np.asfortranarray(B.T), guard[1:-1].reshape(n, m).T),  # the memory of A, B
        (
            A.T.copy().T,
            np.ascontiguousarray(B.reshape(n, 3, 2).transpose(2, 0, 1)).transpose(1, 2, 0),
            np.zeros((n, m // 2, 2), np.float32).transpose(2, 0, 1),
        ),
    ]
    for a, b, out in variants:
        assert not (a.flags.c_contiguous or b.flags.c_contiguous or out.flags.c_contiguous)
        a_blk, b_blk = block(a, (k, m)).astype(np.float64), block(b, (n, k)).astype(np.float64)
        want = b_blk @ a_blk  # out (n x m, C order) = (At^T Bt^T)^T
        for run in (op.execute, op.execute_iter):
            out[...] = 0
            run(a, b, out)
            np.testing.assert_allclose(block(out, (n, m)), want, rtol=1e-5, atol=1e-5)
    assert guard[0] == 7.0 and guard[-1] == 7.0  # nothing outside out touched
    np.testing.assert_allclose(guard[1:-1].reshape(n, m), (B.astype(np.float64) @ A), rtol=1e-5, atol=1e-5)
    # the bound check is unchanged: a dense block one row short is refused before anything runs
    out = np.zeros((m, n), np.float32, order="F")
    for name, args in (
        ("in0", (np.asfortranarray(A.T[:, : k - 1]), B, out)),
        ("in1", (A, np.asfortranarray(B.T[:, : n - 1]), out)),
        ("out", (A, B, out[:, : n - 1])),
    ):
        for run in (op.execute, op.execute_iter):
            with pytest.raises(ValueError, match=f"{name}: the strides reach"):
                run(*args)
    assert not out.any()


@pytest.mark.parametrize("target", EMULATED)
def test_emulated_runs_get_f_order_arrays_as_their_blocks_in_c_order(target, monkeypatch):
    """The emulated runner offsets views into C-contiguous arrays (`minijit.plan.run`): F-order
    arrays taken by execute's quick path reach it as their transposes (the same blocks)."""
    import minijit.tensor_operation as tensor_operation

    m, n, k = VIEW_M, VIEW_N, VIEW_K
    op = op_for(target, *VIEW_GEMM)
    seen, real = [], tensor_operation._run
    monkeypatch.setattr(tensor_operation, "_run", lambda *args: seen.append(args[4]) or real(*args))
    rng = np.random.default_rng(5)
    A, B = rand(rng, (k, m)), rand(rng, (n, k))
    out = np.zeros((m, n), np.float32, order="F")
    op.execute(np.asfortranarray(A.T), np.asfortranarray(B.T), out)
    assert len(seen) == 1 and all(x.flags.c_contiguous for x in seen[0])
    assert [x.ctypes.data for x in seen[0]][2] == out.ctypes.data
    np.testing.assert_allclose(out.T, B.astype(np.float64) @ A, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_unary_and_zero_need_no_in1(target):
    op = op_for(target, *trus_args("relu", 3, 4, 3, 4))
    A = rand(np.random.default_rng(17), (3, 4, 3, 4))
    out = np.zeros((3, 3, 4, 4), np.float32)
    op.execute(A, None, out)
    np.testing.assert_array_equal(out, np.maximum(A.transpose(0, 2, 1, 3), 0))
    with pytest.raises(TypeError, match="in0"):
        op.execute(None, None, out)
    zero = op_for(target, *trus_args("zero", 3, 4, 3, 4))
    zero.execute(None, None, out)
    assert (out == 0).all()


@pytest.mark.parametrize("target", TARGETS)
def test_execute_before_setup(target):
    op = TensorOperation(target)
    with pytest.raises(RuntimeError):
        op.execute(*gemm_arrays())
    with pytest.raises(RuntimeError):
        op.listing()


@pytest.mark.skipif(not ON_X86 and not runs_natively("aarch64"), reason="no native target")
def test_execute_ptr():
    op = op_for(NATIVE, *SMALL_GEMM[:3], "none", *SMALL_GEMM[4:])
    a, b, out = gemm_arrays()
    expected = out.copy()
    op.execute(a, b, expected)
    op.execute_ptr(a.ctypes.data, b.ctypes.data, out.ctypes.data)
    np.testing.assert_array_equal(out, expected)
    for bad in (float(a.ctypes.data), str(a.ctypes.data), None, -8, np.float64(1.0)):
        with pytest.raises(TypeError, match="addr_in0"):
            op.execute_ptr(bad, b.ctypes.data, out.ctypes.data)
    with pytest.raises(TypeError, match="addr_out"):
        op.execute_ptr(a.ctypes.data, b.ctypes.data, out)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("target", EMULATED)
def test_execute_ptr_needs_a_native_target(target):
    op = op_for(target, *SMALL_GEMM)
    a, b, out = gemm_arrays()
    with pytest.raises(ValueError, match="native"):
        op.execute_ptr(a.ctypes.data, b.ctypes.data, out.ctypes.data)


# ---------------------------------------------------------------------------------------------
# listing
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("variant", sorted(SEED_VARIANTS))
def test_listing_reassembles(target, variant):
    from asm import llvm

    args = seed_case(variant, True, SEED_SIZES)[0]
    op = op_for(target, *args)
    text = op.listing()
    head = text.split("\n// ----")[0].splitlines()
    assert head[0] == f"// {op.target}" and head[1].startswith("// TensorConfig") and "// //" not in text
    config_lines = [f"// {line}" for line in str(op.config).splitlines()]
    assert head[1 : 1 + len(config_lines)] == config_lines
    # then what the packing and the cache model chose, and the copy operations they run
    for line in head[1 + len(config_lines) :]:
        assert line.startswith(("// blocking", "// pack", "// kernel order", "// kernels run on", "//   ")) or (
            not line.startswith("//")
        )
    assert ("// blocking" in text) == (op.blocking is not None)
    for tensor in op.panel_plans:
        assert f"// pack {tensor} into micro-panels" in text and f"// pack {tensor} (1/" in text
    for name, kernel in {**op.primitives, "loopnest": op.loopnest}.items():
        assert f"---- {name}" in text
        assert kernel.listing in text
    touches = variant == "zero_brgemm_relu"
    fused = touches and op.target_info.fuses_touches  # every K in the BRGEMM prim: zero/relu inside it
    assert set(op.primitives) == {"main"} | ({"first", "last"} if touches and not fused else set())
    assert ("_z_r" in op.primitives["main"].name) == fused
    assert ("// pack in0 inside the kernel (a_copy)" in text) == op.a_copy == op.primitives["main"].name.endswith("_ac")
    assert ("// kernel order n_outer" in text) == op.n_outer == op.primitives["main"].name.endswith("_no")
    if target.startswith("x86_64"):
        code = llvm.assemble(op.loopnest.listing, triple="x86_64", mattr="")
    else:
        code = llvm.assemble(op.loopnest.listing)
    assert code == op.loopnest.code


# ---------------------------------------------------------------------------------------------
# loop-nest corner cases: deep nests, strides beyond 32-bit immediates
# ---------------------------------------------------------------------------------------------
@pytest.mark.usefixtures("parallel_always")
@pytest.mark.parametrize("target", TARGETS)
def test_deep_loop_nest(target):
    # 10 loops of size 2 (3 shared, K loops between the others) around a 3x2x5 GEMM, touches on
    types = "mcnkmknkcm" + "mnk"
    sizes = (2,) * 10 + (3, 2, 5)
    execs = ("shared",) * 3 + ("seq",) * 7 + ("prim",) * 3
    ids = {t: [i for i, u in enumerate(types) if u in PRESENT[t]] for t in PRESENT}
    strides = {}
    for t, unit in (("in0", 10), ("in1", 12), ("out", 10)):
        order = [unit] + [i for i in reversed(ids[t]) if i != unit]
        step, st_ = 1, {}
        for i in order:
            st_[i] = step
            step *= sizes[i]
        strides[t] = tuple(st_.get(i, 0) for i in range(len(types)))
    args = ("fp32", "zero", "gemm", "relu", types, execs, sizes, strides["in0"], strides["in1"], strides["out"])
    op = op_for(target, *args, num_threads=3)
    assert len(op.nest.loops) == 10
    agrees_with_reference(op, seed=18)


HUGE = (1 << 33) + 12  # bytes: beyond any 32-bit immediate


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind", ["seq", "shared"])
def test_huge_strides_on_size_one_loops(target, kind):
    # size-1 loops never dereference their stride, but the loop nest still adds and subtracts it
    big = HUGE // 4
    args = (
        "fp32", "none", "add", "relu", "cmnc", (kind, "seq", "prim", "prim"), (1, 3, 5, 7),
        (big, 35, 1, 5), (-big, -35, 1, 5), (big + 1, 36, 1, 5),
    )  # fmt: skip
    op = op_for(target, *args)
    agrees_with_reference(op, seed=19)


@pytest.mark.skipif(not ON_X86, reason="needs 4 GiB of address space on the native x86-64 target")
@pytest.mark.parametrize("kind", ["seq", "shared"])
def test_huge_strides_native(kind):
    import mmap

    big = (HUGE // 4) | 1  # elements
    mem = mmap.mmap(-1, 4 * (2 * big + 64))  # lazily allocated: only touched pages cost memory
    try:
        buf = np.frombuffer(mem, dtype=np.float32)
        out = np.zeros((3, 8), np.float32)
        # out[i, j] = relu(buf[i * big + j]) over i in 0..2, j in 0..7
        args = ("fp32", "none", "relu", "none", "cc", (kind, "prim"), (3, 8), (big, 1), (0, 0), (8, 1))
        op = op_for(NATIVE, *args, num_threads=3)
        vals = np.random.default_rng(20).uniform(-1, 1, (3, 8)).astype(np.float32)
        for i in range(3):
            buf[i * big : i * big + 8] = vals[i]
        view = buf[: 2 * big + 8]
        op.execute(view, None, out)
        np.testing.assert_array_equal(out, np.maximum(vals, 0))
        # and reversed: the origin is the last row, the stride negative
        args = ("fp32", "none", "copy", "none", "cc", (kind, "prim"), (3, 8), (-big, 1), (0, 0), (8, 1))
        op = op_for(NATIVE, *args, num_threads=3)
        op.execute(view, None, out, offsets=(2 * big, 0, 0))
        np.testing.assert_array_equal(out, vals[::-1])
        del buf, view
    finally:
        try:
            mem.close()
        except BufferError:
            pass


@pytest.mark.usefixtures("parallel_always")
@pytest.mark.parametrize("target", TARGETS)
def test_optimized_contractions(target):
    # the generated layouts with every exec type seq/undefined: the optimizer picks the primitives
    emu = emulated(target)

    @settings(max_examples=60 if emu else 150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
    @given(
        contractions(max_size=12 if emu else 40, max_elems=20_000 if emu else 400_000, max_leaves=300),
        st.sampled_from(["seq", "undefined"]),
        st.sampled_from([1, 2, 4, 8]),
        st.sampled_from([4, 16, 64, 1024]),
        st.sampled_from([1, 4, 16]),
    )
    def run(case_types, exec_, thread_target, max_kernel_size, min_kernel_size):
        case, types = case_types
        n = len(case.args[4])
        case = Case(changed(case.args, execs=(exec_,) * n), case.views, case.bufs, case.bases)
        check_contraction(
            target, case, types, 2, reference=False,
            thread_target=thread_target, max_kernel_size=max_kernel_size, min_kernel_size=min_kernel_size,
        )  # fmt: skip

    run()


@pytest.mark.usefixtures("parallel_always")
@pytest.mark.parametrize("target", TARGETS)
def test_optimized_elementwise(target):
    emu = emulated(target)

    @settings(max_examples=60 if emu else 150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
    @given(
        elementwise(max_size=12 if emu else 40, max_elems=20_000 if emu else 200_000, max_leaves=300),
        st.sampled_from(["seq", "undefined"]),
        st.sampled_from([1, 3, 8]),
        st.sampled_from([4, 16, 1024]),
        st.sampled_from([1, 4, 16]),
    )
    def run(case, exec_, thread_target, max_kernel_size, min_kernel_size):
        case = Case(changed(case.args, execs=(exec_,) * len(case.args[4])), case.views, case.bufs, case.bases)
        check_elementwise(
            target, case, reference=False,
            thread_target=thread_target, max_kernel_size=max_kernel_size, min_kernel_size=min_kernel_size,
        )  # fmt: skip

    run()


# ---------------------------------------------------------------------------------------------
# operand roles: every orientation of A, B and C through the optimizer
# ---------------------------------------------------------------------------------------------
def _orient(shape_mk: tuple[int, int], row_major: bool) -> tuple[tuple[int, int], tuple[int, int]]:
    """(strides of dims (first, second), C-order array shape) of a matrix stored row- or column-major."""
    r, c = shape_mk
    return ((c, 1), (r, c)) if row_major else ((1, r), (c, r))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_every_orientation_reaches_a_real_primitive(target, dtype):
    """Row- or column-major A, B and C (8 orientations), exec types undefined: the optimizer never
    falls back to an M = 1 primitive when C has a unit-stride M or N dim (a row-major C swaps the
    operands: C^T = B^T A^T), and every orientation computes A @ B; errors still name the
    caller's argument."""
    m, n, k = (24, 20, 12) if emulated(target) else (72, 40, 36)
    rng = np.random.default_rng(11)
    A, B = rng.uniform(-1, 1, (m, k)), rng.uniform(-1, 1, (k, n))
    want = A @ B
    for ra, rb, rc in itertools.product((False, True), repeat=3):
        (sa_m, sa_k), shape_a = _orient((m, k), ra)
        (sb_k, sb_n), shape_b = _orient((k, n), rb)
        (sc_m, sc_n), shape_c = _orient((m, n), rc)
        op = TensorOperation(target, num_threads=2)
        op.setup(dtype, "zero", "gemm", "none", "mnk", ("undefined",) * 3, (m, n, k),
                 (sa_m, 0, sa_k), (0, sb_n, sb_k), (sc_m, sc_n, 0))  # fmt: skip
        cfg = op.config
        assert cfg.inputs_swapped == rc
        prim_m = cfg.dims[cfg.prim.m] if cfg.prim.m is not None else None
        assert prim_m is not None and prim_m.size > 1 and prim_m.stride_out == 1, str(cfg)
        a = np.ascontiguousarray(A if ra else A.T).astype(NP[dtype])
        b = np.ascontiguousarray(B if rb else B.T).astype(NP[dtype])
        assert a.shape == shape_a and b.shape == shape_b
        for run in (op.execute, op.execute_iter):
            c = np.full(shape_c, np.nan, NP[dtype])
            run(a, b, c)
            tol = 1e-4 if dtype == "fp32" else 1e-10
            np.testing.assert_allclose(c if rc else c.T, want, rtol=tol, atol=tol)
        with pytest.raises(ValueError, match="in1: the strides reach"):
            op.execute(a, b.reshape(-1)[1:], c)
        with pytest.raises(TypeError, match="in0 has dtype"):
            op.execute(a.astype(np.float16), b, c)
