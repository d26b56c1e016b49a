"""The sm_90a GEMM family: ptxas for sm_90a (no spills, no C7508/C7511), SASS (HGMMA, no local
memory), A@B in ptx.sim with ragged edges and more K tiles than stages for every operand
orientation, tf32, batches (tensor-map batch dim, C offsets from the batch table) and reductions,
and mutated kernels caught."""

import numpy as np
import pytest

from minijit.cuda import gemm_sm90 as G
from minijit.cuda.gemm import reference
from ptx import sim, toolchain
from ptx.mma import f32_to_bf16_bits
from ptx.tensormap import encode_tiled
from tests.minijit.cuda.helpers import (
    TF32_ROUNDING,
    accumulation_bound,
    assert_gemm_close,
    expected_gemm,
    tensor_core_operand,
)
from tests.minijit.cuda.mutations import mutate

SMALL = G.Sm90Spec("f16", bm=64, bn=64, stages=2)  # 256 threads: one producer, one consumer warpgroup


def _encode(dtype: str, x: np.ndarray) -> np.ndarray:
    """Host encoding of fp32 values for the kernel: float16, bf16 bit patterns, or raw fp32 (tf32)."""
    if dtype == "f16":
        return x.astype(np.float16)
    if dtype == "bf16":
        return f32_to_bf16_bits(x).astype(np.uint16)
    return x.astype(np.float32)


class Problem:
    """Random operands of a (batched, reduced) GEMM in the spec's layouts, in one buffer per tensor.

    Operand matrix ``(z, r)`` of A is stored at byte ``z * a_batch + r * a_reduce`` (strides 0 for
    operands that ``spec.batch``/``spec.reduce`` leave out: the same matrix for every z / r), with
    padded leading dims; C planes lie in *reverse* z order with a gap (non-uniform offsets are
    fine for C: they come from the batch table)."""

    def __init__(self, spec: G.Sm90Spec, m: int, n: int, k: int, batch: int = 1, reduce: int = 1, seed: int = 0):
        rng = np.random.default_rng(seed)
        S, es = spec, spec.es
        pad = 16 // es
        self.spec, self.m, self.n, self.k, self.batch, self.reduce = S, m, n, k, batch, reduce
        inner_a, outer_a = (m, k) if S.a_major == "m" else (k, m)
        inner_b, outer_b = (k, n) if S.b_major == "k" else (n, k)
        self.lda_e, self.ldb_e = -(-inner_a // pad) * pad + pad, -(-inner_b // pad) * pad
        self.ldc_e = m + 3
        za, ra = (batch if "a" in S.batch else 1), (reduce if "a" in S.reduce else 1)
        zb, rb = (batch if "b" in S.batch else 1), (reduce if "b" in S.reduce else 1)
        a = rng.standard_normal((za, ra, outer_a, self.lda_e)).astype(np.float32)
        b = rng.standard_normal((zb, rb, outer_b, self.ldb_e)).astype(np.float32)
        mat_a, mat_b = outer_a * self.lda_e * es, outer_b * self.ldb_e * es
        self.strides = dict(
            batch=batch,
            a_batch=ra * mat_a if "a" in S.batch else 0,
            b_batch=rb * mat_b if "b" in S.batch else 0,
            reduce=reduce,
            a_reduce=mat_a if "a" in S.reduce else 0,
            b_reduce=mat_b if "b" in S.reduce else 0,
        )
        plane = n * self.ldc_e + 5  # floats per C plane, with a gap
        self.c = rng.standard_normal(batch * plane).astype(np.float32)
        self.c_off = [(batch - 1 - z) * plane for z in range(batch)]  # in floats
        self.table = np.array(
            [[z * self.strides["a_batch"], z * self.strides["b_batch"], 4 * self.c_off[z]] for z in range(batch)],
            np.int64,
        )
        self.ha, self.hb = _encode(S.dtype, a), _encode(S.dtype, b)

        def A(z, r):  # logical M x K
            x = a[z if za > 1 else 0, r if ra > 1 else 0]
            return x[:, :m].T if S.a_major == "m" else x[:m, :k]

        def B(z, r):  # logical K x N
            x = b[z if zb > 1 else 0, r if rb > 1 else 0]
            return x[:, :k].T if S.b_major == "k" else x[:k, :n]

        self.want, self.scale = [], []
        for z in range(batch):
            aa = np.concatenate([A(z, r) for r in range(reduce)], axis=1)  # sum_r A_r B_r
            bb = np.concatenate([B(z, r) for r in range(reduce)], axis=0)
            cz = self.c_plane(self.c, z)[:, :m].T
            if S.dtype == "tf32":  # operands as wgmma reads raw fp32: truncated (recorded on an H200)
                q = TF32_ROUNDING["sm90a"]
                qa, qb = tensor_core_operand("tf32", aa, q), tensor_core_operand("tf32", bb, q)
                want, scale = expected_gemm(qa, qb, cz, S.first, S.last)
                self.want.append(want.T)
                self.scale.append(scale.T)
            else:
                self.want.append(reference(S.dtype, aa, bb, cz, S.first, S.last).T)

    def c_plane(self, c: np.ndarray, z: int) -> np.ndarray:
        """(n, ldc) view of batch z's C plane in a flat C buffer."""
        o = self.c_off[z]
        return c[o : o + self.n * self.ldc_e].reshape(self.n, self.ldc_e)

    def maps(self, pa: int, pb: int) -> tuple[dict, dict]:
        es = self.spec.es
        return G.tensor_maps(
            self.spec, pa, pb, self.m, self.n, self.k, self.lda_e * es, self.ldb_e * es, **self.strides
        )

    def args(self, ta: bytes, tb: bytes, pc, pt) -> tuple:
        """Kernel arguments after the two encoded tensor maps (see the module docstring of gemm_sm90)."""
        S = self.spec
        head = (ta, tb, pc) + ((pt,) if S.batch else ())
        tail = ((self.reduce,) if S.reduce else ()) + ((self.batch,) if S.persistent else ())
        return head + (self.m, self.n, self.k) + tail + (self.ldc_e * 4,)

    def check(self, got: np.ndarray) -> None:
        """Compare a flat C buffer after the launch: every plane, and the padding untouched."""
        ksum = self.k * self.reduce
        # f16/bf16 inputs are exact, only the fp32 summation order differs; tf32: the truncated
        # operands of the reference, within the fp32 accumulation bound over all checked elements
        tol = 2e-3 * max(1.0, np.sqrt(ksum / 64))
        for z in range(self.batch):
            plane, old = self.c_plane(got, z), self.c_plane(self.c, z)
            if self.spec.dtype == "tf32":
                checked = self.batch * self.n * self.m
                assert_gemm_close(plane[:, : self.m], self.want[z], self.scale[z], ksum + 1, checked, f"z={z}")
            else:
                np.testing.assert_allclose(plane[:, : self.m], self.want[z], rtol=2e-3, atol=tol, err_msg=f"z={z}")
            np.testing.assert_array_equal(plane[:, self.m :], old[:, self.m :])  # padding between columns
        written = np.zeros(self.c.size, bool)
        for z in range(self.batch):
            o = self.c_off[z]
            written[o : o + self.n * self.ldc_e] = True
        np.testing.assert_array_equal(got[~written], self.c[~written])  # gaps between planes


def _run(
    spec: G.Sm90Spec,
    m: int,
    n: int,
    k: int,
    seed: int = 0,
    ctas=None,
    batch: int = 1,
    reduce: int = 1,
    grid=None,
    mutation: str = "",
):
    """Launch in ptx.sim; returns (Problem, C buffer after the launch). ``grid``: CTAs of a
    persistent kernel (default: one per tile); ``mutation``: a name from
    :data:`tests.minijit.cuda.mutations.MUTATIONS` applied to the kernel's PTX."""
    pr = Problem(spec, m, n, k, batch, reduce, seed)
    gk = G.generate(spec)
    text = mutate(mutation, gk.text) if mutation else gk.text
    mem = sim.Memory()
    pa, pb, pc, pt = mem.upload(pr.ha), mem.upload(pr.hb), mem.upload(pr.c), mem.upload(pr.table)
    ta, tb = pr.maps(pa, pb)
    args = pr.args(encode_tiled(**ta), encode_tiled(**tb), pc, pt)
    dims = gk.grid(m, n, batch, ctas=grid) if spec.persistent else gk.grid(m, n, batch)
    sim.launch(text, gk.name, dims, gk.block, args, mem, shared_bytes=gk.shared_bytes, ctas=ctas)
    return pr, mem.read(pc, np.float32, pr.c.size)


@pytest.mark.parametrize(
    "spec,shape",
    [
        (SMALL, (100, 70, 200)),  # ragged M, N, K; 4 K tiles through 2 stages; 4 CTAs
        (G.Sm90Spec("bf16", bm=128, bn=64, stages=3, first="load", last="relu"), (130, 40, 300)),
        (G.Sm90Spec("f16", bm=64, bn=128, stages=2, first="relu"), (64, 150, 136)),
        # the other orientations: A K-major, B N-major (two 64-n boxes per stage), both
        (G.Sm90Spec("f16", bm=64, bn=64, stages=2, a_major="k"), (100, 70, 200)),
        (G.Sm90Spec("bf16", bm=64, bn=128, stages=2, b_major="n", first="load"), (70, 130, 150)),
        (G.Sm90Spec("f16", bm=128, bn=64, stages=3, a_major="k", b_major="n", last="relu"), (130, 60, 140)),
        # tf32: A and B K-major, 32-element K tiles
        (G.Sm90Spec("tf32", bm=64, bn=64, stages=2, a_major="k"), (90, 70, 110)),
        (G.Sm90Spec("tf32", bm=128, bn=128, stages=3, a_major="k", first="relu"), (72, 130, 100)),
    ],
    ids=lambda x: x.name if isinstance(x, G.Sm90Spec) else str(x),
)
def test_sim_computes_a_times_b(spec, shape):
    pr, got = _run(spec, *shape)
    pr.check(got)


@pytest.mark.parametrize(
    "spec,batch,reduce",
    [
        (G.Sm90Spec("f16", bm=64, bn=64, stages=2, batch="abc"), 3, 1),
        (G.Sm90Spec("bf16", bm=64, bn=64, stages=2, a_major="k", b_major="n", batch="ac", first="load"), 2, 1),
        (G.Sm90Spec("tf32", bm=64, bn=64, stages=2, a_major="k", batch="bc", reduce="ab"), 2, 3),
        (G.Sm90Spec("f16", bm=64, bn=64, stages=3, b_major="n", batch="c", reduce="a", last="relu"), 2, 2),
        (G.Sm90Spec("f16", bm=64, bn=64, stages=2, a_major="k", reduce="b"), 1, 3),
    ],
    ids=lambda x: x.name if isinstance(x, G.Sm90Spec) else str(x),
)
def test_sim_batched_and_reduced(spec, batch, reduce):
    """Batch planes through the tensor maps' z dim (operands without it shared), C at table offsets,
    reductions through the r dim with a ragged K per step (each step's K tail arrives as zeros)."""
    pr, got = _run(spec, 70, 66, 72, batch=batch, reduce=reduce, seed=batch + 10 * reduce)
    pr.check(got)


@pytest.mark.parametrize(
    "spec,shape,batch,reduce,grid",
    [
        # 4 x 3 tiles over 2 CTAs; ragged M, N, K
        (G.Sm90Spec("f16", bm=64, bn=64, stages=2, persistent=True), (200, 150, 130), 1, 1, 2),
        # 10 x 2 tiles: a full group of GROUP_M = 8 m-tiles and a short one; each tile once (load touch)
        (G.Sm90Spec("bf16", bm=64, bn=64, stages=2, persistent=True, first="load", a_major="k"),
         (600, 70, 64), 1, 1, 3),
        # batches and reductions: 2 x 2 tiles x 3 batch entries over 5 CTAs, the batch index per tile
        (G.Sm90Spec("f16", bm=64, bn=64, stages=2, persistent=True, batch="abc", reduce="ab", b_major="n"),
         (70, 90, 70), 3, 2, 5),
        (G.Sm90Spec("f16", bm=64, bn=64, stages=3, persistent=True, batch="c", last="relu"), (100, 64, 100), 4, 1, 3),
        # A K-major, B N-major: 3 x 2 tiles over 2 CTAs, a reduction carried across tiles
        (G.Sm90Spec("f16", bm=64, bn=64, stages=2, persistent=True, a_major="k", b_major="n", reduce="ab",
                    first="load", last="relu"), (130, 100, 90), 1, 2, 2),
        (G.Sm90Spec("tf32", bm=64, bn=64, stages=3, persistent=True, a_major="k", first="relu"),
         (130, 70, 40), 1, 1, 2),
        # more CTAs than tiles: grid() launches one per tile
        (G.Sm90Spec("f16", bm=64, bn=64, stages=2, persistent=True), (64, 64, 64), 1, 1, 8),
    ],
    ids=lambda x: x.name if isinstance(x, G.Sm90Spec) else str(x),
)  # fmt: skip
def test_sim_persistent_tiles(spec, shape, batch, reduce, grid):
    """A persistent kernel walks tiles ctaid.x, + nctaid.x, ... in grouped order with the stage
    ring and barrier phases running on across tiles: every tile once, right, with fewer CTAs."""
    gk = G.generate(spec)
    tiles = gk.tiles(shape[0], shape[1], batch)
    assert gk.grid(shape[0], shape[1], batch, ctas=grid) == (min(grid, tiles), 1, 1)
    assert [p.name for p in gk.kernel.params][-2:] == ["Z", "ldc"]
    pr, got = _run(spec, *shape, batch=batch, reduce=reduce, grid=grid, seed=grid)
    pr.check(got)


def test_persistent_tile_order_is_grouped():
    """The order the kernel computes, as numpy: tiles t -> (z, m tile, n tile), GROUP_M m-tiles per
    sweep of n, a short last group; a bijection onto all tiles."""

    def order(tm: int, tn: int, z: int):
        out = []
        for t in range(tm * tn * z):
            zz, r = divmod(t, tm * tn)
            grp, w = divmod(r, G.GROUP_M * tn)
            first = grp * G.GROUP_M
            size = min(tm - first, G.GROUP_M)
            out.append((zz, first + w % size, w // size))
        return out

    o = order(10, 3, 2)
    assert sorted(o) == [(z, m, n) for z in range(2) for m in range(10) for n in range(3)]
    assert o[:9] == [(0, m, 0) for m in range(8)] + [(0, 0, 1)]
    assert o[24:28] == [(0, 8, 0), (0, 9, 0), (0, 8, 1), (0, 9, 1)]


def test_sim_default_spec_one_cta():
    spec = G.Sm90Spec("f16")  # the GPU default: 256 x 128 tile, 2 consumer warpgroups, 4 stages
    pr, got = _run(spec, 200, 90, 5 * 64 + 8, ctas=[(0, 0, 0)])
    pr.check(got)


#: The two tf32 launches of issue 34 on an H200 (test_launch_through_driver_api, seed 3): spec,
#: (M, N, K), batch, reduce, the CTA holding the element that crossed the old 4-sigma bound, and
#: values of batch plane 0 the failing test printed, {(n, m): value} (the first of each launch
#: is the flagged element; m < 0 counts from M).
H200_TF32 = {
    "load_akbk": (
        G.Sm90Spec("tf32", a_major="k", first="load"), (513, 300, 777), 1, 1, (0, 1, 0),
        {(154, 237): -1.5801877975463867, (0, 0): -20.108881, (0, 1): 10.522806, (0, 2): -32.07979,
         (0, -3): 21.128159, (0, -2): 18.645939, (0, -1): 3.063654, (1, 0): -7.187627, (1, 1): 30.549063,
         (1, 2): 51.39348, (1, -3): -18.587675, (1, -2): -13.429574},
    ),
    "zac_ra": (
        G.Sm90Spec("tf32", a_major="k", batch="ac", reduce="a"), (300, 129, 200), 4, 3, (0, 0, 0),
        {(102, 95): 0.6471707820892334, (0, 0): 8.738156, (0, 1): 48.24115, (0, 2): -9.929513,
         (0, -3): -30.029388, (0, -2): 13.623365, (0, -1): 15.771855, (1, 0): -7.988028, (1, 1): -1.137456,
         (1, 2): -19.837393, (1, -3): 3.611108, (1, -2): 0.377871},
    ),
}  # fmt: skip


def _h200_case(name: str):
    spec, (m, n, k), batch, reduce, cta, seen = H200_TF32[name]
    pr = Problem(spec, m, n, k, batch=batch, reduce=reduce, seed=3)
    pos = [(i, j % m) for i, j in seen]
    return pr, cta, pos, np.array(list(seen.values()))


@pytest.mark.parametrize("name", sorted(H200_TF32))
def test_h200_tf32_values_are_the_truncating_reference(name):
    """The recorded chip values lie within the fp32 accumulation bound of the reference whose
    operands are truncated to tf32; the flagged one lies outside it for the rounding reference
    (so the two launches were right and the old reference was not)."""
    pr, _, pos, chip = _h200_case(name)
    ksum, checked = pr.k * pr.reduce + 1, pr.batch * pr.n * pr.m
    want = np.array([pr.want[0][p] for p in pos])
    bound = np.array([accumulation_bound(pr.scale[0][p], ksum, checked) for p in pos])
    assert (np.abs(chip - want) <= bound).all(), (chip - want, bound)
    # the same operands rounded to nearest (cvt.rna, the old reference): the flagged element is out
    old = _rna_reference(pr)[pos[0]]
    assert abs(chip[0] - old) > bound[0] * 5


def _rna_reference(pr: Problem) -> np.ndarray:
    """Batch plane 0 of ``pr`` with the operands rounded by cvt.rna.tf32 (not what wgmma reads)."""
    za = pr.ha.reshape(-1, pr.reduce if "a" in pr.spec.reduce else 1, pr.m, pr.lda_e)
    zb = pr.hb.reshape(-1, pr.reduce if "b" in pr.spec.reduce else 1, pr.n, pr.ldb_e)
    aa = np.concatenate([za[0, r if za.shape[1] > 1 else 0][:, : pr.k] for r in range(pr.reduce)], axis=1)
    bb = np.concatenate([zb[0, r if zb.shape[1] > 1 else 0][:, : pr.k].T for r in range(pr.reduce)], axis=0)
    cz = pr.c_plane(pr.c, 0)[:, : pr.m].T
    want, _ = expected_gemm(
        tensor_core_operand("tf32", aa, "rna"), tensor_core_operand("tf32", bb, "rna"), cz, pr.spec.first
    )
    return want.T


@pytest.mark.parametrize("name", sorted(H200_TF32))
def test_h200_tf32_launches_in_the_simulator(name):
    """The CTA of each issue-34 tf32 launch that holds the flagged element, in ptx.sim: its tile
    within the truncating reference's bound, and equal to the chip's values there within it."""
    pr, cta, pos, chip = _h200_case(name)
    spec = pr.spec
    gk = G.generate(spec)
    mem = sim.Memory()
    pa, pb, pc, pt = mem.upload(pr.ha), mem.upload(pr.hb), mem.upload(pr.c), mem.upload(pr.table)
    ta, tb = pr.maps(pa, pb)
    args = pr.args(encode_tiled(**ta), encode_tiled(**tb), pc, pt)
    dims = gk.grid(pr.m, pr.n, pr.batch)
    sim.launch(gk.text, gk.name, dims, gk.block, args, mem, shared_bytes=gk.shared_bytes, ctas=[cta])
    got = pr.c_plane(mem.read(pc, np.float32, pr.c.size), cta[2])
    ksum, checked = pr.k * pr.reduce + 1, pr.batch * pr.n * pr.m
    m0, n0 = cta[0] * spec.bm, cta[1] * spec.bn
    tile = (slice(n0, min(n0 + spec.bn, pr.n)), slice(m0, min(m0 + spec.bm, pr.m)))
    assert_gemm_close(got[tile], pr.want[cta[2]][tile], pr.scale[cta[2]][tile], ksum, checked, "the CTA's tile")
    inside = [
        i for i, (n, m) in enumerate(pos) if tile[0].start <= n < tile[0].stop and tile[1].start <= m < tile[1].stop
    ]
    assert 0 in inside  # the flagged element
    sim_v = np.array([got[pos[i]] for i in inside], np.float64)
    bound = np.array([accumulation_bound(pr.scale[0][pos[i]], ksum, checked) for i in inside])
    assert (np.abs(sim_v - chip[inside]) <= bound).all(), (sim_v - chip[inside], bound)


@pytest.mark.parametrize(
    "mutation,msg",
    [
        ("no_wgmma_fence", "missing wgmma.fence"),
        ("expect_tx_plus16", "deadlock"),
        ("wrong_swizzle", None),  # descriptors read a 64-byte swizzle: wrong data or out of bounds
        # the stage freed while its wgmma group may still run: the next TMA load lands on it
        ("early_release", "a tensor copy overwrites shared memory that a wgmma still reads"),
    ],
)
def test_mutated_kernels_fail(mutation, msg):
    """Deliberate bugs (PTX rewrites, tests/minijit/cuda/mutations.py) that the simulator catches."""
    spec = G.Sm90Spec("f16", bm=64, bn=64, stages=2)
    if msg is not None:
        with pytest.raises(sim.SimError, match=msg):
            _run(spec, 64, 64, 512, mutation=mutation)  # 8 K tiles through 2 stages: the producer waits
        return
    _assert_wrong(spec, 192, mutation)


def _assert_wrong(spec: G.Sm90Spec, k: int, mutation: str) -> None:
    """A mutated 64 x 64 x ``k`` kernel is refused by a descriptor rule or computes a wrong C."""
    try:
        pr, got = _run(spec, 64, 64, k, mutation=mutation)
    except sim.SimError as e:
        assert "rule wgmma-desc-start" in str(e) or "rule wgmma-desc-row" in str(e), str(e)
        return
    assert np.abs(pr.c_plane(got, 0)[:, :64] - pr.want[0]).max() > 0.1


@pytest.mark.parametrize("a_major,b_major", [("m", "k"), ("k", "n")])
def test_wrong_transpose_immediate_is_caught(a_major, b_major):
    """imm-trans-b flipped: wgmma reads A's tile in the other (K- vs MN-major) canonical layout."""
    spec = G.Sm90Spec("f16", bm=64, bn=64, stages=2, a_major=a_major, b_major=b_major)
    good = G.generate(spec).text
    trans_b = {line.rstrip(";").split(",")[-1].strip() for line in good.splitlines() if "mma_async" in line}
    bad = {
        line.rstrip(";").split(",")[-1].strip()
        for line in mutate("wrong_trans", good).splitlines()
        if "mma_async" in line
    }
    assert trans_b == {"1" if a_major == "m" else "0"} and bad == {"0" if a_major == "m" else "1"}
    _assert_wrong(spec, 128, "wrong_trans")


def test_spec_validation():
    with pytest.raises(ValueError, match="bn must be"):
        G.Sm90Spec(bn=256)
    with pytest.raises(ValueError, match="stages"):
        G.Sm90Spec(stages=1)
    with pytest.raises(ValueError, match="shared memory"):
        G.Sm90Spec(bm=256, bn=128, stages=6)
    with pytest.raises(ValueError, match="a_major"):
        G.Sm90Spec(a_major="n")
    with pytest.raises(ValueError, match="tf32 wgmma needs K-major"):
        G.Sm90Spec("tf32")  # A M-major
    with pytest.raises(ValueError, match="batch"):
        G.Sm90Spec(batch="ab")  # C always comes from the table
    with pytest.raises(ValueError, match="reduce"):
        G.Sm90Spec(reduce="c")


def test_tensor_maps_orientation_and_extra_dims():
    spec = G.Sm90Spec("bf16", bm=128, bn=128, a_major="k", b_major="n", batch="ac", reduce="ab")
    ta, tb = G.tensor_maps(
        spec, 256, 512, 100, 90, 80, 192, 208, batch=3, a_batch=1 << 20, reduce=2, a_reduce=4096, b_reduce=8192
    )
    assert (ta["global_dim"], ta["box_dim"], ta["global_strides"]) == (
        (80, 100, 2, 3),
        (64, 128, 1, 1),
        (192, 4096, 1 << 20),
    )
    assert (tb["global_dim"], tb["box_dim"], tb["global_strides"]) == ((90, 80, 2), (64, 64, 1), (208, 8192))
    assert ta["rank"] == 4 and tb["rank"] == 3
    for t in (ta, tb):
        encode_tiled(**t)  # accepted by the driver's rules
    with pytest.raises(ValueError, match="b_batch stride 32"):
        G.tensor_maps(
            spec, 256, 512, 100, 90, 80, 192, 208, batch=3, a_batch=64, b_batch=32, reduce=2, a_reduce=16, b_reduce=16
        )
    with pytest.raises(ValueError, match="a_reduce stride 0"):
        G.tensor_maps(spec, 256, 512, 100, 90, 80, 192, 208, batch=3, a_batch=64, reduce=2, b_reduce=16)
    ttf, _ = G.tensor_maps(G.Sm90Spec("tf32", a_major="k"), 256, 512, 100, 90, 80, 416, 416)
    assert ttf["dtype"] == "float32" and ttf["box_dim"] == (32, 256)


def test_plan_uniform_tables():
    z3 = np.array([[0, 0, 0], [4096, 0, 400], [8192, 0, 4000]])
    p = G.plan("f16", 64, 64, 64, "m", "k", 128, 128, z3, np.zeros((1, 2)))
    assert (p.batch, p.reduce, p.nbatch, p.a_batch, p.b_batch) == ("ac", "", 3, 4096, 0)
    r2 = np.array([[0, 0], [256, 512]])
    p = G.plan("tf32", 64, 64, 64, "k", "k", 256, 256, np.zeros((1, 3)), r2)
    assert (p.batch, p.reduce, p.nreduce, p.a_reduce, p.b_reduce) == ("", "ab", 2, 256, 512)
    assert G.plan("tf32", 64, 64, 64, "m", "k", 256, 256, np.zeros((1, 3)), r2) is None  # tf32 A M-major
    bad = z3.copy()
    bad[2, 0] = 4096 * 3  # not uniform
    assert G.plan("f16", 64, 64, 64, "m", "k", 128, 128, bad, np.zeros((1, 2))) is None
    z3[:, 0] //= 512  # 8-byte stride: not a multiple of 16
    assert G.plan("f16", 64, 64, 64, "m", "k", 128, 128, z3, np.zeros((1, 2))) is None
    assert G.plan("f16", 64, 64, 64, "m", "k", 128, 128, np.zeros((1, 3)), np.zeros((2, 2))) is None  # R x same
    assert G.plan("f16", 64, 64, 64, "m", "k", 128, 128, np.zeros((1, 3)), np.zeros((1, 2)), ptr_a=8) is None


SPECS = [
    G.Sm90Spec("f16"),
    G.Sm90Spec("bf16", first="load", last="relu"),
    SMALL,
    G.Sm90Spec("f16", bm=128),
    G.Sm90Spec("f16", a_major="k"),
    G.Sm90Spec("bf16", b_major="n"),
    G.Sm90Spec("f16", a_major="k", b_major="n", first="load"),
    G.Sm90Spec("tf32", a_major="k"),
    G.Sm90Spec("tf32", bm=128, a_major="k", batch="abc", reduce="ab", last="relu"),
    G.Sm90Spec("f16", batch="ac", reduce="b"),
    G.Sm90Spec("bf16", a_major="k", b_major="n", batch="abc"),
    G.Sm90Spec("f16", persistent=True),
    G.Sm90Spec("tf32", a_major="k", batch="abc", reduce="ab", persistent=True, first="load", last="relu"),
]


def _ptxas():
    if toolchain.find_ptxas() is None:
        pytest.skip("ptxas not found")


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_ptxas_sm90a_no_spills_no_serialization(spec):
    _ptxas()
    gk = G.generate(spec)
    assert gk.module.target == "sm_90a"
    cub = toolchain.compile(gk.text, arch="sm_90a")
    info = cub[gk.name]
    assert info.spills == 0 and info.stack_frame == 0, cub.log
    assert "C7511" not in cub.log and "C7508" not in cub.log and "C7510" not in cub.log, cub.log


@pytest.mark.parametrize("spec", [*SPECS[:2], *SPECS[4:]], ids=lambda s: s.name)
def test_sass_has_hgmma_and_no_local_memory(spec):
    """HGMMA of the tile's shape with the orientation's transpose bits (tnspA: B N-major, tnspB: A
    M-major), TMA loads of each tensor map's rank, mbarrier waits, no local memory."""
    _ptxas()
    if toolchain.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    gk = G.generate(spec)
    sass = toolchain.sass(toolchain.compile(gk.text, arch="sm_90a"))
    ops = [line.split("*/")[1].strip() for line in sass.splitlines() if line.count("*/") >= 2]
    kw = 8 if spec.dtype == "tf32" else 16
    hgmma = [op for op in ops if op.startswith(f"HGMMA.64x{spec.bm}x{kw}.F32")]
    assert hgmma, sass[:2000]
    for op in hgmma:
        assert (".tnspA" in op) == (spec.b_major == "n") and (".tnspB" in op) == (spec.a_major == "m"), op
    ranks = {f"UTMALDG.{2 + (x in spec.reduce) + (x in spec.batch)}D" for x in "ab"}
    assert ranks <= {op.split()[0] for op in ops}, ranks
    assert any(op.startswith("SYNCS.PHASECHK") for op in ops)
    assert not [op for op in ops if op.split()[0].split(".")[0] in ("LDL", "STL")]
    assert _tensor_map_operands(ops) == [], sass


def _sass_operands(op: str) -> tuple[str, list[str]]:
    """(opcode, operands) of one SASS instruction text (guard and ';' dropped)."""
    body = op.split(";")[0].strip()
    if body.startswith("@"):
        body = body.split(None, 1)[1]
    head, _, rest = body.partition(" ")
    return head, [x.strip() for x in rest.split(",")] if rest else []


def _last_def(ops: list[str], i: int, reg: str) -> int | None:
    """Index of the last instruction before ``i`` that writes uniform register ``reg`` (a 64-bit
    ULDC.64 / UMOV.64 destination URn also writes URn+1)."""
    n = int(reg[2:])
    for j in range(i - 1, -1, -1):
        head, args = _sass_operands(ops[j])
        if not args or not args[0].startswith("UR") or not args[0][2:].isdigit():
            continue
        d = int(args[0][2:])
        if d == n or (head.endswith(".64") and d + 1 == n):
            return j
    return None


def _tensor_map_operands(ops: list[str]) -> list[str]:
    """The UTMALDG instructions whose tensor-map operand register is *not* computed from a
    constant-bank load (the kernel-parameter base, ULDC c[0x0][...]): e.g. a bare ``UMOV UR8,
    0xb0``, the parameter's offset that faulted on the H200 (issue 34). Empty when all are."""
    bad = []
    for i, op in enumerate(ops):
        if not op.startswith("UTMALDG"):
            continue
        reg = op.split("[")[2].split("]")[0]
        j = _last_def(ops, i, reg)
        ok = False
        if j is not None:
            head, args = _sass_operands(ops[j])
            if head.startswith("ULDC") and "c[0x0]" in args[1]:
                ok = True  # the parameter base itself
            for src in (a for a in args[1:] if a.startswith("UR") and a[2:].isdigit()):
                k = _last_def(ops, j, src)
                if k is not None and ops[k].startswith("ULDC") and "c[0x0]" in ops[k]:
                    ok = True  # base + the parameter's offset
        if not ok:
            bad.append(f"{op} <- {ops[j] if j is not None else 'no definition'}")
    return bad


def test_sass_check_catches_the_bare_parameter_offset():
    """The SASS check above refuses the kernel of issue 34 (no cvta.param: UMOV UR8, 0xb0)."""
    _ptxas()
    if toolchain.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    gk = G.generate(SMALL)
    for text, n_bad in ((gk.text, 0), (mutate("no_cvta_param", gk.text), 2)):
        sass = toolchain.sass(toolchain.compile(text, arch="sm_90a"))
        ops = [line.split("*/")[1].strip() for line in sass.splitlines() if line.count("*/") >= 2]
        bad = _tensor_map_operands(ops)
        assert len(bad) == n_bad and all("UMOV" in b for b in bad), bad


LAUNCHES = [
    (SMALL, (100, 70, 200), 1, 1),
    (G.Sm90Spec("tf32", bm=64, bn=64, stages=2, a_major="k", batch="abc", reduce="ab"), (70, 40, 50), 2, 2),
    pytest.param(G.Sm90Spec("f16"), (1000, 700, 1000), 1, 1, marks=pytest.mark.gpu),
    pytest.param(G.Sm90Spec("bf16", first="load", last="relu"), (513, 257, 4100), 1, 1, marks=pytest.mark.gpu),
    pytest.param(G.Sm90Spec("f16", a_major="k"), (777, 300, 1030), 1, 1, marks=pytest.mark.gpu),
    pytest.param(G.Sm90Spec("bf16", b_major="n", first="relu"), (300, 555, 999), 1, 1, marks=pytest.mark.gpu),
    pytest.param(
        G.Sm90Spec("f16", a_major="k", b_major="n", last="relu"), (640, 384, 520), 1, 1, marks=pytest.mark.gpu
    ),
    pytest.param(G.Sm90Spec("tf32", a_major="k", first="load"), (513, 300, 777), 1, 1, marks=pytest.mark.gpu),
    pytest.param(G.Sm90Spec("f16", batch="abc"), (300, 200, 256), 5, 1, marks=pytest.mark.gpu),
    pytest.param(
        G.Sm90Spec("bf16", a_major="k", b_major="n", batch="bc", reduce="ab"),
        (260, 130, 130),
        3,
        4,
        marks=pytest.mark.gpu,
    ),
    pytest.param(G.Sm90Spec("tf32", a_major="k", batch="ac", reduce="a"), (300, 129, 200), 4, 3, marks=pytest.mark.gpu),
]


@pytest.mark.parametrize(
    "spec,shape,batch,reduce", LAUNCHES, ids=lambda x: x.name if isinstance(x, G.Sm90Spec) else str(x)
)
def test_launch_through_driver_api(cuda_backend, spec, shape, batch, reduce):
    """Tensor maps from the backend's encode_tensor_map_tiled, dynamic shared memory > 48 KB."""
    be = cuda_backend
    if be.simulated and max(shape) > 256:
        pytest.skip("large shapes run on a GPU only")
    if not be.simulated and be.dev.arch != "sm_90":
        pytest.skip(f"the sm_90a family needs compute capability 9.0, device is {be.dev.arch}")
    pr = Problem(spec, *shape, batch=batch, reduce=reduce, seed=3)
    gk = G.generate(spec)
    mod = (
        be.driver.load(toolchain.compile(gk.text, arch="sm_90a")) if toolchain.find_ptxas() else be.driver.load(gk.text)
    )
    fn = mod.function(gk.name, signature=gk.signature)
    drv = be.driver
    da, db, dc, dt = drv.to_device(pr.ha), drv.to_device(pr.hb), drv.to_device(pr.c), drv.to_device(pr.table)
    ta, tb = pr.maps(da.ptr, db.ptr)
    args = pr.args(drv.encode_tensor_map_tiled(**ta), drv.encode_tensor_map_tiled(**tb), dc, dt)
    fn.launch(gk.grid(shape[0], shape[1], batch), gk.block, args=args, shared=gk.shared_bytes)
    drv.synchronize()
    pr.check(dc.to_host(np.float32, pr.c.size))


def _gemm_op(dtype: str, m: int, n: int, k: int, family=None, a_major="m", b_major="k", batch=0, brgemm=0):
    """An operation with prim dims M, N, K (A ``a_major``, B ``b_major`` contiguous, C
    M-contiguous), optionally a shared (batch) dim of ``batch`` and a BR dim of ``brgemm``
    iterations, each with packed operand strides."""
    from minijit.cuda import CudaTensorOperation
    from minijit.ir import dim_t, exec_t, ptype_t
    from ptx import simdriver

    op = CudaTensorOperation(driver=simdriver, family=family)
    c, p = dim_t, exec_t
    sa = (1, 0, m) if a_major == "m" else (k, 0, 1)  # (m, n, k) strides of A
    sb = (0, k, 1) if b_major == "k" else (0, 1, n)
    dims, execs, sizes = [c.m, c.n, c.k], [p.prim, p.prim, p.prim], [m, n, k]
    s0, s1, so = list(sa), list(sb), [1, m, 0]
    ptype = ptype_t.gemm
    if brgemm:
        dims, execs, sizes = [c.k, *dims], [p.prim, *execs], [brgemm, *sizes]
        s0, s1, so, ptype = [m * k, *s0], [k * n, *s1], [0, *so], ptype_t.brgemm
    if batch:
        r = brgemm or 1
        dims, execs, sizes = [c.c, *dims], [p.shared, *execs], [batch, *sizes]
        s0, s1, so = [r * m * k, *s0], [r * k * n, *s1], [m * n, *so]
    op.setup(dtype, ptype_t.zero, ptype, ptype_t.none, dims, execs, sizes, s0, s1, so)
    return op


def test_family_selection(monkeypatch):
    op = _gemm_op("fp16", 64, 48, 96)
    assert op.family_for("sm_90") == "sm90a" and "family sm90a on compute capability 9.0" in repr(op)
    assert op.family_for("sm_80") == "mma.sync" and op.family_for("sm_89") == "mma.sync"
    assert op.family_for("sm_90", ptr_a=8) == "mma.sync"  # TMA needs 16-byte aligned operands
    for am in "mk":
        for bm in "kn":
            assert _gemm_op("bf16", 64, 48, 96, a_major=am, b_major=bm).family_for("sm_90") == "sm90a"
            assert _gemm_op("fp16", 64, 48, 96, a_major=am, b_major=bm, batch=3).family_for("sm_90") == "sm90a"
            want = "sm90a" if (am, bm) == ("k", "k") else "mma.sync"  # tf32 wgmma: K-major A and B only
            assert _gemm_op("fp32", 64, 48, 96, a_major=am, b_major=bm).family_for("sm_90") == want, (am, bm)
    op = _gemm_op("fp32", 64, 48, 96, a_major="k", batch=2, brgemm=3)
    assert op.family_for("sm_90") == "sm90a"
    spec = op.sm90_spec()
    assert (spec.dtype, spec.a_major, spec.b_major, spec.batch, spec.reduce) == ("tf32", "k", "k", "abc", "ab")
    assert _gemm_op("fp16", 64, 48, 99).family_for("sm_90") == "mma.sync"  # ldb of 198 bytes
    assert _gemm_op("fp16", 64, 48, 96, family="mma.sync").family_for("sm_90") == "mma.sync"
    with pytest.raises(Exception, match="family 'sm90a' needs"):
        _gemm_op("fp32", 64, 48, 96, family="sm90a").family_for("sm_90")
    monkeypatch.setenv("MINIJIT_CUDA_FAMILY", "mma.sync")
    assert _gemm_op("fp16", 64, 48, 96).family_for("sm_90") == "mma.sync"
    with pytest.raises(ValueError, match="family"):
        _gemm_op("fp16", 64, 48, 96, family="wgmma")


@pytest.mark.parametrize(
    "family,dtype,a_major,b_major,batch,brgemm",
    [
        ("sm90a", "fp16", "m", "k", 0, 0),
        ("mma.sync", "fp16", "m", "k", 0, 0),
        ("sm90a", "bf16", "k", "n", 2, 0),
        ("sm90a", "fp32", "k", "k", 2, 2),
    ],
)
def test_operation_execute_in_simulator(family, dtype, a_major, b_major, batch, brgemm):
    """Through CudaTensorOperation.execute on the simulated driver (tensor maps, batch table)."""
    m, n, k = 72, 40, 72
    op = _gemm_op(dtype, m, n, k, family=family, a_major=a_major, b_major=b_major, batch=batch, brgemm=brgemm)
    rng = np.random.default_rng(5)
    nb, nr = batch or 1, brgemm or 1
    af = rng.standard_normal((nb, nr, m, k)).astype(np.float32)  # logical A[z, r]: M x K
    bf = rng.standard_normal((nb, nr, k, n)).astype(np.float32)
    a = af.transpose(0, 1, 3, 2) if a_major == "m" else af  # memory order: (z, r, outer, inner)
    b = bf.transpose(0, 1, 3, 2) if b_major == "k" else bf
    kt = {"fp16": "f16", "bf16": "bf16", "fp32": "tf32"}[dtype]
    enc = (lambda x: _encode(kt, np.ascontiguousarray(x))) if dtype != "fp32" else np.ascontiguousarray
    c = np.full((nb, n, m), np.nan, np.float32)
    op.execute(enc(a).reshape(-1), enc(b).reshape(-1), c.reshape(-1))
    for z in range(nb):
        aa = np.concatenate(list(af[z]), axis=1)
        bb = np.concatenate(list(bf[z]), axis=0)
        if kt == "tf32":  # each family's operand rounding (sm90a truncates, mma.sync rounds)
            q = TF32_ROUNDING[family]
            want, scale = expected_gemm(
                tensor_core_operand(kt, aa, q), tensor_core_operand(kt, bb, q), np.zeros((m, n))
            )
            assert_gemm_close(c[z], want.T, scale.T, k * nr + 1, c.size, f"z={z}")
            continue
        want = reference(kt, aa, bb, np.zeros((m, n))).T
        np.testing.assert_allclose(c[z], want, rtol=2e-3, atol=2e-3 * nr, err_msg=f"z={z}")


def test_operation_launches_the_persistent_kernel_on_min_tiles_sms():
    """execute launches the persistent sm90a kernel on min(tiles, SMs of the device model) CTAs:
    3 batch entries (one tile each) on a 2-SM model, so CTA 0 also computes entry 2."""
    from dataclasses import replace

    from minijit.cuda import tiling

    m, n, k, nb = 72, 40, 72, 3
    op = _gemm_op("fp16", m, n, k, family="sm90a", batch=nb)
    assert op.sm90_spec().persistent
    op.gpu = replace(tiling.H100_SXM, sms=2)
    rng = np.random.default_rng(6)
    af = rng.standard_normal((nb, m, k)).astype(np.float32)
    bf = rng.standard_normal((nb, k, n)).astype(np.float32)
    c = np.full((nb, n, m), np.nan, np.float32)
    a = _encode("f16", np.ascontiguousarray(af.transpose(0, 2, 1)))  # A M-contiguous, B K-contiguous
    b = _encode("f16", np.ascontiguousarray(bf.transpose(0, 2, 1)))
    op.execute(a.reshape(-1), b.reshape(-1), c.reshape(-1))
    (launch,) = op._launches.values()
    assert launch.grid == (2, 1, 1)
    for z in range(nb):
        np.testing.assert_allclose(c[z], reference("f16", af[z], bf[z], np.zeros((m, n))).T, rtol=2e-3, atol=2e-3)
