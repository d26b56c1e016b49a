"""ptx.sim's caches and compact state stay exact: shared parsed operands, state spaces that are
one code for every thread or a code per thread, launches of one cached kernel text."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ptx import mma, sim
from ptx.sim_memory import _add_at
from ptx.sim_parse import Program


def test_parsed_operands_are_shared_but_never_changed():
    """The parse cache shares operands between instructions; shfl's ``d|p`` gets its own copy."""
    text = """
.visible .entry k()
{
    shfl.sync.idx.b32 %r91|%p91, %r92, 0, 31, 0xFFFFFFFF;
    mov.b32 %r91, %r92;
    ret;
}
"""
    code = Program(text).kernels["k"].code
    assert code[0].ops[0].pred == "%p91"
    assert code[1].ops[0].pred is None and code[1].ops[0].name == "%r91"
    again = Program(text).kernels["k"].code  # a second parse: same operands, still unchanged
    assert again[1].ops[0].pred is None and again[0].ops[0].pred == "%p91"


_SPACES = """
.visible .entry k()
{{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    .shared .align 4 .b8 buf[512];
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 32;
    mul.wide.u32 %rd2, %r1, 4;
    mov.u64 %rd1, buf;
    add.u64 %rd1, %rd1, %rd2;
    @!%p1 cvta.shared.u64 %rd1, %rd1;
    {body}
    ret;
}}
"""


def test_state_space_per_thread_after_a_partial_write():
    """After a guarded cvta, warp 0 holds shared::cta addresses and warp 1 generic ones."""
    ok = "@%p1 st.shared.u32 [%rd1], %r1;\n    @!%p1 st.u32 [%rd1], %r1;"
    sim.launch(_SPACES.format(body=ok), "k", 1, 64, (), sim.Memory())
    for body in ("@!%p1 st.shared.u32 [%rd1], %r1;", "@%p1 st.u32 [%rd1], %r1;", "st.shared.u32 [%rd1], %r1;"):
        with pytest.raises(sim.SimError, match="rule state-space"):
            sim.launch(_SPACES.format(body=body), "k", 1, 64, (), sim.Memory())


def test_state_space_one_code_again_after_the_other_threads_convert():
    """cvta.to.shared in warp 1 makes every thread's address shared::cta again."""
    body = "@!%p1 cvta.to.shared.u64 %rd1, %rd1;\n    st.shared.u32 [%rd1], %r1;"
    sim.launch(_SPACES.format(body=body), "k", 1, 64, (), sim.Memory())
    with pytest.raises(sim.SimError, match="rule state-space"):
        sim.launch(_SPACES.format(body=body + "\n    st.u32 [%rd1], %r1;"), "k", 1, 64, (), sim.Memory())


def test_launches_of_one_text_are_independent():
    """One cached kernel text, launched with other arguments and block sizes: each launch computes
    its own result (registers, immediates' bit arrays per thread count)."""
    text = """
.visible .entry k(.param .u64 out, .param .u32 add)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r2, [add];
    mov.u32 %r1, %tid.x;
    mul.lo.u32 %r3, %r1, 3;
    add.u32 %r3, %r3, %r2;
    mul.wide.u32 %rd2, %r1, 4;
    add.u64 %rd1, %rd1, %rd2;
    st.global.u32 [%rd1], %r3;
    ret;
}
"""
    for n, add in ((32, 5), (64, 7), (32, 11)):
        mem = sim.Memory()
        out = mem.alloc(4 * n)
        sim.launch(text, "k", 1, n, (out, add), mem)
        np.testing.assert_array_equal(mem.read(out, np.uint32, n), np.arange(n, dtype=np.uint32) * 3 + add)


@pytest.mark.parametrize("operand", ["a", "b", "c"])
def test_mma_layout_is_cached_and_read_only(operand):
    """ptx.mma.layout is built once per argument: every caller gets the same read-only table."""
    lay = mma.layout("m16n8k16", "f16", operand)
    assert mma.layout("m16n8k16", "f16", operand) is lay
    with pytest.raises(ValueError, match="read-only"):
        lay[0, 0, 0] = 99
    n = lay.shape[1]
    want = [[mma.element_position("m16n8k16", "f16", operand, lane, i) for i in range(n)] for lane in range(32)]
    np.testing.assert_array_equal(lay, np.array(want))


_OVERLAP = """
.visible .entry k(.param .u64 src)
{{
    .reg .pred %p<3>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    .shared .align 16 .b8 buf[64];
    ld.param.u64 %rd1, [src];
    mov.u32 %r1, %tid.x;
    setp.lt.u32 %p1, %r1, 2;
    setp.eq.u32 %p2, %r1, 0;
    mov.u64 %rd2, buf;
    @%p1 cp.async.cg.shared.global [%rd2], [%rd1], 16;
    cp.async.commit_group;
    {wait} cp.async.wait_group 0;
    @%p2 ld.shared.u32 %r3, [%rd2];
    ret;
}}
"""


def test_overlapping_cp_async_bytes_stay_pending_until_every_copy_completes():
    """Two threads copy into the same 16 bytes: once thread 0 waits, thread 1's copy is still pending."""
    mem = sim.Memory()
    src = mem.upload(np.arange(16, dtype=np.uint8))
    sim.launch(_OVERLAP.format(wait=""), "k", 1, 32, (src,), mem)
    with pytest.raises(sim.SimError, match="cp.async has not completed"):
        sim.launch(_OVERLAP.format(wait="@%p2"), "k", 1, 32, (src,), mem)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-40, 39), min_size=0, max_size=30).map(lambda v: np.array(v, np.int64)),
    st.sampled_from([1, -1, 3]),
    st.sampled_from([np.int32, np.int64]),
)
def test_add_at_is_np_add_at(idx, v, dtype):
    """sim_memory._add_at (indexed counts) adds exactly what np.add.at adds, repeats included;
    out-of-range indices raise as np.add.at does."""
    got, want = np.arange(40, dtype=dtype), np.arange(40, dtype=dtype)
    try:
        np.add.at(want, idx, v)
    except IndexError:
        with pytest.raises(IndexError):
            _add_at(got, idx, v)
        return
    _add_at(got, idx, v)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype


@pytest.mark.parametrize(
    "body,msg",
    [
        # an address addend keeps its space in the threads that run the mad (the others keep theirs)
        ("@!%p1 mad.lo.u64 %rd3, %rd2, 1, %rd3;\n    @!%p1 st.shared.u32 [%rd3], %r1;", "holds a generic address"),
        ("@!%p1 mad.lo.u64 %rd3, %rd2, 1, %rd3;\n    @%p1 st.shared.u32 [%rd3], %r1;", "holds a generic address"),
        # an address as a factor is no address: checked by its value in those threads only
        ("@!%p1 mad.lo.u64 %rd3, %rd3, 1, %rd2;\n    @!%p1 st.shared.u32 [%rd3], %r1;", "not a shared-window"),
        ("@!%p1 mad.lo.u64 %rd3, %rd3, 1, %rd2;\n    @%p1 st.shared.u32 [%rd3], %r1;", "holds a generic address"),
    ],
)
def test_mad_keeps_the_space_of_an_address_addend_per_thread(body, msg):
    body = "cvta.shared.u64 %rd3, buf;\n    " + body
    with pytest.raises(sim.SimError, match=msg):
        sim.launch(_SPACES.format(body=body), "k", 1, 64, (), sim.Memory())
