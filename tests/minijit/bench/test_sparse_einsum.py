"""minijit bench sparse-einsum: the data generators, the sliced dense check and one small row."""

from __future__ import annotations

import numpy as np
import pytest

from minijit.bench import sparse_einsum as se
from minijit.sparseauto.tensor import SparseTensor

pytestmark = pytest.mark.skipif(
    __import__("minijit.runtime", fromlist=["host"]).host().isa != "x86_64", reason="runs x86-64 code"
)


def test_powerlaw_tensor_has_skewed_slices():
    t = se.powerlaw_tensor((200, 100, 50), 5000, np.random.default_rng(0))
    coords, _ = t.to_coo()
    per_slice = np.bincount(coords[0], minlength=200)
    assert t.levels == ("compressed",) * 3 and per_slice.max() > 10 * max(1, np.median(per_slice))


def test_dense_slice_matches_to_dense():
    d = np.where(np.random.default_rng(1).random((9, 4, 3)) < 0.3, 1.5, 0)
    t = SparseTensor.from_dense(d)
    rows = np.array([1, 4, 8])
    np.testing.assert_array_equal(se._dense_slice(t, rows), d[rows])
    np.testing.assert_array_equal(se._dense_slice(d, rows), d[rows])


def test_one_row_runs_and_checks(monkeypatch):
    monkeypatch.setattr(se, "_tensora", lambda case: (None, "tensora skipped in this test"))
    rep = se.bench(1, 1, True, "test", pydata=False, only=("SDDMM",))
    (row,) = rep.result["rows"]
    assert rep.ok and row["auto_check"]["ok"] and row["linear_check"]["ok"]
    assert row["same_code"] in (True, False) and "| SDDMM |" in rep.body[0]
    assert "tensora skipped in this test" in "\n".join(rep.body)
    # as users call it: minijit.einsum on a scipy CSR next to the pre-converted tensor, checked
    assert row["call_s"] > 0 and row["call_pre_s"] > 0 and row["call_check"]["ok"]
    assert row["tensora_incl_s"] is None
    ratio = f"| {row['call_s'] / row['call_pre_s']:.2f}x |"
    lines = "\n".join(rep.body).splitlines()
    assert any(line.startswith("| SDDMM |") and ratio in line for line in lines)  # the call table


def test_user_operands_are_scipy_and_pydata():
    sparse = pytest.importorskip("sparse")
    import scipy.sparse as sp

    rng = np.random.default_rng(2)
    t = se.powerlaw_tensor((20, 15, 100), 400, rng)
    m = SparseTensor.from_scipy(sp.random(9, 7, density=0.3, format="csr", random_state=1))
    dense = rng.standard_normal((7, 3))
    ops, note = se._user_operands({"operands": [t, m, dense]})
    assert note == "" and isinstance(ops[0], sparse.COO) and sp.issparse(ops[1]) and ops[1].format == "csr"
    assert ops[2] is dense
    np.testing.assert_array_equal(ops[0].todense(), t.to_dense())
    np.testing.assert_array_equal(ops[1].toarray(), m.to_dense())


def test_gnn_rows_in_the_quick_set():
    rows = {r["name"]: r for r in se.cases(True, np.random.default_rng(0))}
    for w in se.GNN_WIDTHS:
        r = rows[f"SDDMM-SpMM GNN-{w}"]
        g, b, c, d = r["operands"]
        assert r["subscripts"] == "ij,ik,jk,jl->il" and b.shape[1] == c.shape[1] == d.shape[1] == w
        assert g.shape == (se.GNN_NODES // 50,) * 2 and 0 < g.nnz <= se.GNN_EDGES // 100 * 1.05
    per_row = np.diff(np.asarray(rows["SDDMM-SpMM GNN-64"]["operands"][0].storage[1].pos))
    assert per_row.max() > 5 * max(1.0, np.median(per_row))  # power-law rows


def _ttmc_case(rng):
    t = se.powerlaw_tensor((40, 30, 500), 3000, rng)
    b, c = rng.standard_normal((30, 4)), rng.standard_normal((500, 3))
    return {"name": "TTMc", "subscripts": "ijk,jl,km->ilm", "operands": [t, b, c]}


def test_check_densifies_only_the_used_coordinates_and_catches_errors():
    rng = np.random.default_rng(4)
    case = _ttmc_case(rng)
    t, b, c = case["operands"]
    ref = np.einsum("ijk,jl,km->ilm", t.to_dense(), b, c)
    assert se._check(case, ref)["ok"]
    bad = ref.copy()
    rows = np.argsort(-np.bincount(t.to_coo()[0][0], minlength=40))[:1]
    bad[rows[0], 1, 2] += 1e-3  # a wrong value in the heaviest row
    assert not se._check(case, bad)["ok"]
    # TTM: the output keeps j, whose unused coordinates must stay zero
    case = {"name": "TTM", "subscripts": "ijk,kl->ijl", "operands": [t, c]}
    ref = np.einsum("ijk,kl->ijl", t.to_dense(), c)
    assert se._check(case, ref)["ok"]
    coords, vals = t.to_coo()
    keep = coords[1] < 25  # no non-zero at j >= 25
    t = SparseTensor.from_coo(coords[:, keep], vals[keep], t.shape)
    case = {"name": "TTM", "subscripts": "ijk,kl->ijl", "operands": [t, c]}
    ref = np.einsum("ijk,kl->ijl", t.to_dense(), c)
    assert se._check(case, ref)["ok"]
    stray = ref.copy()
    stray[rows[0], 27, 0] = 1.0
    res = se._check(case, stray)
    assert not res["ok"] and "outside" in res


def test_summary_geomeans_by_data_set():
    ratios = dict(zip(se.FISSION_ROWS, (2.0, 8.0, 4.0, 16.0, 1.0, 32.0, 64.0), strict=True))
    rows = [{"name": n, "auto_s": 1.0, "linear_s": x} for n, x in ratios.items()]
    rows.append({"name": "SpMM", "auto_s": 2.0, "linear_s": 2.0})
    sums = se.summary(rows)
    assert sums["linear/auto (fission rows, power-law tensors)"] == pytest.approx(4.0)  # TTMc, SDDMM-SpMM, TTM chain
    assert sums["linear/auto (fission rows, NELL-2 tensors and SDDMM-SpMM)"] == pytest.approx(128 ** (1 / 3))
    assert sums["linear/auto (fission rows, power-law tensors, fibre output)"] == pytest.approx(512 ** (1 / 3))
    assert sums["linear/auto (fission rows, NELL-2 tensors and SDDMM-SpMM, fibre output)"] == pytest.approx(
        (16 * 8 * 64) ** (1 / 3)
    )
    assert sums["linear/auto (other rows)"] == pytest.approx(1.0)


def test_summary_geomeans_the_cost_model_per_data_set():
    ratios = dict(zip(se.FISSION_ROWS, (2.0, 8.0, 4.0, 16.0, 1.0, 32.0, 64.0), strict=True))
    rows = [{"name": n, "auto_s": 1.0, "linear_s": 1.0, "model_ratio": x} for n, x in ratios.items()]
    sums = se.summary(rows)
    assert sums["model linear/auto (fission rows, power-law tensors)"] == pytest.approx(4.0)
    assert sums["model linear/auto (fission rows, power-law tensors, fibre output)"] == pytest.approx(512 ** (1 / 3))
    assert sums["linear/auto (fission rows, power-law tensors)"] == pytest.approx(1.0)


def test_model_ratio_is_the_cost_model_at_the_rows_sizes():
    """TTMc: linear L*M*nnz against the fission's L*M*fibres + M*nnz, counted on the tensor."""
    from minijit.sparseauto.api import compile_einsum

    rng = np.random.default_rng(3)
    t = se.powerlaw_tensor((30, 25, 60), 1500, rng)
    b, c = rng.standard_normal((25, 6)), rng.standard_normal((60, 5))
    compiled, _ = compile_einsum("ijk,jl,km->ilm", t, b, c)
    fibres = t.storage[1].crd.shape[0]
    assert "T" in str(compiled.nest)  # the fission was chosen
    expected = 6 * 5 * t.nnz / (6 * 5 * fibres + 5 * t.nnz)
    assert se.model_ratio(compiled.plan) == pytest.approx(expected)
    assert se.model_ratio(None) is None
