"""The cache-block model (minijit.blocking) and its use by split_dims / TensorOperation.setup."""

from __future__ import annotations

import numpy as np
import pytest

from minijit import TensorOperation, kernels, targets
from minijit.blocking import (
    GEMV_MAX_K,
    GEMV_RUN_BYTES,
    LLC_B_SHARE,
    Blocking,
    call_footprint,
    choose,
    transfer_cycles,
)
from minijit.ir import TensorConfig, dim_t
from minijit.optimizer import split_dims
from minijit.packing import CacheGeometry
from minijit.runtime import host

CACHES = (CacheGeometry(32 * 1024, 8, 64), CacheGeometry(512 * 1024, 8, 64))


def test_deeper_k_blocks_move_fewer_c_bytes_and_wider_blocks_fewer_a_and_b_bytes():
    base = transfer_cycles((1024, 1024, 1024), (256, 256, 256), 16, 4)
    deeper = transfer_cycles((1024, 1024, 1024), (256, 256, 512), 16, 4)
    wider = transfer_cycles((1024, 1024, 1024), (512, 512, 256), 16, 4)
    assert deeper[0] < base[0] and deeper[1] < base[1] and deeper[2] < base[2]
    assert wider[1] < base[1] and wider[2] < base[2]
    # by hand: A 4 MiB * 1024/256 + B 4 MiB * 1024/256 + C 8 MiB * 1024/256 into L2, at 16 B/cycle
    mib = 1 << 20
    assert base[1] == pytest.approx((4 * mib * 4 + 4 * mib * 4 + 8 * mib * 4) / 16)


@pytest.mark.parametrize(
    "item,target", [(4, "x86_64-avx2"), (8, "x86_64-avx2"), (4, "x86_64-avx512"), (8, "x86_64-avx512")]
)
def test_choice_fits_the_caches_and_divides_the_sizes(item, target):
    share = targets.get(target).b_block_l2_share
    for size in (64, 100, 256, 512, 1000, 2048):
        b = choose((size, size, size), item, target, caches=CACHES)
        column = {"x86_64-avx2": 64, "x86_64-avx512": 256}[target]
        assert size % b.m == 0 and size % b.n == 0 and size % b.k == 0
        assert column * b.k <= CACHES[0].size or b.k <= 16  # the A micro-panel fits L1
        assert b.k * b.n * item <= CACHES[1].size * share or b.n <= 16  # the B block fits its share of L2
        cap = f"{int(CACHES[1].size * share)} B (its share) of " if share < 1 else ""
        assert f"B of {cap}L2 {CACHES[1].size} B" in b.reason and "modelled cycles" in b.reason


def test_avx512_b_block_takes_its_share_of_l2_only():
    """A Zen 4 L2 (1 MiB): the AVX-512 B block (prim K 128) stops at a quarter of it, where the
    whole L2 would take N 1024 (fp64) / 2048 (fp32) and ran 0.87x numpy at 2048^3 fp64; AVX2
    keeps the whole L2 (K 512)."""
    zen4 = (CACHES[0], CacheGeometry(1024 * 1024, 8, 64))
    assert targets.get("x86_64-avx512").b_block_l2_share == 0.25 and targets.get("x86_64-avx2").b_block_l2_share == 1
    for item, nc in ((8, 256), (4, 512)):
        b = choose((2048, 2048, 2048), item, "x86_64-avx512", caches=zen4)
        assert (b.k, b.n) == (128, nc) and b.k * b.n * item == 256 * 1024
    b = choose((2048, 2048, 2048), 8, "x86_64-avx2", caches=zen4)
    assert (b.k, b.n) == (512, 256) and b.k * b.n * 8 == 1024 * 1024


ZEN4 = (CACHES[0], CacheGeometry(1024 * 1024, 8, 64))
MIB = 1 << 20


def test_br_steps_per_call_keep_every_threads_b_within_its_share_of_the_llc():
    """4096^3 fp64 AVX2 on a Zen 4 host (L2 1 MiB, L3 32 MiB): K blocks of 512 x N 256 (1 MiB);
    all 8 in one call are 8 MiB of B per call, 16 MiB on 2 threads, past a quarter of L3 (the
    2-thread run fell to 0.84x numpy): at most 4 BR steps. One thread, or 2048^3 (4 blocks), fit."""
    assert LLC_B_SHARE == 0.25
    two = choose((4096, 4096, 4096), 8, "x86_64-avx2", threads=2, caches=ZEN4, llc_bytes=32 * MIB)
    assert (two.k, two.n, two.br) == (512, 256, 4)
    assert "at most 4 BR steps of 512 per call" in two.reason and f"within {8 * MIB} B" in two.reason
    assert choose((4096, 4096, 4096), 8, "x86_64-avx2", threads=1, caches=ZEN4, llc_bytes=32 * MIB).br is None
    assert choose((2048, 2048, 2048), 8, "x86_64-avx2", threads=2, caches=ZEN4, llc_bytes=32 * MIB).br is None
    # a small last-level cache: one K block per call
    assert choose((4096, 4096, 4096), 8, "x86_64-avx2", threads=2, caches=ZEN4, llc_bytes=4 * MIB).br == 1


@pytest.mark.parametrize("target", ["x86_64-avx2", "x86_64-avx512"])
@pytest.mark.parametrize("item", [4, 8])
@pytest.mark.parametrize("threads", [1, 2, 16])
def test_br_cap_holds_for_every_shape(target, item, threads):
    for shape in ((4096, 4096, 4096), (512, 1024, 8192), (1000, 100, 30000), (64, 64, 64), (2048, 48, 2048)):
        for llc in (2 * MIB, 32 * MIB):
            b = choose(shape, item, target, threads=threads, caches=ZEN4, llc_bytes=llc)
            blocks = shape[2] // b.k
            block = b.k * b.n * item * threads  # one K block's B on every thread
            if b.br is None:
                assert blocks == 1 or blocks * block <= llc * LLC_B_SHARE
            else:
                assert 1 <= b.br < blocks and (b.br == 1 or b.br * block <= llc * LLC_B_SHARE)
                assert (b.br + 1) * block > llc * LLC_B_SHARE


def test_choose_rejects_a_bad_llc_size():
    for bad in (0, -1, 1.5, True, "32M"):
        with pytest.raises(ValueError, match="llc_bytes"):
            choose((4096, 4096, 4096), 8, "x86_64-avx2", caches=ZEN4, llc_bytes=bad)


def test_blocking_checks_its_fields():
    assert Blocking(1, 2, 3, "r").br is None and Blocking(1, 2, 3, "r", 4).br == 4
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="Blocking.br"):
            Blocking(1, 2, 3, "r", bad)


def test_avx2_fp32_blocks_match_what_was_measured_best():
    # 2048^3 on a Zen host (L1d 32 KiB, L2 512 KiB): K blocks of 512 (not 256), M and N as large as fit
    b = choose((2048, 2048, 2048), 4, "x86_64-avx2", caches=CACHES)
    assert (b.k, b.n) == (512, 256) and b.m >= 512
    # with 2 threads a 256^3 GEMM gets two M blocks to share; with 1 thread one prim
    assert choose((256, 256, 256), 4, "x86_64-avx2", caches=CACHES).m == 256
    two = choose((256, 256, 256), 4, "x86_64-avx2", threads=2, caches=CACHES)
    assert (256 // two.m) * (256 // two.n) >= 2


@pytest.mark.parametrize("threads", [2, 3, 4])
def test_blocks_split_evenly_over_the_threads(threads):
    """960 x 1920 x 640: one thread's pick (960 x 384) leaves 5 (M, N) blocks, a 3-against-2 split
    on 2 threads; with the threads' load in the model every pick is a multiple of the threads."""
    shape = (960, 1920, 640)
    one = choose(shape, 4, "x86_64-avx2", caches=CACHES)
    blocks = lambda b: (shape[0] // b.m) * (shape[1] // b.n)  # noqa: E731
    assert blocks(one) == 5
    many = choose(shape, 4, "x86_64-avx2", threads=threads, caches=CACHES)
    assert blocks(many) % threads == 0
    assert many.k * many.n * 4 <= CACHES[1].size  # still within the caches


@pytest.mark.parametrize("target", ["x86_64-avx2", "x86_64-avx512"])
def test_gemv_blocks_take_long_column_runs_and_split_over_the_threads(target):
    """N = 1 on x86-64 (the GEMV kernel reads A once): the prim M is the longest run of a column up
    to GEMV_RUN_BYTES that leaves a block per thread (evenly where M allows), K up to GEMV_MAX_K;
    other targets keep the cache model."""
    for item in (4, 8):
        cap = GEMV_RUN_BYTES // item
        one = choose((4 * cap, 1, 4096), item, target, caches=CACHES)
        assert (one.m, one.n, one.k) == (cap, 1, GEMV_MAX_K) and "GEMV" in one.reason
        assert choose((cap, 1, 4096), item, target, threads=2, caches=CACHES).m == cap // 2
        assert choose((cap * 3, 1, 4096), item, target, threads=2, caches=CACHES).m == cap * 3 // 4
        small = choose((300, 1, 100), item, target, caches=CACHES)
        assert (small.m, small.n, small.k) == (300, 1, 100)
        assert choose((4099, 1, 4099), item, target, threads=2, caches=CACHES).m == 4099  # prime: one block
    assert "GEMV" not in choose((4096, 1, 4096), 4, "aarch64-neon", caches=CACHES).reason


def test_blocking_validates_its_sizes():
    with pytest.raises(ValueError, match="Blocking.k"):
        Blocking(16, 16, 0, "")
    assert Blocking(32, 16, 8, "").sizes() == {dim_t.m: 32, dim_t.n: 16, dim_t.k: 8}


def test_split_dims_with_per_type_maxima_keeps_an_outer_part_below_the_minimum():
    cfg = TensorConfig.from_lists("fp32", "none", "gemm", "none", "mnk", ("undefined",) * 3, (512, 512, 1024),
                                  (1, 0, 512), (0, 1024, 1), (1, 512, 0))  # fmt: skip
    out = split_dims(cfg, 256, 4, {dim_t.m: 512, dim_t.n: 256, dim_t.k: 512})
    sizes = [(d.type, d.size) for d in out.dims]
    # M stays whole; N splits 2 x 256; K 2 x 512 (an outer 2 < min 4 is fine for a per-type maximum)
    assert sizes == [(dim_t.m, 512), (dim_t.n, 2), (dim_t.n, 256), (dim_t.k, 2), (dim_t.k, 512)]
    with pytest.raises(ValueError, match="max_sizes"):
        split_dims(cfg, 256, 4, {dim_t.m: 0})


def test_setup_uses_the_model_for_gemms_unless_a_size_is_given():
    n = 128
    args = ("fp32", "zero", "gemm", "none", "mnk", ("undefined",) * 3, (n, n, n), (n, 0, 1), (0, 1, n), (n, 1, 0))
    op = TensorOperation("native", num_threads=1)
    op.setup(*args)
    assert op.blocking is not None and op.blocking.m == n and "blocking (minijit.blocking)" in op.listing()
    fixed = TensorOperation("native", num_threads=1)
    fixed.setup(*args, max_kernel_size=32)
    assert fixed.blocking is None and all(d.size <= 32 for d in fixed.config.dims)
    rng = np.random.default_rng(0)
    A, B = rng.uniform(-1, 1, (n, n)).astype(np.float32), rng.uniform(-1, 1, (n, n)).astype(np.float32)
    for o in (op, fixed):
        C = np.full((n, n), np.nan, np.float32)
        o.execute(A, B, C)
        np.testing.assert_allclose(C, A.astype(np.float64) @ B, rtol=1e-4, atol=1e-4)


def test_setup_rejects_a_zero_max_kernel_size_instead_of_using_the_model():
    op = TensorOperation("native", num_threads=1)
    args = ("fp32", "none", "gemm", "none", "mnk", ("undefined",) * 3, (8, 8, 8), (1, 0, 8), (0, 8, 1), (1, 8, 0))
    with pytest.raises(ValueError, match="max_kernel_size must be >= 1"):
        op.setup(*args, max_kernel_size=0)
    assert op.config is None


def test_call_footprint_states_what_one_compiled_call_reads():
    # 2048^3 fp32 as compiled on AVX2: 1024 x 256 prims, K = 4 BR steps of 512
    text = call_footprint(1024, 256, 512, 4, 4, 16, CACHES)
    assert "1024 x 256 x 2048 (4 BR steps of 512)" in text
    assert "A micro-panel 131072 B fits L2 (524288 B)" in text  # 16 rows x 2048 x 4 B
    assert "B block 2097152 B beyond L2 (524288 B)" in text  # 2048 x 256 x 4 B
    assert "C block 1048576 B" in text
    small = call_footprint(8, 6, 64, 1, 8, 8, CACHES)  # fp64: 8 rows, no BR steps
    assert "8 x 6 x 64 (M x N x K)" in small and "A micro-panel 4096 B fits L1 (32768 B)" in small
    assert "BR steps" not in small and "B block 3072 B fits L1" in small
    for bad in ((0, 6, 64, 1, 4, 16), (8, 6, 64, 1, 4, 1.5), (8, 6, 64, -1, 4, 16)):
        with pytest.raises(ValueError, match="call_footprint"):
            call_footprint(*bad, CACHES)


def test_listing_shows_the_model_and_the_compiled_call():
    n = 512  # K is split into blocks the optimizer folds into BR steps of one call
    args = ("fp32", "zero", "gemm", "none", "mnk", ("undefined",) * 3, (n, n, n), (1, 0, n), (0, n, 1), (1, n, 0))
    op = TensorOperation("native", num_threads=1)
    op.setup(*args)
    prims = {d.type: d.size for d in op.config.dims if d.exec.value == "prim"}
    br = op.config.dims[op.config.prim.br].size if op.config.prim.br is not None else 1
    line = next(ln for ln in op.listing().splitlines() if ln.startswith("// compiled (minijit.blocking"))
    depth = br * prims[dim_t.k]
    # A's register block: 4 AVX-512 / 1 AVX2 / 4 NEON vectors (16 / 8 / 16 fp32 rows), 4 SVE vectors
    column = {"x86_64-avx512": 256, "x86_64-avx2": 64, "aarch64-neon": 64}.get(op.target, 4 * op.sve_vl // 8)
    rows = min(column // 4, prims[dim_t.m])  # the register block's rows of A
    assert f"{prims[dim_t.m]} x {prims[dim_t.n]} x {depth}" in line
    assert f"A micro-panel {rows * depth * 4} B" in line and f"B block {depth * prims[dim_t.n] * 4} B" in line


BR_TARGETS = tuple(dict.fromkeys((kernels.native_target(), "aarch64-neon", "aarch64-sve")))
if host().isa == "x86_64" and host().avx2:
    BR_TARGETS += ("x86_64-avx2",)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("target", sorted(set(BR_TARGETS)))
def test_a_capped_br_runs_its_k_loop_outside_the_call_with_the_fused_touches(target, threads, monkeypatch):
    """A last-level cache so small that one K block per call is all it holds: the K blocks run as a
    seq K loop around the call, and zero (first touch) and relu (last touch) still apply once, to
    the whole sum (C starts as NaN: a K block that zeroed or relu'd partial sums would show)."""
    from minijit.runtime import features

    monkeypatch.setattr(features, "last_level_cache_bytes", lambda: 64 * 1024)
    m, n, k = 40, 24, 2048
    args = ("fp32", "zero", "gemm", "relu", "mnk", ("undefined",) * 3, (m, n, k), (1, 0, m), (0, 1, n), (1, m, 0))
    op = TensorOperation(target, num_threads=threads)
    op.setup(*args)
    cfg = op.config if not op.parts else op.parts[0][0].config
    assert op.blocking is not None and op.blocking.br is not None and "BR steps of" in op.blocking.reason
    first = next(i for i, d in enumerate(cfg.dims) if d.exec.value == "prim")
    assert cfg.dims[first - 1].type is dim_t.k and cfg.dims[first - 1].exec.value == "seq"
    assert cfg.prim.br is None or cfg.dims[cfg.prim.br].size <= op.blocking.br
    rng = np.random.default_rng(threads)
    A = np.asfortranarray(rng.uniform(-1, 1, (m, k)).astype(np.float32))  # M x K column-major
    B = rng.uniform(-1, 1, (k, n)).astype(np.float32)  # K x N row-major
    C = np.full((n, m), np.nan, np.float32)  # M x N column-major, as its transpose
    op.execute(A.T, B, C)
    want = np.maximum(A.astype(np.float64) @ B, 0)
    np.testing.assert_allclose(C.T, want, rtol=1e-4, atol=1e-4)
    assert (C == 0).any() and (C > 0).any()
