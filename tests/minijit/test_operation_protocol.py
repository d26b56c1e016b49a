"""One `Operation` protocol: the public constructors build subclasses of themselves (isinstance is
true for every target), and every implementation has setup/execute/listing/flops/info."""

from __future__ import annotations

import numpy as np
import pytest

import minijit
from minijit.cuda.operation import CudaTensorOperation
from minijit.einsum.cuda import CudaEinsumPlan
from minijit.operation import Operation
from minijit.sparse import SpMM
from minijit.sparse.spmm_cpu import CpuSpMM
from minijit.sparse.spmm_cuda import CudaSpMM
from tests.minijit.sparse.helpers import csr_with_lengths, quantized_reference

PROTOCOL = ("setup", "execute", "listing", "info")


def _check_protocol(op, target: str, flops: int) -> dict:
    assert isinstance(op, Operation)
    for name in PROTOCOL:
        assert callable(getattr(op, name)), name
    assert op.flops == flops
    info = op.info()
    assert info["target"] == target and info["kernel"] and info["flops"] == flops
    assert {"dtype", "shapes"} <= set(info)
    assert isinstance(op.listing(), str) and op.listing()
    return info


def _gemm_args(dtype: str, m: int, n: int, k: int) -> tuple:
    """setup() arguments of C[m, n] = A[m, k] B[k, n], all C-order."""
    return (dtype, "zero", "gemm", "none", ["m", "n", "k"], ["undefined"] * 3, [m, n, k],
            [k, 0, 1], [0, 1, n], [n, 1, 0])  # fmt: skip


def test_tensor_operation_native_is_the_public_class():
    op = minijit.TensorOperation(target="native")
    assert type(op) is minijit.TensorOperation and not isinstance(op, CudaTensorOperation)
    assert op.flops == 0
    op.setup(*_gemm_args("fp32", 6, 5, 4))
    info = _check_protocol(op, op.target, 2 * 6 * 5 * 4)
    assert info["dtype"] == "fp32" and sorted(info["shapes"]) == [4, 5, 6]
    rng = np.random.default_rng(0)
    a, b = rng.random((6, 4), np.float32), rng.random((4, 5), np.float32)
    c = np.empty((6, 5), np.float32)
    op.execute(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_tensor_operation_cuda_is_a_subclass_in_the_simulator():
    from ptx import simdriver

    op = minijit.TensorOperation("cuda", driver=simdriver)
    assert type(op) is CudaTensorOperation and isinstance(op, minijit.TensorOperation)
    assert op.target == "cuda" and op.driver is simdriver
    assert not hasattr(op, "target_info") and not hasattr(op, "num_threads")  # no CPU __init__ ran
    op.setup(*_gemm_args("fp32", 16, 16, 8))
    info = _check_protocol(op, "cuda", 2 * 16 * 16 * 8)
    assert info["family"] == "auto" and info["kernel"] in op.listing()
    rng = np.random.default_rng(1)
    a, b = rng.random((16, 8), np.float32), rng.random((8, 16), np.float32)
    c = np.empty((16, 16), np.float32)
    op.execute(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=2e-3, atol=2e-3)  # tf32 inputs
    with pytest.raises(TypeError, match="num_threads"):
        minijit.TensorOperation("cuda", num_threads=2)


@pytest.mark.parametrize("option", [{"thread_target": 2}, {"max_kernel_size": 64}, {"min_kernel_size": 1}])
def test_cuda_setup_refuses_the_cpu_blocking_options(option):
    """One `setup` signature serves both targets; the CPU-only options are refused by name on CUDA
    and leave the operation without a configuration."""
    from ptx import simdriver

    op = minijit.TensorOperation("cuda", driver=simdriver)
    op.setup(*_gemm_args("fp32", 16, 16, 8))
    (name,) = option
    with pytest.raises(TypeError, match=f"{name} apply to CPU targets only"):
        op.setup(*_gemm_args("fp32", 16, 16, 8), **option)
    assert op.config is None and op.spec is None


def test_einsum_plans_are_einsum_plans_on_both_targets():
    from ptx import simdriver

    cpu = minijit.EinsumPlan("ij,jk->ik", (8, 4), (4, 8))
    assert type(cpu) is minijit.EinsumPlan
    _check_protocol(cpu, "native", 2 * 8 * 4 * 8)
    gpu = minijit.EinsumPlan("ij,jk->ik", (16, 8), (8, 16), target="cuda", driver=simdriver)
    auto = minijit.EinsumPlan("ij,jk->ik", (16, 8), (8, 16), driver=simdriver)
    for plan in (gpu, auto):
        assert type(plan) is CudaEinsumPlan and isinstance(plan, minijit.EinsumPlan)
    info = _check_protocol(gpu, "cuda", 2 * 16 * 8 * 16)
    assert info["nodes"][0] == "gemm" and info["dtype"] == "float32"
    rng = np.random.default_rng(2)
    a, b = rng.random((16, 8), np.float32), rng.random((8, 16), np.float32)
    np.testing.assert_allclose(gpu(a, b), a @ b, rtol=2e-3, atol=2e-3)
    assert "CudaEinsumPlan" in repr(gpu)


def test_einsum_plan_takes_multi_operand_path_steps():
    """A numpy path step naming three operands is made pairwise (it failed to unpack before)."""
    rng = np.random.default_rng(3)
    ops = [rng.random(s) for s in ((3, 4), (4, 5), (5, 2))]
    for path in ([(0, 1, 2)], ["einsum_path", (0, 1, 2)], [(2, 0, 1)]):
        plan = minijit.EinsumPlan("ij,jk,kl->il", *[x.shape for x in ops], dtype="float64", optimize=path)
        assert len(plan.path) == 2
        np.testing.assert_allclose(plan(*ops), np.einsum("ij,jk,kl->il", *ops), rtol=1e-12)


def test_spmm_targets_are_spmm_subclasses_with_their_own_attributes():
    from ptx import simdriver

    rng = np.random.default_rng(4)
    s = csr_with_lengths([0, 3, 20, 9, 1], 40, rng)
    b = rng.random((40, 8)).astype(np.float32)
    native = SpMM(s, 8, target="native", threads=1)
    assert type(native) is CpuSpMM and isinstance(native, SpMM)
    assert not any(hasattr(native, a) for a in ("_wplan", "reordered", "row_order", "_driver", "_prec"))
    _check_protocol(native, "native", 2 * s.nnz * 8)
    np.testing.assert_allclose(native.execute(b, np.empty((5, 8), np.float32)), s @ b, rtol=1e-5)
    cuda = SpMM(s, 8, target="cuda", driver=simdriver, strategy="tca")
    assert type(cuda) is CudaSpMM and isinstance(cuda, SpMM)
    assert not any(hasattr(cuda, a) for a in ("threads", "_kernel", "_splits"))
    info = _check_protocol(cuda, "cuda", 2 * s.nnz * 8)
    assert info["strategy"] == "tca" and info["shapes"] == [(5, 40), (40, 8), (5, 8)]
    c = cuda.execute(b, np.empty((5, 8), np.float32))
    np.testing.assert_allclose(c, quantized_reference(s, b), rtol=1e-3, atol=1e-3)
    with pytest.raises(ValueError, match="target must be one of"):
        SpMM(s, 8, target="tpu")


def test_an_operation_must_implement_the_whole_protocol():
    class Partial(Operation):
        def setup(self):
            pass

        def execute(self):
            pass

        def listing(self):
            return ""

    with pytest.raises(TypeError, match="abstract"):
        Partial()


def test_cuda_operation_hides_the_cpu_plan_members():
    """A CUDA operation has none of the CPU plan tree's members or raw entry points: reading one
    raises AttributeError naming it (hasattr is False), and the CPU operation still has them."""
    from minijit.cuda.operation import CPU_ONLY
    from ptx import simdriver

    cuda = CudaTensorOperation(driver=simdriver)
    cpu = minijit.TensorOperation()
    for name in CPU_ONLY:
        assert not hasattr(cuda, name), name
        with pytest.raises(AttributeError, match=name):
            getattr(cuda, name)
        assert hasattr(type(cpu), name), name


def test_cuda_einsum_plan_hides_the_cpu_plan_members():
    """The CPU EinsumPlan's tree constructor and host intermediates are not members of the CUDA
    plan (AttributeError naming them); the CPU plan keeps them."""
    for name in ("from_tree", "intermediate_shapes", "intermediate_bytes"):
        assert not hasattr(CudaEinsumPlan, name), name
        with pytest.raises(AttributeError, match=name):
            getattr(CudaEinsumPlan, name)
        assert hasattr(minijit.EinsumPlan, name), name
