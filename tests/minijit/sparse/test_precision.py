"""Input precisions of the tensor-core SpMM kernels: what the device receives is what the
reference (`Precision.quantize`) models, for float64 values too."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from minijit.sparse.precision import PRECISIONS, precision


def decoded(name: str, device: np.ndarray) -> np.ndarray:
    """The device elements as float64, the tensor cores' rounding applied (tf32 rounds in the kernel)."""
    p = precision(name)
    if p.mma == "bf16":
        return (device.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if p.mma == "tf32":
        return p.quantize(device)
    return device.astype(np.float64)


#: float64 just below the float16 halfway point 1903.5 * 2^-11: float32 rounds it onto the halfway
#: point and float16 then to even (1904); float64 straight to float16 would give 1903
BELOW_HALFWAY = 1903.5 * 2.0**-11 - 2.0**-40


@pytest.mark.parametrize("name", sorted(PRECISIONS))
def test_device_values_round_through_float32_like_quantize(name):
    p = precision(name)
    x = np.array([BELOW_HALFWAY, -BELOW_HALFWAY, 0.92944335, 1.0, 0.0, 65504.0, 1e-7])
    assert decoded(name, p.device_array(x)).tolist() == p.quantize(x).tolist()
    if name == "fp16":
        assert p.device_array(x)[0] == np.float16(1904 * 2.0**-11)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(PRECISIONS)),
    x=hnp.arrays(np.float64, st.integers(1, 16), elements=st.floats(-6e4, 6e4, allow_nan=False)),
)
def test_device_values_match_quantize_for_any_float64(name, x):
    p = precision(name)
    np.testing.assert_array_equal(decoded(name, p.device_array(x)), p.quantize(x))
