"""Tests of minijit.ir: enums, Dimension, TensorConfig validation, offsets."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from minijit.errors import SetupError, error_t
from minijit.ir import (
    Dimension,
    PrimDims,
    TensorConfig,
    dim_t,
    dtype_t,
    exec_t,
    offset_range,
    ptype_t,
)
from tests.minijit.helpers import trus_args

# docs/seeds/004_mini_jit_backend.txt section 5.3: benchmark configuration (BRGEMM variant)
SEED = dict(
    dim_types=("m", "n", "k", "m", "n", "k"),
    exec_types=("seq", "seq", "prim", "prim", "prim", "prim"),
    dim_sizes=(32, 32, 8, 32, 32, 32),
    strides_in0=(8192, 0, 1024, 1, 0, 32),
    strides_in1=(0, 8192, 1024, 0, 32, 1),
    strides_out=(32768, 1024, 0, 1, 32, 0),
)


def seed_config(main: str = "brgemm", first: str = "none", last: str = "none", **changes) -> TensorConfig:
    args = {**SEED, **changes}
    if main == "gemm" and "exec_types" not in changes:
        args["exec_types"] = ("seq", "seq", "seq", "prim", "prim", "prim")
    return TensorConfig.from_lists("fp32", first, main, last, *args.values())


def with_item(seq, i, value):
    out = list(seq)
    out[i] = value
    return tuple(out)


def expect(code: error_t, dim: int | None, **changes) -> SetupError:
    main = changes.pop("main", "brgemm")
    first = changes.pop("first", "none")
    last = changes.pop("last", "none")
    with pytest.raises(SetupError) as info:
        seed_config(main, first, last, **changes)
    err = info.value
    assert err.code is code, str(err)
    assert err.dim == dim
    if dim is not None:
        assert f"dim {dim} " in str(err)
    return err


# --------------------------------------------------------------------------------------------
# enums
# --------------------------------------------------------------------------------------------
def test_enum_lookup_by_name():
    assert dtype_t("fp32") is dtype_t.fp32
    assert dtype_t("FP64") is dtype_t.fp64
    assert ptype_t("brgemm") is ptype_t.brgemm
    assert ptype_t(" ReLU ") is ptype_t.relu
    assert ptype_t("identity") is ptype_t.copy
    assert ptype_t.identity is ptype_t.copy
    assert dim_t("K") is dim_t.k
    assert exec_t("Shared") is exec_t.shared
    assert exec_t(exec_t.prim) is exec_t.prim
    with pytest.raises(ValueError):
        dtype_t("bf16")
    with pytest.raises(ValueError):
        ptype_t(3)
    assert str(ptype_t.gemm) == "gemm"


def test_dtype_properties():
    assert dtype_t.fp32.itemsize == 4 and dtype_t.fp64.itemsize == 8
    assert dtype_t.fp32.numpy == np.float32 and dtype_t.fp64.numpy == np.float64
    assert dtype_t.from_numpy(np.float64) is dtype_t.fp64
    assert dtype_t.from_numpy(np.int32) is dtype_t.s32 and dtype_t.s64.numpy == np.int64
    with pytest.raises(SetupError) as info:
        dtype_t.from_numpy(np.int16)
    assert info.value.code is error_t.wrong_dtype


def test_dimension_coerces_and_is_frozen():
    d = Dimension("m", "seq", np.int64(4), 1, 0, np.int32(1))
    assert d.type is dim_t.m and d.exec is exec_t.seq
    assert type(d.size) is int and type(d.stride_out) is int
    assert d.strides == (1, 0, 1) and d.stride("in1") == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.size = 3  # type: ignore[misc]
    assert d.with_(size=8).size == 8 and d.size == 4
    with pytest.raises(SetupError) as info:
        Dimension("x", "seq", 1, 0, 0, 0)
    assert info.value.code is error_t.wrong_dimension
    with pytest.raises(SetupError) as info:
        Dimension("m", "parallel", 1, 0, 0, 0)
    assert info.value.code is error_t.wrong_exec_type


# --------------------------------------------------------------------------------------------
# valid configs
# --------------------------------------------------------------------------------------------
def test_seed_configs_are_valid():
    gemm = seed_config("gemm")
    assert gemm.prim == PrimDims(m=3, n=4, k=5, br=None)
    br = seed_config("brgemm", "zero", "relu")
    assert br.prim == PrimDims(m=3, n=4, k=5, br=2)  # BR = the outer prim K
    assert br.prim_first is ptype_t.zero and br.prim_last is ptype_t.relu
    assert len(br.seq_dims) == 2 and len(br.prim_dims) == 4 and br.shared_dims == ()
    assert br.first_prim == 2 and br.has_prims
    # the seed's benchmark counts 2 * 32^5 * 8 flops per repetition
    assert gemm.flops() == br.flops() == 536870912
    assert br.uses_in0 and br.uses_in1
    text = str(br)
    assert "brgemm" in text and "relu" in text and "32768" in text
    assert len(text.splitlines()) == 2 + 6
    assert br.to_lists()[2] == [32, 32, 8, 32, 32, 32]


def test_config_equality_and_immutability():
    a, b = seed_config(), seed_config()
    assert a == b and a is not b
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.dims = ()  # type: ignore[misc]


def test_config_without_prims_is_valid_but_not_executable():
    c = seed_config("gemm", exec_types=("seq",) * 6)
    assert not c.has_prims and c.prim == PrimDims()
    with pytest.raises(SetupError) as info:
        c.validate_executable()
    assert info.value.code is error_t.wrong_exec_type
    u = seed_config("gemm", exec_types=("undefined",) * 3 + ("prim",) * 3)
    with pytest.raises(SetupError) as info:
        u.validate_executable()
    assert info.value.dim == 0
    seed_config("gemm").validate_executable()


def test_unary_and_binary_configs():
    # docs/seeds/004_mini_jit_backend.txt section 5.6.2: permutation trus -> turs with T, R, U, S = 3, 4, 7, 5
    T, R, U, S = 3, 4, 7, 5
    c = TensorConfig.from_lists(*trus_args("identity", T, R, U, S))
    assert c.prim_main is ptype_t.copy and c.prim == PrimDims(m=3, n=2)
    assert not c.uses_in1 and c.flops() == 0
    b = TensorConfig.from_lists(
        "fp64",
        "none",
        "add",
        "relu",
        "mn",
        ("prim", "prim"),
        (4, 5),
        (1, 4),
        (5, 1),
        (1, 4),
    )
    assert b.prim == PrimDims(m=0, n=1) and b.flops() == 20 and b.uses_in1
    z = TensorConfig.from_lists("fp32", "none", "zero", "none", "k", ("prim",), (3,), (1,), (0,), (0,))
    assert not z.uses_in0 and z.prim.n is None


# --------------------------------------------------------------------------------------------
# validation rules
# --------------------------------------------------------------------------------------------
def test_from_lists_length_mismatch():
    with pytest.raises(SetupError) as info:
        TensorConfig.from_lists(
            "fp32", "none", "gemm", "none", "mnk", ("prim",) * 3, (2, 2), (1, 0, 2), (0, 2, 1), (1, 2, 0)
        )
    assert info.value.code is error_t.wrong_length
    assert "dim_sizes=2" in str(info.value)


def test_wrong_dtype_and_ptypes():
    with pytest.raises(SetupError) as info:
        TensorConfig.from_lists("int8", "none", "gemm", "none", *SEED.values())
    assert info.value.code is error_t.wrong_dtype
    with pytest.raises(SetupError) as info:
        TensorConfig.from_lists("fp32", "none", "conv", "none", *SEED.values())
    assert info.value.code is error_t.wrong_ptype
    # every name offered is accepted; the alias is shown next to what it stands for
    offered = str(info.value).split("is not one of ")[1]
    assert "copy (alias identity)" in offered
    assert [ptype_t[name] for name in offered.replace(" (alias identity)", "").split(", ")] == list(ptype_t)
    assert (
        TensorConfig.from_lists("fp32", "none", "identity", "none", "m", ("prim",), (2,), (1,), (0,), (1,)).prim_main
        is ptype_t.copy
    )
    expect(error_t.wrong_ptype, None, main="none")
    expect(error_t.wrong_ptype, None, first="gemm")
    expect(error_t.wrong_ptype, None, last="add")


def test_wrong_size():
    err = expect(error_t.wrong_size, 4, dim_sizes=with_item(SEED["dim_sizes"], 4, 0))
    assert "size 0" in str(err)
    expect(error_t.wrong_size, 1, dim_sizes=with_item(SEED["dim_sizes"], 1, 2.5))


def test_wrong_stride_type():
    expect(error_t.wrong_stride, 2, strides_in1=with_item(SEED["strides_in1"], 2, "x"))


def test_shared_k():
    exec_types = ("shared", "seq", "seq", "prim", "prim", "prim")
    expect(error_t.shared_k, 2, main="gemm", exec_types=("shared", "shared", "shared", "prim", "prim", "prim"))
    seed_config("gemm", exec_types=exec_types)  # shared M is fine


def test_exec_order():
    # shared after seq
    expect(error_t.wrong_exec_type, 1, main="gemm", exec_types=("seq", "shared", "seq", "prim", "prim", "prim"))
    # prim dims not last / not contiguous
    err = expect(error_t.wrong_exec_type, 1, exec_types=("prim", "seq", "prim", "prim", "prim", "prim"))
    assert "prim" in str(err)


def test_prim_dims_must_match_gemm():
    # GEMM with 4 prim dims (two K)
    err = expect(error_t.wrong_dimension, 5, main="gemm", exec_types=("seq", "seq", "prim", "prim", "prim", "prim"))
    assert "one too many" in str(err)
    # BRGEMM with only M, N, K
    expect(error_t.wrong_dimension, 3, main="brgemm", exec_types=("seq", "seq", "seq", "prim", "prim", "prim"))
    # GEMM missing M
    err = expect(error_t.wrong_dimension, 4, main="gemm", exec_types=("seq", "seq", "seq", "seq", "prim", "prim"))
    assert "found 0 prim m" in str(err)


def test_prim_dims_must_match_unary_binary():
    with pytest.raises(SetupError) as info:
        TensorConfig.from_lists(
            "fp32", "none", "copy", "none", "ccc", ("prim",) * 3, (2, 2, 2), (1, 2, 4), (0, 0, 0), (1, 2, 4)
        )
    assert info.value.code is error_t.wrong_dimension and info.value.dim == 0
    # K dims need a GEMM (zero excepted)
    with pytest.raises(SetupError) as info:
        TensorConfig.from_lists("fp32", "none", "add", "none", "mk", ("prim", "seq"), (2, 2), (1, 2), (1, 2), (1, 0))
    assert info.value.code is error_t.wrong_dimension and info.value.dim == 1
    # zero accepts any prim dim types
    TensorConfig.from_lists("fp32", "none", "zero", "none", "mk", ("prim", "prim"), (2, 2), (0, 0), (0, 0), (1, 0))


def test_stride_rules():
    expect(error_t.wrong_stride, 5, strides_out=with_item(SEED["strides_out"], 5, 7))  # K in out
    expect(error_t.wrong_stride, 4, strides_in0=with_item(SEED["strides_in0"], 4, 3))  # N in in0
    expect(error_t.wrong_stride, 3, strides_in1=with_item(SEED["strides_in1"], 3, 3))  # M in in1
    expect(error_t.wrong_stride, 0, strides_out=with_item(SEED["strides_out"], 0, 0))  # aliased output
    with pytest.raises(SetupError) as info:  # unary ops have no in1
        TensorConfig.from_lists("fp32", "none", "relu", "none", "cc", ("prim", "prim"), (2, 2), (1, 2), (0, 5), (1, 2))
    assert info.value.code is error_t.wrong_stride and info.value.dim == 1
    # a size-1 output dim may have stride 0
    TensorConfig.from_lists("fp32", "none", "relu", "none", "cc", ("prim", "prim"), (1, 2), (0, 1), (0, 0), (0, 1))


def test_error_message_names_dim_and_value():
    err = expect(error_t.wrong_stride, 5, strides_out=with_item(SEED["strides_out"], 5, 7))
    msg = str(err)
    assert "dim 5" in msg and "stride_out 0" in msg and "got 7" in msg
    assert isinstance(err, ValueError)


# --------------------------------------------------------------------------------------------
# offsets
# --------------------------------------------------------------------------------------------
def test_offset_range_seed():
    c = seed_config()
    assert c.offset_range("in0") == (0, 32 * 8 * 32 * 32 - 1)
    assert c.offset_range("in1") == (0, 32 * 8 * 32 * 32 - 1)
    assert c.offset_range("out") == (0, 32**4 - 1)
    with pytest.raises(ValueError):
        c.offset_range("in2")


def test_offset_range_negative_strides():
    c = TensorConfig.from_lists(
        "fp64", "none", "gemm", "none", "mnk", ("prim",) * 3, (3, 4, 5), (-1, 0, 3), (0, -5, 1), (1, -3, 0)
    )
    assert offset_range(c, "in0") == (-2, 12)
    assert offset_range(c, "in1") == (-15, 4)
    assert offset_range(c, "out") == (-9, 2)
    assert offset_range(c.dims[:1], "in0") == (-2, 0)


def test_config_is_hashable_cache_key():
    a, b = seed_config(), seed_config()
    assert hash(a) == hash(b) and len({a, b, seed_config("gemm")}) == 2
