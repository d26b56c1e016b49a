"""minijit.dask on a real cluster: a `distributed.LocalCluster` of two worker processes (one
thread each), started once for the module. Drawn expressions against numpy and dask.array, and a
worker that dies in the middle of a computation: Dask retries its tasks, the result stays right."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

da = pytest.importorskip("dask.array")  # installed by the test extra (pyproject.toml)
distributed = pytest.importorskip("distributed")

import minijit.dask as md  # noqa: E402
from tests.conftest import examples  # noqa: E402
from tests.minijit.dask.helpers import assert_matches, chunk_spec, dask_operands  # noqa: E402
from tests.minijit.einsum.strategies import expressions, operands  # noqa: E402


@pytest.fixture(scope="module")
def client():
    """The cluster; starting its worker processes sets OMP_NUM_THREADS=1 (and MKL_/OPENBLAS_) in
    this process's environment too (distributed's pre-spawn environment), which would make every
    later test in this process run minijit on one thread: the environment is restored after."""
    saved = dict(os.environ)
    try:
        with (
            distributed.LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, memory_limit="1GiB"
            ) as cluster,
            distributed.Client(cluster) as c,
        ):
            yield c
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _worker_pids(client) -> set[int]:
    return set(client.run(os.getpid).values())


@settings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    expressions(min_ops=1, max_ops=3, max_indices=4, max_size=9, max_product=2000),
    st.sampled_from([np.float32, np.float64]),
    st.data(),
)
def test_drawn_expressions_on_two_worker_processes(client, expr, dtype, data):
    subs, shapes = expr
    ops = operands(shapes, dtype, seed=len(subs))
    dops = dask_operands(data.draw, ops, max_cuts=2)
    chunks, _ = data.draw(chunk_spec(subs, min_block=3))  # a few hundred tasks at most
    got = client.compute(md.einsum(subs, *dops, chunks=chunks, split_every=2)).result()
    assert_matches(got, subs, ops, dtype)
    theirs = client.compute(da.einsum(subs, *dops)).result()
    np.testing.assert_allclose(got, theirs, rtol=1e-4 if dtype == np.float32 else 1e-10, atol=1e-4)


def test_blocks_run_in_both_worker_processes(client):
    """Every worker JITs its own plans: both processes ran minijit.einsum (a per-process cache)."""
    rng = np.random.default_rng(6)
    A, B = rng.random((64, 48)).astype(np.float32), rng.random((48, 40)).astype(np.float32)
    r = md.einsum("ij,jk->ik", da.from_array(A, chunks=16), da.from_array(B, chunks=16), chunks=16)
    assert_matches(client.compute(r).result(), "ij,jk->ik", [A, B], np.float32)
    misses = client.run(lambda: __import__("minijit").cache_info()["einsum.plans"]["misses"])
    assert len(misses) == 2 and all(m > 0 for m in misses.values()), misses


def _die_once(block: np.ndarray, marker: str) -> np.ndarray:
    """The first call anywhere writes its pid to ``marker`` and kills its worker process."""
    try:
        with open(marker, "x") as f:
            f.write(str(os.getpid()))
    except FileExistsError:
        return block
    os._exit(1)


def test_a_killed_worker_is_retried_and_the_result_is_right(client, tmp_path):
    rng = np.random.default_rng(7)
    A, B = rng.random((96, 64)), rng.random((64, 80))
    marker = str(tmp_path / "died")
    a = da.from_array(A, chunks=16)
    # one block of A kills the worker that makes it, after other blocks have been contracted
    die = a[48:].map_blocks(_die_once, marker=marker, dtype=a.dtype, meta=np.empty((0, 0)))  # meta: not run here
    a = da.concatenate([a[:48], die])
    before = _worker_pids(client)
    got = client.compute(md.einsum("ij,jk->ik", a, da.from_array(B, chunks=16), chunks="input")).result()
    assert_matches(got, "ij,jk->ik", [A, B], np.float64)
    with open(marker) as f:
        dead = int(f.read())
    client.wait_for_workers(2, timeout=60)  # the nanny's new worker (later tests count two)
    assert dead in before and dead not in _worker_pids(client)  # a worker really died; its successor finished


def test_bench_rows_on_this_cluster(client):
    """The ``bench einsum --dask`` rows on a tiny case: the sides agree, the table names the case."""
    from minijit.bench import dask as dask_bench

    client.wait_for_workers(2, timeout=60)
    case = ("tiny", "ij,jk->ik", [(64, 48), (48, 40)], "a tiny GEMM")
    rep = dask_bench.bench(False, 1, "test", cases=[case], client=client)
    (row,) = rep.result["results"]
    assert rep.ok and row["check"]["ok"] and row["ratio"] > 0 and row["gflops_per_worker"] > 0
    assert row["worker_restarts"] == 0
    assert "tiny `ij,jk->ik`" in rep.body[0] and rep.result["settings"]["workers"] == 2
