"""The float16 route converts with minijit's conversion kernels (`minijit.kernels.convert`): a spy
counts the kernel calls, and the results are bit for bit those of the numpy ``astype`` fallback."""

from __future__ import annotations

import numpy as np
import pytest

import minijit
from minijit.kernels import convert
from minijit.runtime.features import detected_host

HOST = detected_host()
HAS_KERNEL = convert.kernel("fp16", "fp32") is not None
needs_kernel = pytest.mark.skipif(not HAS_KERNEL, reason="this host has no conversion kernel (no F16C)")


class Spy:
    """Counts the calls of a kernel and their element counts, then runs it."""

    def __init__(self, kernel) -> None:
        self.kernel, self.calls = kernel, []

    def __call__(self, src, dst, n) -> None:
        self.calls.append(n)
        self.kernel(src, dst, n)


@pytest.fixture
def spies(monkeypatch):
    made = {d: Spy(convert.kernel(*d)) for d in (("fp16", "fp32"), ("fp32", "fp16"))}
    monkeypatch.setattr(convert, "kernel", lambda src, dst: made[(src, dst)])
    return made


def _fallback(monkeypatch, fn):
    """``fn()`` with no conversion kernel (numpy's astype everywhere), then restored."""
    with monkeypatch.context() as m:
        m.setattr(convert, "kernel", lambda src, dst: None)
        return fn()


@needs_kernel
def test_float16_route_calls_the_conversion_kernels(spies, monkeypatch) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((37, 19)).astype(np.float16)
    b = rng.standard_normal((19, 23)).astype(np.float16)
    got = minijit.einsum("ij,jk->ik", a, b)
    assert spies[("fp16", "fp32")].calls == [37 * 19, 19 * 23]
    assert spies[("fp32", "fp16")].calls == [37 * 23]
    want = _fallback(monkeypatch, lambda: minijit.einsum("ij,jk->ik", a, b))
    assert got.dtype == want.dtype == np.float16
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@needs_kernel
def test_mixed_float16_float32_widens_only_the_half_operand(spies) -> None:
    a = np.arange(12, dtype=np.float16).reshape(3, 4)
    b = np.ones((4, 5), np.float32)
    got = minijit.einsum("ij,jk->ik", a, b)
    assert got.dtype == np.float32
    assert spies[("fp16", "fp32")].calls == [12] and spies[("fp32", "fp16")].calls == []
    np.testing.assert_array_equal(got, a.astype(np.float32) @ b)


@needs_kernel
def test_aarch64_target_converts_on_the_host(spies, monkeypatch) -> None:
    """The operands are host arrays whatever the target: the host's kernel converts them."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((9, 6)).astype(np.float16)
    b = rng.standard_normal((6, 7)).astype(np.float16)
    got = minijit.einsum("ij,jk->ik", a, b, target="aarch64-neon")
    assert spies[("fp16", "fp32")].calls == [54, 42] and spies[("fp32", "fp16")].calls == [63]
    want = _fallback(monkeypatch, lambda: minijit.einsum("ij,jk->ik", a, b, target="aarch64-neon"))
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("order", ["C", "F", "strided", "0d", "empty"])
def test_conversions_keep_shape_layout_and_bits(order) -> None:
    rng = np.random.default_rng(2)
    bits = rng.integers(0, 1 << 16, (7, 11), dtype=np.uint64).astype(np.uint16)
    bits[((bits & 0x7C00) == 0x7C00) & ((bits & 0x3FF) != 0)] |= 0x0200  # quiet NaNs only (bit for bit comparable)
    x = bits.view(np.float16)
    x = {"C": x, "F": np.asfortranarray(x), "strided": x[:, ::2], "0d": x[3, 4].reshape(()), "empty": x[:0]}[order]
    wide = convert.to_float32(x)
    assert wide.shape == x.shape and wide.dtype == np.float32
    assert wide.flags.c_contiguous == x.astype(np.float32).flags.c_contiguous
    np.testing.assert_array_equal(wide.view(np.uint32), x.astype(np.float32).view(np.uint32))
    back = convert.to_float16(wide * np.float32(1.0009765625))  # not exact: rounds
    with np.errstate(all="ignore"):
        want = (wide * np.float32(1.0009765625)).astype(np.float16)
    np.testing.assert_array_equal(back.view(np.uint16), want.view(np.uint16))


def test_conversion_rejects_other_dtypes() -> None:
    with pytest.raises(TypeError, match="x must be a float16"):
        convert.to_float32(np.ones(3, np.float32))
    with pytest.raises(TypeError, match="x must be a float32"):
        convert.to_float16(np.ones(3, np.float64))
    with pytest.raises(ValueError, match="src, dst"):
        convert.kernel("fp16", "fp64")


def test_kernel_choice_follows_the_host() -> None:
    """x86-64: the F16C kernel exactly when the host has AVX2 and F16C; AArch64: the NEON one."""
    from minijit.runtime.features import _cpuinfo_flags

    k = convert.kernel("fp32", "fp16")
    if HOST.isa == "x86_64":
        assert (k is not None) == (HOST.avx2 and "f16c" in _cpuinfo_flags())
        assert k is None or k.name == "convert_fp32_fp16_avx2"
    elif HOST.isa == "aarch64":
        assert k is not None
    else:
        assert k is None
