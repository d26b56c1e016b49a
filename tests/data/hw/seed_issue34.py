"""Write the seed ``sm_90.npz`` from the H200 run of issue 34, until a GPU records the corpus.

    .venv/bin/python tests/data/hw/seed_issue34.py     # rewrites tests/data/hw/sm_90.npz

Every value comes from the logs of the 2026-11-26 H200 run, not kept in this repository (NVIDIA
H200, sm_90, driver 580.159.04, CUDA 13.0, main at 213122a), never from the simulator:

- ``op:<instruction>#issue34``: ``tests/ptx/test_sim.py::test_float_semantics[gpu-*]`` compared
  the chip's bits with numpy formulas over ``_f32(1)`` and ``_f32(2)[::-1]``. Eight forms passed,
  so the chip's bits are those formulas' (copied below from the test at 213122a); for
  ``cvt.rna.tf32.f32`` the log gives the one element that differed (0x7fc00123 -> 0x7fc00000,
  gputests_nosm90.txt line 53) and the other 127 passed.
- ``launch:spmm.tca.*#issue34-*``: the sparse tests printed the first five elements where the
  chip's C differed from the numpy model, as exact float32 values; the matrices are regenerated
  from the tests' seeds (tests/minijit/sparse/test_tca.py at 213122a), checked against the
  model values printed beside them, and only those five elements are marked known.

The inputs are stored with the outputs, so the record does not depend on this script again.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from minijit.cuda import hwrecord as R  # noqa: E402
from ptx import hwcorpus as H  # noqa: E402

LOGS = (
    "the logs of the 2026-11-26 H200 run, not kept in this repository: gputests_nosm90.txt"
    " (and gputests_sm90.txt: the same values)"
)
RUN = {
    "device": "NVIDIA H200",
    "arch": "sm_90",
    "nvidia_driver": "580.159.04",
    "cuda_driver_api": 13000,
    "ptxas": "Cuda compilation tools, release 13.0",
    "date": "2026-11-26",
    "commit": "213122a",
    "command": "pytest -m gpu (scripts/gpu-check), logs transcribed by tests/data/hw/seed_issue34.py",
    "how": "seeded from the logs of issue 34's H200 run: not a --record run",
}

# ---------------------------------------------------------------------------- test_float_semantics
N = 128


def _f32(seed: int) -> np.ndarray:
    """tests/ptx/test_sim.py::_f32 at 213122a."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(N) * 10.0 ** rng.integers(-6, 6, N)).astype(np.float32)
    x[:10] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, 65504.0, 65520.0, 3.0e38, 1e-40]
    x[10:12] = np.array([0x7FC00123, 0xFFC00000], np.uint32).view(np.float32)
    return x


def _tf32(x: np.ndarray) -> np.ndarray:
    u = x.view(np.uint32)
    lo = u & np.uint32(0xFFFFE000)
    hi = lo + np.uint32(0x2000)
    dl = np.abs(lo.view(np.float32).astype(np.float64) - x)
    dh = np.abs(hi.view(np.float32).astype(np.float64) - x)
    return np.where(np.isfinite(x), np.where(dh <= dl, hi, lo), u)


def _bf16(x: np.ndarray) -> np.ndarray:
    u = x.view(np.uint32)
    lo = u & np.uint32(0xFFFF0000)
    hi = lo + np.uint32(0x10000)
    dl = np.abs(lo.view(np.float32).astype(np.float64) - x)
    dh = np.abs(hi.view(np.float32).astype(np.float64) - x)
    even_hi = ((hi >> np.uint32(16)) & np.uint32(1)) == 0
    r = (np.where((dh < dl) | ((dh == dl) & even_hi), hi, lo) >> np.uint32(16)).astype(np.uint16)
    return np.where(np.isinf(x), (u >> np.uint32(16)).astype(np.uint16), r)


def _canon32(r: np.ndarray) -> np.ndarray:
    r = np.asarray(r, np.float32).view(np.uint32)
    return np.where(np.isnan(r.view(np.float32)), np.uint32(0x7FFFFFFF), r)


def _canon16(a: np.ndarray, r: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(a), np.uint16(0x7FFF), r)


def float_semantics() -> list[H.Entry]:
    a, b = _f32(1), _f32(2)[::-1].copy()
    with np.errstate(all="ignore"):
        outs = {
            "add.f32": _canon32(a + b),
            "mul.f32": _canon32(a * b),
            "min.f32": np.fmin(a, b).view(np.uint32),
            "max.f32": np.fmax(a, b).view(np.uint32),
            "div.rn.f32": _canon32(a / b),
            "cvt.rna.tf32.f32": _tf32(a),
            "cvt.rn.bf16.f32": _canon16(a, _bf16(a)),
            "cvt.rn.f16.f32": _canon16(a, a.astype(np.float16).view(np.uint16)),
            "cvt.rzi.s32.f32": np.clip(np.nan_to_num(np.trunc(a.astype(np.float64)), nan=0), -(2**31), 2**31 - 1)
            .astype(np.int64)
            .astype(np.uint32),
        }
    tf32 = outs["cvt.rna.tf32.f32"]
    assert tf32[10] == 0x7FC00123  # what the formula says; the chip wrote:
    tf32[10] = 0x7FC00000  # gputests_nosm90.txt line 53: [10]: 2143289344 (ACTUAL)
    entries = []
    for name, out in outs.items():
        case = H.OPS[name]
        ins = (a.view(np.uint32), b.view(np.uint32))[: len(case.ins)]
        if name == "cvt.rna.tf32.f32":
            src = f"{LOGS}: test_float_semantics[gpu-{name}] failed only at element 10 (line 53)"
        else:
            src = f"{LOGS}: test_float_semantics[gpu-{name}] passed: the chip's bits equal the test's formula"
        entries.append(H.op_entry(case, ins, out, {"source": src, "run": 0}, label="issue34"))
    return entries


# ---------------------------------------------------------------------------- sparse tests

#: (test, dtype, {index: (chip value, model value)}, log line of the first)
SPARSE = [
    ("device_b", "fp16", {(0, 1): (0.7137088179588318, 0.7137088775634766),
                          (0, 12): (-2.0097086429595947, -2.009708881378174),
                          (1, 3): (-4.324313163757324, -4.324313640594482),
                          (1, 4): (5.816810131072998, 5.816810607910156),
                          (1, 5): (-4.392870903015137, -4.392871379852295)}, 257),
    ("skewed", "bf16", {(3, 4): (-38.00697708129883, -38.006980895996094),
                        (3, 5): (-1.8383889198303223, -1.8383893966674805),
                        (3, 6): (-1.5296473503112793, -1.5296478271484375),
                        (3, 7): (0.7954120635986328, 0.7954115867614746),
                        (3, 10): (-16.007017135620117, -16.00701904296875)}, 156),
]  # fmt: skip
_SAME = {(1, 1): (4.099989891052246, 4.099990367889404), (1, 17): (1.4367650747299194, 1.436765193939209),
         (1, 23): (4.602725505828857, 4.602725982666016), (3, 0): (-7.826281547546387, -7.826280117034912),
         (3, 1): (-1.5054926872253418, -1.5054941177368164)}  # fmt: skip
SPARSE += [("skewed", "tf32", _SAME, 215), ("skewed", "fp16", _SAME, 316)]


def _sparse_inputs(test: str):
    """(scipy CSR, B, n) of the failing launch, from the tests' seeds at 213122a."""
    from tests.minijit.sparse.helpers import csr_with_lengths, skewed

    if test == "device_b":  # test_device_b_must_hold_the_kernels_type: fp16 first
        rng = np.random.default_rng(3)
        s = skewed(12, 40, 0.3, rng)
        return s, rng.standard_normal((40, 16)).astype(np.float32), 16
    # test_precisions_on_skewed_matrices_vs_scipy: 10/216 and 43/216 mismatches: 9 x 24, the
    # first case (long_row) with n = 24, drawn after all three cases of _skewed_cases
    rng = np.random.default_rng(16)
    long_row = csr_with_lengths([0, 5, 0, 300, 0, 12, 1, 40, 0], 320, rng)
    rng.standard_normal(24)  # one_column's values
    return long_row, rng.standard_normal((320, 24)).astype(np.float32), 24


def sparse() -> list[H.Entry]:
    from minijit.sparse import SpMM
    from ptx import simdriver

    entries = []
    for test, dtype, values, line in SPARSE:
        s, b, n = _sparse_inputs(test)
        model = SpMM(s, n, dtype=dtype, target="cuda", driver=simdriver, strategy="tca").model(b)
        for idx, (_, want) in values.items():  # the regenerated inputs are the run's
            assert np.float32(want) == model[idx], (test, dtype, idx, model[idx], want)
        out = np.full(model.shape, np.nan, np.float32)
        known = np.zeros(model.shape, bool)
        for idx, (chip, _) in values.items():
            out[idx], known[idx] = chip, True
        arrays = {"indptr": s.indptr.astype(np.int32), "indices": s.indices.astype(np.int32),
                  "data": s.data.astype(np.float32), "b": b}  # fmt: skip
        params = {"strategy": "tca", "dtype": dtype, "shape": list(s.shape), "n": n, "window_rows": None}
        test_name = "test_device_b_must_hold_the_kernels_type" if test == "device_b" else (
            f"test_precisions_on_skewed_matrices_vs_scipy[gpu-{dtype}] (long_row, n = 24)")  # fmt: skip
        src = f"{LOGS}: {test_name}: the first five elements that differed from the model, line {line} on"
        case = R.LAUNCHES[f"spmm.tca.{dtype}"]
        entries.append(R.launch_entry(case, arrays, params, out, {"source": src, "run": 0}, f"issue34-{test}", known))
    return entries


def main() -> None:
    rec = H.Record("sm_90", [RUN])
    for e in float_semantics() + sparse():
        rec.add(e)
    path = Path(__file__).with_name("sm_90.npz")
    H.save(path, rec)
    print(f"wrote {path}: {len(rec.entries)} entries")


if __name__ == "__main__":
    main()
