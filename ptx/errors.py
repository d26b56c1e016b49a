"""Exceptions of the ``ptx`` package."""

from __future__ import annotations


class PtxTypeError(TypeError):
    """An instruction was given an operand of the wrong type, count or kind.

    Raised by the builder before any text is written; the message names the
    instruction and the operand.
    """


class PtxVersionError(ValueError):
    """A caller-chosen ``.version``/``.target`` is lower than an instruction needs."""


class PtxError(RuntimeError):
    """ptxas rejected a module (or could not be run).

    ``log`` is ptxas' complete output; ``lines`` maps each PTX line number that
    ptxas complained about to the text of that line.
    """

    def __init__(self, message: str, log: str = "", lines: dict[int, str] | None = None):
        super().__init__(message)
        self.log = log
        self.lines = dict(lines or {})


class CudaError(RuntimeError):
    """A CUDA driver call failed. ``name`` is the driver's name for ``code``."""

    def __init__(self, call: str, code: int, name: str, description: str = ""):
        msg = f"{call} failed: {name} ({code})"
        if description:
            msg += f": {description}"
        super().__init__(msg)
        self.call = call
        self.code = code
        self.name = name
