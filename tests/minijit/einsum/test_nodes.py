"""Per-node choices of an einsum plan: thread counts, permutes that packing absorbs, and those it needs."""

from __future__ import annotations

import numpy as np
import pytest

import minijit
from minijit.einsum.plan import SMALL_GEMM_FLOPS
from tests.minijit.einsum.strategies import assert_close, operands


def test_num_threads_is_a_cap_small_nodes_run_on_one_thread():
    # 2 * 16^3 flops: far below SMALL_GEMM_FLOPS, so one thread although the plan allows two
    small = minijit.EinsumPlan("ij,jk->ik", (16, 16), (16, 16), num_threads=2)
    (step,) = small.steps
    assert 2 * 16**3 < SMALL_GEMM_FLOPS and step.op.num_threads == 1
    # 2 * 256^3 >= SMALL_GEMM_FLOPS: big enough for the plan's two threads
    assert 2 * 256**3 >= SMALL_GEMM_FLOPS
    big = minijit.EinsumPlan("ij,jk->ik", (256, 256), (256, 256), num_threads=2)
    (step,) = big.steps
    assert step.op.num_threads == 2
    ops = operands([(256, 256), (256, 256)], np.float32, seed=3)
    assert_close(big(*ops), "ij,jk->ik", ops, np.float32)


def test_transposed_a_that_the_gemm_packs_gets_no_permute_node():
    # attention scores: K (bhkd) is A with its summed index d innermost (transposed); the GEMM packs
    # it, and the packing copy absorbs the transpose, so no permute node copies it first
    shapes = [(2, 2, 64, 32), (2, 2, 48, 32)]
    plan = minijit.EinsumPlan("bhqd,bhkd->bhqk", *shapes, dtype=np.float32)
    assert [s.kind for s in plan.steps] == ["contract"]
    assert "in0" in plan.steps[0].op.packed_operands
    ops = operands(shapes, np.float32, seed=4)
    assert_close(plan(*ops), "bhqd,bhkd->bhqk", ops, np.float32)


@pytest.mark.parametrize("target", ["native", "aarch64-neon", "aarch64-sve"])
@pytest.mark.parametrize("expr,shapes", [("ij,j->i", [(300, 200), (200,)]), ("bij,bj->bi", [(3, 70, 90), (3, 90)])])
def test_a_gemv_reads_a_row_major_a_in_place(expr, shapes, target):
    # y = A x with A row-major: A's summed index j is innermost (transposed), and no GEMM packs it;
    # the GEMV kernels (x86-64, NEON, SVE) stream A's rows as they are, so no permute node copies A
    plan = minijit.EinsumPlan(expr, *shapes, dtype=np.float32, target=target)
    assert [s.kind for s in plan.steps] == ["contract"]
    op = plan.steps[0].op
    name = op.primitives["main"].name
    assert name.startswith("gemv_" if op.target.startswith("x86_64") else f"{op.target.split('-')[1]}_gemv_"), name
    ops = operands(shapes, np.float32, seed=6)
    assert_close(plan(*ops), expr, ops, np.float32)


def test_a_whose_innermost_m_index_is_not_cs_is_copied_first():
    # the result's unit-stride index g is an M index that A (figdh) holds at stride 48, while A's
    # unit-stride index h is another M index: unpacked, the GEMM would read A's M columns strided
    # (the scalar kernel, 10x slower here); one permute puts A's M indices innermost in C's order
    shapes = [(15, 4, 9, 12, 4), (5, 15, 16)]
    plan = minijit.EinsumPlan("figdh,jfc->djcihg", *shapes, dtype=np.float32)
    assert [s.kind for s in plan.steps] == ["permute", "contract"]
    a_ids, _, o_ids = plan.steps[1].ids
    assert a_ids[-1] == o_ids[-1] == "g"
    prims = [d for d in plan.steps[1].op.config.dims if d.type.name == "m" and d.exec.name == "prim"]
    assert any(d.stride_in0 == 1 and d.stride_out == 1 for d in prims)
    ops = operands(shapes, np.float32, seed=5)
    assert_close(plan(*ops), "figdh,jfc->djcihg", ops, np.float32)
