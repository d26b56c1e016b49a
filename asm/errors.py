"""Errors raised by the encoders."""


class EncodingError(ValueError):
    """An operand cannot be encoded.

    The message names the instruction, the operand and its legal range, e.g.
    ``add: imm must be in 0..4095 (optionally shifted by 12), got 5000``.
    """


def check_range(mnemonic: str, operand: str, value: int, lo: int, hi: int, step: int = 1) -> int:
    """Return ``value`` if ``lo <= value <= hi`` and ``value % step == 0``, else raise."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise EncodingError(f"{mnemonic}: {operand} must be an int, got {value!r}")
    if not lo <= value <= hi or value % step:
        rng = f"{lo}..{hi}" + (f" in steps of {step}" if step != 1 else "")
        raise EncodingError(f"{mnemonic}: {operand} must be in {rng}, got {value}")
    return value
