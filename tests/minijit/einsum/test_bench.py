"""``minijit bench einsum``: the cases are valid, rows check against numpy, the CLI wiring."""

from __future__ import annotations

import math

import numpy as np
import pytest

from minijit import cli
from minijit.bench import einsum as bench_einsum
from minijit.einsum import parse_subscripts


def test_cases_are_valid_expressions():
    for case in bench_einsum.cases() + bench_einsum.cases(quick=True):
        if "tree" in case:
            assert len(case["sizes"]) == 9
            continue
        expr = parse_subscripts(case["subscripts"], *case["shapes"])
        assert len(expr.inputs) == len(case["shapes"]) >= 2
    trees = {c["name"]: c["sizes"] for c in bench_einsum.cases() if "tree" in c}
    assert trees == {"lab-tree": bench_einsum.LAB_SIZES, "lab-tree-full": (100, 72, 128, 128, 3, 71, 305, 32, 3)}
    assert [c["name"] for c in bench_einsum.cases(quick=True) if "tree" in c] == ["lab-tree"]
    first = bench_einsum.random_cases(3)
    assert first == bench_einsum.random_cases(3)  # fixed seed
    for case in first:
        ops = [np.empty(s) for s in case["shapes"]]
        info = np.einsum_path(case["subscripts"], *ops, optimize=True)[1]
        flops = float(info.split("Optimized FLOP count:")[1].split()[0])
        assert 1e7 <= flops <= 2e8


def test_generated_cases_come_from_every_generator_within_bounds():
    pytest.importorskip("einsum_benchmark")
    rows, missing = bench_einsum.generated_cases(2)
    assert missing == []
    assert rows == bench_einsum.generated_cases(2)[0]  # fixed seeds
    names = [r["name"].rsplit("-", 1)[0] for r in rows]
    expected = [n for load in bench_einsum.GENERATORS.values() for n in load()]
    assert names == [n for n in expected for _ in range(2)]  # two rows per generator, in order
    assert len({r["name"] for r in rows}) == len(rows)
    for r in rows:
        assert r["kind"] == "random"
        parse_subscripts(r["subscripts"], *r["shapes"])
        info = np.einsum_path(r["subscripts"], *[np.empty(s) for s in r["shapes"]], optimize=True)[1]
        flops = float(info.split("Optimized FLOP count:")[1].split()[0])
        assert 1e7 <= flops <= 3e8
        assert all(np.prod(s) <= 1 << 21 for s in r["shapes"])


def test_generated_cases_note_a_missing_package(monkeypatch):
    monkeypatch.setattr(bench_einsum, "GENERATORS", {"not_a_package": lambda: None, **bench_einsum.GENERATORS})
    monkeypatch.setitem(bench_einsum.GENERATORS, "einsum_benchmark", lambda: None)
    rows, missing = bench_einsum.generated_cases(1)
    assert missing == [
        f"{p} is not installed: its random rows are missing (pip install {p})"
        for p in ("not_a_package", "einsum_benchmark")
    ]
    assert {r["name"] for r in rows} == {f"oe-rand-equation-{r['name'].rsplit('-', 1)[1]}" for r in rows} != set()


def test_large_outputs_are_checked_on_a_slice(monkeypatch):
    monkeypatch.setattr(bench_einsum, "CHECK_ELEMENTS", 10)
    rng = np.random.default_rng(1)
    a, b = rng.random((5, 4)), rng.random((4, 3))
    out = a @ b
    got, ref = bench_einsum._reference("ij,jk->ik", [a, b], out)
    assert got.shape == ref.shape == (bench_einsum.CHECK_SLICE, 3)
    np.testing.assert_allclose(got, ref)
    got, ref = bench_einsum._reference("jk,ij->ik", [b, a], out)  # the first output index in the second operand
    np.testing.assert_allclose(got, ref)
    bad = out.copy()
    bad[1, 2] += 1  # an error inside the slice is seen
    got, ref = bench_einsum._reference("ij,jk->ik", [a, b], bad)
    assert not bench_einsum.report.check_result(got, ref, 1e-6)["ok"]
    got, ref = bench_einsum._reference("ij,jk->ik", [a[:3], b], out[:3])  # at most CHECK_ELEMENTS: whole
    assert got.shape == (3, 3)


TINY = [
    {"name": "tiny-chain", "subscripts": "ij,jk,kl->il", "shapes": [(16, 8), (8, 12), (12, 4)], "description": "t",
     "kind": "real"},
    {"name": "tiny-tree", "tree": "[0,1],[1,2]->[0,2]", "sizes": (6, 5, 7), "description": "t", "kind": "real"},
]  # fmt: skip
#: typed rows small enough for a test: an int32 GEMM, complex64/complex128 GEMMs and a float16 matvec
TINY_TYPED = [
    {"name": "mm-int32", "subscripts": "ij,jk->ik", "shapes": [(9, 7), (7, 5)], "description": "t", "kind": "int32",
     "matmul": np.matmul},
    {"name": "mm-complex64", "subscripts": "ij,jk->ik", "shapes": [(9, 40), (40, 5)], "description": "t",
     "kind": "complex64", "matmul": np.matmul},
    {"name": "bmm-complex128", "subscripts": "bij,bjk->bik", "shapes": [(2, 6, 30), (2, 30, 4)], "description": "t",
     "kind": "complex128", "matmul": np.matmul},
    {"name": "mv-float16", "subscripts": "ij,j->i", "shapes": [(12, 300), (300,)], "description": "t",
     "kind": "float16", "matmul": None},
]  # fmt: skip
TINY_RANDOM = [{"name": "random-0", "subscripts": "ab,bc->ca", "shapes": [(5, 6), (6, 7)], "description": "t",
                "kind": "random"}]  # fmt: skip


def test_bench_one_row_checks_and_ratios():
    row = bench_einsum.bench_one(TINY[0], "float64", 1, 1, bench_einsum.BlasThreads())
    assert row["check"]["ok"]
    # the cheaper chain order: (jk kl) then ij: 2 (8*12*4 + 16*8*4) flops, not 2 (16*8*12 + 16*12*4)
    assert row["flops"] == 2 * (8 * 12 * 4 + 16 * 8 * 4)
    peer = row["peers"][0]
    assert peer["name"] == "numpy.einsum"
    assert peer["ratio"] == pytest.approx(peer["time_s"] / row["time_s"])


def test_cli_einsum_runs_rows(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(bench_einsum, "cases", lambda quick=False: [dict(c) for c in TINY])
    monkeypatch.setattr(bench_einsum, "int_cases", lambda quick=False: [dict(c) for c in TINY_TYPED[:1]])
    monkeypatch.setattr(bench_einsum, "dtype_cases", lambda quick=False: [dict(c) for c in TINY_TYPED[1:]])
    monkeypatch.setattr(bench_einsum, "random_cases", lambda count=4: [dict(c) for c in TINY_RANDOM])
    monkeypatch.setattr(bench_einsum, "generated_cases", lambda n=2: ([], ["einsum_benchmark is not installed: x"]))
    monkeypatch.setattr(bench_einsum.report, "results_dir", lambda: tmp_path)
    rc = cli.main(["bench", "einsum", "--reps", "1", "--threads", "1", "-q", "--write"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "| tiny-chain | fp32 | 1 |" in out and "| tiny-tree |" in out and "| random-0 |" in out
    assert "geomean minijit/numpy.einsum: real " in out and "(lowest tiny-" in out and ", random " in out
    assert "einsum_benchmark is not installed: x" in out
    assert "| mm-int32 | s32 | 1 |" in out and "| mm-complex64 | c64 | 1 |" in out and "| mv-float16 | fp16 |" in out
    written = list(tmp_path.glob("einsum_*.md"))
    assert len(written) == 1 and "command: `minijit bench einsum --reps 1" in written[0].read_text()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "einsum", "--config", "gemm"], "unrecognized arguments: --config gemm"),
        (["bench", "--einsum", "--spmm"], "argument --spmm: not allowed with argument --einsum"),
        (["bench", "einsum", "--threads", "1,2"], "bench einsum takes one --threads value"),
        (["bench", "einsum", "--target", "cuda", "--threads", "2"], "it does not take --threads"),
        (["bench", "einsum", "--target", "cuda", "--dtype", "fp32"], "it does not take --dtype"),
        (["bench", "einsum", "--target", "aarch64-neon"], "invalid choice: 'aarch64-neon'"),
    ],
)
def test_cli_einsum_bad_arguments(argv, message, capsys):
    rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and message in err


def test_cuda_cases_plan_without_a_gpu():
    from minijit.bench import einsum_cuda
    from minijit.einsum.cuda import CudaEinsumPlan

    full, quick = einsum_cuda.cases(), einsum_cuda.cases(quick=True)
    assert [c["name"] for c in full] == [c["name"] for c in quick]
    for case, small in zip(full, quick, strict=True):
        subs, shapes = einsum_cuda._subscripts_and_shapes(case)
        parse_subscripts(subs, *shapes)
        plan = CudaEinsumPlan(subs, *shapes, dtype="float16")  # planning needs no device
        assert plan.flops >= 5e9  # enough work per call to time a GPU
        assert plan.flops == sum(n.op.config.flops() for n in plan.nodes)
        s_subs, s_shapes = einsum_cuda._subscripts_and_shapes(small)
        assert s_subs == subs and sum(math.prod(s) for s in s_shapes) <= sum(math.prod(s) for s in shapes)
    lab = full[-1]
    assert einsum_cuda._subscripts_and_shapes(lab)[1] == [
        (3, 3),
        (32, 128, 3),
        (128, 305, 32),
        (72, 71, 305),
        (100, 71),
    ]


def test_cli_einsum_cuda_needs_a_gpu_and_reports_rows(monkeypatch, capsys, tmp_path):
    from minijit.bench import cuda, einsum_cuda

    monkeypatch.setattr(cuda, "missing", lambda: "no usable CUDA GPU: test")
    assert cli.main(["bench", "einsum", "--target", "cuda"]) == 2
    assert "minijit: error: bench einsum --target cuda: no usable CUDA GPU: test" in capsys.readouterr().err
    # with a device: the rows measure() returns, as a table with the geomean per dtype
    rows = [
        {"case": "matmul", "dtype": dt, "nodes": 1, "time_s": t, "tflops": 0.2 / t, "max_rel_err": 1e-4,
         "peer": {"name": "torch.einsum", "time_s": 2 * t, "tflops": 0.1 / t}, "ratio": 2.0,
         "check": {"ok": True}}
        for dt, t in (("fp16", 1e-3), ("fp32", 2e-3))
    ]  # fmt: skip
    monkeypatch.setattr(cuda, "missing", lambda: None)
    monkeypatch.setattr(einsum_cuda, "measure", lambda quick, iters, progress: rows)
    monkeypatch.setattr(einsum_cuda, "environment", lambda: {"device": "GPU-X", "driver": "1.0"})
    monkeypatch.setattr(einsum_cuda.report, "results_dir", lambda: tmp_path)
    assert cli.main(["bench", "einsum", "--target", "cuda", "-q", "--write"]) == 0
    out = capsys.readouterr().out
    assert "| matmul | fp16 | 1 | 1.000 | 200.0 | 100.0 | 2.00x | 0.0001 |" in out
    assert "geomean minijit/torch.einsum: fp16 2.00x, fp32 2.00x" in out
    assert [p.name.startswith("einsum_cuda_") for p in tmp_path.glob("*.md")] == [True]


# ---------------------------------------------------------------------------------------------
# the typed rows: int32/int64, complex64/complex128, float16
# ---------------------------------------------------------------------------------------------
def test_typed_cases_cover_every_dtype_and_shape_with_matmul_peers():
    for quick in (False, True):
        ints, typed = bench_einsum.int_cases(quick), bench_einsum.dtype_cases(quick)
        assert {c["kind"] for c in ints} == {"int32", "int64"}
        assert {c["kind"] for c in typed} == {"complex64", "complex128", "float16"}
        names = [c["name"] for c in ints + typed]
        assert len(set(names)) == len(names)
        kinds = {"matmul", "matvec"} | (set() if quick else {"batched-matmul"})
        for dt in ("complex64", "complex128", "float16"):
            assert {c["name"].rsplit("-", 1)[0] for c in typed if c["kind"] == dt} == kinds
        rng = np.random.default_rng(0)
        for c in typed:
            expr = parse_subscripts(c["subscripts"], *c["shapes"])
            assert len(expr.inputs) == 2
            assert (c["matmul"] is not None) == c["kind"].startswith("complex")  # cgemm/zgemm peers
            if c["matmul"] is not None and quick:  # the peer computes the expression's product
                ops = [rng.random(s) for s in c["shapes"]]
                np.testing.assert_allclose(c["matmul"](*ops), np.einsum(c["subscripts"], *ops), rtol=1e-12)
    full, quick = bench_einsum.dtype_cases(), bench_einsum.dtype_cases(quick=True)
    assert max(math.prod(s) for c in quick for s in c["shapes"]) * 4 <= max(
        math.prod(s) for c in full for s in c["shapes"]
    )


@pytest.mark.parametrize("case", TINY_TYPED[1:], ids=lambda c: c["name"])
def test_dtype_row_checks_counts_real_flops_and_ratios(case):
    row = bench_einsum.bench_dtype_one(dict(case), 1, 1, bench_einsum.BlasThreads(), rounds=1)
    assert row["check"]["ok"], row["check"]
    assert 0 <= row["check"]["max_abs_err"] <= row["check"]["bound"]
    sizes = parse_subscripts(case["subscripts"], *case["shapes"]).sizes
    per_mac = 8 if case["kind"].startswith("complex") else 2  # a complex multiply-add: 8 real flops
    assert row["flops"] == per_mac * math.prod(sizes.values())
    assert row["unit"] == "GFLOPS" and row["rate"] == pytest.approx(row["flops"] / row["time_s"] / 1e9)
    assert row["dtype"] == bench_einsum.DTYPE_NAMES[case["kind"]] and row["kind"] == case["kind"]
    names = [p["name"] for p in row["peers"]]
    assert names == (["numpy.einsum", "numpy-matmul"] if case["matmul"] else ["numpy.einsum"])
    for p in row["peers"]:
        assert p["ratio"] == pytest.approx(p["time_s"] / row["time_s"])
        assert p["rate"] == pytest.approx(row["flops"] / p["time_s"] / 1e9)
    assert row["path"].startswith(("minijit compiled", "numpy")), row["path"]


def test_int_row_checks_bit_for_bit():
    row = bench_einsum.bench_int_one(dict(TINY_TYPED[0]), 1, 1, bench_einsum.BlasThreads(), rounds=1)
    assert row["check"] == {"ok": True, "max_abs_err": 0.0}
    assert [p["name"] for p in row["peers"]] == ["numpy.einsum", "numpy-matmul"]
    assert row["flops"] == 2 * 9 * 7 * 5 and row["unit"] == "GOPS"


def test_dtype_row_sees_a_wrong_result_and_a_wrong_peer(monkeypatch):
    import minijit

    real = minijit.einsum

    def off_by_a_little(subscripts, *ops, **kwargs):
        r = real(subscripts, *ops, **kwargs)
        if kwargs.get("explain"):
            return r
        r = np.array(r)
        r.flat[3] += 100 * (1 + 1j if r.dtype.kind == "c" else 1)  # beyond every row's bound
        return r

    monkeypatch.setattr(minijit, "einsum", off_by_a_little)
    for case in TINY_TYPED[1:]:
        row = bench_einsum.bench_dtype_one(dict(case), 1, 1, bench_einsum.BlasThreads(), rounds=1)
        assert not row["check"]["ok"] and row["check"]["max_abs_err"] > row["check"]["bound"], case["name"]
    monkeypatch.setattr(minijit, "einsum", real)
    wrong_peer = dict(TINY_TYPED[1], matmul=lambda a, b: np.matmul(a, b.conj()))
    with pytest.raises(RuntimeError, match="np.matmul of the operands is not the expression's product"):
        bench_einsum.bench_dtype_one(wrong_peer, 1, 1, bench_einsum.BlasThreads(), rounds=1)


def test_rounding_bound_is_the_stated_one():
    a = np.full((2, 100), 1 + 1j, np.complex64)
    b = np.ones((100, 3), np.complex64)
    exact, bound = bench_einsum.rounding_bound("ij,jk->ik", [a, b], np.dtype(np.complex64))
    np.testing.assert_array_equal(exact, np.full((2, 3), 100 + 100j))
    u = 2.0**-24
    want = 4 * (100 + 2 * 2 + 2) * u * 100 * np.sqrt(2) + 100 * np.finfo(np.float32).smallest_subnormal
    np.testing.assert_allclose(bound, np.full((2, 3), want), rtol=1e-12)


def test_cli_einsum_typed_rows_only_table_and_json(monkeypatch, capsys, tmp_path):
    """``--rows typed``: no float suite; the int, complex and float16 tables, their geomeans per
    dtype against np.einsum and np.matmul, the paths, and every row in the JSON."""
    monkeypatch.setattr(bench_einsum, "cases", lambda quick=False: pytest.fail("the float suite ran"))
    monkeypatch.setattr(bench_einsum, "int_cases", lambda quick=False: [dict(c) for c in TINY_TYPED[:1]])
    monkeypatch.setattr(bench_einsum, "dtype_cases", lambda quick=False: [dict(c) for c in TINY_TYPED[1:]])
    out_json = tmp_path / "typed.json"
    rc = cli.main(["bench", "einsum", "--rows", "typed", "--threads", "1", "--reps", "1", "--quick", "-q",
                   "--json", str(out_json)])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert "| mm-complex64 | c64 | 1 |" in out and "| bmm-complex128 | c128 | 1 |" in out
    assert "| mv-float16 | fp16 | 1 |" in out and "| mm-int32 | s32 | 1 |" in out
    assert "a complex multiply-add counts 8" in out
    for line in ("geomean minijit/numpy.einsum complex64: ", "geomean minijit/numpy-matmul complex128: ",
                 "geomean minijit/numpy.einsum float16: ", "geomean minijit/numpy-matmul int32: "):  # fmt: skip
        assert line in out, line
    assert "geomean minijit/numpy-matmul float16" not in out  # float16 has no matmul peer
    assert "- mm-complex64: minijit compiled" in out or "- mm-complex64: numpy" in out
    data = __import__("json").loads(out_json.read_text())
    assert data["results"] == [] and data["settings"]["rows"] == "typed"
    assert [r["config"] for r in data["dtype_results"]] == [c["name"] for c in TINY_TYPED[1:]]
    assert [r["config"] for r in data["int_results"]] == ["mm-int32"]
    assert all(r["check"]["ok"] for r in data["dtype_results"] + data["int_results"])
    assert set(data["summary"]["dtypes"]) == {
        "complex64_numpy.einsum", "complex128_numpy.einsum", "float16_numpy.einsum",
        "complex64_numpy-matmul", "complex128_numpy-matmul",
    }  # fmt: skip


def test_cli_einsum_float_rows_only(monkeypatch, capsys):
    monkeypatch.setattr(bench_einsum, "cases", lambda quick=False: [dict(c) for c in TINY[:1]])
    monkeypatch.setattr(bench_einsum, "random_cases", lambda count=4: [])
    monkeypatch.setattr(bench_einsum, "generated_cases", lambda n=2: ([], []))
    monkeypatch.setattr(bench_einsum, "int_cases", lambda quick=False: pytest.fail("the int rows ran"))
    monkeypatch.setattr(bench_einsum, "dtype_cases", lambda quick=False: pytest.fail("the typed rows ran"))
    assert cli.main(["bench", "einsum", "--rows", "float", "--threads", "1", "--reps", "1", "-q"]) == 0
    assert "| tiny-chain | fp32 | 1 |" in capsys.readouterr().out
    with pytest.raises(ValueError, match="rows must be one of all, float, typed"):
        bench_einsum.bench(1, 1, True, "x", rows="complex")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench", "einsum", "--rows", "ints"], "invalid choice: 'ints'"),
        (["bench", "einsum", "--target", "cuda", "--rows", "typed"], "it does not take --rows"),
        (["bench", "einsum", "--dask", "--rows", "typed"], "--rows)"),
    ],
)
def test_cli_einsum_rows_bad_arguments(argv, message, capsys):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err
