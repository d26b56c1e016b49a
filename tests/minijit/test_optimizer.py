"""Tests of minijit.optimizer with the seed's (docs/seeds/004_mini_jit_backend.txt, section 5.5) numbers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minijit import optimizer
from minijit.ir import Dimension, TensorConfig, dim_t, exec_t, ptype_t
from minijit.optimizer import (
    create_shared_loops,
    find_best_split,
    find_largest_multiple_of_divisor,
    fuse_dims,
    identify_primitives,
    limit_batch,
    optimize,
    reorder_dims,
    split_dims,
    split_rows,
    swap_operands,
    thread_load,
)

SEED_LISTS = (
    "mnkmnk",
    ("seq",) * 6,
    (32, 32, 8, 32, 32, 32),
    (8192, 0, 1024, 1, 0, 32),
    (0, 8192, 1024, 0, 32, 1),
    (32768, 1024, 0, 1, 32, 0),
)


def cfg(main, dims, first="none", last="none", dtype="fp32") -> TensorConfig:
    return TensorConfig(dtype, first, main, last, tuple(Dimension(*d) for d in dims))


def seed_seq(main="gemm") -> TensorConfig:
    return TensorConfig.from_lists("fp32", "none", main, "none", *SEED_LISTS)


def matmul(n: int, exec_="seq") -> TensorConfig:
    """C (M x N) += A (M x K) B (K x N), column-major, all dims ``exec_``."""
    return cfg("gemm", [("m", exec_, n, 1, 0, 1), ("n", exec_, n, 0, n, n), ("k", exec_, n, n, 1, 0)])


def footprint(config: TensorConfig) -> dict:
    """Per dim type: product of sizes (invariant under fuse/split/reorder/shared)."""
    return {t: math.prod(d.size for d in config.dims if d.type is t) for t in dim_t}


def assert_valid_result(before: TensorConfig, after: TensorConfig) -> None:
    assert isinstance(after, TensorConfig) and after is not before
    TensorConfig(after.dtype, after.prim_first, after.prim_main, after.prim_last, after.dims)  # re-validates
    assert footprint(after) == footprint(before)
    assert after.offset_range("in0") == before.offset_range("in0")
    assert after.offset_range("out") == before.offset_range("out")


# --------------------------------------------------------------------------------------------
# findBestSplit / findLargestMultipleOfDivisor
# --------------------------------------------------------------------------------------------
def test_find_largest_multiple_of_divisor_seed_example():
    # "divisor 16, size 1600, max 1024 -> 2 and 800"
    assert find_largest_multiple_of_divisor(16, 1600, 1024) == (2, 800)
    assert find_largest_multiple_of_divisor(16, 1600, 1024, 16) == (20, 80)
    assert find_largest_multiple_of_divisor(16, 100, 64) is None  # no multiple of 16 divides 100
    assert find_largest_multiple_of_divisor(2048, 4096, 1024) is None  # divisor > max
    assert find_largest_multiple_of_divisor(2, 8, 8, 16) is None  # size < min


def test_find_best_split_seed_numbers():
    # before min_kernel_size: 1600 -> 2 x 800 (the seed's first version)
    assert find_best_split(1600, 1024, 1) == (2, 800)
    # the seed's code with min 16 and max 1024 gives 20 x 80 (its prose says 50 x 32, which is
    # what the same code gives for max_kernel_size 32 -- or for min 32)
    assert find_best_split(1600, 1024, 16) == (20, 80)
    assert find_best_split(1600, 32, 16) == (50, 32)
    assert find_best_split(1600, 1024, 32) == (50, 32)
    # N prefers multiples of 4, K any divisor
    assert find_best_split(1600, 1024, 16, "n") == (16, 100)
    assert find_best_split(1600, 1024, 16, dim_t.k) == (16, 100)
    assert find_best_split(1600, 1024, 1, "k") == (2, 800)
    # M falls back to multiples of 12, 8, 2
    assert find_best_split(36, 20, 1) == (3, 12)
    assert find_best_split(50, 32, 1) == (5, 10)
    # nothing fits
    assert find_best_split(1031, 1024, 16) == (1, 1031)
    assert find_best_split(50, 32, 16) == (1, 50)


@pytest.mark.parametrize("size", [2, 17, 96, 1000, 1600, 4096, 6000])
@pytest.mark.parametrize("type_", list(dim_t))
def test_find_best_split_invariants(size, type_):
    outer, inner = find_best_split(size, 64, 4, type_)
    assert outer * inner == size
    assert outer == 1 or (inner <= 64 and outer >= 4 and inner >= 4)


def padded_rows(outer: int, inner: int) -> int:
    return outer * -(-inner // optimizer.ROW_GRANULE) * optimizer.ROW_GRANULE


def test_split_rows_takes_the_fewest_padded_rows():
    """Where a multiple of 16 fits, the seed's choice; elsewhere fewer padded rows than the seed's
    block of 8 or 3 blocks for 2 threads; a prime is not split; the minimum holds where it can."""
    assert split_rows(1600, 1024) == find_best_split(1600, 1024, 1) == (2, 800)
    assert split_rows(2048, 1024) == (2, 1024) and split_rows(4096, 1024) == (4, 1024)
    assert find_best_split(104, 52, 1) == (13, 8) and split_rows(104, 52) == (2, 52)  # 208 -> 128 rows
    assert find_best_split(102, 51, 1) == (3, 34) and split_rows(102, 51) == (2, 51)
    assert find_best_split(108, 54, 1) == (3, 36) and split_rows(108, 54) == (2, 54)
    assert split_rows(1031, 1024) == (1, 1031)
    assert split_rows(2 * 1031, 1024) == (1031, 2) == find_best_split(2 * 1031, 1024, 1)  # the only one that fits
    assert split_rows(96, 48, 32) == (2, 48) and split_rows(96, 40, 32) == (3, 32)
    assert split_rows(96, 40, 64) == (3, 32)  # no divisor reaches the minimum: the best that fits


@given(size=st.integers(2, 5000), limit=st.integers(1, 1100))
def test_split_rows_never_pads_more_than_the_seed_rule(size, limit):
    outer, inner = split_rows(size, limit)
    assert outer * inner == size
    assert outer == 1 or inner <= limit
    seed = find_best_split(size, limit, 1, "m")
    if seed[0] > 1:
        assert outer > 1 and padded_rows(outer, inner) <= padded_rows(*seed)
    if outer == 1:
        assert size <= limit or not any(size % d == 0 for d in range(2, min(size, limit) + 1))


# --------------------------------------------------------------------------------------------
# split_dims
# --------------------------------------------------------------------------------------------
def test_split_dims_1600():
    c = matmul(1600)
    s = split_dims(c, 1024, 16)
    assert_valid_result(c, s)
    assert [(d.type.name, d.size) for d in s.dims] == [
        ("m", 20),
        ("m", 80),
        ("n", 16),
        ("n", 100),
        ("k", 16),
        ("k", 100),
    ]
    outer_m, inner_m = s.dims[0], s.dims[1]
    assert outer_m.strides == (80, 0, 80) and inner_m.strides == (1, 0, 1)
    assert s.dims[2].strides == (0, 160000, 160000)


def test_split_dims_recursive_and_fallback():
    c = cfg("copy", [("c", "seq", 4096, 1, 0, 1)])
    s = split_dims(c, 16, 4)
    assert [d.size for d in s.dims] == [16, 16, 16]
    assert [d.stride_in0 for d in s.dims] == [256, 16, 1]
    # 50 with max 32, min 16 cannot satisfy the minimum: the seed's older rule splits it anyway
    s = split_dims(cfg("copy", [("c", "seq", 50, 1, 0, 1)]), 32, 16)
    assert [d.size for d in s.dims] == [5, 10]
    # a prime stays
    s = split_dims(cfg("copy", [("c", "seq", 37, 1, 0, 1)]), 32, 1)
    assert [d.size for d in s.dims] == [37]


def test_split_prim_dim_keeps_prim_block():
    c = cfg("gemm", [("m", "prim", 64, 1, 0, 1), ("n", "prim", 8, 0, 8, 64), ("k", "prim", 8, 64, 1, 0)])
    s = split_dims(c, 16, 1)
    assert [(d.exec.name, d.size) for d in s.dims] == [("seq", 4), ("prim", 16), ("prim", 8), ("prim", 8)]
    assert_valid_result(c, s)


# --------------------------------------------------------------------------------------------
# fuse_dims
# --------------------------------------------------------------------------------------------
def test_fuse_dims():
    # A[m0, m1] with m1 unit stride: (m0 stride 5 = |m1| * 1) fuses into one M of 20
    c = cfg("copy", [("m", "seq", 4, 5, 0, 5), ("m", "seq", 5, 1, 0, 1)])
    f = fuse_dims(c)
    assert_valid_result(c, f)
    assert f.dims == (Dimension("m", "seq", 20, 1, 0, 1),)
    # the seed's min_kernel_size rule: only dims smaller than it look for a partner
    assert fuse_dims(c, min_kernel_size=5).dims == c.dims
    assert fuse_dims(c, min_kernel_size=6).dims == f.dims
    # different layout in out (a transposition): no fusion
    t = cfg("copy", [("m", "seq", 4, 5, 0, 1), ("m", "seq", 5, 1, 0, 4)])
    assert fuse_dims(t).dims == t.dims
    # different types, or different exec types, or prim dims: no fusion
    for dims in (
        [("m", "seq", 4, 5, 0, 5), ("n", "seq", 5, 1, 0, 1)],
        [("m", "shared", 4, 5, 0, 5), ("m", "seq", 5, 1, 0, 1)],
        [("m", "prim", 4, 5, 0, 5), ("m", "prim", 5, 1, 0, 1)],
    ):
        c2 = cfg("add", dims)
        assert fuse_dims(c2).dims == c2.dims
    # seq and undefined mix
    u = cfg("copy", [("m", "undefined", 4, 5, 0, 5), ("m", "seq", 5, 1, 0, 1)])
    assert fuse_dims(u).dims == (Dimension("m", "seq", 20, 1, 0, 1),)


def test_optimize_fuses_every_composable_pair_of_an_elementwise_config():
    # a permute (10 x 6 contiguous in both tensors, b transposed against them): the seed's rule
    # (min_kernel_size 4) leaves 10 and 6 apart; elementwise configs fuse them, so the transposing
    # primitive spans 8 x 60 elements instead of 8 x 6
    dims = [("c", "undefined", 10, 6, 0, 48), ("c", "undefined", 8, 60, 0, 1), ("c", "undefined", 6, 1, 0, 8)]
    c = cfg("copy", dims)
    o = optimize(c, min_kernel_size=4)
    assert_valid_result(c, o)
    assert sorted((d.size, d.stride_in0, d.stride_out) for d in o.dims) == [(8, 60, 1), (60, 1, 8)]
    assert fuse_dims(c, min_kernel_size=4).dims == c.dims  # the pass itself keeps the seed's rule
    # a GEMM keeps the seed's rule: M = 10 x 6 (both >= 4) is not fused
    g = cfg("gemm", [("m", "undefined", 10, 6, 0, 6), ("m", "undefined", 6, 1, 0, 1), ("n", "undefined", 8, 0, 8, 60),
                     ("k", "undefined", 8, 60, 1, 0)])  # fmt: skip
    og = optimize(g, min_kernel_size=4)
    assert_valid_result(g, og)
    assert sorted(d.size for d in og.dims if d.type is dim_t.m) == [6, 10]


def test_fuse_dims_chain_and_nonadjacent():
    # three M dims spread over the list fuse into one; the N dim in between stays
    c = cfg(
        "gemm",
        [
            ("m", "seq", 2, 12, 0, 12),
            ("n", "seq", 3, 0, 1, 24),
            ("m", "seq", 3, 4, 0, 4),
            ("k", "seq", 5, 24, 3, 0),
            ("m", "seq", 4, 1, 0, 1),
        ],
    )
    f = fuse_dims(c)
    assert_valid_result(c, f)
    assert [(d.type.name, d.size) for d in f.dims] == [("n", 3), ("k", 5), ("m", 24)]


# --------------------------------------------------------------------------------------------
# identify_primitives
# --------------------------------------------------------------------------------------------
def test_identify_seed_gemm_promotes_to_brgemm():
    c = seed_seq("gemm")
    p = identify_primitives(c)
    assert_valid_result(c, p)
    assert p.prim_main is ptype_t.brgemm  # the second K (size 8) becomes the BR dim
    assert [(d.type.name, d.exec.name, d.size) for d in p.dims] == [
        ("m", "seq", 32),
        ("n", "seq", 32),
        ("k", "prim", 8),
        ("m", "prim", 32),
        ("n", "prim", 32),
        ("k", "prim", 32),
    ]
    assert p.prim.br == 2 and p.prim.k == 5
    assert p.dims[5].stride_in1 == 1 and p.dims[3].stride_in0 == 1


@pytest.mark.parametrize("br,cap,inner", [(8, 4, 4), (8, 3, 2), (7, 4, 1), (12, 5, 4), (8, 8, 8), (8, 9, 8), (8, 1, 1)])
def test_limit_batch_splits_the_br_dim_into_a_k_loop_outside_the_prims(br, cap, inner):
    """A BR dim over ``max_br`` keeps its largest divisor up to the cap; the rest becomes a seq K
    loop right outside the prims, with the BR stride times that divisor."""
    c = identify_primitives(TensorConfig.from_lists("fp32", "zero", "gemm", "relu", *_seed_lists(br)))
    assert c.prim.br is not None and c.dims[c.prim.br].size == br
    out = limit_batch(c, cap)
    assert_valid_result(c, out)
    assert out.prim_first is c.prim_first and out.prim_last is c.prim_last and out.prim_main is c.prim_main
    assert out.dims[out.prim.br].size == inner
    if inner == br:
        assert out.dims == c.dims
        return
    first = next(i for i, d in enumerate(out.dims) if d.exec is exec_t.prim)
    k = out.dims[first - 1]
    assert (k.type, k.exec, k.size) == (dim_t.k, exec_t.seq, br // inner)
    assert k.strides == tuple(s * inner for s in c.dims[c.prim.br].strides)
    assert out.dims[: first - 1] == c.dims[: first - 1] and out.dims[first + 1 :] == c.dims[first:]


def _seed_lists(k0: int) -> tuple:
    """The seed layout with a K0 (the BR dim after identify_primitives) of ``k0``."""
    s = (32, 32, k0, 32, 32, 32)
    return (
        "mnkmnk",
        ("seq",) * 6,
        s,
        (32 * 32 * k0, 0, 1024, 1, 0, 32),
        (0, 32 * 32 * k0, 1024, 0, 32, 1),
        (32768, 1024, 0, 1, 32, 0),
    )


def test_limit_batch_leaves_other_configs_and_checks_its_cap():
    gemm = identify_primitives(matmul(64))
    assert gemm.prim.br is None and limit_batch(gemm, 1).dims == gemm.dims
    c = identify_primitives(seed_seq("gemm"))
    assert limit_batch(c, None).dims == c.dims and limit_batch(c, None) is not c
    for bad in (0, -1, 2.0, True, "4"):
        with pytest.raises(ValueError, match="max_br"):
            limit_batch(c, bad)
    opt = optimize(seed_seq("gemm"), max_br=2)
    assert opt.dims[opt.prim.br].size == 2 and footprint(opt) == footprint(seed_seq("gemm"))


def test_identify_keeps_existing_prims_and_demotes_brgemm():
    c = TensorConfig.from_lists(
        "fp32", "none", "gemm", "none", *SEED_LISTS[:1], ("undefined",) * 3 + ("prim",) * 3, *SEED_LISTS[2:]
    )
    p = identify_primitives(c)
    assert p.prim_main is ptype_t.gemm and all(d.exec is not exec_t.undefined for d in p.dims)
    assert [d.exec for d in p.dims[:3]] == [exec_t.seq] * 3
    b = matmul(16)
    b = b.with_dims(b.dims, prim_main="brgemm")
    assert identify_primitives(b).prim_main is ptype_t.gemm  # one K only


def test_identify_missing_dims_become_size_one():
    # matrix-vector: no N dim
    c = cfg("gemm", [("m", "seq", 6, 1, 0, 1), ("k", "seq", 5, 6, 1, 0)])
    p = identify_primitives(c)
    assert_valid_result(c, p)
    assert [(d.type.name, d.size, d.strides) for d in p.dims] == [
        ("m", 6, (1, 0, 1)),
        ("n", 1, (0, 0, 0)),
        ("k", 5, (6, 1, 0)),
    ]


def test_identify_unary_permutation():
    # docs/seeds/004_mini_jit_backend.txt section 5.6.2: trus -> turs, all seq;
    # prim M = s (unit stride in in0 and out), N = u
    T, R, U, S = 3, 4, 7, 5
    c = cfg(
        "copy",
        [
            ("c", "seq", T, R * U * S, 0, U * R * S),
            ("c", "seq", R, U * S, 0, S),
            ("c", "seq", U, S, 0, R * S),
            ("c", "seq", S, 1, 0, 1),
        ],
    )
    p = identify_primitives(c)
    assert_valid_result(c, p)
    assert [d.size for d in p.prim_dims] == [U, S]
    assert p.dims[p.prim.m].size == S and p.dims[p.prim.n].size == U
    # a transposition: the unit-stride dim of out becomes prim N
    tr = cfg("relu", [("c", "seq", 3, 1, 0, 4), ("c", "seq", 4, 3, 0, 1)])
    p = identify_primitives(tr)
    assert p.dims[p.prim.m].strides == (1, 0, 4) and p.dims[p.prim.n].strides == (3, 0, 1)


def test_identify_binary_and_zero():
    c = cfg("sub", [("n", "seq", 3, 20, 20, 20), ("m", "seq", 4, 5, 5, 5), ("m", "seq", 5, 1, 1, 1)])
    p = identify_primitives(c)
    assert [(d.exec.name, d.size) for d in p.dims] == [("seq", 3), ("prim", 4), ("prim", 5)]
    z = cfg("zero", [("c", "seq", 3, 0, 0, 1), ("c", "seq", 4, 0, 0, 3), ("c", "seq", 2, 0, 0, 12)])
    p = identify_primitives(z)
    assert [d.stride_out for d in p.prim_dims] == [3, 1]


# --------------------------------------------------------------------------------------------
# reorder_dims and create_shared_loops
# --------------------------------------------------------------------------------------------
def test_reorder_dims():
    c = identify_primitives(seed_seq("gemm"))
    assert reorder_dims(c).dims == c.dims  # M, N, K is already the order by stride
    shuffled = c.with_dims((c.dims[1], c.dims[0]) + c.dims[2:])
    r = reorder_dims(shuffled)
    assert_valid_result(shuffled, r)
    assert r.dims == c.dims


@pytest.mark.parametrize(
    ("target", "shared", "pieces"),
    [(1, [], True), (16, [16], True), (32, [32], True), (64, [32, 2], True), (4096, [32, 32], True)]
    # the seed's brgemm (537 MFLOP) is big enough for 8 pieces (`MIN_FLOPS_PER_PIECE`) ...
    + [(2, [8], True), (4, [8], True)]
    # ... without pieces, the seed's choice: the fewest iterations that balance
    + [(2, [2], False), (4, [4], False)],
)
def test_create_shared_loops(target, shared, pieces, monkeypatch):
    if not pieces:
        monkeypatch.setattr(optimizer, "MIN_FLOPS_PER_PIECE", 1 << 62)
    c = identify_primitives(seed_seq("brgemm"))
    s = create_shared_loops(c, target)
    assert_valid_result(c, s)
    assert [d.size for d in s.shared_dims] == shared
    assert all(d.type is not dim_t.k for d in s.shared_dims)
    assert s.dims[: len(shared)] == s.shared_dims
    if target <= 1024:
        assert math.prod(shared) >= target


def test_create_shared_loops_existing_and_prime():
    c = identify_primitives(seed_seq("gemm"))
    pre = create_shared_loops(c, 32)
    assert create_shared_loops(pre, 16).dims == pre.dims  # enough shared iterations already
    # a dim without a suitable divisor is shared as a whole
    p = cfg("copy", [("c", "seq", 7, 4, 0, 4), ("c", "prim", 4, 1, 0, 1)])
    s = create_shared_loops(p, 4)
    assert [(d.exec.name, d.size) for d in s.dims] == [("shared", 7), ("prim", 4)]
    with pytest.raises(ValueError):
        create_shared_loops(p, 0)


def test_thread_load():
    assert thread_load(10, 2) == 1.0 and thread_load(5, 2) == 1.2 and thread_load(1, 4) == 4.0
    assert thread_load(7, 1) == 1.0 and thread_load(17, 16) == pytest.approx(32 / 17)


def two_blocks(n_blocks: int, m_blocks: int) -> TensorConfig:
    """A 1600^3-style GEMM after identify/reorder: seq N and M block loops around BRGEMM prims."""
    m, n, k = 800, 320, 400
    return cfg(
        "brgemm",
        [
            ("n", "seq", n_blocks, 0, k * 4 * n, m * m_blocks * n),
            ("m", "seq", m_blocks, m, 0, m),
            ("k", "prim", 4, k * m * m_blocks, k, 0),
            ("m", "prim", m, 1, 0, 1),
            ("n", "prim", n, 0, k * 4, m * m_blocks),
            ("k", "prim", k, m * m_blocks, 1, 0),
        ],
    )


@pytest.mark.parametrize(
    ("n_blocks", "m_blocks", "threads", "shared"),
    [
        (5, 2, 2, [5, 2]),  # 5 N blocks alone: 3 against 2; with M: 5 against 5
        (5, 2, 4, [5, 2]),  # 10 on 4 (load 1.2) beats 5 on 4 (1.6)
        (5, 2, 5, [5]),  # N alone is balanced
        (5, 2, 3, [5]),  # 10 on 3 is no better than 5 on 3: the fewer iterations
        (4, 2, 2, [2]),  # an outer part of N already balances (the seed's choice)
        (6, 4, 4, [6, 2]),  # N whole, then an outer part of M: 12 on 4
        (5, 2, 1, []),
    ],
)
def test_create_shared_loops_balances_the_threads(n_blocks, m_blocks, threads, shared, monkeypatch):
    """Balance alone: no GEMM is big enough for pieces (`MIN_FLOPS_PER_PIECE` out of reach)."""
    monkeypatch.setattr(optimizer, "MIN_FLOPS_PER_PIECE", 1 << 62)
    c = two_blocks(n_blocks, m_blocks)
    s = create_shared_loops(c, threads)
    assert_valid_result(c, s)
    assert [d.size for d in s.shared_dims] == shared
    assert s.dims[: len(shared)] == s.shared_dims
    if shared == [6, 2]:  # M 4 became a shared 2 and a seq 2 right after it
        assert [(d.type, d.exec, d.size) for d in s.dims[1:3]] == [
            (dim_t.m, exec_t.shared, 2),
            (dim_t.m, exec_t.seq, 2),
        ]


@pytest.mark.parametrize(
    ("n_blocks", "m_blocks", "threads", "shared"),
    [
        (4, 2, 2, [4, 2]),  # 8 = 2 threads x PIECES_PER_THREAD: N whole, then M whole
        (8, 2, 2, [8]),  # N alone reaches 8
        (16, 2, 2, [8]),  # an outer part of N: no more than the target
        (5, 2, 3, [5, 2]),  # 10 on 3 is as balanced as 5 on 3: the more pieces
        (6, 4, 4, [6, 2]),  # 24 would overshoot 16; 12 is balanced
        (4, 2, 1, []),  # one thread: nothing to share
    ],
)
def test_a_big_gemm_gets_pieces_for_every_thread(n_blocks, m_blocks, threads, shared):
    """A GEMM with at least `MIN_FLOPS_PER_PIECE` per iteration is given up to `PIECES_PER_THREAD`
    shared iterations per thread (among the balanced plans), which the team hands out in pieces."""
    c = two_blocks(n_blocks, m_blocks)
    assert c.flops() >= optimizer.MIN_FLOPS_PER_PIECE * optimizer.PIECES_PER_THREAD * threads
    s = create_shared_loops(c, threads)
    assert_valid_result(c, s)
    assert [d.size for d in s.shared_dims] == shared
    assert s.dims[: len(shared)] == s.shared_dims


def test_small_gemms_and_other_ops_keep_the_fewest_balanced_iterations():
    """Below `MIN_FLOPS_PER_PIECE` per piece a GEMM keeps the seed's choice (the fewest shared
    iterations that balance), and so does any non-GEMM op."""
    gemm = two_blocks(4, 2)
    small = gemm.with_dims([d.with_(size=8) if d.exec is exec_t.prim else d for d in gemm.dims])
    assert small.flops() < optimizer.MIN_FLOPS_PER_PIECE
    assert [d.size for d in create_shared_loops(small, 2).shared_dims] == [2]
    copy = cfg("copy", [("c", "seq", 64, 4096, 0, 4096), ("c", "prim", 4096, 1, 0, 1)])
    assert [d.size for d in create_shared_loops(copy, 2).shared_dims] == [2]


# --------------------------------------------------------------------------------------------
# the whole optimizer
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("exec_", ["seq", "undefined"])
def test_optimize_1600_cubed(exec_):
    c = matmul(1600, exec_)
    o = optimize(c, thread_target=16, max_kernel_size=1024, min_kernel_size=16)
    assert_valid_result(c, o)
    o.validate_executable()
    assert o.prim_main is ptype_t.brgemm
    assert all(d.size <= 1024 for d in o.prim_dims)
    p = o.prim
    assert (o.dims[p.m].size, o.dims[p.n].size, o.dims[p.k].size, o.dims[p.br].size) == (80, 100, 100, 16)
    assert o.dims[p.m].stride_in0 == 1 and o.dims[p.k].stride_in1 == 1
    assert math.prod(d.size for d in o.shared_dims) >= 16
    assert o.flops() == 2 * 1600**3


def test_optimize_1600_cubed_small_kernels():
    o = optimize(matmul(1600), thread_target=64, max_kernel_size=32, min_kernel_size=16)
    assert o.dims[o.prim.m].size == 32  # the seed's 50 x 32
    assert all(d.size <= 32 for d in o.prim_dims)


def mm_64_25() -> TensorConfig:
    """dims (M, M, N, N, K, K), sizes (64, 25, 64, 25, 64, 25), row-major A[k0,k1,m0,m1],
    B[n0,n1,k0,k1], C[n0,n1,m0,m1] (the last index has unit stride)."""
    return cfg(
        "gemm",
        [
            ("m", "seq", 64, 25, 0, 25),
            ("m", "seq", 25, 1, 0, 1),
            ("n", "seq", 64, 0, 40000, 40000),
            ("n", "seq", 25, 0, 1600, 1600),
            ("k", "seq", 64, 40000, 25, 0),
            ("k", "seq", 25, 1600, 1, 0),
        ],
    )


def test_optimize_64_25():
    c = mm_64_25()
    # seed defaults (min 16): 64 and 25 are not small, nothing fuses
    o = optimize(c, thread_target=4, max_kernel_size=1024, min_kernel_size=16)
    assert_valid_result(c, o)
    p = o.prim
    assert (o.dims[p.m].size, o.dims[p.n].size, o.dims[p.k].size, o.dims[p.br].size) == (25, 25, 25, 64)
    assert math.prod(d.size for d in o.shared_dims) >= 4
    # min 32: the 25s fuse with their 64s into 1600, which is split again
    o = optimize(c, thread_target=4, max_kernel_size=1024, min_kernel_size=32)
    assert_valid_result(c, o)
    p = o.prim
    assert (o.dims[p.m].size, o.dims[p.n].size, o.dims[p.k].size, o.dims[p.br].size) == (32, 40, 50, 32)
    # fusing everything gives the 1600^3 matmul
    f = fuse_dims(c)
    assert [(d.type.name, d.size) for d in f.dims] == [("m", 1600), ("n", 1600), ("k", 1600)]
    assert [d.strides for d in f.dims] == [(1, 0, 1), (0, 1600, 1600), (1600, 1, 0)]


def test_passes_do_not_mutate():
    c = mm_64_25()
    snapshot = (c.dims, c.prim_main)
    for result in (
        fuse_dims(c),
        split_dims(c, 16),
        identify_primitives(c),
        reorder_dims(c),
        create_shared_loops(c, 8),
        optimize(c, 8, 16, 4),
    ):
        assert result is not c
    assert (c.dims, c.prim_main) == snapshot


def test_swap_operands_row_major_gemm():
    """A row-major C (unit stride in N, none in M): m/n types and in0/in1 strides exchange, the
    flag flips; applying it to its own result changes nothing (C is then unit-stride in M)."""
    row = TensorConfig.from_lists(
        "fp32", "zero", "gemm", "none", "mnk", ("undefined",) * 3, (8, 6, 4), (4, 0, 1), (0, 1, 6), (6, 1, 0)
    )
    s = swap_operands(row)
    assert s.inputs_swapped and not row.inputs_swapped
    assert [d.type for d in s.dims] == [dim_t.n, dim_t.m, dim_t.k]
    assert [(d.stride_in0, d.stride_in1, d.stride_out) for d in s.dims] == [(0, 4, 6), (1, 0, 1), (6, 1, 0)]
    assert swap_operands(s) == s
    assert "inputs swapped" in str(s)
    # column-major C, prim dims given, or another primitive: unchanged
    col = row.with_dims([d.with_(stride_out=so) for d, so in zip(row.dims, (1, 8, 0), strict=True)])
    assert swap_operands(col) is col
    prims = row.with_dims([d.with_(exec=exec_t.prim) for d in row.dims])
    assert swap_operands(prims) is prims
    add = TensorConfig.from_lists(
        "fp32", "none", "add", "none", "mn", ("undefined",) * 2, (3, 4), (4, 1), (4, 1), (4, 1)
    )
    assert swap_operands(add) is add
    # optimize() runs it first: a prim M with unit output stride and size > 1
    o = optimize(row)
    assert o.inputs_swapped and o.dims[o.prim.m].size == 6 and o.dims[o.prim.m].stride_out == 1


def test_threads_split_a_lone_prim_dim():
    """One 512^3 GEMM prim and 2 threads: no loop to share, so the prim N dim is split into a
    shared 2 and a prim 256 (flops unchanged); 1 thread, too little work (256^3: the pool's
    hand-off would eat the gain), or a prim too small, leaves it whole."""

    def square(n: int) -> TensorConfig:
        return TensorConfig.from_lists(
            "fp32", "none", "gemm", "none", "mnk", ("undefined",) * 3, (n, n, n), (1, 0, n), (0, n, 1), (1, n, 0)
        )

    big = square(512)
    o1 = optimize(big, thread_target=1, max_kernel_size=512)
    assert not any(d.exec is exec_t.shared for d in o1.dims)
    o2 = optimize(big, thread_target=2, max_kernel_size=512)
    shared = [d for d in o2.dims if d.exec is exec_t.shared]
    assert [(d.type, d.size, d.stride_in1, d.stride_out) for d in shared] == [(dim_t.n, 2, 256 * 512, 256 * 512)]
    assert o2.dims[o2.prim.n].size == 256 and o2.flops() == big.flops()
    o3 = optimize(big, thread_target=3, max_kernel_size=512)  # smallest divisor of 512 reaching 3 is 4
    assert math.prod(d.size for d in o3.dims if d.exec is exec_t.shared) == 4
    assert not any(d.exec is exec_t.shared for d in optimize(square(256), thread_target=2).dims)
    narrow = TensorConfig.from_lists(
        "fp32",
        "none",
        "gemm",
        "none",
        "mnk",
        ("undefined",) * 3,
        (48, 48, 2**16),
        (1, 0, 48),
        (0, 2**16, 1),
        (1, 48, 0),
    )
    o4 = optimize(narrow, thread_target=2, max_kernel_size=2**16)  # enough flops, but 24 < 32 per thread
    assert not any(d.exec is exec_t.shared for d in o4.dims)


def test_create_shared_loops_scans_few_divisors_of_a_huge_dim():
    """A seq dim of 2^40 + 15 (no divisor scan to its square root) and a prime one: shared whole,
    the static split of that many iterations being balanced to within one part in 10^5."""
    for size in (2**40 + 15, 1_000_003):
        c = cfg("copy", [("c", "seq", size, 4, 0, 4), ("c", "prim", 4, 1, 0, 1)])
        s = create_shared_loops(c, 2)
        assert [d.size for d in s.shared_dims] == [size]
        assert thread_load(size, 2) < 1 + 1e-5


def test_a_strided_vector_y_is_one_strided_column():
    """A y with no unit stride gets a prim M of its own length, strided in out, and a prim N of
    size 1 (the kernels' transposed C of one column) instead of a size-1 M dummy; a row vector
    y = x B is swapped into that column first. A C with N > 1 and no unit stride is not."""
    # y[m * 3] = A[m, k] x[k], A row-major: no N dim at all
    col = TensorConfig.from_lists(
        "fp32", "none", "gemm", "none", "mk", ("undefined",) * 2, (37, 23), (23, 1), (0, 1), (3, 0)
    )
    o = optimize(col)
    m = o.dims[o.prim.m]
    assert (m.size, m.stride_out) == (37, 3) and not o.inputs_swapped
    assert o.prim.n is None or o.dims[o.prim.n].size == 1
    # y[n * 4] = x[k] B[k, n] (M of size 1): swapped, the caller's N becomes the prim M
    row = TensorConfig.from_lists(
        "fp32", "none", "gemm", "none", "mnk", ("undefined",) * 3, (1, 29, 17), (0, 0, 1), (0, 1, 29), (0, 4, 0)
    )
    s = swap_operands(row)
    assert s.inputs_swapped and [d.type for d in s.dims] == [dim_t.n, dim_t.m, dim_t.k]
    o = optimize(row)
    assert o.inputs_swapped and (o.dims[o.prim.m].size, o.dims[o.prim.m].stride_out) == (29, 4)
    # a unit-stride M wins over a strided one (A[m0, m1, k] row-major, y[m0, m1] C order)
    both = TensorConfig.from_lists(
        "fp32", "none", "gemm", "none", "mmk", ("undefined",) * 3, (5, 7, 3), (21, 3, 1), (0, 0, 1), (7, 1, 0)
    )
    o = optimize(both)
    assert (o.dims[o.prim.m].size, o.dims[o.prim.m].stride_out) == (7, 1)
    # a C of two strided dims keeps its roles
    grid = TensorConfig.from_lists(
        "fp32", "none", "gemm", "none", "mnk", ("undefined",) * 3, (5, 6, 3), (1, 0, 5), (0, 3, 1), (2, 20, 0)
    )
    assert swap_operands(grid) is grid
