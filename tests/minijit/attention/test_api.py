"""`minijit.attention.scaled_dot_product_attention` against a float64 numpy reference of torch's
definition: drawn leading dims, L != S, E and Ev including 1 and odd sizes, causal, bool and float
masks, scale, GQA, huge logits, strided views; bad input refused by name before anything runs."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minijit.attention import api
from minijit.attention.api import AttentionPlan, scaled_dot_product_attention
from minijit.runtime import detected_host
from tests.conftest import examples


def reference(q, k, v, mask=None, is_causal=False, scale=None, enable_gqa=False):
    """torch's math definition in float64 (its documented reference implementation)."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    L, S = q.shape[-2], k.shape[-2]
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    if enable_gqa:
        k = np.repeat(k, q.shape[-3] // k.shape[-3], axis=-3)
        v = np.repeat(v, q.shape[-3] // v.shape[-3], axis=-3)
    bias = np.zeros((L, S))
    if is_causal:
        bias = np.where(np.tril(np.ones((L, S), bool)), 0.0, -np.inf)
    if mask is not None:
        bias = np.where(mask, 0.0, -np.inf) if mask.dtype == np.bool_ else bias + mask.astype(np.float64)
    s = q @ np.swapaxes(k, -1, -2) * scale + bias
    m = s.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        p = np.exp(s - m)
        return (p / p.sum(axis=-1, keepdims=True)) @ v


@settings(max_examples=examples(60))
@given(
    lead=st.lists(st.integers(1, 3), min_size=0, max_size=2),
    L=st.integers(1, 40),
    S=st.integers(1, 40),
    E=st.sampled_from([1, 3, 8, 17]),
    Ev=st.sampled_from([1, 5, 16]),
    dtype=st.sampled_from([np.float32, np.float64]),
    mask=st.sampled_from(["none", "causal", "bool", "float"]),
    scale=st.sampled_from([None, 0.25, 3.0]),
    big=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_matches_the_float64_reference(lead, L, S, E, Ev, dtype, mask, scale, big, seed):
    rng = np.random.default_rng(seed)
    mag = 100.0 if big else 1.0  # |scores| up to ~1e4: finite and right
    q = (rng.uniform(-1, 1, (*lead, L, E)) * mag).astype(dtype)
    k = (rng.uniform(-1, 1, (*lead, S, E)) * mag).astype(dtype)
    v = rng.uniform(-1, 1, (*lead, S, Ev)).astype(dtype)
    m = None
    if mask == "bool":
        m = rng.uniform(size=(L, S)) < 0.7
        m[:, 0] = True  # every row attends somewhere (a fully masked row is NaN in both)
    elif mask == "float":
        m = rng.uniform(-2, 2, (*lead[-1:], L, S)).astype(dtype)
    got = scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=mask == "causal", scale=scale)
    want = reference(q, k, v, m, mask == "causal", scale)
    assert got.shape == want.shape and got.dtype == dtype
    tol = 3e-5 if dtype == np.float32 else 1e-12
    if big and dtype == np.float32:  # scores of ~1e4 carry fp32 rounding of ~1e-3 into the softmax
        tol = 3e-3
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1.0, float(np.abs(want).max(initial=0))))


def test_gqa_groups_query_heads_over_key_value_heads():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 6, 9, 8))
    k, v = rng.standard_normal((2, 3, 11, 8)), rng.standard_normal((2, 3, 11, 4))
    got = scaled_dot_product_attention(q, k, v, enable_gqa=True)
    np.testing.assert_allclose(got, reference(q, k, v, enable_gqa=True), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="cannot be grouped"):
        scaled_dot_product_attention(q, np.ones((2, 4, 11, 8)), np.ones((2, 4, 11, 4)), enable_gqa=True)


@pytest.mark.parametrize("fused", [True, False])
def test_tiles_stream_long_sequences_and_odd_strided_views(monkeypatch, fused):
    monkeypatch.setattr(api, "FUSED", fused)
    monkeypatch.setattr(api, "TILE_Q", 7)
    monkeypatch.setattr(api, "TILE_S", 5)
    rng = np.random.default_rng(1)
    base = rng.standard_normal((3, 40, 24)).astype(np.float32)
    q, k, v = base[:, ::2, :6], base[:, 1::3, 3:9], base[:, :13, ::-3]  # views with odd strides
    for causal in (False, True):
        got = scaled_dot_product_attention(q, k, v, is_causal=causal)
        want = reference(q, k, v, is_causal=causal)
        np.testing.assert_allclose(got, want, rtol=0, atol=3e-5 * max(1, np.abs(want).max()))


def test_a_row_with_every_key_masked_is_nan_as_torchs_math():
    q = k = v = np.ones((1, 2, 4))
    mask = np.array([[True, True], [False, False]])
    out = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert np.isfinite(out[0, 0]).all() and np.isnan(out[0, 1]).all()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"dropout_p": 0.1}, NotImplementedError, "dropout_p"),
        ({"attn_mask": np.ones((4, 5), bool), "is_causal": True}, ValueError, "is_causal together"),
        ({"attn_mask": np.ones((3, 5), bool)}, ValueError, "does not broadcast"),
        ({"attn_mask": np.ones((2, 1, 4, 5), bool)}, ValueError, "does not broadcast"),
        ({"attn_mask": np.ones((4, 5), np.float64)}, TypeError, "float attn_mask must be float32"),
        ({"scale": float("nan")}, ValueError, "finite"),
        ({"scale": float("inf")}, ValueError, "finite"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, error, match):
    q, k, v = np.ones((2, 4, 3), np.float32), np.ones((2, 5, 3), np.float32), np.ones((2, 5, 6), np.float32)
    with pytest.raises(error, match=match):
        scaled_dot_product_attention(q, k, v, **kwargs)


def test_bad_shapes_and_dtypes_are_refused_by_name():
    f32 = np.ones((2, 4, 3), np.float32)
    with pytest.raises(ValueError, match="disagree on E"):
        scaled_dot_product_attention(f32, np.ones((2, 5, 2), np.float32), np.ones((2, 5, 6), np.float32))
    with pytest.raises(ValueError, match="disagree on S"):
        scaled_dot_product_attention(f32, np.ones((2, 5, 3), np.float32), np.ones((2, 6, 6), np.float32))
    with pytest.raises(TypeError, match="mixed dtypes"):
        scaled_dot_product_attention(f32, f32.astype(np.float64), f32)
    with pytest.raises(TypeError, match="int64"):
        scaled_dot_product_attention(np.ones((4, 3), np.int64), np.ones((4, 3), np.int64), np.ones((4, 3), np.int64))
    with pytest.raises(ValueError, match="at least 2 dims"):
        scaled_dot_product_attention(np.ones(3, np.float32), f32, f32)
    with pytest.raises(ValueError, match="do not broadcast"):
        scaled_dot_product_attention(f32, np.ones((3, 5, 3), np.float32), np.ones((3, 5, 6), np.float32))


def test_a_plan_is_set_up_once_and_checks_what_it_is_given():
    plan = AttentionPlan((2, 4, 3), (2, 5, 3), (2, 5, 6), np.dtype(np.float32), "causal")
    assert plan.out_shape == (2, 4, 6) and plan.scale_value == pytest.approx(1 / math.sqrt(3))
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 4, 3), (2, 5, 3), (2, 5, 6)))
    np.testing.assert_allclose(plan.execute(q, k, v), reference(q, k, v, is_causal=True), atol=3e-5)
    with pytest.raises(ValueError, match="the plan is for float32"):
        plan.execute(q[:, :3], k, v)


@pytest.mark.parametrize("threads", [None, "16"])
def test_long_sequences_stay_in_a_few_tiles_of_memory(monkeypatch, threads):
    """L = S = 16384, one head, E = 64: an L x S fp32 score matrix would be 1 GiB; the streamed
    plan's allocations beyond the operands and the output stay under 64 MiB (tracemalloc sees
    numpy's buffers), also with 16 threads' scratch and K^T buffers (the one head's K^T packed
    once and shared). The buffers kept between calls are dropped first, so they count."""
    import tracemalloc

    if threads:
        monkeypatch.setenv("MINIJIT_NUM_THREADS", threads)
    monkeypatch.setattr(api, "_local", threading.local())
    rng = np.random.default_rng(3)
    n = 16384
    q, k, v = (rng.standard_normal((1, n, 64), dtype=np.float32) for _ in range(3))
    tracemalloc.start()
    try:
        out = scaled_dot_product_attention(q, k, v)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak - out.nbytes < 64 << 20, f"peak {peak >> 20} MiB"
    rows = [0, 5000, n - 1]  # spot-check three rows against the reference
    want = reference(q[:, rows], k, v)
    np.testing.assert_allclose(out[:, rows], want, rtol=0, atol=3e-5 * max(1, np.abs(want).max()))


X86 = detected_host().isa == "x86_64"


@pytest.mark.skipif(not X86, reason="the fused kernel is x86-64 only")
@pytest.mark.parametrize("threads", ["1", "4"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_fused_kernel_runs_none_and_causal_and_agrees_with_the_numpy_tiles(monkeypatch, threads, dtype):
    """On x86-64 the plan calls the fused kernel for "none" and "causal" (split into blocks of
    query rows over threads when slices are few), broadcast and GQA heads included; its result
    matches the numpy tile loop (``FUSED = False``) and the float64 reference."""
    monkeypatch.setenv("MINIJIT_NUM_THREADS", threads)
    monkeypatch.setattr(api, "FUSED_ROWS", 5)
    monkeypatch.setattr(api, "DECODE_MAX_ROWS", 1)  # two and four rows: the g = 2 and g = 4 kernels
    calls = []
    real = api.fused_kernel
    monkeypatch.setattr(api, "fused_kernel", lambda dt, *a, **kw: calls.append(dt) or real(dt, *a, **kw))
    rng = np.random.default_rng(4)
    tol = 3e-5 if dtype == np.float32 else 1e-12
    shapes = [
        ((1, 4, 2, 16), (1, 4, 300, 16), (1, 4, 300, 7), False),  # two rows: a g = 2 kernel
        ((3, 2, 4, 5), (3, 2, 19, 5), (3, 2, 19, 2), False),  # g = 4
        ((1, 1, 23, 17), (1, 1, 31, 17), (1, 1, 31, 9), False),
        ((2, 6, 9, 8), (2, 3, 11, 8), (2, 3, 11, 3), True),
    ]
    for qs, ks, vs, gqa in shapes:
        q, k, v = (rng.standard_normal(s).astype(dtype) for s in (qs, ks, vs))
        q = np.broadcast_to(q[:, :1], q.shape) if not gqa else q  # a broadcast (stride 0) head
        for causal in (False, True):
            got = scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
            want = reference(q, k, v, is_causal=causal, enable_gqa=gqa)
            np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1, np.abs(want).max()))
            monkeypatch.setattr(api, "FUSED", False)
            tiles = scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
            monkeypatch.setattr(api, "FUSED", True)
            np.testing.assert_allclose(got, tiles, rtol=0, atol=tol * max(1, np.abs(want).max()))
    assert len(calls) == 8 and all(np.dtype(c) == dtype for c in calls)
    one = scaled_dot_product_attention(q[..., :1, :], k, v, enable_gqa=True)  # decode: numpy's GEMV
    assert len(calls) == 8
    want = reference(q[..., :1, :], k, v, enable_gqa=True)
    np.testing.assert_allclose(one, want, rtol=0, atol=tol * max(1, np.abs(want).max()))
    assert api.fused_kernel(dtype) is not None


@pytest.mark.skipif(not X86, reason="the fused kernel is x86-64 only")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bool_masks_run_the_fused_kernel_as_a_bias(monkeypatch, dtype):
    """A bool mask runs the fused kernel, its blocks made the additive bias (0 / -inf) just before
    each call: full masks, a padding mask broadcast over rows and heads (converted as one row), a
    transposed view, a column broadcast, a row with no key (NaN, as torch's math); rows in pieces
    (`BOOL_MASK_ROWS`) and several key chunks, so pieces and chunks resume each row's state."""
    calls, made = [], []
    real, real_bias = api.fused_kernel, api._bool_bias
    monkeypatch.setattr(api, "fused_kernel", lambda dt, *a, **kw: calls.append(dt) or real(dt, *a, **kw))
    monkeypatch.setattr(api, "_bool_bias", lambda b, dt: made.append(b.shape) or real_bias(b, dt))
    monkeypatch.setattr(api, "BOOL_MASK_ROWS", 5)
    monkeypatch.setattr(api, "KEY_CHUNK_BYTES", 16 * 13 * np.dtype(dtype).itemsize)  # a few keys a chunk
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal(s).astype(dtype) for s in ((2, 3, 13, 8), (2, 3, 97, 8), (2, 3, 97, 5)))
    full = rng.uniform(size=(2, 3, 13, 97)) < 0.6
    full[..., 0] = True
    none_row = rng.uniform(size=(13, 97)) < 0.5
    none_row[:, 3] = True
    none_row[4] = False  # row 4 attends nowhere: NaN
    masks = [
        full,
        rng.uniform(size=(2, 1, 1, 97)) < 0.7,  # padding: one row for all rows and heads (row stride 0)
        (rng.uniform(size=(97, 13)) < 0.6).T | (np.arange(97) == 0)[:, None].T,  # a transposed view
        np.broadcast_to(rng.uniform(size=(13, 1)) < 0.8, (13, 97)) | (np.arange(97) == 1),  # rows all-or-most
        none_row,
    ]
    tol = 3e-5 if dtype == np.float32 else 1e-12
    for m in masks:
        got = scaled_dot_product_attention(q, k, v, attn_mask=m)
        want = reference(q, k, v, m)
        np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1, np.nanmax(np.abs(want))))
    assert np.isnan(got[..., 4, :]).all() and not np.isnan(np.delete(got, 4, axis=-2)).any()
    assert len(calls) == len(masks)
    assert made and max(r for r, _ in made) <= 5
    plan = AttentionPlan(q.shape, k.shape, v.shape, dtype, "bool", mask_shape=full.shape)
    assert plan.path().startswith("fused")


def test_bool_bias_converts_only_the_masks_own_elements():
    m = np.broadcast_to(np.array([True, False, True]), (4, 3))  # row stride 0
    b = api._bool_bias(m, np.dtype(np.float32))
    assert b.strides == (0, 4) and b.dtype == np.float32
    np.testing.assert_array_equal(b[2], [0, -np.inf, 0])
    c = api._bool_bias(np.broadcast_to(np.array([[True], [False]]), (2, 5)), np.dtype(np.float64))
    assert c.strides == (8, 0)
    np.testing.assert_array_equal(c[:, 4], [0, -np.inf])
    f = np.asfortranarray(np.eye(3, dtype=bool))  # an F-order mask: the bias still has column stride 1
    assert api._bool_bias(f, np.dtype(np.float32)).strides == (12, 4)


@pytest.mark.skipif(not X86, reason="the fused kernel is x86-64 only")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_masks_run_the_fused_kernel_with_any_strides(monkeypatch, dtype):
    """A float mask is the fused kernel's bias: broadcast rows and columns (stride 0), a
    transposed view (copied), -inf entries and a row of -inf (NaN, as torch's math)."""
    calls = []
    real = api.fused_kernel
    monkeypatch.setattr(api, "fused_kernel", lambda dt, *a, **kw: calls.append(dt) or real(dt, *a, **kw))
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal(s).astype(dtype) for s in ((2, 3, 13, 8), (2, 3, 37, 8), (2, 3, 37, 5)))
    base = rng.uniform(-2, 2, (37, 13)).astype(dtype)
    masks = [
        rng.uniform(-2, 2, (2, 3, 13, 37)).astype(dtype),
        base.T,  # column stride 13: copied
        rng.uniform(-2, 2, (37,)).astype(dtype),  # one row for all (row stride 0)
        rng.uniform(-2, 2, (3, 13, 1)).astype(dtype) + np.zeros((1, 1, 37), dtype),
        np.broadcast_to(rng.uniform(-2, 2, (13, 1)).astype(dtype), (13, 37)),  # column stride 0
    ]
    inf = rng.uniform(-2, 2, (13, 37)).astype(dtype)
    inf[rng.uniform(size=(13, 37)) < 0.3] = -np.inf
    inf[4] = -np.inf
    masks.append(inf)
    tol = 3e-5 if dtype == np.float32 else 1e-12
    for m in masks:
        got = scaled_dot_product_attention(q, k, v, attn_mask=m)
        want = reference(q, k, v, m)
        np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1, np.nanmax(np.abs(want))))
    assert np.isnan(got[..., 4, :]).all()
    assert len(calls) == len(masks)


@settings(max_examples=examples(40))
@given(
    lead=st.lists(st.integers(1, 3), min_size=0, max_size=2),
    L=st.integers(1, 4),
    S=st.integers(1, 70),
    E=st.sampled_from([1, 5, 16]),
    Ev=st.sampled_from([1, 7]),
    dtype=st.sampled_from([np.float32, np.float64]),
    mask=st.sampled_from(["none", "causal", "bool", "float"]),
    split=st.integers(1, 80),
    threads=st.integers(1, 5),
    big=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_decode_merges_key_chunks_at_any_count(lead, L, S, E, Ev, dtype, mask, split, threads, big, seed):
    """The decode path (L <= DECODE_MAX_ROWS): the key axis in ``split`` chunks (clamped to S) over
    ``threads`` threads, each chunk's (max, sum, output) triple merged; chunks whose keys are all
    masked (weight 0) included; against the float64 reference. (Logits up to ~1e3 here: at ~1e4
    the fp32 rounding of a score, ~5e-4, can alone pass the tolerance, on every path.)"""
    rng = np.random.default_rng(seed)
    mag = 30.0 if big else 1.0
    q = (rng.uniform(-1, 1, (*lead, L, E)) * mag).astype(dtype)
    k = (rng.uniform(-1, 1, (*lead, S, E)) * mag).astype(dtype)
    v = rng.uniform(-1, 1, (*lead, S, Ev)).astype(dtype)
    m = None
    if mask == "bool":
        m = rng.uniform(size=(L, S)) < 0.8
        m[:, rng.integers(S)] = True  # every row sees a key
        m[:, : S // 2] = False  # the first chunks see nothing
    elif mask == "float":
        m = rng.uniform(-3, 3, (*lead, L, S)).astype(dtype)
    kind = {"none": "none", "causal": "causal", "bool": "bool", "float": "float"}[mask]
    plan = AttentionPlan(
        q.shape,
        k.shape,
        v.shape,
        np.dtype(dtype),
        kind,
        None if m is None else m.shape,
        threads=threads,
        key_split=split,
    )
    keys = min(S, L) if mask == "causal" else S
    assert len(api.decode_chunks(keys, 1, L, 4, threads, split)) == min(split, keys)
    got = plan.execute(q, k, v, m)
    want = reference(q, k, v, m, is_causal=mask == "causal")
    tol = 3e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1, np.abs(want).max()))


def test_decode_chunks_cover_the_keys_once():
    for keys in (1, 7, 255, 256, 4096, 5000):
        for threads in (1, 2, 16):
            for split in (None, 1, 3, 64):
                chunks = api.decode_chunks(keys, 32, 1, 4, threads, split)
                assert chunks[0][0] == 0 and chunks[-1][1] == keys
                assert all(a < b for a, b in chunks) and all(
                    b == c for (_, b), (c, _) in zip(chunks[:-1], chunks[1:], strict=True)
                )
                if split is None:
                    assert len(chunks) == min(threads, max(1, keys // api.DECODE_MIN_KEYS))
    # one chunk's scores stay under DECODE_CHUNK_BYTES: many slices take more chunks
    chunks = api.decode_chunks(4096, 4096, 4, 4, 1)
    assert max(b - a for a, b in chunks) * 4096 * 4 * 4 <= api.DECODE_CHUNK_BYTES


def test_decode_takes_no_fused_kernel_and_splits_over_threads(monkeypatch):
    monkeypatch.setattr(api, "fused_kernel", lambda *a, **kw: pytest.fail("decode reads K as it is"))
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 4, 1, 16), (2, 4, 1000, 16), (2, 4, 1000, 16)))
    got = AttentionPlan(q.shape, k.shape, v.shape, np.dtype(np.float32), threads=3).execute(q, k, v)
    want = reference(q, k, v)
    np.testing.assert_allclose(got, want, rtol=0, atol=3e-5 * max(1, np.abs(want).max()))


@pytest.mark.skipif(not X86, reason="the fused kernel is x86-64 only")
@settings(max_examples=examples(30))
@given(
    L=st.integers(5, 60),
    S=st.integers(1, 120),
    E=st.sampled_from([1, 3, 8]),
    Ev=st.sampled_from([1, 5, 9]),
    dtype=st.sampled_from([np.float32, np.float64]),
    mask=st.sampled_from(["none", "causal", "float"]),
    tiles=st.integers(1, 3),
    threads=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_the_fused_kernel_chains_key_chunks(L, S, E, Ev, dtype, mask, tiles, threads, seed):
    """Key axes longer than `KEY_CHUNK_BYTES` of K and V run in chunks of whole key tiles, the
    kernel resuming each row's (max, sum, output) (``chain``); causal rows final in the chunk of
    their diagonal; float masks with -inf entries and a row masked in the first chunks only and a
    row masked everywhere (NaN); against the float64 reference."""
    rng = np.random.default_rng(seed)
    q, k = (rng.uniform(-3, 3, (2, n, E)).astype(dtype) for n in (L, S))
    v = rng.uniform(-1, 1, (2, S, Ev)).astype(dtype)
    m = None
    if mask == "float":
        m = rng.uniform(-2, 2, (L, S)).astype(dtype)
        m[rng.uniform(size=(L, S)) < 0.3] = -np.inf
        m[1, : S // 2] = -np.inf
        m[3] = -np.inf
    s_x = 16 if dtype == np.float32 else 8  # the smallest AVX2 tile: up to 8 chunks
    plan = AttentionPlan(
        q.shape, k.shape, v.shape, np.dtype(dtype), mask, None if m is None else m.shape, threads=threads, tile=(6, s_x)
    )
    calls = []
    real = api._pack_kt
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(api, "KEY_CHUNK_BYTES", tiles * s_x * (E + Ev) * np.dtype(dtype).itemsize)
        mp.setattr(api, "FUSED_ROWS", 7)
        mp.setattr(api, "_pack_kt", lambda *a: calls.append(a) or real(*a))
        got = plan.execute(q, k, v, m)
    assert calls  # the fused kernel ran
    want = reference(q, k, v, m, is_causal=mask == "causal")
    tol = 3e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1, np.nanmax(np.abs(want))))
    if mask == "float":
        assert np.isnan(got[:, 3]).all()


def test_pack_args_refuses_a_chain_without_its_state():
    from minijit.kernels.x86_64 import attention as kernel

    base = {n: 1 for n in kernel.ARGS} | {"causal": 0, "lse": 0, "chain": 0}
    assert list(kernel.pack_args(**base)) == [base[n] for n in kernel.ARGS]
    for chain in (1, 2, 3):
        with pytest.raises(ValueError, match="chain"):
            kernel.pack_args(**(base | {"chain": chain}))  # no lse to resume from or keep to
        kernel.pack_args(**(base | {"chain": chain, "lse": 4096}))
    with pytest.raises(ValueError, match="chain"):
        kernel.pack_args(**(base | {"chain": 4, "lse": 4096}))


@settings(max_examples=examples(40), deadline=None)
@given(
    outer=st.sampled_from([(), (2,)]),
    kv_heads=st.integers(1, 3),
    group=st.integers(2, 4),
    L=st.sampled_from([1, 2, 3, 9, 20]),
    S=st.integers(1, 40),
    E=st.sampled_from([1, 5, 8]),
    Ev=st.sampled_from([1, 3, 8]),
    mask=st.sampled_from(["none", "causal", "bool", "float"]),
    kv_broadcast=st.booleans(),
    threads=st.sampled_from(["1", "2"]),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**16),
)
def test_gqa_reads_each_key_value_head_once_without_copies(
    outer, kv_heads, group, L, S, E, Ev, mask, kv_broadcast, threads, dtype, seed
):
    """GQA on every path (fused, decode, numpy tiles; masks; key/value broadcast over the outer
    dims) against the reference, with K^T packed once per key/value head (never per query head)
    and no np.repeat of key or value."""
    packs = []
    real_pack = api._pack_kt

    def pack(kt, ks, *a):
        packs.append(ks.__array_interface__["data"][0])
        real_pack(kt, ks, *a)

    rng = np.random.default_rng(seed)
    q = rng.standard_normal((*outer, kv_heads * group, L, E)).astype(dtype)
    kv_lead = ((1,) if outer and kv_broadcast else outer) + (kv_heads,)
    k = rng.standard_normal((*kv_lead, S, E)).astype(dtype)
    v = rng.standard_normal((*kv_lead, S, Ev)).astype(dtype)
    m = None
    if mask == "bool":
        m = rng.uniform(size=(L, S)) < 0.7
        m[:, 0] = True
    elif mask == "float":
        m = rng.uniform(-2, 2, (kv_heads * group, L, S)).astype(dtype)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINIJIT_NUM_THREADS", threads)
        mp.setattr(api, "_pack_kt", pack)
        mp.setattr(np, "repeat", lambda *a, **kw: pytest.fail("key or value repeated"))
        got = scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=mask == "causal", enable_gqa=True)
    want = reference(q, k, v, m, mask == "causal", enable_gqa=True)
    tol = 3e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1.0, float(np.abs(want).max(initial=0))))
    # every packing reads one key/value head's K: at most one distinct head a pack call, and the
    # heads packed are the key/value heads (outer x kv_heads), not the query heads
    assert len(set(packs)) <= math.prod(outer or (1,)) * kv_heads
