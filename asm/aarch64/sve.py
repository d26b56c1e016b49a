"""AArch64 SVE encoders."""

from __future__ import annotations


class SveMixin:
    """SVE mnemonics; mixed into `Assembler` (which provides `emit`)."""
