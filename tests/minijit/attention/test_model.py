"""Seed 001's attention IO-cost model (`minijit.attention.model`): the Hopper derivation reproduces
FlashAttention-3's tiles and its softmax bound; on every recorded CPU host the chosen tiles meet
the register-block and cache constraints; M_l and H_l match a hand count; decode splits the key
axis; bad arguments are refused by name. Pure Python: nothing is generated or run."""

from __future__ import annotations

import pytest

from minijit import targets
from minijit.attention import model
from minijit.runtime import features, profiles

#: the issue's bench shapes: (batch, heads, L, S, E, causal)
BENCH = [
    (1, 8, 2048, 2048, 64, False),
    (1, 4, 4096, 4096, 128, False),
    (4, 16, 512, 512, 64, False),
    (2, 8, 1024, 1024, 128, True),
    (1, 32, 1, 4096, 128, False),
]
SMALL = [(1, 1, 5, 3, 8, False), (2, 2, 300, 40, 64, True), (1, 2, 7, 100, 16, False)]


@pytest.fixture(params=sorted(profiles.PROFILES))
def host(request, pin_host):
    """Each recorded host profile, pinned for the test."""
    return pin_host(request.param)


def _geometry(dtype: str) -> tuple[int, int, int, int]:
    """(register block rows, vector lanes, register file bytes, item) of the pinned host's target,
    read independently of the model: rows = panel_column_bytes / item (`minijit.blocking`)."""
    t = targets.native()
    item = model.CPU_DTYPES[dtype]
    regs = model.VECTOR_REGISTERS[t.isa] * t.vector_bits // 8
    return t.panel_column_bytes // item, t.vector_bits // 8 // item, regs, item


# -- Hopper ---------------------------------------------------------------------------------------
def test_hopper_derivation_gives_flashattention3_tiles_and_the_softmax_bound():
    m = model.hopper_derivation(d=128, dtype="fp16")
    assert (m.tiling.g_q, m.tiling.s_x) == (128, 128)
    assert m.tiling.score_level == "registers (SM)"
    assert m.time.limit == "softmax"
    assert m.time.bound.startswith("the softmax (exp on the MUFU)")
    assert 0.9 < m.time.busy < 1.0  # the tensor cores wait on the softmax, a little (Table 3's ideal rates)
    text = m.explain()
    assert "g_q = 128, s_x = 128" in text
    assert "bound: the softmax (exp on the MUFU)" in text
    assert "B.0.1: 295" in text and "g_q >= 295" in text  # the seed's no-caching bound, reproduced


def test_hopper_tiles_fit_the_sm_and_larger_ones_do_not():
    m = model.hopper_derivation()
    sm = model.H100_SEED
    assert m.level("registers (SM)").m_bytes <= sm.regs
    assert m.level("shared memory (SM)").m_bytes <= sm.smem
    # 128 x 160 or 256 x 64 would need more registers than an SM has (S, the next S, O in fp32)
    assert model._gpu_reg_bytes(128, 160, 128, 2) > sm.regs
    assert model._gpu_reg_bytes(256, 64, 128, 2) > sm.regs


def test_hopper_softmax_overhead_of_the_seed_explains_75_percent():
    """§6.3: with 66 % overhead in the softmax, fp16 FlashAttention-3 runs about 4/3 as long as its
    tensor cores need: about 75 % of peak."""
    m = model.hopper_derivation(softmax_overhead=0.66)
    assert (m.tiling.g_q, m.tiling.s_x) == (128, 128)
    assert m.time.busy == pytest.approx(0.75, abs=0.03)
    assert m.time.total > model.hopper_derivation().time.total


def test_hopper_wide_heads_are_tensor_bound_and_fp8_softmax_bound():
    """d = 256 doubles the products per score, so the softmax hides behind Q K^T; fp8 doubles the
    tensor rate, so the softmax binds harder (§6.2)."""
    assert model.hopper_derivation(d=256).time.limit == "tensor cores"
    fp16, fp8 = model.hopper_derivation(), model.hopper_derivation(dtype="fp8")
    assert fp8.time.limit == "softmax" and fp8.time.busy < fp16.time.busy


# -- CPU: constraints on every recorded host ------------------------------------------------------
@pytest.mark.parametrize("shape", BENCH + SMALL)
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_chosen_tiles_meet_the_register_block_and_cache_constraints(host, shape, dtype):
    b, h, L, S, E, causal = shape
    m = model.plan(b, h, L, S, E, dtype=dtype, causal=causal)
    rows, lanes, reg_bytes, item = _geometry(dtype)
    t = m.tiling
    # register block multiples
    assert t.g_q % rows == 0 or (t.g_q == L and L < rows), (t.g_q, rows)
    assert t.s_x % lanes == 0, (t.s_x, lanes)
    # the score tile in the level the model assigns it to (next to the K block it is computed from)
    l1, l2 = features.cache_geometries()
    if t.score_level == "registers":
        assert t.g_q * t.s_x * item <= model.REG_SCORE_SHARE * reg_bytes
    else:
        assert t.score_level == "L1"
        assert (t.g_q * t.s_x + t.s_x * E) * item <= l1.size
    # the whole tile (its rows and their state, a K/V block, the scores where they are in L1) in its level
    tile = t.g_q * (2 * E + 3) + t.s_x * 2 * E
    if t.tile_level == "L1":
        assert (tile + (t.g_q * t.s_x if t.score_level == "L1" else 0)) * item <= l1.size
    else:
        assert t.tile_level == "L2" and tile * item <= l2.size
    # the L2 group: a multiple of g_q whose rows and a K/V block fit L2
    assert t.group % t.g_q == 0
    assert (min(t.group, L) * (2 * E + 3) + t.s_x * 2 * E) * item <= l2.size
    # every level's M within its capacity, in bytes = values x item (§4.3)
    for lv in m.levels:
        assert lv.capacity is None or lv.m_bytes <= lv.capacity, lv
        assert lv.h_bytes == pytest.approx(lv.h_values * item)
    # threads: every thread has work, the split covers batch x heads
    assert t.threads == features.num_cpus()
    assert t.rounds == -(-b * h * t.query_split * t.key_split // t.threads)


@pytest.mark.parametrize("E", [16, 32, 64, 128, 256, 512])
def test_larger_heads_never_push_the_query_tile_past_its_cache(host, E):
    """g_q (E + Ev) stays within the capacity of the level holding the tile (L1 or L2) as E
    grows: the query tile shrinks instead."""
    l1, l2 = features.cache_geometries()
    for dtype in ("fp32", "fp64"):
        item = model.CPU_DTYPES[dtype]
        m = model.plan(1, 4, 2048, 2048, E, dtype=dtype)
        cap = {"L1": l1.size, "L2": l2.size}[m.tiling.tile_level]
        assert m.tiling.g_q * 2 * E * item <= cap


def test_the_choice_is_the_cheapest_candidate(pin_host):
    """No pinned alternative (tile sizes, score placement) models faster than the choice."""
    pin_host("zen3")
    best = model.plan(1, 8, 2048, 2048, 64)
    for g_q in (16, 32, 64, 128, 256):
        for s_x in (8, 16, 32, 64, 128):
            for level in ("L1", "registers"):
                try:
                    alt = model.plan(1, 8, 2048, 2048, 64, g_q=g_q, s_x=s_x, score_level=level)
                except ValueError:
                    continue
                assert alt.time.total >= best.time.total * (1 - 1e-12), (g_q, s_x, level)


def test_time_split_names_the_products_and_the_softmax(pin_host):
    pin_host("cascadelake")
    m = model.plan(1, 8, 2048, 2048, 64)
    ts = m.time
    assert ts.qk == pytest.approx(ts.pv)  # E == Ev: the two products cost the same
    assert ts.softmax > 0 and ts.limit == "products"
    assert sum(ts.shares().values()) == pytest.approx(1.0)
    parts = ts.qk + ts.pv + ts.softmax + ts.merge + sum(c for _, c in ts.transfers)
    assert parts == pytest.approx(ts.total)
    # causal visits about half the scores: the products halve, the softmax too
    full = model.plan(2, 8, 1024, 1024, 128, g_q=64, s_x=32)
    tri = model.plan(2, 8, 1024, 1024, 128, causal=True, g_q=64, s_x=32)
    assert tri.time.qk / full.time.qk == pytest.approx(0.5, abs=0.05)


# -- CPU: the hand count --------------------------------------------------------------------------
def test_levels_match_a_hand_count(pin_host):
    """zen3 (AVX2 fp32: 8 lanes, register block 16 x 6; L1 32 KiB = 8192 values, L2 512 KiB =
    131072 values, L3 slice 16 MiB), one head, L = S = 128, E = Ev = 32 (E + Ev = 64), one
    thread, g_q = s_x = 16, scores in L1. 8 tiles of 16 rows, each seeing 128 keys in n = 8 blocks:
    sum rows v = 128 x 128 = 16384 scores, sum n rows = 8 x 8 x 16 = 1024.

    L2 group g_2 = g_q = 16:
      registers: M = (2 vectors x 6 columns + 2 + 1) x 8 = 120 values;
        H = 16384 x 64 x (1/6 + 1/16) + 2 x 1024 x 32 + 4 x 16384 = 240298.67 + 65536 + 65536.
      L1: the tile's rows 16 (64 + 3) = 1072, a K/V block 16 x 64 = 1024, scores 16 x 16 = 256:
        M = 2352 (9408 B); all of K, V (8192) would not fit next to them, so §3.2 at g = g_q:
        H = L (E + Ev) + ceil(L / g_q) S (E + Ev) = 8192 + 8 x 8192 = 73728 (294912 B).
      L2, L3: the group's rows 1072 and all of K, V 8192 fit: M = 9264, and the level keeps K, V
        for every group (g = L): H = L (E + Ev) + S (E + Ev) = 16384.
    L2 group g_2 = 32 (two tiles interleave per key block): L1 keeps no rows; the K/V block (1024)
      and the scores (256) stay: M = 1280; K, V enter once per L2 group (4 x 128 keys) and each
      tile's rows pass once per key block, Q in and O in and out:
        H = 512 x 64 + 1024 x (32 + 2 x 32) = 32768 + 98304 = 131072."""
    pin_host("zen3")
    m = model.plan(1, 1, 128, 128, 32, threads=1, g_q=16, s_x=16, group=16, score_level="L1")
    reg, l1, l2, l3 = (m.level(n) for n in ("registers", "L1", "L2", "L3 (per thread)"))
    assert reg.m_values == 120 and reg.m_bytes == 480
    assert reg.h_values == pytest.approx(16384 * 64 * (1 / 6 + 1 / 16) + 2 * 1024 * 32 + 4 * 16384)
    assert (l1.m_values, l1.m_bytes) == (2352, 9408)
    assert (l1.h_values, l1.h_bytes) == (73728, 294912)
    assert l1.group == 16 and l1.stream == 16
    for lv in (l2, l3):
        assert (lv.m_values, lv.h_values, lv.h_bytes) == (9264, 16384, 65536)
        assert lv.group == 128  # the whole query axis: K, V stay for every group
    assert m.tiling.tile_level == "L1"

    g = model.plan(1, 1, 128, 128, 32, threads=1, g_q=16, s_x=16, group=32, score_level="L1")
    l1 = g.level("L1")
    assert (l1.m_values, l1.h_values) == (1280, 131072)
    assert l1.group == 0 and g.tiling.tile_level == "L2"


def test_seed_formula_at_the_l2_group(pin_host):
    """Where K, V of a head overflow L2, L2 keeps the largest group g_2 that fits and the §3.2
    count holds: H_L2 = L (E + Ev) + ceil(L / g_2) S (E + Ev)."""
    pin_host("zen3")
    L = S = 8192
    E = 64
    m = model.plan(1, 1, L, S, E, threads=1, g_q=16, s_x=16, score_level="L1")
    g2 = m.tiling.group
    assert g2 > 16 and g2 % 16 == 0
    assert (g2 * (2 * E + 3) + 16 * 2 * E) * 4 <= 512 * 1024  # the group's rows and a K/V block fit L2
    assert m.level("L2").h_values == L * 2 * E + -(-L // g2) * S * 2 * E


# -- CPU: decode ----------------------------------------------------------------------------------
def test_decode_splits_the_key_axis_and_merges_the_triples(host):
    m = model.plan(1, 1, 1, 4096, 128)
    t = m.tiling
    assert t.key_split == t.threads == host.cores and t.query_split == 1  # one chunk per core
    assert t.g_q == 1
    text = m.explain()
    assert "partial (max, sum, O) triples merged" in text
    assert m.time.merge > 0
    # more threads than heads: every thread gets a chunk
    wide = model.plan(1, 2, 1, 4096, 128, threads=8)
    assert wide.tiling.key_split >= 4 and wide.tiling.rounds == 1


def test_decode_with_enough_heads_keeps_whole_heads(pin_host):
    pin_host("zen3")
    m = model.plan(1, 32, 1, 4096, 128)  # 32 heads on 2 threads: 16 each, no merge to pay
    assert m.tiling.key_split == 1 and m.tiling.rounds == 16
    assert m.time.limit in ("L2", "L3")  # decode streams K, V: fills, not FMAs, bound it


# -- explain and arguments ------------------------------------------------------------------------
def test_explain_prints_every_level_and_the_choice(host):
    m = model.plan(2, 8, 1024, 1024, 128, causal=True)
    text = m.explain()
    for lv in m.levels:
        assert lv.line() in text
        assert f"M = {model._fmt(lv.m_values)} values" in text
    for name in ("registers", "L1", "L2", "L3 (per thread)", "memory"):
        assert f"  {name} " in text
    assert f"g_q = {m.tiling.g_q}, s_x = {m.tiling.s_x}" in text
    assert "§3.2" in text and "split (§6)" in text and "bound:" in text
    assert "causal" in text


@pytest.mark.parametrize("name", ["batch", "heads", "L", "S", "E", "Ev"])
@pytest.mark.parametrize("bad", [0, -3, 2.0, True])
def test_non_positive_sizes_are_refused_by_name(pin_host, name, bad):
    pin_host("zen3")
    args = {"batch": 1, "heads": 2, "L": 64, "S": 64, "E": 32, "Ev": 32}
    args[name] = bad
    with pytest.raises(ValueError, match=rf"^{name} must be a positive int"):
        model.plan(*args.values())
    with pytest.raises(ValueError, match=rf"^{name} must be a positive int"):
        model.hopper_plan(*args.values())


def test_other_bad_arguments_are_refused_by_name(pin_host):
    pin_host("zen3")
    with pytest.raises(ValueError, match="^dtype must be one of fp32, fp64"):
        model.plan(1, 1, 64, 64, 32, dtype="fp16")
    with pytest.raises(ValueError, match="^dtype must be one of fp16, bf16, fp8"):
        model.hopper_plan(1, 1, 64, 64, 32, dtype="fp32")
    with pytest.raises(ValueError, match="^dtype"):
        model.hopper_derivation(dtype="int8")
    with pytest.raises(ValueError, match="^threads must be a positive int"):
        model.plan(1, 1, 64, 64, 32, threads=0)
    with pytest.raises(ValueError, match="^g_q must be a multiple of the register block's 16 rows"):
        model.plan(1, 1, 64, 64, 32, g_q=24)
    with pytest.raises(ValueError, match="^s_x must be a multiple of the vector length 8"):
        model.plan(1, 1, 64, 64, 32, s_x=12)
    with pytest.raises(ValueError, match="^score_level must be one of"):
        model.plan(1, 1, 64, 64, 32, score_level="L3")
    with pytest.raises(ValueError, match="^group must be a multiple of g_q"):
        model.plan(1, 1, 64, 64, 32, g_q=16, group=24)
    with pytest.raises(ValueError, match="^softmax_overhead must be a non-negative number"):
        model.hopper_derivation(softmax_overhead=-0.1)
    with pytest.raises(ValueError, match="^d must be a positive int"):
        model.hopper_derivation(d=0)


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_kernel_s_x_is_whole_register_blocks_whose_v_block_and_p_tile_fit_l1(dtype):
    from minijit.attention.model import KERNEL_BLOCK_VECTORS, KERNEL_G, KERNEL_MAX_VECTORS, _host_cpu, kernel_s_x

    cpu = _host_cpu(dtype)
    keys = cpu.vl * KERNEL_BLOCK_VECTORS.get(cpu.isa, 2)
    for E in (1, 8, 64, 100, 128, 256, 4096):
        s_x = kernel_s_x(E, E, dtype)
        assert s_x % keys == 0 and keys <= s_x <= KERNEL_MAX_VECTORS * cpu.vl
        if (
            s_x > keys
        ):  # past one block: V block and P tile within L1, and the next block would not fit or is past the cap
            assert s_x * (E + KERNEL_G) * cpu.item <= cpu.caps[0]
        assert s_x + keys > KERNEL_MAX_VECTORS * cpu.vl or (s_x + keys) * (E + KERNEL_G) * cpu.item > cpu.caps[0]
    assert kernel_s_x(8, 8, dtype) >= kernel_s_x(64, 64, dtype) >= kernel_s_x(256, 256, dtype)
    with pytest.raises(ValueError, match="Ev"):
        kernel_s_x(64, 0, dtype)
    with pytest.raises(ValueError, match="dtype"):
        kernel_s_x(64, 64, "fp16")


@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_kernel_g_is_register_blocks_whose_rows_fit_half_of_l1(dtype):
    from minijit.attention.model import (
        KERNEL_G,
        KERNEL_MAX_BLOCKS,
        KERNEL_ROWS_L1_SHARE,
        X86_ISAS,
        _host_cpu,
        kernel_g,
        kernel_s_x,
    )

    cpu = _host_cpu(dtype)
    seen = set()
    for E in (1, 8, 64, 100, 128, 256, 4096):
        s_x = kernel_s_x(E, E, dtype)
        g = kernel_g(E, E, s_x, dtype)
        seen.add(g)
        if cpu.isa not in X86_ISAS:
            assert g == KERNEL_G
            continue
        assert g % KERNEL_G == 0 and KERNEL_G <= g <= KERNEL_MAX_BLOCKS * KERNEL_G
        per_row = (2 * E + s_x) * cpu.item
        if g > KERNEL_G:  # past one block: the rows' state fits the share
            assert g * per_row <= KERNEL_ROWS_L1_SHARE * cpu.caps[0]
        # one more block would not fit, or is past the cap
        assert g == KERNEL_MAX_BLOCKS * KERNEL_G or (g + KERNEL_G) * per_row > KERNEL_ROWS_L1_SHARE * cpu.caps[0]
    if cpu.isa in X86_ISAS:
        assert len(seen) > 1  # the rule depends on the head size: narrow heads share K, V over more rows
    for bad in ({"E": 0}, {"Ev": -1}, {"s_x": 0}):
        args = {"E": 64, "Ev": 64, "s_x": 64, **bad}
        with pytest.raises(ValueError, match=next(iter(bad))):
            kernel_g(args["E"], args["Ev"], args["s_x"], dtype)
    with pytest.raises(ValueError, match="dtype"):
        kernel_g(64, 64, 64, "fp16")
