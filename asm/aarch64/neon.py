"""AArch64 Advanced SIMD (NEON) encoders."""

from __future__ import annotations


class NeonMixin:
    """NEON mnemonics; mixed into `Assembler` (which provides `emit`)."""
