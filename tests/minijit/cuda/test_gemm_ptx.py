"""CUDA GEMM generator without a GPU: index math (PTX interpreted), numpy model of whole CTAs,
bank conflicts, ptxas for sm_80 and sm_90 with no spills, CudaTensorOperation setup/simulate."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ptx
from minijit import SetupError, error_t
from minijit.cuda import CudaTensorOperation, gemm, gemm_spec
from minijit.cuda.gemm import GemmSpec, Val
from ptx import Module, mma, sreg
from tests.minijit.cuda.helpers import check_result, gemm_problem
from tests.minijit.helpers import seed_layout

DTYPES = ("f16", "bf16", "tf32")
HAVE_PTXAS = ptx.find_ptxas() is not None


# --------------------------------------------------------------------------- a PTX ALU interpreter

_ALU = re.compile(r"^(\w+)((?:\.\w+)*)\s+(%\w+),\s*(.+);$")


def _interpret(kernel, env: dict[str, np.ndarray], threads: int) -> dict[str, np.ndarray]:
    """Run the integer ALU instructions of ``kernel`` for ``threads`` threads at once (int64
    lanes, .s32 results wrapped to 32 bits). ``env`` gives ld.param values by parameter name."""
    regs: dict[str, np.ndarray] = {"%tid.x": np.arange(threads, dtype=np.int64)}

    def val(tok: str):
        tok = tok.strip()
        if tok.startswith("%"):
            return regs[tok]
        return int(tok, 0)

    for line in kernel.body:
        line = line.strip()
        m = _ALU.match(line)
        if not m:
            continue
        op, mods, dst, rest = m.groups()
        args = [a.strip() for a in rest.split(",")]
        mods = mods.split(".")[1:]
        if op == "ld" and mods[0] == "param":
            regs[dst] = np.full(threads, env[args[0].strip("[]")], np.int64)
            continue
        if op == "mov" and not args[0].startswith("%") or op == "mov" and args[0] in regs:
            regs[dst] = np.broadcast_to(np.asarray(val(args[0]), np.int64), (threads,)).copy()
            continue
        fn = {
            "add": lambda a, b: a + b,
            "sub": lambda a, b: a - b,
            "mul": lambda a, b: a * b,
            "shl": lambda a, b: a << b,
            "shr": lambda a, b: a >> b,
            "and": lambda a, b: a & b,
            "or": lambda a, b: a | b,
            "xor": lambda a, b: a ^ b,
            "min": np.minimum,
            "max": np.maximum,
        }.get(op)
        if op == "cvt":
            regs[dst] = val(args[0]).copy()
            continue
        if fn is None:
            continue
        r = fn(val(args[0]), val(args[1]))
        if mods[-1] in ("s32", "b32", "u32"):
            r = ((r + 2**31) % 2**32) - 2**31
        regs[dst] = np.asarray(r, np.int64)
    return regs


def _tid_kernel(threads: int):
    k = Module().kernel("index_math", reqntid=threads)
    r = k.reg("s32")
    k.mov(r, sreg.tid.x)
    return k, Val(k, r)


SPECS = [
    GemmSpec("f16", 128, 128, 32, 2, 4, 3),
    GemmSpec("bf16", 64, 32, 16, 1, 1, 2, vec_a=8, vec_b=4),
    GemmSpec("tf32", 128, 128, 16, 2, 4, 3),
    GemmSpec("tf32", 32, 64, 16, 1, 2, 4, vec_a=4, vec_b=8),
    GemmSpec("f16", 32, 32, 32, 1, 1, 3, vec_a=2, vec_b=2),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_index_math_ptx_equals_numpy(spec):
    """The PTX the shared formulas emit computes, for every thread, what numpy computes."""
    T = spec.threads
    k, tid = _tid_kernel(T)
    params = {}
    for n in ("M", "N", "K", "k0", "m_cta"):
        r = k.reg("s32")
        k.ld_param(r, k.param("s32", n))
        params[n] = Val(k, r)
    env = {"M": 77, "N": 45, "K": 37, "k0": 32, "m_cta": 64}
    out: dict[str, tuple] = {}
    tids = np.arange(T, dtype=np.int64)
    for op, lay, vec in (("a", spec.layout_a, spec.vec_a), ("b", spec.layout_b, spec.vec_b)):
        for j in range(spec.copies(op)):
            for src, pv in ((tids, env), (tid, params)):
                row, col = gemm.copy_coords(lay, vec, T, src, j)
                outer, inner, nb = gemm.copy_src(lay, vec, row, col, pv["k0"], pv["m_cta"], pv["K"], pv["M"])
                vals = (lay.offset(row, col), outer, inner, nb)
                out.setdefault((op, j), []).append(vals)
    for key in gemm._fragment_plans(spec):
        out[key] = [(gemm._frag_offset(spec, tids, key),), (gemm._frag_offset(spec, tid, key),)]
    for mt in range(spec.mt):
        for nt in range(spec.nt):
            for i in range(4):
                key = ("acc", mt, nt, i)
                out[key] = [gemm.acc_coords(spec, tids, mt, nt, i), gemm.acc_coords(spec, tid, mt, nt, i)]
    regs = _interpret(k, env, T)
    for key, (want, got) in out.items():
        for w, g in zip(want, got, strict=True):
            g = regs[g.r.name] if isinstance(g, Val) else np.full(T, g)
            np.testing.assert_array_equal(g, np.broadcast_to(w, (T,)), err_msg=str(key))


# --------------------------------------------------------------------------- the numpy model


def _run_model(spec: GemmSpec, m, n, k, r=1, z=1, seed=0, exact=False, pad=(0, 0, 0)):
    """A, B, C blocks packed one after another (leading dims padded by ``pad``)."""
    spec, p = gemm_problem(spec, m, n, k, r, z, seed, pad)
    es, C = spec.es, p.C
    a_mem, b_mem = (gemm.encode(spec.dtype, x).view(np.uint8).ravel() for x in (p.A, p.B))
    c = C.copy().ravel()
    stats = gemm.simulate(
        spec, a_mem, b_mem, c, m, n, k, p.lda * es, p.ldb * es, p.ldc * 4, p.bt, p.rt, exact_mma=exact
    )
    c = c.reshape(C.shape)
    check_result(spec, p, c, rtol=1e-5, atol=1e-5 * np.sqrt(k * r))
    written = stats.written.reshape(C.shape)
    assert (written[:, :, :m] == 1).all() and (written[:, :, m:] == 0).all()
    return stats


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "m,n,k,r,z",
    [(32, 32, 32, 1, 1), (40, 24, 40, 2, 2), (33, 17, 9, 1, 1), (1, 1, 1, 1, 1), (64, 48, 70, 3, 1)],
)
def test_model_small_tiles(dtype, m, n, k, r, z):
    spec = GemmSpec(dtype, 32, 32, 32 if dtype != "tf32" else 16, 1, 1, 3)
    stats = _run_model(spec, m, n, k, r, z)
    assert set(stats.conflicts.values()) == {1}, stats.conflicts


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("first,last", [("zero", "none"), ("load", "relu"), ("relu", "none")])
def test_model_default_tiles_ragged(dtype, first, last):
    """A 128x128 CTA tile with 8 warps over a ragged 136 x 72 x 50 problem (two CTAs in M)."""
    spec = gemm.default_spec(dtype, first=first, last=last)
    stats = _run_model(spec, 136, 72, 50, pad=(8, 0, 3))
    assert set(stats.conflicts.values()) == {1}, stats.conflicts


@pytest.mark.parametrize("dtype", DTYPES)
def test_model_default_tiles_aligned_brgemm(dtype):
    spec = gemm.default_spec(dtype)
    stats = _run_model(spec, 128, 128, 64, r=2)
    assert set(stats.conflicts.values()) == {1}, stats.conflicts
    assert stats.mma == spec.warps * spec.mt * spec.nt * (64 * 2 // spec.kstep)


@pytest.mark.parametrize("dtype", DTYPES)
def test_model_exact_warp_mma(dtype):
    """The lane-level ptx.mma.mma_sync on the fragments the model loads gives the same C."""
    _run_model(GemmSpec(dtype, 32, 32, 16, 1, 1, 2), 20, 12, 16, exact=True)


@settings(max_examples=15, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    m=st.integers(1, 80),
    n=st.integers(1, 80),
    k=st.integers(1, 50),
    r=st.integers(1, 2),
    stages=st.integers(2, 4),
)
def test_model_hypothesis(dtype, m, n, k, r, stages):
    base = gemm.default_spec(dtype, m, n, k)
    if stages * (base.layout_a.nbytes + base.layout_b.nbytes) > 48 * 1024:
        with pytest.raises(ValueError, match="static shared memory"):
            gemm.default_spec(dtype, m, n, k, stages=stages)
        return
    spec = gemm.default_spec(dtype, m, n, k, stages=stages)
    _run_model(spec, m, n, k, r)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,n,k,r,z,split", [(40, 24, 70, 2, 2, 3), (33, 17, 9, 1, 1, 2), (64, 48, 70, 3, 1, 4)])
def test_model_split_k(dtype, m, n, k, r, z, split):
    """The partials kernel's model writes every element of every workspace plane once; the
    reduction's model sums them (with the touches) to the GEMM (one part has no K tile in the
    second case)."""
    from minijit.cuda import splitk

    base = GemmSpec(dtype, 32, 32, 32 if dtype != "tf32" else 16, 1, 1, 3, split_k=split)
    spec, p = gemm_problem(base, m, n, k, r, z, seed=2, pad=(3, 1, 2))
    es = spec.es
    a_mem, b_mem = (gemm.encode(dtype, x).view(np.uint8).ravel() for x in (p.A, p.B))
    ws = np.full(splitk.workspace_bytes(split, m, n, z) // 4, np.nan, np.float32)
    stats = gemm.simulate(spec, a_mem, b_mem, ws, m, n, k, p.lda * es, p.ldb * es, m * 4, p.bt, p.rt)
    assert (stats.written == 1).all()
    c = p.C.copy().ravel()
    splitk.simulate(splitk.ReduceSpec(split, "load", "relu"), ws, c, m, n, p.ldc * 4, p.bt)
    full = replace(spec, split_k=1, first="load", last="relu")
    check_result(full, p, c.reshape(p.C.shape), rtol=1e-5, atol=1e-5 * np.sqrt(k * r))


def test_model_detects_a_bad_swizzle(monkeypatch):
    """Without the swizzle the ldmatrix reads of A conflict: the bank check has teeth."""
    monkeypatch.setattr(gemm_spec, "ldmatrix_swizzle", lambda rb: gemm.Swizzle())
    stats = _run_model(gemm.default_spec("f16"), 128, 128, 32)
    assert stats.conflicts["ldmatrix_a"] > 1


def test_model_detects_out_of_bounds_reads():
    spec = GemmSpec("f16", 32, 32, 32, 1, 1, 2)
    a = np.zeros(32 * 32 * 2 - 2, np.uint8)  # one element short
    b = np.zeros(32 * 32 * 2, np.uint8)
    with pytest.raises(AssertionError, match="outside"):
        gemm.simulate(replace(spec, vec_a=2), a, b, np.zeros(32 * 32, np.float32), 32, 32, 32, 64, 64, 128)


def test_fragment_tables_used_by_the_model():
    """The model's fragments go through ptx.mma.gather; ldmatrix.trans of A's k-major rows
    yields exactly the m16n8k16 A layout."""
    tile = np.arange(16 * 16, dtype=np.float32).reshape(16, 16)  # (m, k)
    stored = tile.T.astype(np.float16).view(np.uint16)  # rows k, m contiguous
    mats = np.stack([stored[0:8, 0:8], stored[0:8, 8:16], stored[8:16, 0:8], stored[8:16, 8:16]])
    got = mma.ldmatrix(mats, trans=True)
    regs = got[..., 0].astype(np.uint32) | (got[..., 1].astype(np.uint32) << 16)
    np.testing.assert_array_equal(mma.gather("m16n8k16", "f16", "a", mma.unpack_regs("f16", regs)), tile)


# --------------------------------------------------------------------------- ptxas


def _sweep():
    out = []
    for dtype in DTYPES:
        for m, n, k in ((8192, 8192, 8192), (32, 32, 32), (64, 40, 9), (100, 300, 17)):
            for first, last in (("zero", "none"), ("load", "relu"), ("relu", "relu")):
                vecs = [(16, 16)] + ([(2, 2), (8, 4)] if dtype != "tf32" else [(4, 8)])
                for va, vb in vecs:
                    try:
                        out.append(gemm.default_spec(dtype, m, n, k, first=first, last=last, vec_a=va, vec_b=vb))
                    except ValueError:
                        pass
    return sorted(set(out), key=lambda s: s.name)


SWEEP = _sweep()


@pytest.mark.skipif(not HAVE_PTXAS, reason="ptxas not found")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptxas_sweep_no_spills(arch):
    assert len(SWEEP) >= 40
    for spec in SWEEP:
        gk = gemm.generate(spec)
        cub = ptx.compile(gk.text, arch=arch)
        info = cub[gk.name]
        assert info.spills == 0 and info.stack_frame == 0, (spec.name, info)
        assert info.registers <= 255
        assert info.shared_bytes == spec.smem_bytes
        if spec.threads == 256:
            assert info.registers <= 128, (spec.name, info.registers)  # two CTAs per SM


def test_generated_text_features():
    gk = gemm.generate(gemm.default_spec("f16", first="load", last="relu"))
    text = gk.text
    assert ".version 7.0" in text and ".target sm_80" in text
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in text
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in text
    assert "cp.async.cg.shared.global" in text and "cp.async.wait_group 1" in text
    assert gk.signature == ("u64",) * 5 + ("s32",) * 4 + ("s64",) * 3
    tf = gemm.generate(gemm.default_spec("tf32")).text
    assert "cvt.rna.tf32.f32" in tf and "m16n8k8.row.col.f32.tf32.tf32.f32" in tf


def test_spec_validation():
    with pytest.raises(ValueError, match="shared memory"):
        GemmSpec("tf32", 128, 128, 32, 2, 4, 3).validate()
    with pytest.raises(ValueError, match="warp tile"):
        GemmSpec("f16", 32, 32, 32, 1, 4, 3).validate()
    with pytest.raises(ValueError, match="vec_a"):
        GemmSpec("tf32", 32, 32, 16, 1, 1, 3, vec_a=2).validate()
    assert gemm.choose_vec(2, 64, 130) == 2 and gemm.choose_vec(4, 64, 8) == 8


# --------------------------------------------------------------------------- CudaTensorOperation


SEED_CASES = [
    ("gemm", ("seq", "seq", "seq", "prim", "prim", "prim"), "none", "none"),
    ("brgemm", ("seq", "seq", "prim", "prim", "prim", "prim"), "none", "none"),
    ("brgemm", ("shared", "seq", "prim", "prim", "prim", "prim"), "zero", "relu"),
]


def _host(dtype, x):
    return gemm.encode({"fp16": "f16", "bf16": "bf16", "fp32": "tf32"}[dtype], x)


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp32"])
@pytest.mark.parametrize("main,exec_types,first,last", SEED_CASES)
def test_operation_seed_configs_simulated(dtype, main, exec_types, first, last):
    """The seed configurations (sizes scaled down) through the launch execute() would make."""
    dims, sizes, s0, s1, so = seed_layout(2, 3, 4, 32, 32, 32)
    op = CudaTensorOperation()
    assert op.setup(dtype, first, main, last, dims, exec_types, sizes, s0, s1, so) is error_t.success
    rng = np.random.default_rng(3)
    A = rng.standard_normal((2, 4, 32, 32)).astype(np.float32)
    B = rng.standard_normal((3, 4, 32, 32)).astype(np.float32)
    C = rng.standard_normal((2, 3, 32, 32)).astype(np.float32)
    ha, hb = _host(dtype, A), _host(dtype, B)
    qa, qb = (gemm.decode(op.dtype, h) if op.dtype != "tf32" else mma.round_tf32(h) for h in (ha, hb))
    ref = np.einsum("akcb,dkec->adeb", qa.astype(np.float64), qb.astype(np.float64))
    ref = ref + (C if first == "none" else 0)
    ref = np.maximum(ref, 0) if last == "relu" else ref
    out = C.copy()
    op.simulate(ha, hb, out)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4)


def test_operation_setup_errors():
    dims, sizes, s0, s1, so = seed_layout(2, 2, 2, 32, 32, 32)
    ex = ("seq", "seq", "seq", "prim", "prim", "prim")
    op = CudaTensorOperation()
    with pytest.raises(SetupError) as e:
        op.setup("fp64", "zero", "gemm", "none", dims, ex, sizes, s0, s1, so)
    assert e.value.code is error_t.wrong_dtype
    with pytest.raises(SetupError) as e:  # A with unit stride on neither prim M nor prim K
        op.setup("fp16", "zero", "gemm", "none", dims, ex, sizes, (2, 0, 2048, 64, 0, 2), s1, so)
    assert e.value.code is error_t.wrong_stride and "dim 3" in str(e.value)
    with pytest.raises(SetupError) as e:
        op.setup("fp16", "zero", "gemm", "zero", dims, ex, sizes, s0, s1, so)
    assert e.value.code is error_t.wrong_ptype
    with pytest.raises(SetupError):
        op.setup("fp16", "zero", "add", "none", ("m", "n"), ("prim", "prim"), (4, 4), (1, 4), (1, 4), (1, 4))
    assert op.config is None


def test_operation_no_prims_uses_optimizer():
    op = CudaTensorOperation()
    strides = (1, 0, 20), (0, 40, 1), (1, 20, 0)
    op.setup("fp32", "zero", "gemm", "none", ("m", "n", "k"), ("seq",) * 3, (20, 30, 40), *strides)
    assert (op.m, op.n, op.k) == (20, 30, 40)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((40, 20)).astype(np.float32)  # a[m + k*20]
    b = rng.standard_normal((30, 40)).astype(np.float32)  # b[k + n*40]
    c = np.zeros((30, 20), np.float32)
    op.simulate(a, b, c)
    ref = mma.round_tf32(a).T.astype(np.float64) @ mma.round_tf32(b).T.astype(np.float64)
    np.testing.assert_allclose(c.T, ref, rtol=1e-5, atol=1e-4)


def test_operation_validates_arrays_before_launch():
    dims, sizes, s0, s1, so = seed_layout(2, 2, 2, 32, 32, 32)
    op = CudaTensorOperation()
    op.setup("fp16", "zero", "gemm", "none", dims, ("seq", "seq", "seq", "prim", "prim", "prim"), sizes, s0, s1, so)
    a = np.zeros((2, 2, 32, 32), np.float16)
    b = np.zeros((2, 2, 32, 32), np.float16)
    c = np.zeros((2, 2, 32, 32), np.float32)
    with pytest.raises(TypeError, match="dtype"):
        op.execute(a.astype(np.float32), b, c)
    with pytest.raises(ValueError, match="outside"):
        op.execute(a[:1], b, c)
    with pytest.raises(TypeError, match="dtype"):
        op.execute(a, b, c.astype(np.float64))
    c.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        op.execute(a, b, c)


class _FakeDeviceArray:
    """A device array as cupy would expose it (never dereferenced: validation fails first)."""

    def __init__(self, shape, strides, typestr="<f4"):
        self.__cuda_array_interface__ = {
            "shape": shape, "strides": strides, "typestr": typestr, "data": (1 << 40, False), "version": 3,
        }  # fmt: skip


def _column_major_gemm():
    """A 20 x 30 x 40 GEMM on column-major A (m x k), B (k x n), C (m x n) in the simulator, and
    the C-order arrays holding that memory: a (k x m), b (n x k), c (n x m)."""
    from ptx import simdriver

    op = CudaTensorOperation(driver=simdriver)
    strides = (1, 0, 20), (0, 40, 1), (1, 20, 0)
    op.setup("fp32", "zero", "gemm", "none", ("m", "n", "k"), ("seq",) * 3, (20, 30, 40), *strides)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((40, 20)).astype(np.float32)
    b = rng.standard_normal((30, 40)).astype(np.float32)
    return op, a, b, np.zeros((30, 20), np.float32)


def test_operation_rejects_views_with_gaps_never_reads_raw_memory():
    """The rule of minijit.arrays on the CUDA path: views with gaps or negative strides (numpy or
    device) raise ValueError naming the argument; nothing is staged or written."""
    op, a, b, c = _column_major_gemm()
    big = np.zeros(3 * 600, np.float32)
    bad = {
        "in0": [np.repeat(a, 2, axis=1)[:, ::2], np.asfortranarray(np.repeat(a, 2, axis=0))[::2]],
        "in1": [b[::-1], np.zeros(3 * 1200, np.float32)[::3]],
        "out": [big[::3], np.zeros((20, 31), np.float32).T[:30], _FakeDeviceArray((30, 20), (4, 160))],
    }
    for name, views in bad.items():
        for v in views:
            args = {"in0": a, "in1": b, "out": c, name: v}
            for call in (op.execute, op.simulate):
                with pytest.raises(ValueError, match=f"{name} is not one dense block"):
                    call(args["in0"], args["in1"], args["out"])
            assert not big.any() and not c.any()
    # a dense device array passes the layout check, C or F order (and fails later only for lack of memory)
    for strides in (None, (4, 120), (80, 4)):
        assert op._check("out", _FakeDeviceArray((30, 20), strides)).address == 1 << 40
    assert op._check("out", _FakeDeviceArray((31, 20), (80, 4)), 20).address == (1 << 40) + 80
    assert op._check("out", _FakeDeviceArray((20, 31), (4, 80)), 20).address == (1 << 40) + 80


def test_operation_reads_dense_blocks_in_any_axis_order():
    """F-order and permuted arrays are one dense block each: the configured strides count elements
    of that block from its lowest address (an F-order (m, k) A is the memory of a C-order (k, m)
    one). In0, in1 and out in F order give numpy's product in the simulator (launch and model);
    out in a guarded buffer is written and nothing around it; too small a block is refused."""
    op, a, b, _ = _column_major_gemm()
    want = b.astype(np.float64) @ a.astype(np.float64)  # C (n x m, C order) = (A B)^T
    b3 = np.ascontiguousarray(b.reshape(30, 8, 5).transpose(2, 0, 1)).transpose(1, 2, 0)  # permuted axes
    for call in (op.execute, op.simulate):
        guard = np.full(600 + 2, 7.0, np.float32)
        out = guard[1:-1].reshape(30, 20).T  # F order (m, n): the memory of C
        call(np.asfortranarray(a.T), np.asfortranarray(b.T), out)
        np.testing.assert_allclose(guard[1:-1].reshape(30, 20), want, rtol=2e-2, atol=2e-2)  # tf32
        assert guard[0] == 7.0 and guard[-1] == 7.0
        out = np.zeros((20, 30), np.float32, order="F")
        call(a, b3, out)  # b3's block is b's values in another order: read as that memory
        want3 = np.ravel(b3, order="K").reshape(30, 40).astype(np.float64) @ a
        np.testing.assert_allclose(np.ravel(out, order="K").reshape(30, 20), want3, rtol=2e-2, atol=2e-2)
    out = np.zeros((20, 30), np.float32, order="F")
    for name, args in (
        ("in0", (np.asfortranarray(a.T[:, :39]), b, out)),
        ("in1", (a, np.asfortranarray(b.T[:, :29]), out)),
        ("out", (a, b, out[:, :29])),
    ):
        with pytest.raises(ValueError, match=f"{name}: the strides reach"):
            op.execute(*args)
    assert not out.any()


def test_operation_execute_without_gpu_is_a_clear_error():
    from ptx import driver

    if driver.available():
        pytest.skip("a GPU is present")
    dims, sizes, s0, s1, so = seed_layout(1, 1, 1, 32, 32, 32)
    op = CudaTensorOperation()
    op.setup("fp16", "zero", "gemm", "none", dims, ("seq", "seq", "seq", "prim", "prim", "prim"), sizes, s0, s1, so)
    a = np.zeros(32 * 32, np.float16)
    with pytest.raises(RuntimeError, match="GPU"):
        op.execute(a, a, np.zeros(32 * 32, np.float32))


def test_tensor_operation_cuda_target_is_the_cuda_operation():
    from minijit import TensorOperation
    from minijit.cuda.operation import CudaTensorOperation

    op = TensorOperation("cuda")
    assert isinstance(op, CudaTensorOperation)
    with pytest.raises(TypeError, match="num_threads"):
        TensorOperation("cuda", num_threads=2)
    from ptx import driver, simdriver

    assert op.driver is driver and TensorOperation("cuda", driver=simdriver).driver is simdriver
    with pytest.raises(TypeError, match="lacks"):
        TensorOperation("cuda", driver=np)


def test_row_major_operands_run_swapped_in_the_simulator():
    """C-order A (M x K), B (K x N), C (M x N) with exec types undefined: the optimizer swaps the
    operands (C^T = B^T A^T), the launch computes A @ B, errors name the caller's arguments."""
    from ptx import simdriver

    m, n, k = 40, 24, 16
    op = CudaTensorOperation(driver=simdriver)
    op.setup("fp32", "zero", "gemm", "none", ("m", "n", "k"), ("undefined",) * 3, (m, n, k),
             (k, 0, 1), (0, 1, n), (n, 1, 0))  # fmt: skip
    assert op.config.inputs_swapped and (op.m, op.n, op.k) == (n, m, k)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    op.execute(a, b, c)
    ref = mma.round_tf32(a).astype(np.float64) @ mma.round_tf32(b).astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)
    with pytest.raises(ValueError, match="in1: the strides reach"):
        op.execute(a, b[:-1], c)
    with pytest.raises(TypeError, match="in0 has dtype"):
        op.execute(a.astype(np.float64), b, c)
