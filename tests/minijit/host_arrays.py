"""Array stand-ins for tests: a host array that speaks DLPack only (as a torch CPU tensor does,
without numpy's type) and a bare ``__cuda_array_interface__`` object (never dereferenced)."""

from __future__ import annotations

import numpy as np


class HostDLPack:
    """``a`` behind ``__dlpack__`` / ``__dlpack_device__`` only."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def __dlpack__(self, **kwargs):
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class BareCuda:
    """A CUDA array interface with a made-up address: for tests that it is refused before any use."""

    def __init__(self, shape: tuple[int, ...], typestr: str = "<f4") -> None:
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (1 << 20, False),
                                         "strides": None, "version": 3}  # fmt: skip
