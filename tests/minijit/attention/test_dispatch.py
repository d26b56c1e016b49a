"""The fused kernel comes from the native target (`Target.attention_kernel`): the x86-64 and AArch64
generators share one calling convention, and the API runs a kernel that cannot resume a row's
state between key chunks over the whole key axis at once."""

from __future__ import annotations

import types

import numpy as np
import pytest

from minijit import targets
from minijit.attention import api
from minijit.kernels.aarch64 import attention as arm
from minijit.kernels.x86_64 import attention as x86
from minijit.runtime import runs_natively
from minijit.targets.aarch64 import AArch64Target
from tests.minijit.attention.test_api import reference

native_x86 = pytest.mark.skipif(not (runs_natively("x86_64") and targets.native().supported), reason="x86-64 host")


def test_both_generators_share_the_calling_convention():
    """The AArch64 kernel's arguments are the x86-64 kernel's without the chunk chaining (lse, chain)."""
    assert x86.ARGS[: len(arm.ARGS)] == arm.ARGS
    assert x86.ARGS[len(arm.ARGS) :] == ("lse", "chain")
    assert "chain" not in arm.ARGS


@pytest.mark.parametrize("isa", ["neon", "sve"])
def test_aarch64_target_gives_no_kernel_where_its_code_does_not_run(isa):
    """The API calls the kernel through ctypes: an AArch64 target on another host has none."""
    t = AArch64Target(isa=isa, sve_vl=256)
    found = t.attention_kernel("fp32", 4)
    if runs_natively("aarch64"):  # pragma: no cover - an AArch64 host
        module, kernel, name, g, s_x = found
        assert module is arm and name in arm.ISAS and g == 4 and kernel.address
    else:
        assert found is None


@native_x86
def test_native_x86_target_hands_out_the_x86_kernel_with_a_validated_tile():
    module, kernel, isa, g, s_x = targets.native().attention_kernel("fp32", 5, None)
    assert module is x86 and isa == targets.native().isa and kernel.address
    assert (g, s_x) == x86.check_tiles("fp32", isa, 5)
    with pytest.raises(ValueError, match="g must"):
        targets.native().attention_kernel("fp32", 99)


@native_x86
@pytest.mark.parametrize("causal", [False, True])
def test_a_kernel_without_chaining_runs_the_whole_key_axis_in_one_call(monkeypatch, causal):
    """The API with a generator whose ARGS have no chain, as AArch64's: one kernel call
    per (slice, block of rows) even where the key axis passes the L2 chunk, and right results."""
    cls = type(targets.native())
    real = cls.attention_kernel
    # the x86-64 kernel reads 17 argument slots: the last two stay 0 (chain 0: start and finish in
    # one call), as for a generator without them; the API must not chunk the key axis for it
    unchained = types.SimpleNamespace(ARGS=(*arm.ARGS, "lse", "spare"), scratch_bytes=x86.scratch_bytes)
    calls = []

    def attention_kernel(self, *args, **kwargs):
        module, kernel, isa, g, s_x = real(self, *args, **kwargs)
        return unchained, kernel, isa, g, s_x

    monkeypatch.setattr(api, "_fused", {})
    monkeypatch.setattr(cls, "attention_kernel", attention_kernel)
    monkeypatch.setattr(api, "KEY_CHUNK_BYTES", 1 << 10)  # many chunks for a chaining kernel
    wrapped = api.fused_kernel

    def counting(*args, **kwargs):
        function, *rest = wrapped(*args, **kwargs)
        return (lambda *a: calls.append(1) or function(*a)), *rest

    monkeypatch.setattr(api, "fused_kernel", counting)
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, n, 16)).astype(np.float32) for n in (200, 300, 300))
    plan = api.AttentionPlan(q.shape, k.shape, v.shape, np.float32, mask="causal" if causal else "none", threads=1)
    got = plan.execute(q, k, v)
    want = reference(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), is_causal=causal)
    np.testing.assert_allclose(got, want, atol=3e-5, rtol=0)
    assert len(calls) == 2  # one per slice: no key chunks
    monkeypatch.setattr(api, "_fused", {})


@pytest.mark.parametrize("dtype", [np.float32, "float32", np.dtype("float32")])
def test_a_plan_takes_any_spelling_of_its_dtype(dtype):
    plan = api.AttentionPlan((3, 4), (5, 4), (5, 2), dtype)
    assert plan.dtype == np.dtype(np.float32) and plan == api.AttentionPlan((3, 4), (5, 4), (5, 2), np.float32)


@pytest.mark.parametrize("dtype", [None, np.int32, "float16", "no such dtype", object()])
def test_a_plan_refuses_other_dtypes_naming_them(dtype):
    with pytest.raises(TypeError, match="dtype"):
        api.AttentionPlan((3, 4), (5, 4), (5, 2), dtype)
