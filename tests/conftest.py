"""Project-wide pytest configuration."""

from __future__ import annotations

import os

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


def pytest_terminal_summary(terminalreporter) -> None:
    for isa, forms in FORMS.items():
        if forms:
            terminalreporter.write_line(
                f"{isa}: {len(forms)} distinct encoder forms checked byte-for-byte against llvm-mc"
            )
