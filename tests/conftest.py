"""Project-wide pytest configuration."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from tests.asm.oracle import FORMS

settings.register_profile(
    "default",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "ci",
    parent=settings.get_profile("default"),
    derandomize=True,  # CI is reproducible; local runs explore new examples
    print_blob=True,
)
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture(scope="module")
def dev():
    """The CUDA device, for the gpu tests; skips without a device, the CUDA bindings or ptxas."""
    from ptx import driver, toolchain

    if not driver.available():
        pytest.skip("no CUDA device or cuda-bindings not installed")
    if toolchain.find_ptxas() is None:
        pytest.skip("ptxas not found")
    return driver.device()


def pytest_terminal_summary(terminalreporter) -> None:
    for isa, forms in FORMS.items():
        if forms:
            terminalreporter.write_line(
                f"{isa}: {len(forms)} distinct encoder forms checked byte-for-byte against llvm-mc"
            )
