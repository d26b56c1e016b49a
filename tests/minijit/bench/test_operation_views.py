"""The read-only views of a set-up `TensorOperation` the benchmarks read (``iterations``,
``threads_used``, ``chunk_kind``, ``call_footprint()``), checked against the loop nest and the
listing; and the bench modules read no private attribute of another module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import minijit
from minijit import TensorOperation
from minijit.runtime import features, profiles
from tests.minijit.helpers import RULE_HOST, RULE_TARGET, x86_machine


def _gemm(n: int, threads: int, target: str = "native") -> TensorOperation:
    op = TensorOperation(target, num_threads=threads)
    op.setup("fp32", "zero", "gemm", "none", "mnk", ["undefined"] * 3, [n] * 3, [1, 0, n], [0, n, 1], [1, n, 0])
    return op


def test_views_before_setup():
    op = TensorOperation("native", num_threads=2)
    assert op.iterations == 0 and op.threads_used == 1 and op.chunk_kind is None
    with pytest.raises(RuntimeError, match="call_footprint needs an operation set up"):
        op.call_footprint()


@x86_machine
@pytest.mark.parametrize("profile", profiles.X86_PROFILES)
@pytest.mark.parametrize("n, threads", [(8, 2), (256, 2), (256, 1)])
def test_iterations_and_threads_used_follow_the_loop_nest(pin_host, n, threads, profile):
    """On each x86-64 profile, for its own target (set up, not run)."""
    pin_host(profile)
    op = _gemm(n, threads)
    assert op.iterations == op.nest.iterations >= 1
    # tiny operations run on the calling thread; the rest on up to num_threads, never more than iterations
    assert 1 <= op.threads_used <= min(threads, op.iterations)
    if n == 8:
        assert op.threads_used == 1
    else:
        assert op.threads_used == min(threads, op.iterations)


def test_call_footprint_is_the_listed_compiled_call():
    op = _gemm(256, 1)
    line = next(ln for ln in op.listing().splitlines() if ln.startswith("// compiled (minijit.blocking"))
    assert line.endswith(": " + op.call_footprint()) and op.call_footprint().startswith("one kernel call: ")
    add = TensorOperation("native", num_threads=1)
    add.setup("fp32", "none", "add", "none", "c", ["undefined"], [64], [1], [1], [1])
    with pytest.raises(RuntimeError, match="GEMM blocking"):
        add.call_footprint()


#: setup arguments, last-level cache bytes to plan with (one sharer's), num_threads, the kind chosen
#: for `RULE_TARGET` on the `RULE_HOST` profile
CHUNKED = {
    "M": (
        ("fp32", "zero", "gemm", "none", "mnk", ["undefined"] * 3, [16, 4608, 64], [64, 0, 1], [0, 1, 4608],
         [4608, 1, 0]),
        8 * 1024 * 64 * 4, 2,
    ),
    "K": (
        ("fp32", "none", "gemm", "none", "kmnk", ["seq", "prim", "prim", "prim"], [3, 320, 4, 214],
         [214 * 320, 1, 0, 320], [214, 0, 642, 1], [0, 1, 320, 0]),
        2 * 320 * 642 * 4 - 4, 1,
    ),
}  # fmt: skip


@x86_machine
@pytest.mark.parametrize("kind", sorted(CHUNKED))
def test_chunk_kind_names_the_chunks_the_listing_describes(pin_host, kind, monkeypatch):
    args, llc, threads = CHUNKED[kind]
    pin_host(RULE_HOST)
    monkeypatch.setattr(features, "last_level_cache_bytes", lambda: llc)
    monkeypatch.setattr(features, "last_level_cache_sharing", lambda: 1)
    op = TensorOperation(RULE_TARGET, num_threads=threads)
    op.setup(*args)
    assert op.chunk_kind == kind and op.chunks > 1 and op.iterations == op.chunks
    (line,) = [ln for ln in op.listing().splitlines() if ln.startswith("// chunked: ")]
    assert ("chunks of K dim" in line) == (kind == "K")
    assert ("chunks of the outermost loop dim" in line) == (kind == "M")
    plain = _gemm(64, 1, RULE_TARGET)
    assert plain.chunk_kind is None and "// chunked" not in plain.listing()


def test_bench_reads_no_private_attribute_of_other_objects():
    """``x._name`` reads in minijit/bench and the CLI are only of ``self``."""
    root = Path(minijit.__file__).parent
    private = re.compile(r"\b(?!self\b)([A-Za-z_][A-Za-z0-9_]*)\._[a-z]")
    hits = []
    for path in [*sorted((root / "bench").glob("*.py")), root / "cli.py"]:
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if private.search(line.split("#", 1)[0]):
                hits.append(f"{path.name}:{i}: {line.strip()}")
    assert hits == []


def test_cuda_driver_version_comes_from_the_public_driver_call(monkeypatch):
    from minijit.bench import cuda
    from ptx import driver

    class FakeBindings:
        def cuDriverGetVersion(self):  # noqa: N802 - the driver API's name
            return 0, 12040  # CUDA_SUCCESS, 12.4

    monkeypatch.setattr(driver, "_driver", lambda: FakeBindings())
    assert driver.version() == 12040
    monkeypatch.setattr(cuda.shutil, "which", lambda name: None)  # no nvidia-smi
    assert cuda._driver_version() == "CUDA 12.4"


def test_einsum_plan_overhead_times_the_plan_and_its_node():
    from minijit.bench import einsum

    times = einsum.plan_overhead("float32", 1)
    assert set(times) == {"plan_us", "node_us", "einsum_us"} and all(t > 0 for t in times.values())
