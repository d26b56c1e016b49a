"""Fuzz batches run in a child process: ``python -m tests.fuzz.runner ENTRY EXAMPLES SEED``.

Each example is printed (``EXAMPLE <repr>``, flushed) before it runs, so a crash of the child
leaves the drawn example in its output for the parent (`tests/fuzz/test_fuzz.py`) to show. The
last line is ``SUMMARY <json>``: examples, outcomes (``result``: compared with numpy, ``refused``:
an expected exception with the outputs untouched, ``setup_only``: set up but too large to
execute) and the failures (wrong results, unexpected exception types, touched outputs). Exit
status 0 when there are no failures.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import sys
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from tests.fuzz import cases

COUNTS: Counter = Counter()
FAILURES: list[str] = []


def _show(tag: str, example: Any) -> None:
    print(f"EXAMPLE {tag} {example!r}", flush=True)
    if os.environ.get("MINIJIT_FUZZ_CRASH"):  # test_fuzz's check of the crash report: a real SIGSEGV
        ctypes.string_at(0)


def _fail(what: str, example: Any) -> None:
    FAILURES.append(f"{what}\n  example: {example!r}")


def _expect(example: Any, run: Callable[[], Any], outputs: list, check: Callable[[Any], str | None]) -> None:
    """Run ``run``; on an expected exception the ``outputs`` (arrays, or functions that read one
    back from the device) must be untouched, on success ``check(result)`` must return None (else
    it names what is wrong)."""

    def snap(o: Any) -> np.ndarray | None:
        return o() if callable(o) else np.array(o, copy=True) if isinstance(o, np.ndarray) else None

    before = [snap(o) for o in outputs]
    try:
        result = run()
    except cases.EXPECTED_ERRORS as e:
        for o, b in zip(outputs, before, strict=True):
            if b is not None and not np.array_equal(snap(o), b, equal_nan=True):
                _fail(f"refused with {type(e).__name__} ({e}) but an output was touched", example)
                return
        COUNTS[f"refused:{type(e).__name__}"] += 1
        return
    except Exception as e:  # noqa: BLE001 - any other type is what the fuzz looks for
        _fail(f"unexpected {type(e).__name__}: {e}\n{traceback.format_exc()}", example)
        return
    problem = check(result)
    if problem:
        _fail(problem, example)
    else:
        COUNTS["result"] += 1


# -- TensorOperation (CPU targets) -----------------------------------------------------------------
def _cpu(target: str, examples: int, seed: int) -> None:
    from minijit import TensorOperation

    @settings(
        max_examples=examples, deadline=None, database=None, derandomize=False, suppress_health_check=list(HealthCheck)
    )
    @given(
        setup=cases.valid_setup(),
        mode=st.sampled_from(["valid"] * 3 + ["corrupt"] * 2 + ["bad_array"]),
        how=st.sampled_from(cases.CORRUPTIONS),
        bad=st.sampled_from(cases.BAD_ARRAYS),
        which=st.integers(0, 2),
        rseed=st.integers(0, 2**32 - 1),
    )
    def one(setup: dict, mode: str, how: str, bad: str, which: int, rseed: int) -> None:
        rnd, rng = random.Random(rseed), np.random.default_rng(rseed)
        if mode == "corrupt":
            setup = cases.corrupt(setup, how, rnd)
        example = {"target": target, "mode": mode, "setup": setup}
        if mode == "bad_array":
            example.update(bad=bad, which=which)
        _show("cpu", example)
        COUNTS["examples"] += 1
        op = TensorOperation(target, num_threads=1)
        try:
            op.setup(*setup.values())
        except cases.EXPECTED_ERRORS as e:
            COUNTS[f"refused_setup:{type(e).__name__}"] += 1
            return
        except Exception as e:  # noqa: BLE001
            _fail(f"setup raised unexpected {type(e).__name__}: {e}\n{traceback.format_exc()}", example)
            return
        if not cases.executable(setup):
            COUNTS["setup_only"] += 1
            return
        in0, in1, out, offsets = cases.arrays_for(setup, rng)
        args = [in0, in1, out]
        if mode == "bad_array":
            args = cases.bad_array(bad, which, args, rng)
        want = cases.oracle(setup, in0, in1, out, offsets) if args[2] is not None else None
        given_out = args[2]

        def check(_: Any) -> str | None:
            got = np.asarray(given_out)
            if want is None or got.shape != want.shape or not np.array_equal(got.astype(want.dtype), want):
                return f"wrong result: got {got!r}, want {want!r}"
            return None

        _expect(example, lambda: op.execute(*args, offsets=offsets), [given_out], check)

    hypothesis_seed(seed)(one)()


# -- CUDA operation on ptx.simdriver ---------------------------------------------------------------
def _cuda(examples: int, seed: int) -> None:
    from minijit.cuda import CudaTensorOperation
    from ptx import simdriver

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(
        setup=cases.valid_setup(kinds=("gemm",)),
        mode=st.sampled_from(["valid", "corrupt", "bad_array", "device"]),
        how=st.sampled_from(cases.CORRUPTIONS),
        bad=st.sampled_from(cases.BAD_ARRAYS + DEVICE_KINDS),
        which=st.integers(0, 2),
        rseed=st.integers(0, 2**32 - 1),
    )
    def one(setup: dict, mode: str, how: str, bad: str, which: int, rseed: int) -> None:
        rnd, rng = random.Random(rseed), np.random.default_rng(rseed)
        setup = dict(setup, dtype="fp32")
        if mode == "corrupt":
            setup = cases.corrupt(setup, how, rnd)
        example = {"target": "cuda-sim", "mode": mode, "setup": setup}
        if mode in ("bad_array", "device"):
            bad = bad if (mode == "device") == (bad in DEVICE_KINDS) else ("ok" if mode == "device" else "short")
            example.update(bad=bad, which=which)
        _show("cuda", example)
        COUNTS["examples"] += 1
        op = CudaTensorOperation(driver=simdriver)
        try:
            op.setup(*setup.values())
        except cases.EXPECTED_ERRORS as e:
            COUNTS[f"refused_setup:{type(e).__name__}"] += 1
            return
        except Exception as e:  # noqa: BLE001
            _fail(f"setup raised unexpected {type(e).__name__}: {e}\n{traceback.format_exc()}", example)
            return
        if not cases.executable(setup) or min(int(x) for x in setup["strides_out"] + [0]) < 0:
            COUNTS["setup_only"] += 1
            return
        in0, in1, out, offsets = cases.arrays_for(setup, rng)
        if any(offsets):
            COUNTS["setup_only"] += 1
            return
        args: list[Any] = [in0, in1, out]
        want = cases.oracle(setup, in0, in1, out, offsets)
        if mode == "device":
            args = [_Cai.of(simdriver, x, "ok" if i != which else bad) for i, x in enumerate(args)]
            dev_out = args[2]
            _expect(example, lambda: op.execute(*args), [dev_out.read], lambda _: dev_out.check(want))
            return
        if mode == "bad_array":
            args = cases.bad_array(bad, which, args, rng)
        given_out = args[2]

        def check(_: Any) -> str | None:
            got = np.asarray(given_out)
            if got.shape != want.shape or not np.array_equal(got.astype(want.dtype), want):
                return f"wrong result: got {got!r}, want {want!r}"
            return None

        _expect(example, lambda: op.execute(*args), [given_out], check)

    hypothesis_seed(seed)(one)()


#: bad device arrays: a bare __cuda_array_interface__ over a simulator buffer, one field wrong
DEVICE_KINDS = ("ok", "dev_short", "dev_dtype", "dev_readonly", "dev_strided", "dev_null", "dev_2d")


class _Cai:
    """A ``__cuda_array_interface__`` (what cupy / torch CUDA tensors expose) over a simulator
    buffer holding ``host``; ``kind`` (one of :data:`DEVICE_KINDS`) makes one field wrong."""

    def __init__(self, buf: Any, host: np.ndarray, cai: dict) -> None:
        self.buf, self.host = buf, host
        self.__cuda_array_interface__ = cai

    @classmethod
    def of(cls, driver: Any, host: np.ndarray, kind: str) -> _Cai:
        buf = driver.to_device(host)
        n = host.size
        cai = {"shape": (n,), "typestr": host.dtype.str, "data": (buf.ptr, False), "version": 3, "strides": None}
        if kind == "dev_short":
            cai["shape"] = (n - 1,)
        elif kind == "dev_dtype":
            cai["typestr"] = "<f8" if host.dtype == np.float32 else "<f4"
        elif kind == "dev_readonly":
            cai["data"] = (buf.ptr, True)
        elif kind == "dev_strided":
            cai["shape"], cai["strides"] = (max(n // 2, 1),), (2 * host.itemsize,)
        elif kind == "dev_null":
            cai["data"] = (0, False)
        elif kind == "dev_2d":
            cai["shape"] = (1, n)
        return cls(buf, host, cai)

    def read(self) -> np.ndarray:
        return self.buf.to_host(self.host.dtype, self.host.shape)

    def check(self, want: np.ndarray) -> str | None:
        got = self.read()
        return None if np.array_equal(got, want) else f"wrong result on the device: got {got!r}, want {want!r}"


# -- SpMM --------------------------------------------------------------------------------------
def _spmm(target: str, examples: int, seed: int) -> None:
    from minijit.sparse.spmm import SpMM

    driver = {}
    if target == "cuda":
        from ptx import simdriver

        driver = {"driver": simdriver}

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(
        m=st.integers(1, 24),
        k=st.integers(1, 24),
        n=st.integers(1, 12),
        density=st.floats(0, 1),
        mode=st.sampled_from(["valid", "corrupt_csr", "bad_b", "bad_c"]),
        how=st.integers(0, 7),
        rseed=st.integers(0, 2**32 - 1),
    )
    def one(m: int, k: int, n: int, density: float, mode: str, how: int, rseed: int) -> None:
        rng = np.random.default_rng(rseed)
        dense = (rng.random((m, k)) < density) * rng.integers(-3, 4, (m, k))
        indptr = np.concatenate([[0], np.cumsum((dense != 0).sum(1))]).astype(np.int32)
        indices = np.nonzero(dense)[1].astype(np.int32)
        data = dense[dense != 0].astype(np.float32)
        if mode == "corrupt_csr" and indices.size:
            if how == 0:
                indices[rng.integers(indices.size)] = k + int(rng.integers(0, 5))
            elif how == 1:
                indices[rng.integers(indices.size)] = -1
            elif how == 2 and m > 1:
                indptr[1], indptr[-2] = indptr[-2] + 1, indptr[1]
            elif how == 3:
                data = data[:-1]
            elif how == 4:
                indptr = indptr[:-1]
            elif how == 5:
                indptr = indptr.astype(np.float64)
            elif how == 6:
                indptr[-1] += 1
            else:
                data = data.astype(np.complex64)
        csr = (indptr, indices, data, (m, k))
        example = {"target": target, "mode": mode, "how": how, "n": n, "csr": csr}
        _show("spmm", example)
        COUNTS["examples"] += 1
        try:
            op = SpMM(csr, n, target=target, **driver)
        except cases.EXPECTED_ERRORS as e:
            COUNTS[f"refused_setup:{type(e).__name__}"] += 1
            return
        except Exception as e:  # noqa: BLE001
            _fail(f"SpMM raised unexpected {type(e).__name__}: {e}\n{traceback.format_exc()}", example)
            return
        b = rng.integers(-3, 4, (k, n)).astype(np.float32)
        c = np.full((m, n), 7.0, np.float32)
        if mode == "bad_b":
            b = [b[:-1], b.astype(np.float64), b.T, b.tolist(), b[:, :-1] if n > 1 else b[:0]][how % 5]
        if mode == "bad_c":
            c = [c[:-1], c.astype(np.float64), np.asfortranarray(c) if n > 1 else c[:0], c.tolist(), None][how % 5]
            if how % 5 == 4:
                c = np.full((m, n), 7.0, np.float32)
                c.flags.writeable = False
        bb = np.asarray(b, np.float64)
        want = dense.astype(np.float64) @ bb if bb.shape == (k, n) else None
        example["b"], example["c"] = b, c

        def check(_: Any) -> str | None:
            got = np.asarray(c)
            if want is None or got.shape != want.shape or not np.allclose(got, want, rtol=1e-2, atol=1e-2):
                return f"wrong result: got {got!r}, want {want!r}"
            return None

        _expect(example, lambda: op.execute(b, c), [c], check)

    hypothesis_seed(seed)(one)()


def main(argv: list[str]) -> int:
    """Run ``ENTRY EXAMPLES SEED [TARGET]``; 0 when no example failed."""
    np.set_printoptions(threshold=64, edgeitems=4, linewidth=1 << 20)
    entry, examples, seed = argv[0], int(argv[1]), int(argv[2])
    extra = argv[3:]
    if entry == "cpu":
        _cpu(extra[0], examples, seed)
    elif entry == "cuda":
        _cuda(examples, seed)
    elif entry == "spmm":
        _spmm(extra[0], examples, seed)
    elif entry == "einsum":
        from tests.fuzz import einsum_fuzz

        einsum_fuzz.run(examples, seed, COUNTS, _show, _expect)
    elif entry == "sparse":
        from tests.fuzz import sparse_fuzz

        sparse_fuzz.run(examples, seed, COUNTS, _show, _expect)
    else:
        raise SystemExit(f"unknown entry {entry!r}")
    print("SUMMARY " + json.dumps({"counts": COUNTS, "failures": FAILURES[:20], "failed": len(FAILURES)}), flush=True)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
