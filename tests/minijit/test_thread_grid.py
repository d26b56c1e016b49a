"""The threads' grid over a GEMM's macro tiles and its B panel (`minijit.schedule.choose_grid`),
the last-level cache counted per sharing CPU (`minijit.packing.llc_share`), on the Xeon of issue 36
(16 threads) and the Zen 3 / Zen 4 guests (2 threads); native runs on 2..4 threads against numpy.
The decisions are made on a pinned host profile (`RULE_HOST`, or the Zen guest named) with its
caches replaced by the geometry named, for an explicit target."""

from __future__ import annotations

import collections
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minijit import TensorOperation, blocking, packing, schedule, targets
from minijit.ir import TensorConfig
from minijit.plan.nodes import head
from minijit.runtime import features
from minijit.runtime.features import CacheGeometry
from minijit.schedule import Rules
from tests.minijit.helpers import RULE_HOST, RULE_TARGET, x86_machine

KIB, MIB = 1024, 1024 * 1024

#: (L1d, L2, L3 with its sharers): the Xeon bare (120 CPUs share the L3) and in its 16-CPU guest,
#: this project's Zen 3 and Zen 4 guests (2 CPUs share a 32 MiB L3)
GEOMETRIES = {
    "xeon": (CacheGeometry(48 * KIB, 12, 64), CacheGeometry(2 * MIB, 16, 64), CacheGeometry(300 * MIB, 15, 64, 120)),
    "xeon-guest": (
        CacheGeometry(48 * KIB, 12, 64),
        CacheGeometry(2 * MIB, 16, 64),
        CacheGeometry(300 * MIB, 15, 64, 16),
    ),
    "zen3": (CacheGeometry(32 * KIB, 8, 64), CacheGeometry(512 * KIB, 8, 64), CacheGeometry(32 * MIB, 16, 64, 2)),
    "zen4": (CacheGeometry(32 * KIB, 8, 64), CacheGeometry(1 * MIB, 8, 64), CacheGeometry(32 * MIB, 16, 64, 2)),
}


def use(monkeypatch, name: str) -> tuple[CacheGeometry, CacheGeometry, CacheGeometry]:
    """Make the host's cache queries answer geometry ``name`` (the pinned profile's other answers,
    its ISA, CPU model and cores, stay)."""
    geo = GEOMETRIES[name]
    monkeypatch.setattr(features, "_sysfs_caches", lambda: dict(enumerate(geo, 1)))
    return geo


def gemm_args(m: int, n: int, k: int, dtype: str = "fp32") -> tuple:
    """numpy's C-order ``C = A @ B`` (A m x k, B k x n), as `TensorOperation.setup` arguments."""
    return (dtype, "zero", "gemm", "none", "mnk", ("undefined",) * 3, (m, n, k), (k, 0, 1), (0, 1, n), (n, 1, 0))


def check_partition(grid: schedule.ThreadGrid, threads: int) -> None:
    """Every tile owned by exactly one thread; rows and columns per thread within one of each other."""
    assert 1 <= grid.threads <= threads and grid.p_m <= grid.tiles_m and grid.p_n <= grid.tiles_n
    owners = collections.Counter()
    for t in range(grid.threads):
        rows, cols = grid.tiles(t)
        owners.update(itertools.product(rows, cols))
    assert set(owners) == set(itertools.product(range(grid.tiles_m), range(grid.tiles_n)))
    assert set(owners.values()) == {1}
    heights = {len(grid.rows(i)) for i in range(grid.p_m)}
    widths = {len(grid.cols(j)) for j in range(grid.p_n)}
    assert max(heights) - min(heights) <= 1 and max(widths) - min(widths) <= 1 and min(heights) >= 1


def check_working_set(grid, shape, block, item, l2: CacheGeometry, llc: CacheGeometry) -> None:
    """What the grid keeps in the cache, counted here from the shapes: the whole B for a shared
    panel, within `SHARED_B_LLC_SHARE` of the slices its threads own; a thread's A rows and B
    columns for private parts, against its L2 and slice."""
    (m, n, k), (mc, nc, _) = shape, block
    own = min(llc.size, llc.size // llc.shared * grid.threads)
    if grid.panel == "shared":
        assert grid.working_set == k * n * item <= own * schedule.SHARED_B_LLC_SHARE
    else:
        assert grid.panel == "private"
        rows, cols = len(grid.rows(0)), len(grid.cols(0))  # the first runs are the largest
        assert grid.working_set == (min(m, rows * mc) + min(n, cols * nc)) * k * item
        assert grid.budget == l2.size + own // grid.threads
    assert (grid.working_set <= grid.budget) == grid.fits


@settings(max_examples=150)
@given(
    shape=st.tuples(*[st.integers(1, 5000)] * 3),
    block=st.tuples(
        st.sampled_from([16, 48, 96, 256, 512, 1024]),
        st.sampled_from([16, 96, 256, 512, 1024]),
        st.sampled_from([64, 128, 256]),
    ),
    item=st.sampled_from([4, 8]),
    threads=st.integers(1, 32),
    geometry=st.sampled_from(sorted(GEOMETRIES)),
)
def test_the_grid_covers_every_tile_once_balanced_within_one_row_or_column(shape, block, item, threads, geometry):
    _, l2, llc = GEOMETRIES[geometry]
    grid = schedule.choose_grid(shape, block, item, threads, l2=l2, llc=llc)
    assert (grid.tiles_m, grid.tiles_n) == (-(-shape[0] // block[0]), -(-shape[1] // block[1]))
    check_partition(grid, threads)
    check_working_set(grid, shape, block, item, l2, llc)
    assert grid.panel in grid.describe() and f"{grid.p_m} x {grid.p_n}" in grid.describe()


def traffic(shape, item, p_m, p_n) -> int:
    """Bytes of A and B that private parts move from memory when each fits its thread's cache."""
    m, n, k = shape
    return (m * k * p_n + k * n * p_m) * item


@x86_machine
@pytest.mark.parametrize("geometry", ["xeon", "xeon-guest"])
@pytest.mark.parametrize("dtype", ["fp32", "fp64"])
def test_on_the_xeons_16_threads_the_grid_is_2d_and_the_b_panel_shared_where_it_fits(
    pin_host, monkeypatch, geometry, dtype
):
    """1024-4096 on 16 threads with the model's blocks: all 16 threads in a balanced grid; a shared B
    panel exactly where the whole B fits half of the L3 those threads own (40 MiB bare, all 300 MiB in
    the 16-CPU guest); with private parts, no other 16-thread grid of the same largest thread moves
    less A and B. TensorOperation's listing shows the grid, the panel and the shared loops' grid.
    (`RULE_HOST` with the Xeon's caches, the AVX-512 target.)"""
    pin_host(RULE_HOST)
    l1, l2, llc = use(monkeypatch, geometry)
    item = 4 if dtype == "fp32" else 8
    own = min(llc.size, llc.size // llc.shared * 16)
    for n in (1024, 2048, 3072, 4096):
        shape = (n, n, n)
        b = blocking.choose(shape, item, "x86_64-avx512", threads=16)
        block = (b.m, b.n, b.k)
        grid = schedule.choose_grid(shape, block, item, 16, mr=256 // item, l2=l2, llc=llc)
        check_partition(grid, 16)
        check_working_set(grid, shape, block, item, l2, llc)
        assert grid.threads == 16, (n, grid)
        assert (grid.panel == "shared") == (n * n * item <= own * schedule.SHARED_B_LLC_SHARE), (n, grid)
        if grid.panel == "private" and grid.fits:
            same = [
                (pm, 16 // pm)
                for pm in range(1, 17)
                if 16 % pm == 0 and pm <= grid.tiles_m and 16 // pm <= grid.tiles_n
                and -(-grid.tiles_m // pm) * -(-grid.tiles_n // (16 // pm)) == len(grid.rows(0)) * len(grid.cols(0))
            ]  # fmt: skip
            assert traffic(shape, item, grid.p_m, grid.p_n) == min(traffic(shape, item, *g) for g in same)
    op = TensorOperation("x86_64-avx512", num_threads=16)
    op.setup(*gemm_args(2048, 2048, 2048, dtype))
    line = next(ln for ln in op.listing().splitlines() if ln.startswith("// blocking of the threads"))
    grid = schedule.gemm_grid(head(op.plan).config, 16, 256 // item)
    assert grid.describe() in line and "the shared loops give" in line


@pytest.mark.parametrize("geometry", ["zen3", "zen4"])
def test_on_the_zen_guests_2_threads_share_one_b_panel_up_to_2048(pin_host, monkeypatch, geometry):
    """Zen 3 / Zen 4 (a 32 MiB L3 over 2 CPUs; the host profile of that name pinned): on 2
    threads, 384-2048 fp32 and 384-1024 fp64 (B at most 16 MiB, half the L3) share one packed B,
    both threads busy; on 1 thread a grid of one."""
    pin_host(geometry)
    _, l2, llc = use(monkeypatch, geometry)
    for item, sizes in ((4, (384, 1024, 2048)), (8, (384, 1024))):
        for n in sizes:
            b = blocking.choose((n, n, n), item, "x86_64-avx2", threads=2)
            grid = schedule.choose_grid((n, n, n), (b.m, b.n, b.k), item, 2, l2=l2, llc=llc)
            check_partition(grid, 2)
            assert grid.threads == 2 and grid.panel == "shared" and grid.fits, (item, n, grid)
            one = schedule.choose_grid((n, n, n), (b.m, b.n, b.k), item, 1, l2=l2, llc=llc)
            assert (one.p_m, one.p_n) == (1, 1)


@x86_machine
def test_the_last_level_cache_counted_is_the_threads_slices(pin_host, monkeypatch):
    """`packing.llc_share`: 300 MiB over 120 CPUs is 40 MiB for 16 threads, the whole 300 MiB when the
    guest lists 16 sharers; 16 MiB of the Zen 3's 32 MiB for one thread. On the bare Xeon a C-order
    128 x 4096 x 2048 fp32 GEMM (the kernel's A, the caller's B, 32 MiB: over half of 40 MiB; the
    kernel's B 1 MiB) therefore runs in chunks on 16 threads, which the whole 300 MiB would not
    call for (nor does the guest's view). (`RULE_TARGET` on `RULE_HOST` with the Xeon's caches.)"""
    pin_host(RULE_HOST)
    use(monkeypatch, "xeon")
    assert packing.llc_share(16) == 40 * MIB and packing.llc_share(200) == 300 * MIB
    with pytest.raises(ValueError, match="threads"):
        packing.llc_share(0)
    op = TensorOperation(RULE_TARGET, num_threads=16)
    op.setup(*gemm_args(128, 4096, 2048))
    assert op.chunks > 1
    use(monkeypatch, "xeon-guest")
    assert packing.llc_share(16) == 300 * MIB
    op = TensorOperation(RULE_TARGET, num_threads=16)
    op.setup(*gemm_args(128, 4096, 2048))
    assert op.chunks == 1
    use(monkeypatch, "zen3")
    assert packing.llc_share(1) == 16 * MIB and packing.llc_share(2) == 32 * MIB


def test_the_shared_loops_grid_and_bad_arguments():
    """`shared_partition`: shared N 2 x M 3 on 2 threads gives each thread one N part and all 3 M
    parts (1 x 2); on 4 threads (ranges of 2, 2, 1, 1 iterations) the second range wraps from one N
    part into the next, no grid. `choose_grid` names a bad argument; `tiles` a thread out of range."""
    # column-major A (6 x 4), B (4 x 6), C (6 x 6)
    dims = (("n", "shared", 2, (0, 12, 18)), ("m", "shared", 3, (2, 0, 2)), ("m", "prim", 2, (1, 0, 1)))
    dims += (("n", "prim", 3, (0, 4, 6)), ("k", "prim", 4, (6, 1, 0)))
    types, execs, sizes, strides = zip(*dims, strict=True)
    config = TensorConfig.from_lists("fp32", "none", "gemm", "none", types, execs, sizes, *zip(*strides, strict=True))
    assert schedule.shared_partition(config, 2) == (1, 2)
    assert schedule.shared_partition(config, 6) == (3, 2)
    assert schedule.shared_partition(config, 4) is None
    # `share_grid` rebuilds the shared loops as a given grid: 3 x 1 and 1 x 2 fit the M loop of 3
    # and the N loop of 2; an M part of 2 does not divide 3
    for p_m, p_n in ((3, 1), (1, 2), (3, 2)):
        regrid = schedule.share_grid(config, p_m, p_n)
        assert schedule.shared_partition(regrid, p_m * p_n) == (p_m, p_n)
        for kind in ("m", "n", "k"):  # every index still walked once
            sizes = [math.prod(d.size for d in c.dims if d.type.name == kind) for c in (config, regrid)]
            assert sizes[0] == sizes[1]
    assert schedule.share_grid(config, 2, 1) is None
    with pytest.raises(ValueError, match="p_n"):
        schedule.share_grid(config, 1, 0)
    for bad in ({"threads": 0}, {"item": 2.0}, {"threads": True}):
        args = {"shape": (64, 64, 64), "block": (16, 16, 16), "item": 4, "threads": 2, **bad}
        with pytest.raises(ValueError, match=next(iter(bad))):
            schedule.choose_grid(**args)
    grid = schedule.choose_grid((64, 64, 64), (16, 16, 16), 4, 4)
    with pytest.raises(ValueError, match="thread"):
        grid.tiles(grid.threads)


@pytest.mark.parametrize("threads", [2, 3, 4])
def test_odd_shapes_on_2_to_4_threads_match_numpy(threads):
    """Native runs of odd shapes (each over the threading threshold) on 2..4 threads against numpy;
    the listing shows the thread grid of the threaded kernel."""
    rng = np.random.default_rng(threads)
    for m, n, k in ((131, 197, 89), (257, 63, 301), (1001, 67, 33)):
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        op = TensorOperation("native", num_threads=threads)
        op.setup(*gemm_args(m, n, k))
        c = np.full((m, n), np.nan, np.float32)
        op.execute(a, b, c)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4 * np.sqrt(k))
        if op.threads_used > 1 and op.blocking is not None and op.chunks == 1:
            assert "// blocking of the threads (minijit.schedule.choose_grid): thread grid" in op.listing()
        gridded = TensorOperation("native", num_threads=threads, rules=Rules(grid=True))
        gridded.setup(*gemm_args(m, n, k))
        c2 = np.full((m, n), np.nan, np.float32)
        gridded.execute(a, b, c2)
        np.testing.assert_allclose(c2, c, rtol=1e-5, atol=1e-5 * np.sqrt(k))
        kernel = head(gridded.plan)
        if kernel.threads > 1:  # each thread one rectangle of tiles
            assert schedule.shared_partition(kernel.config, kernel.threads) is not None


def test_n_outer_counts_the_a_block_against_its_threads_slice(pin_host, monkeypatch):
    """`schedule.kernel_n_outer`: a call's A block, re-read by its thread, within a quarter of that
    thread's slice. 2 MiB (1024 x 512 fp32): beyond a quarter of the bare Xeon's 2.5 MiB slice,
    within the 16-CPU guest's 18.75 MiB; 4 MiB (1024 x 1024) on the Zen 3 guest (16 MiB per CPU) is
    within on 1 thread and on 2, as it was against 1/8 of the whole 32 MiB. The core is
    `RULE_HOST`'s, for `RULE_TARGET`: an AMD core, whose L3 streams an A block re-read from there
    as fast as the FMAs need it, so the slice alone decides (on an Intel mesh core,
    `minijit.targets.uarch.INTEL_MESH`, the 2 MiB block in the guest's slice is not streamed fast
    enough: no n_outer there)."""
    pin_host(RULE_HOST)
    target = targets.get_cpu(RULE_TARGET)

    def config(k: int) -> TensorConfig:
        args = ("fp32", "none", "gemm", "none", "mnk", ("prim",) * 3, (1024, 64, k))
        return TensorConfig.from_lists(*args, (1, 0, 1024), (0, k, 1), (1, 1024, 0))

    use(monkeypatch, "xeon")
    assert not schedule.kernel_n_outer(config(512), target, threads=16)
    use(monkeypatch, "xeon-guest")
    assert schedule.kernel_n_outer(config(512), target, threads=16)
    use(monkeypatch, "zen3")
    for threads in (1, 2):
        assert schedule.kernel_n_outer(config(1024), target, threads=threads)
        assert not schedule.kernel_n_outer(config(2048), target, threads=threads)


@x86_machine
def test_the_grid_rule_runs_the_models_grid_on_the_xeons_16_threads(pin_host, monkeypatch):
    """4096^3 fp64 on the bare Xeon's 16 threads: the default shared loops give 2 x 8 where the model
    wants 4 x 4 (equal modelled cycles); with ``Rules(grid=True)`` the loops are the model's grid,
    which the listing then shows on both sides. 2048^3 fp32, where they agree, keeps its grid.
    (`RULE_HOST` with the Xeon's caches.)"""
    pin_host(RULE_HOST)
    use(monkeypatch, "xeon")
    for n, dtype in ((4096, "fp64"), (2048, "fp32")):
        item = 8 if dtype == "fp64" else 4
        default = TensorOperation("x86_64-avx512", num_threads=16)
        default.setup(*gemm_args(n, n, n, dtype))
        gridded = TensorOperation("x86_64-avx512", num_threads=16, rules=Rules(grid=True))
        gridded.setup(*gemm_args(n, n, n, dtype))
        kernel = head(gridded.plan)
        model = schedule.gemm_grid(kernel.config, 16, 256 // item)
        assert schedule.shared_partition(kernel.config, 16) == (model.p_m, model.p_n) == (model.p_m, 16 // model.p_m)
        before = schedule.shared_partition(head(default.plan).config, 16)
        assert (before == (model.p_m, model.p_n)) == (n == 2048)
        assert f"thread grid {model.p_m} x {model.p_n}" in gridded.listing()
        assert f"the shared loops give {model.p_m} x {model.p_n} (M x N)" in gridded.listing()
