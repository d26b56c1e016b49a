"""Packing of A (minijit.packing): the L1 model's decisions, and packed GEMM/BRGEMM operations on
every target computing what the unpacked ones and numpy compute."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minijit import TensorOperation, schedule
from minijit import plan as plans
from minijit.ir import TensorConfig, exec_t
from minijit.packing import (
    CacheGeometry,
    aligned_empty,
    padded_column,
    plan_packing,
    plan_panels,
    reachable_bytes,
    stream_rows,
    usable_bytes,
)
from minijit.runtime import features, profiles, runs_natively
from minijit.schedule import Rules
from tests.minijit.helpers import RULE_HOST, RULE_TARGET, runs_avx2
from tests.minijit.test_gemm_layouts import Guarded
from tests.minijit.test_tensor_operation import TARGETS, emulated

GEO = CacheGeometry(32 * 1024, 8, 64)  # 64 sets


@pytest.fixture(autouse=True)
def _one_sharer(monkeypatch):
    """The last-level caches these tests set are one team's (one sharer): `minijit.packing.llc_share`
    would otherwise count the slice of each CPU that the host's sysfs lists as sharing it."""
    monkeypatch.setattr(features, "last_level_cache_sharing", lambda: 1)


CACHES = (GEO, CacheGeometry(512 * 1024, 8, 64))  # the L2: 1024 sets


def test_usable_l1_bytes_counts_the_sets_a_stride_reaches():
    assert usable_bytes(8192, GEO) == 8 * 64  # a power of two >= 4 KiB: one set
    assert usable_bytes(2048, GEO) == 2 * 8 * 64  # 32 lines apart: every 32nd set
    assert usable_bytes(64 * 3, GEO) == GEO.size  # odd line stride: every set
    assert usable_bytes(6400, GEO) == 16 * 8 * 64  # 100 lines: gcd(100, 64) = 4
    assert usable_bytes(4100, GEO) == GEO.size  # not a line multiple: spread
    assert usable_bytes(8192, CACHES[1]) == 8 * 8 * 64  # the L2's 1024 sets: 128 lines apart, 8 sets


def test_padded_column_is_an_odd_number_of_lines():
    assert padded_column(256, 4) == 272 and padded_column(256, 8) == 264  # 16 -> 17, 32 -> 33 lines
    assert padded_column(48, 4) == 48 and padded_column(40, 4) == 48  # 3 lines stay, 2.5 -> 3
    assert padded_column(8, 4) == 8 and padded_column(16, 4) == 16  # a line or less: dense
    for m in range(1, 300):
        for item in (4, 8):
            col = padded_column(m, item)
            assert col >= m and (col * item <= 64 or (col * item // 64) % 2 == 1)


def gemm_config(m, n, k, sa, sb, sc, prims=True, main="gemm", br=None) -> TensorConfig:
    """A GEMM (or BRGEMM with a BR dim ``br`` = (size, stride_in0, stride_in1)) with all prims."""
    dims, execs, sizes = ["m", "n", "k"], ["prim"] * 3, [m, n, k]
    s0, s1, so = [sa[0], 0, sa[1]], [0, sb[1], sb[0]], [sc[0], sc[1], 0]
    if br is not None:
        dims, execs, sizes = ["k", *dims], ["prim", *execs], [br[0], *sizes]
        s0, s1, so = [br[1], *s0], [br[2], *s1], [0, *so]
    execs = execs if prims else ["undefined"] * len(dims)
    return TensorConfig.from_lists("fp32", "none", main, "none", dims, execs, sizes, s0, s1, so)


def test_plan_packs_thrashing_and_transposed_panels_only():
    # column-major 2048^3 prims: K columns 8 KiB apart, one L1 set: packed, M innermost
    big = gemm_config(256, 256, 256, (1, 2048), (1, 2048), (1, 2048))
    plan = plan_packing(big, CACHES)
    # M 256 fp32 = 16 lines per column, padded to 17 (272 elements): the columns reach every set
    assert plan is not None and plan.elements == 272 * 256
    assert [(d.stride_in0) for d in plan.main.dims] == [1, 0, 272]
    assert "of L1" in plan.describe()
    # a panel deeper than L1 (K 256 x 256 B = 64 KiB) with columns 16 KiB apart: packed
    deep = plan_packing(gemm_config(256, 256, 256, (1, 4096), (1, 4096), (1, 4096)), CACHES)
    assert deep is not None
    # a prim that is the whole matrix (lda = prim M = 16 lines): only the padding helps, and it does
    whole = plan_packing(gemm_config(256, 256, 256, (1, 256), (1, 256), (1, 256)), CACHES)
    assert whole is not None and whole.main.dims[2].stride_in0 == 272
    # an odd number of lines already (lda = 17 lines): the caller's layout is as good, no packing
    assert plan_packing(gemm_config(256, 256, 256, (1, 272), (1, 272), (1, 272)), CACHES) is None
    # the same with an odd leading dimension: the columns spread over the sets, no packing
    assert plan_packing(gemm_config(256, 256, 256, (1, 2049), (1, 2049), (1, 2049)), CACHES) is None
    # too little reuse (prim N < 16): no packing
    assert plan_packing(gemm_config(256, 8, 256, (1, 2048), (1, 2048), (1, 2048)), CACHES) is None
    # transposed A (unit stride in K): always packed, whatever the stride
    t = plan_packing(gemm_config(64, 32, 48, (48, 1), (1, 48), (1, 64)), CACHES)
    assert t is not None and "transposed" in t.reason and t.main.dims[0].stride_in0 == 1
    # BRGEMM: the BR dim is packed outside K
    b = plan_packing(gemm_config(64, 32, 64, (1, 1024), (1, 64), (1, 64), main="brgemm", br=(3, 65536, 4096)), CACHES)
    assert b is not None and [d.stride_in0 for d in b.main.dims] == [80 * 64, 1, 0, 80]  # 4 lines -> 5
    # unary ops and configs without prims: never
    assert plan_packing(gemm_config(256, 256, 256, (1, 2048), (1, 2048), (1, 2048), prims=False), CACHES) is None


CASES = {
    # (m, n, k, A strides (m, k), B strides (k, n), C strides (m, n), buffer sizes, brgemm)
    "pow2-lda": (8, 20, 32, (1, 1024), (1, 32), (1, 8), None),
    "transposed-a": (12, 18, 10, (10, 1), (1, 10), (1, 12), None),
    "brgemm": (8, 17, 32, (1, 1024), (1, 32), (1, 8), (2, 32768, 544)),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize(
    "touches,dtype", [(("none", "none"), "fp32"), (("zero", "relu"), "fp32"), (("none", "none"), "fp64")]
)
def test_packed_operations_compute_what_unpacked_ones_do(target, case, touches, dtype):
    m, n, k, sa, sb, sc, br = CASES[case]
    if dtype == "fp64":  # the same thrashing in bytes: half the elements between the columns
        sa = tuple(s // 2 if s > 64 else s for s in sa)
        br = None if br is None else (br[0], br[1] // 2, br[2])
    main = "brgemm" if br else "gemm"
    cfg = gemm_config(m, n, k, sa, sb, sc, main=main, br=br)
    args = (
        dtype, touches[0], main, touches[1], [d.type.name for d in cfg.dims], [d.exec.name for d in cfg.dims],
        [d.size for d in cfg.dims], *([d.strides[t] for d in cfg.dims] for t in range(3)),
    )  # fmt: skip
    rng = np.random.default_rng(len(case))
    ops = {p: TensorOperation(target, num_threads=2, pack=p) for p in (True, False)}
    for op in ops.values():
        op.setup(*args)
    assert ops[True].pack_plan is not None and ops[False].pack_plan is None
    assert ops[True].config == ops[False].config  # the caller's configuration either way
    sizes = [op_range[1] + 1 for op_range in (ops[True].config.offset_range(t) for t in ("in0", "in1", "out"))]
    t = np.float32 if dtype == "fp32" else np.float64
    a, b = rng.uniform(-1, 1, sizes[0]).astype(t), rng.uniform(-1, 1, sizes[1]).astype(t)
    c0 = rng.uniform(-1, 1, sizes[2]).astype(t)
    got = {}
    for p, op in ops.items():
        got[p] = c0.copy()
        op.execute(a, b, got[p])
    np.testing.assert_allclose(got[True], got[False], rtol=1e-5, atol=1e-5)
    ref = c0.copy()
    ops[True].execute_iter(a, b, ref)
    np.testing.assert_allclose(got[True], ref, rtol=1e-4, atol=1e-4)
    if not emulated(target):  # execute_ptr packs too
        c = c0.copy()
        ops[True].execute_ptr(a.ctypes.data, b.ctypes.data, c.ctypes.data)
        np.testing.assert_array_equal(c, got[True])
    text = ops[True].listing()
    assert "pack in0" in text and "// pack: " in text and "// //" not in text


@pytest.mark.parametrize("target", TARGETS)
def test_row_major_numpy_gemm_is_packed_and_right(target):
    """A C-order GEMM through the optimizer (swapped operands) with a power-of-two size."""
    n = 64 if emulated(target) else 256
    op = TensorOperation(target, num_threads=2)
    op.setup("fp32", "zero", "gemm", "none", "mnk", ("undefined",) * 3, (n, n, 32), (32, 0, 1), (0, 1, n), (n, 1, 0))
    rng = np.random.default_rng(2)
    A, B = rng.uniform(-1, 1, (n, 32)).astype(np.float32), rng.uniform(-1, 1, (32, n)).astype(np.float32)
    C = np.full((n, n), np.nan, np.float32)
    op.execute(A, B, C)
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)
    assert op.config.inputs_swapped
    assert all(d.exec is not exec_t.undefined for d in op.config.dims)


@pytest.mark.parametrize("sve_vl", [128, 256, 512])
def test_packed_brgemm_on_sve_at_every_vector_length(sve_vl):
    """The packed path (copy kernels + BRGEMM on the packed buffer) on SVE, emulated at 128, 256
    and 512 bits (natively on an SVE host at its own length only)."""

    if runs_natively("aarch64") and sve_vl != 128:
        pytest.skip("native host: its own vector length only")
    m, n, k, sa, sb, sc, br = CASES["brgemm"]
    cfg = gemm_config(m, n, k, sa, sb, sc, main="brgemm", br=br)
    lists = [[d.type.name for d in cfg.dims], ["prim"] * 4, [d.size for d in cfg.dims]]
    lists += [[d.strides[t] for d in cfg.dims] for t in range(3)]
    ops = {p: TensorOperation("aarch64-sve", num_threads=1, sve_vl=sve_vl, pack=p) for p in (True, False)}
    for op in ops.values():
        op.setup("fp32", "zero", "brgemm", "relu", *lists)
    assert ops[True].pack_plan is not None
    rng = np.random.default_rng(sve_vl)
    sizes = [ops[True].config.offset_range(t)[1] + 1 for t in ("in0", "in1", "out")]
    a, b = rng.uniform(-1, 1, sizes[0]).astype(np.float32), rng.uniform(-1, 1, sizes[1]).astype(np.float32)
    got = {}
    for p, op in ops.items():
        got[p] = np.full(sizes[2], np.nan, np.float32)
        op.execute(a, b, got[p])
    ref = np.full(sizes[2], np.nan, np.float32)
    ops[True].execute_iter(a, b, ref)
    np.testing.assert_allclose(got[True], got[False], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[True], ref, rtol=1e-4, atol=1e-4, equal_nan=True)


# -- B micro-panels (x86-64) -----------------------------------------------------------------------
def test_reachable_bytes_counts_runs_and_their_starts():
    l2 = CACHES[1]
    # 1 KiB runs (16 lines) 8 KiB apart: 8 start sets, 16 lines each -> 128 of 1024 sets
    assert reachable_bytes(1024, 8192, l2) == 128 * 8 * 64
    # contiguous columns (the stride is the run): every set
    assert reachable_bytes(1024, 1024, l2) == l2.size
    # not a line multiple: spread
    assert reachable_bytes(1024, 8196, l2) == l2.size


def test_plan_panels_packs_conflicting_b_blocks_only():
    big = gemm_config(256, 256, 256, (1, 2048), (1, 2048), (1, 2048))
    plan = plan_panels(big, 6, CACHES, llc_bytes=1)
    assert plan is not None and plan.width == 6 and plan.panel == 256 * 6
    # 42 full panels and one of 4 columns: two copies, the remainder at panel 42 / column 252
    assert len(plan.copies) == 2 and plan.copies[1][1:] == (252 * 2048, 42 * 1536)
    assert plan.elements == 43 * 1536
    k, n = plan.main.dims[2], plan.main.dims[1]
    assert (k.stride_in1, n.stride_in1) == (6, 1)
    assert "of L2" in plan.describe()
    # the same column-major B (about 2 MiB reach) in a last-level cache of twice that or more: left
    # in place, the kernel re-reads it from there; at half the cache or more: packed
    assert plan_panels(big, 6, CACHES, llc_bytes=8 << 20) is None
    reach = (255 * 2048 + 256) * 4
    assert plan_panels(big, 6, CACHES, llc_bytes=2 * reach + 2) is None
    at_half = plan_panels(big, 6, CACHES, llc_bytes=2 * reach)
    assert at_half is not None and (at_half.copies, at_half.main) == (plan.copies, plan.main)
    assert f"takes half the last-level cache ({2 * reach} B)" in at_half.reason
    # a row-major B (unit stride in N) is packed whatever the last-level cache holds
    rows = gemm_config(256, 256, 256, (1, 2048), (2048, 1), (1, 2048))
    assert plan_panels(rows, 6, CACHES, llc_bytes=1 << 40) is not None
    # the caller's B already contiguous (ldb = K): no conflicts, no packing
    assert plan_panels(gemm_config(256, 256, 256, (1, 256), (1, 256), (1, 256)), 6, CACHES, llc_bytes=1) is None
    # too few rows of M reuse each B element (M < MIN_REUSE_M): no packing
    assert plan_panels(gemm_config(32, 256, 256, (1, 2048), (1, 2048), (1, 2048)), 6, CACHES, llc_bytes=1) is None
    # fewer columns than one panel: no packing
    assert plan_panels(gemm_config(256, 4, 256, (1, 2048), (1, 2048), (1, 2048)), 6, CACHES, llc_bytes=1) is None
    # a transposed B (unit stride in N) with conflicting rows: packed too
    t = plan_panels(gemm_config(256, 256, 256, (1, 2048), (2048, 1), (1, 2048)), 6, CACHES, llc_bytes=1)
    assert t is not None and len(t.copies) == 2
    # BRGEMM: the BR step lies between the panels and K
    cfg = gemm_config(128, 256, 64, (1, 128), (1, 4096), (1, 128), main="brgemm", br=(3, 8192, 64))
    b = plan_panels(cfg, 6, CACHES, llc_bytes=1)
    assert b is not None and b.panel == 3 * 64 * 6 and b.main.dims[0].stride_in1 == 64 * 6
    # the same B block with room to spare (contiguous 256 B columns): no packing
    dense = gemm_config(128, 256, 64, (1, 128), (1, 64), (1, 128), main="brgemm", br=(3, 8192, 64 * 256))
    assert plan_panels(dense, 6, CACHES, llc_bytes=1) is None


PANEL_CASES = {
    # (dtype, touches, dim types, sizes, in0/in1/out strides): B blocks that conflict in L2
    "gemm-pow2": ("fp32", ("none", "none"), "mnk", (96, 100, 64), (1, 0, 96), (0, 4096, 1), (1, 96, 0)),
    "gemm-row-major-b": ("fp64", ("zero", "relu"), "mnk", (70, 40, 33), (1, 0, 70), (0, 1, 4096), (1, 70, 0)),
    "brgemm-odd-n": (
        "fp32",
        ("zero", "none"),
        "kmnk",
        (2, 67, 61, 32),
        (32 * 67, 1, 0, 67),
        (32, 0, 4096, 1),
        (0, 1, 67, 0),
    ),  # fmt: skip
}


@runs_avx2
@pytest.mark.parametrize("case", sorted(PANEL_CASES))
@pytest.mark.parametrize("threads", [1, 2])
def test_panel_packed_operations_match_numpy_and_the_unpacked_ones(pin_host, monkeypatch, case, threads):
    """B blocks that conflict in L2 go into micro-panels (`RULE_TARGET` on `RULE_HOST`, where the
    cases were drawn); packed and unpacked results match each other and the reference."""
    pin_host(RULE_HOST)
    monkeypatch.setattr(features, "last_level_cache_bytes", lambda: 1)  # B over half of it: packed
    dtype, touches, types, sizes, s0, s1, so = PANEL_CASES[case]
    main = "brgemm" if types.count("k") > 1 else "gemm"
    execs = ["prim"] * len(types)
    ops = {p: TensorOperation(RULE_TARGET, num_threads=threads, pack=p) for p in (True, False)}
    for op in ops.values():
        op.setup(dtype, touches[0], main, touches[1], list(types), execs, list(sizes), list(s0), list(s1), list(so))
    assert "in1" in ops[True].panel_plans and not ops[False].panel_plans
    assert "pack in1 into" in ops[True].listing()
    t = np.float32 if dtype == "fp32" else np.float64
    rng = np.random.default_rng(len(case) + threads)
    reach = [ops[True].config.offset_range(x)[1] + 1 for x in ("in0", "in1", "out")]
    a, b = rng.uniform(-1, 1, reach[0]).astype(t), rng.uniform(-1, 1, reach[1]).astype(t)
    c0 = rng.uniform(-1, 1, reach[2]).astype(t)
    got = {}
    for p, op in ops.items():
        got[p] = c0.copy()
        op.execute(a, b, got[p])
    ref = c0.copy()
    ops[True].execute_iter(a, b, ref)
    tol = 1e-4 if dtype == "fp32" else 1e-10
    np.testing.assert_allclose(got[True], ref, rtol=tol, atol=tol)
    np.testing.assert_allclose(got[True], got[False], rtol=tol, atol=tol)
    c = c0.copy()
    ops[True].execute_ptr(a.ctypes.data, b.ctypes.data, c.ctypes.data)
    np.testing.assert_array_equal(c, got[True])


@runs_avx2
@pytest.mark.parametrize("profile", profiles.X86_PROFILES)
def test_c_order_numpy_gemm_with_power_of_two_size_packs_both_operands(pin_host, monkeypatch, profile):
    """What a numpy user writes: C-order A @ B at 1024 (swapped operands), with a last-level cache
    smaller than B (both packed) and with a 64 MiB one (B, 4 MiB, re-read from there). For the
    AVX2 target on every x86-64 profile's caches (the AVX-512 target, which profiles with AVX-512
    pick natively, packs A inside the kernel instead: `a_copy`, B alone in micro-panels)."""
    pin_host(profile)
    n = 1024
    args = ("fp32", "zero", "gemm", "none", "mnk", ("undefined",) * 3, (n, n, n), (n, 0, 1), (0, 1, n), (n, 1, 0))
    monkeypatch.setattr(features, "last_level_cache_bytes", lambda: 64 << 20)
    roomy = TensorOperation(RULE_TARGET, num_threads=2)
    roomy.setup(*args)
    assert set(roomy.panel_plans) == {"in0"}
    monkeypatch.setattr(features, "last_level_cache_bytes", lambda: 1)
    op = TensorOperation(RULE_TARGET, num_threads=2)
    op.setup(*args)
    assert set(op.panel_plans) == {"in0", "in1"} and op.pack_plan is None
    assert op.packed_operands == {"in0", "in1"}
    rng = np.random.default_rng(5)
    A, B = rng.uniform(-1, 1, (n, n)).astype(np.float32), rng.uniform(-1, 1, (n, n)).astype(np.float32)
    C = np.full((n, n), np.nan, np.float32)
    op.execute(A, B, C)
    np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-3)


def test_aligned_empty_starts_on_a_line():
    for n in (1, 17, 1000):
        for dt in (np.float32, np.float64):
            x = aligned_empty(n, dt)
            assert x.ctypes.data % 64 == 0 and x.size == n and x.dtype == dt and x.flags.writeable


def test_plan_panels_for_a_needs_reuse_and_a_full_panel():
    # 2048^3 blocks: each 16-row block of A becomes one stream; panels of 16 rows, K columns of 16
    big = gemm_config(256, 256, 256, (1, 2048), (1, 2048), (1, 2048))
    plan = plan_panels(big, 16, CACHES, tensor="in0")
    assert plan is not None and plan.tensor == "in0" and plan.panel == 256 * 16 and len(plan.copies) == 1
    m, k = plan.main.dims[0], plan.main.dims[2]
    assert (m.stride_in0, k.stride_in0) == (1, 16) and "pack in0 into micro-panels of 16 rows" in plan.describe()
    # a ragged M (250 = 15 panels + 10 rows): a second copy writes the partial panel
    ragged = plan_panels(gemm_config(250, 256, 256, (1, 2048), (1, 2048), (1, 2048)), 16, CACHES, tensor="in0")
    assert ragged is not None and ragged.copies[1][1:] == (240, 15 * 256 * 16) and ragged.elements == 16 * 256 * 16
    # few columns of N reuse A: not worth a copy
    assert plan_panels(gemm_config(256, 32, 256, (1, 2048), (1, 2048), (1, 2048)), 16, CACHES, tensor="in0") is None
    # less than one panel of M: the kernel's remainder block reads the caller's A directly
    assert plan_panels(gemm_config(8, 256, 256, (1, 2048), (1, 2048), (1, 2048)), 16, CACHES, tensor="in0") is None
    with pytest.raises(ValueError, match="tensor"):
        plan_panels(big, 16, CACHES, tensor="out")


def test_stream_rows_is_the_largest_divisor_in_range():
    assert stream_rows(2048) == 64 and stream_rows(512) == 64 and stream_rows(96) == 48
    assert stream_rows(40) == 40 and stream_rows(16) == 16 and stream_rows(100) == 50
    assert stream_rows(67) is None and stream_rows(15) is None and stream_rows(2 * 67) is None  # 67 prime
    for k in range(1, 400):
        r = stream_rows(k)
        assert r is None or (16 <= r <= 64 and k % r == 0 and not any(k % s == 0 for s in range(r + 1, 65)))


def copy_dims(plan):
    """(exec, size, source stride, buffer stride) of the first copy's dims, outermost first."""
    return [(d.exec.name, d.size, d.stride_in0, d.stride_out) for d in plan.copies[0][0].dims]


def test_a_copy_streams_k_chunks_when_a_and_its_buffer_exceed_half_the_last_level_cache():
    big = gemm_config(256, 256, 256, (1, 2048), (1, 2048), (1, 2048))  # A block: 256 KiB
    # fits: the optimizer is free to scatter each column over the panels
    fits = plan_panels(big, 16, CACHES, tensor="in0", llc_bytes=1 << 20)
    assert all(e == "undefined" for e, *_ in copy_dims(fits))
    # A and buffer (512 KiB) over half of a 512 KiB LLC: 4 chunks of 64 K rows outermost, then the
    # 16 panels; a call copies 64 rows of one panel (16 M elements each, a contiguous run)
    streamed = plan_panels(big, 16, CACHES, tensor="in0", llc_bytes=512 << 10)
    assert copy_dims(streamed) == [
        ("seq", 4, 64 * 2048, 64 * 16),
        ("seq", 16, 16, 256 * 16),
        ("prim", 64, 2048, 16),
        ("prim", 16, 1, 1),
    ]
    assert streamed.main == fits.main and streamed.elements == fits.elements
    # BRGEMM: the BR steps go outside the K chunks
    cfg = gemm_config(128, 256, 96, (1, 4096), (1, 4096), (1, 128), main="brgemm", br=(3, 96 * 4096, 96))
    br = plan_panels(cfg, 16, CACHES, tensor="in0", llc_bytes=1)
    assert copy_dims(br)[:3] == [
        ("seq", 3, 96 * 4096, 96 * 16),
        ("seq", 2, 48 * 4096, 48 * 16),
        ("seq", 8, 16, 3 * 96 * 16),
    ]
    # a K with no divisor in [16, 64] keeps the optimizer's order
    odd = plan_panels(gemm_config(256, 256, 67, (1, 2048), (1, 2048), (1, 2048)), 16, CACHES, tensor="in0", llc_bytes=1)
    assert odd is not None and all(e == "undefined" for e, *_ in copy_dims(odd))
    # B copies are unaffected
    rows = gemm_config(256, 256, 256, (1, 2048), (2048, 1), (1, 2048))
    assert plan_panels(rows, 6, CACHES, llc_bytes=1) == plan_panels(rows, 6, CACHES, llc_bytes=1 << 40)


@runs_avx2
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
@pytest.mark.parametrize("threads", [1, 2])
def test_streamed_a_copy_fills_the_same_panels(pin_host, monkeypatch, dtype, threads):
    """An LLC too small for A forces the streamed copy: the packed A, and so every bit of C, equals
    the scattering copy's; with BR steps, a ragged last panel and a K loop in the nest."""
    types, sizes = "kmnk", [3, 250, 130, 96]  # BR 3, M 250 = panels + 10 rows, K 96 (chunks of 48)
    s0, s1, so = [96 * 256, 1, 0, 256], [96, 0, 4096, 1], [0, 1, 256, 0]
    pin_host(RULE_HOST)
    ops = {}
    for llc in (1 << 40, 1):
        monkeypatch.setattr(features, "last_level_cache_bytes", lambda llc=llc: llc)
        op = TensorOperation(RULE_TARGET, num_threads=threads)
        op.setup(dtype, "zero", "brgemm", "none", list(types), ["prim"] * 4, sizes, s0, s1, so)
        ops[llc] = op
    streamed, scattered = ops[1], ops[1 << 40]
    assert "in0" in streamed.panel_plans and not streamed.a_copy
    dims = [c.dims for c, _, _ in streamed.panel_plans["in0"].copies]
    assert all(any(d.size == 2 and d.stride_in0 == 48 * 256 for d in ds) for ds in dims)  # K chunks
    assert not any(d.size == 2 and d.stride_in0 == 48 * 256 for d in scattered.panel_plans["in0"].copies[0][0].dims)
    t = np.float32 if dtype == "fp32" else np.float64
    rng = np.random.default_rng(threads)
    a = rng.uniform(-1, 1, 3 * 96 * 256).astype(t)
    b = rng.uniform(-1, 1, 130 * 4096).astype(t)
    got = {}
    for llc, op in ops.items():
        got[llc] = np.full(130 * 256, np.nan, t)
        op.execute(a, b, got[llc])
    np.testing.assert_array_equal(got[1], got[1 << 40])
    # A flush against a PROT_NONE page at either end: the streamed copy reads nothing outside it
    for end in ("upper", "lower"):
        guarded = Guarded(a.size, t, end)
        guarded.array[:] = a
        c = np.full(130 * 256, np.nan, t)
        streamed.execute(guarded.array, b, c)
        np.testing.assert_array_equal(c, got[1])
    ref = np.full(130 * 256, np.nan, t)
    streamed.execute_iter(a, b, ref)
    np.testing.assert_allclose(got[1], ref, rtol=1e-4 if dtype == "fp32" else 1e-10, atol=1e-4)


@runs_avx2
@pytest.mark.parametrize("profile", profiles.X86_PROFILES)
@pytest.mark.parametrize("outer_k", [False, True])
def test_zero_and_relu_touches_fuse_into_the_kernel_when_k_is_whole(pin_host, outer_k, profile):
    """first zero / last relu run inside the x86 BRGEMM when every K dim is a prim (one final
    store per C block); with a K loop outside they stay separate calls. Results equal either way."""
    pin_host(profile)
    m, n, k, br = 40, 30, 16, 3
    types, execs = "kmnk", ["prim"] * 4
    sizes, s0, s1, so = [br, m, n, k], [k * m, 1, 0, m], [k, 0, br * k, 1], [0, 1, m, 0]
    if outer_k:  # the BR dim becomes a seq loop outside the (GEMM) prim
        execs, main = ["seq", "prim", "prim", "prim"], "gemm"
    else:
        main = "brgemm"
    op = TensorOperation(RULE_TARGET, num_threads=1)
    op.setup("fp32", "zero", main, "relu", list(types), execs, sizes, s0, s1, so)
    name = op.primitives["main"].name
    if outer_k:
        assert {"first", "last"} <= set(op.primitives) and "_z" not in name and "_r" not in name
    else:
        assert not {"first", "last"} & set(op.primitives) and name.endswith("_z_r")
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, br * k * m).astype(np.float32)
    b = rng.uniform(-1, 1, n * br * k).astype(np.float32)
    c = np.full(m * n, np.nan, np.float32)
    op.execute(a, b, c)
    ref = np.full(m * n, np.nan, np.float32)
    op.execute_iter(a, b, ref)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5)
    assert (c >= 0).all() and not np.signbit(c).any()


@runs_avx2
@pytest.mark.parametrize("order", ["F", "C"])
@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_copies_a_when_few_calls_reuse_an_l2_sized_a_block(pin_host, order, threads):
    """256^3 (one call per A block, 256 KiB): the kernel packs A itself, no copy pass and no
    buffer; its result matches numpy and the panel-packed operation. The seed's 32^3 prims (32
    calls re-read each A block) and 2048^3 (an A block of 2 MiB) keep the copy pass (`RULE_TARGET`
    on `RULE_HOST`: an A block is L2-sized against its 512 KiB L2)."""
    pin_host(RULE_HOST)
    n = 256
    strides = {"F": ((1, 0, n), (0, n, 1), (1, n, 0)), "C": ((n, 0, 1), (0, 1, n), (n, 1, 0))}[order]
    args = ("fp32", "none", "gemm", "none", "mnk", ("undefined",) * 3, (n, n, n), *strides)
    op = TensorOperation(RULE_TARGET, num_threads=threads)
    op.setup(*args)
    assert op.a_copy and "in0" not in op.packed_operands and op.primitives["main"].name.endswith("_ac")
    assert "pack in0 inside the kernel (a_copy)" in op.listing()
    rng = np.random.default_rng(threads)
    A, B = rng.uniform(-1, 1, (n, n)).astype(np.float32), rng.uniform(-1, 1, (n, n)).astype(np.float32)
    C0 = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    C = C0.copy()
    op.execute(A, B, C)
    want = C0 + (A.astype(np.float64) @ B if order == "C" else (A.T.astype(np.float64) @ B.T).T)
    np.testing.assert_allclose(C, want, rtol=1e-4, atol=1e-4)
    panels = TensorOperation(RULE_TARGET, num_threads=threads, rules=Rules(a_copy=False))
    panels.setup(*args)
    assert not panels.a_copy and "in0" in panels.packed_operands
    C2 = C0.copy()
    panels.execute(A, B, C2)
    np.testing.assert_array_equal(C, C2)  # the same FMAs in the same order
    for sizes, dims in (((32, 32, 8, 32, 32, 32), "mnkmnk"), ((2048,) * 3, "mnk")):
        big = TensorOperation(RULE_TARGET, num_threads=threads)
        if dims == "mnk":
            big.setup(
                "fp32",
                "none",
                "gemm",
                "none",
                dims,
                ("undefined",) * 3,
                sizes,
                (1, 0, 2048),
                (0, 2048, 1),
                (1, 2048, 0),
            )
        else:
            big.setup(
                "fp32", "none", "brgemm", "none", dims, ("seq", "seq", "prim", "prim", "prim", "prim"), sizes,
                (8192, 0, 1024, 1, 0, 32), (0, 8192, 1024, 0, 32, 1), (32768, 1024, 0, 1, 32, 0),
            )  # fmt: skip
        assert not big.a_copy and "in0" in big.packed_operands


@runs_avx2
@pytest.mark.parametrize("profile", profiles.X86_PROFILES)
@pytest.mark.parametrize("order", ["F", "C"])
@pytest.mark.parametrize("threads", [1, 2])
def test_small_k_gemms_walk_n_outermost(pin_host, monkeypatch, order, threads, profile):
    """1024 x 1024 x 64 (a call's A block 256 KiB, C runs of 4 KiB down each column): A is packed
    in panels and the kernel walks its N blocks outermost (``n_outer``, shown in the listing); the
    result equals the M-outer operation's bit for bit (the same FMAs per element, in the same
    order) and matches numpy. An A block over the last-level cache's share, or a prim M of 128
    rows (runs of 512 B), keeps the M-outer order."""
    pin_host(profile)
    monkeypatch.setattr(features, "last_level_cache_bytes", lambda: 32 << 20)
    m, n, k = 1024, 1024, 64
    strides = {"F": ((1, 0, m), (0, k, 1), (1, m, 0)), "C": ((k, 0, 1), (0, 1, n), (n, 1, 0))}[order]
    args = ("fp32", "none", "gemm", "none", "mnk", ("undefined",) * 3, (m, n, k), *strides)
    op = TensorOperation(RULE_TARGET, num_threads=threads)
    op.setup(*args)
    assert op.n_outer and not op.a_copy and "in0" in op.packed_operands
    assert op.primitives["main"].name.endswith("_no") and "// kernel order n_outer" in op.listing()
    rng = np.random.default_rng(threads)
    A, B = rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)
    C0 = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    if order == "F":  # the operands' memory in column-major order, passed as the C-contiguous transposes
        A, B, C0 = (np.asfortranarray(x) for x in (A, B, C0))
    C = C0.copy(order="K")
    op.execute(A.T if order == "F" else A, B.T if order == "F" else B, C.T if order == "F" else C)
    want = C0.astype(np.float64) + A.astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_allclose(C, want, rtol=1e-4, atol=1e-4)
    m_outer = TensorOperation(RULE_TARGET, num_threads=threads, rules=Rules(n_outer=False))
    m_outer.setup(*args)
    assert not m_outer.n_outer and "_no" not in m_outer.primitives["main"].name
    C2 = C0.copy(order="K")
    m_outer.execute(A.T if order == "F" else A, B.T if order == "F" else B, C2.T if order == "F" else C2)
    np.testing.assert_array_equal(C, C2)
    monkeypatch.undo()
    monkeypatch.setattr(features, "last_level_cache_bytes", lambda: 1 << 19)  # share 64 KiB: below any A block here
    small_llc = TensorOperation(RULE_TARGET, num_threads=threads)
    small_llc.setup(*args)
    assert not small_llc.n_outer
    monkeypatch.setattr(features, "last_level_cache_bytes", lambda: 32 << 20)
    short = TensorOperation(RULE_TARGET, num_threads=threads)
    short_args = ((128, 8192, 128), (1, 0, 128), (0, 128, 1), (1, 128, 0))
    short.setup("fp32", "none", "gemm", "none", "mnk", ("undefined",) * 3, *short_args)
    assert short.config.dims[short.config.prim.m].size <= 128 and not short.n_outer


@runs_avx2
def test_row_major_b_panels_are_copied_row_by_row_with_whole_vectors(pin_host):
    """A and B C-order, C F-order at 1024: B (unit-stride N) goes into 6-column panels by a copy
    whose prims are K and the panel's 6 columns, so each call fills one panel's contiguous rows with
    whole-vector stores (`dense_b`; before: 6-element runs into a different panel each, 2.1 ms
    against 0.84 ms on a Zen 3 core); the product matches numpy (`RULE_TARGET` on `RULE_HOST`)."""
    pin_host(RULE_HOST)
    n = 1024
    op = TensorOperation(RULE_TARGET, num_threads=2)
    op.setup("fp32", "zero", "gemm", "none", "mnk", ("undefined",) * 3, (n,) * 3, (n, 0, 1), (0, 1, n), (1, n, 0))
    assert "in1" in op.panel_plans
    copies = [c.plan for f in plans.head_pack(op.plan).fills if f.tensor == "in1" for c in f.copies]
    full = copies[0]
    assert plans.head(full).primitives["main"].name.endswith("_dense")
    prims = full.config.prim_dims
    assert sorted((d.stride_in0, d.stride_out) for d in prims) == [(1, 1), (n, 6)]  # 6 columns, K rows
    rng = np.random.default_rng(9)
    A, B = rng.uniform(-1, 1, (n, n)).astype(np.float32), rng.uniform(-1, 1, (n, n)).astype(np.float32)
    C = np.full(n * n, np.nan, np.float32)
    op.execute(A, B, C)
    np.testing.assert_allclose(C.reshape(n, n).T, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-3)


@runs_avx2
# pin_host pins the whole test: every example on the same profile
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    m=st.integers(64, 96),  # packing.PANEL_REUSE_N columns reuse A's panels; C over 1/16 of the cache
    n_panels=st.integers(288, 320),  # A (n x k) over 4x the largest prim M (1024 rows): an outer M loop
    k4=st.integers(64, 100),  # k = 4 * k4
    threads=st.sampled_from([1, 2]),
    pad=st.integers(0, 5),
    seed=st.integers(0, 2**16),
)
def test_chunked_operations_match_numpy(pin_host, m, n_panels, k4, threads, pad, seed):
    """C-order operands with a last-level cache of 8 prim Ms (1024 rows, `minijit.blocking.MAX_MC`)
    of A (A is the caller's B, N x K: it exceeds half of it; B, the caller's m x K A, fits its 1/8
    share; one index of the outer M loop fits it too; C is over the K chunks' share): a GEMM on 1 or
    2 threads runs in chunks of its outermost M loop (`minijit.schedule.a_chunks`: each chunk's A
    packed, then its kernels); through `execute` and `execute_ptr` the results match numpy, the
    listing names the chunks.
    Leading dims are padded by ``pad`` elements; the padding of C is left alone. `RULE_TARGET` on
    `RULE_HOST`."""
    n, k = 16 * n_panels, 4 * k4
    pin_host(RULE_HOST)
    with pytest.MonkeyPatch.context() as mp:
        lda, ldb, ldc = k + pad, n + pad, n + pad
        mp.setattr(features, "last_level_cache_bytes", lambda: 8 * 1024 * lda * 4)
        strides = ((lda, 0, 1), (0, 1, ldb), (ldc, 1, 0))
        op = TensorOperation(RULE_TARGET, num_threads=threads)
        op.setup("fp32", "none", "gemm", "none", "mnk", ("undefined",) * 3, (m, n, k), *strides)
    assert (
        op.chunks > 1
        and op.threads_used == min(threads, op.chunks)
        and f"// chunked: {op.chunks} chunks" in op.listing()
    )
    assert op.chunk_kind == "M"  # M chunks: C (m x n) is over the K chunks' share of the cache
    rng = np.random.default_rng(seed)
    A = rng.uniform(-1, 1, (m, lda)).astype(np.float32)
    B = rng.uniform(-1, 1, (k, ldb)).astype(np.float32)
    C0 = rng.uniform(-1, 1, (m, ldc)).astype(np.float32)
    want = C0.astype(np.float64)
    want[:, :n] += A[:, :k].astype(np.float64) @ B[:, :n].astype(np.float64)
    C = C0.copy()
    op.execute(A, B, C)
    np.testing.assert_allclose(C, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    np.testing.assert_array_equal(C[:, n:], C0[:, n:])
    C2 = C0.copy()
    op.execute_ptr(A.ctypes.data, B.ctypes.data, C2.ctypes.data)
    np.testing.assert_array_equal(C2, C)


@runs_avx2
@pytest.mark.parametrize("profile", profiles.X86_PROFILES)
def test_gemms_whose_a_outgrows_the_cache_run_in_chunks(pin_host, monkeypatch, profile):
    """A 32 MiB last-level cache. 256 x 16384 x 1024 (A, the caller's B, 64 MiB; B 1 MiB; C 16
    MiB): M chunks of one prim M (1024 rows x K 1024: 4 MiB of A, 1/8 of the cache), shown in the
    listing, on one thread and split over two (the shared dim merged back first). 1..64 x 4096 x
    4096 (C up to 1 MiB) in C order, and 4096 x 64 x 4096 in F order (the same kernel roles):
    K chunks, their A in micro-panels even for N = 8, in the M-outer order. A padded leading dim of
    A: no K chunks. A GEMV (1 x 4096 x 4096, N = 1 to the kernel) reads A once: no chunks and
    nothing packed, on 1 and 2 threads. Where A is re-read by an outer N loop (2048^3), fits the cache (1024^3), or one
    index of the outer M loop is over the share (256 x 4096 x 4096: 1024 rows x K 4096), the
    whole operation runs at once."""
    pin_host(profile)
    monkeypatch.setattr(features, "last_level_cache_bytes", lambda: 32 << 20)

    def setup(m, n, k, threads, order="C", ldb=None):
        op = TensorOperation(RULE_TARGET, num_threads=threads)
        strides = {"C": ((k, 0, 1), (0, 1, ldb or n), (n, 1, 0)), "F": ((1, 0, m), (0, k, 1), (1, m, 0))}[order]
        op.setup("fp32", "none", "gemm", "none", "mnk", ("undefined",) * 3, (m, n, k), *strides)
        return op

    for threads in (1, 2):
        op = setup(256, 16384, 1024, threads)  # C (16 MiB) over the K chunks' share: M chunks
        assert op.chunks == 16 and op.threads_used == threads and "in0" in op.packed_operands
        assert "// chunked: 16 chunks of the outermost loop dim (in0, in1, out (4096, 0, 4096) bytes" in op.listing()
    # C 1 MiB or less, A's K rows whole (one contiguous run per chunk): 8 K chunks of one BR step
    # (512 K rows, 8 MiB of A: 1/4 of the cache), in order, each on every thread
    shapes = ((64, 4096, 4096, "C"), (4096, 64, 4096, "F"), (8, 4096, 4096, "C"))
    for (m, n, k, order), threads in itertools.product(shapes, (1, 2)):
        op = setup(m, n, k, threads, order)
        assert op.chunks == 8 and op.chunk_kind == "K" and op.chunk_dim == op.config.prim.br, (m, n, k, order)
        assert len(op.plan.body.bodies) == 8 and op.threads_used == threads and "in0" in op.packed_operands
        assert f"// chunked: 8 chunks of K dim {op.chunk_dim} (in0, in1, out (8388608, 2048, 0) bytes" in op.listing()
        assert all(not plans.head(c).a_copy and not plans.head(c).n_outer for c in op.plan.body.bodies)
        assert not any(isinstance(c.body, plans.Chunk) for c in op.plan.body.bodies)
    # C-order and F-order operands of one GEMM get one kernel configuration (the cache model sees
    # the kernel's roles)
    assert setup(64, 4096, 4096, 1).config.dims == setup(4096, 64, 4096, 1, "F").config.dims
    # a padded leading dim of the caller's B (A): a K chunk's A has gaps
    op = setup(64, 4096, 4096, 1, ldb=4112)
    assert op.chunk_kind != "K"
    for threads in (1, 2):
        op = setup(1, 4096, 4096, threads)
        assert op.chunk_kind is None and not op.packed_operands and op.primitives["main"].name.startswith("gemv_")
    cases = (
        (2048, 2048, 2048, 1, "C"),
        (2048, 2048, 2048, 2, "C"),
        (1024, 1024, 1024, 1, "C"),
        (256, 4096, 4096, 1, "C"),
    )
    for m, n, k, threads, order in cases:
        op = setup(m, n, k, threads, order)
        assert op.chunks == 1 and op.chunk_kind is None and "// chunked" not in op.listing(), (m, n, k, threads)


@runs_avx2
@pytest.mark.parametrize("profile", profiles.X86_PROFILES)
# pin_host pins the whole test: every example on the same profile
@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    # M = 16 * panels > 4 N: B within 1/8 of the cache (one item short of twice A: at M = 4 N, B
    # is over 1/8 of it by a fraction of a byte, and nothing is chunked)
    panels=st.integers(20, 28),
    n=st.integers(2, 79),  # a chunk packs A into panels for any N
    kc=st.integers(214, 240),  # K = kc * kb >= 8 N: C within 1/16 of the cache
    kb=st.integers(3, 8),
    br=st.booleans(),
    first=st.sampled_from(["none", "zero"]),
    last=st.sampled_from(["none", "relu"]),
    threads=st.sampled_from([1, 2]),
    pad=st.sampled_from([0, 0, 0, 3]),
    dtype=st.sampled_from(["fp32", "fp64"]),
    seed=st.integers(0, 2**16),
)
def test_k_chunked_operations_match_numpy(
    pin_host, profile, panels, n, kc, kb, br, first, last, threads, pad, dtype, seed
):
    """Column-major fp32/fp64 A (M x K, leading dim M + ``pad``), B (K x N), C (M x N) with a last-level cache
    just under twice A: a GEMM whose outer K dim (a seq loop, or the BRGEMM's BR dim) has ``kb``
    steps of ``kc`` runs in K chunks (`minijit.schedule.k_chunks`: the largest divisor of ``kb``
    whose A takes at most a quarter of the cache, so at least 3 chunks), in order, the first touch on the first chunk
    and the last touch on the last, on 1 or 2 threads (N split over a shared dim); through
    `execute` and `execute_ptr` the results match numpy and nothing outside C's columns changes.
    With a padded A, a chunk's A is not one run: no K chunks."""
    m, k = 16 * panels, kc * kb
    lda, item = m + pad, 4 if dtype == "fp32" else 8
    t = np.float32 if dtype == "fp32" else np.float64
    prim_n = n // 2 if threads == 2 else n
    nn = prim_n * threads
    n_dims = [("n", "shared", 2, (0, k * prim_n, lda * prim_n))] if threads == 2 else []
    dims = [
        *n_dims,
        ("k", "prim" if br else "seq", kb, (kc * lda, kc, 0)),
        ("m", "prim", m, (1, 0, 1)),
        ("n", "prim", prim_n, (0, k, lda)),
        ("k", "prim", kc, (lda, 1, 0)),
    ]
    types, execs, sizes, strides = zip(*dims, strict=True)
    s0, s1, so = ([s[i] for s in strides] for i in range(3))
    pin_host(profile)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(features, "last_level_cache_bytes", lambda: 2 * lda * k * item - item)
        op = TensorOperation(RULE_TARGET, num_threads=threads)
        op.setup(dtype, first, "brgemm" if br else "gemm", last, types, execs, sizes, s0, s1, so)
    if pad:
        assert op.chunk_kind != "K"  # no K chunks
    else:
        step = max(c for c in range(1, kb) if kb % c == 0 and 2 * c < kb)  # A over half the cache
        assert op.chunks == kb // step and op.chunk_kind == "K" and len(op.plan.body.bodies) == op.chunks
        small = m * nn * kc * step < schedule.PARALLEL_MIN_ELEMENTS  # a chunk runs on one thread
        assert op.config.dims[op.chunk_dim].size == kb and op.threads_used == (1 if small else threads)
        touches = [(c.config.prim_first.name, c.config.prim_last.name) for c in op.plan.body.bodies]
        assert touches[0][0] == first and touches[-1][1] == last
        assert all(t[0] == "none" for t in touches[1:]) and all(t[1] == "none" for t in touches[:-1])
        assert f"// chunked: {op.chunks} chunks of K dim {op.chunk_dim}" in op.listing()
    rng = np.random.default_rng(seed)
    A = rng.uniform(-1, 1, k * lda).astype(t)
    B = rng.uniform(-1, 1, nn * k).astype(t)
    C0 = rng.uniform(-1, 1, nn * lda).astype(t)
    a, b = A.reshape(k, lda)[:, :m].T.astype(np.float64), B.reshape(nn, k).T.astype(np.float64)
    want = C0.reshape(nn, lda).T.astype(np.float64)
    want[:m] = (0 if first == "zero" else want[:m]) + a @ b
    if last == "relu":
        want[:m] = np.maximum(want[:m], 0)
    C = C0.copy()
    op.execute(A, B, C)
    got = C.reshape(nn, lda).T
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    np.testing.assert_array_equal(got[m:], C0.reshape(nn, lda).T[m:])
    C2 = C0.copy()
    op.execute_ptr(A.ctypes.data, B.ctypes.data, C2.ctypes.data)
    np.testing.assert_array_equal(C2, C)
