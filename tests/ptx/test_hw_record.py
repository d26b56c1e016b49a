"""`ptx.sim` against recorded hardware (``tests/data/hw/<arch>.npz``, `ptx.hwcorpus`): every
recorded float op bit for bit, every recorded kernel launch (`minijit.cuda.hwrecord`) within the
fp32 accumulation bound; the check catches a wrong simulated value and a changed record; the
recorder writes what the check reads; the bound holds for rounding and truncating sums."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from minijit.cuda import hwrecord as R
from ptx import hwcorpus as H
from ptx import simdriver

DATA = Path(__file__).resolve().parents[1] / "data" / "hw"
RECORDS = sorted(DATA.glob("*.npz"))


@cache
def _record(path: Path) -> H.Record:
    return H.load(path)


ENTRIES = [(p, name) for p in RECORDS for name in sorted(_record(p).entries)]


def _check(entry: H.Entry, driver=None) -> list[str]:
    return H.check_op(entry, driver) if entry.kind == "op" else R.check_launch(entry, driver)


def test_there_is_a_record_for_hopper():
    assert DATA / "sm_90.npz" in RECORDS


@pytest.mark.parametrize("path, name", ENTRIES, ids=[f"{p.stem}:{n}" for p, n in ENTRIES])
def test_simulator_matches_the_record(path, name):
    lines = _check(_record(path).entries[name])
    assert not lines, "the simulator differs from the chip:\n" + "\n".join(lines)


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_records_say_where_they_come_from(path):
    rec = _record(path)
    assert rec.arch == path.stem
    assert rec.runs and all({"device", "arch", "date", "commit"} <= set(run) for run in rec.runs)
    for name, e in rec.entries.items():
        assert e.info["source"] and 0 <= e.info["run"] < len(rec.runs), name
        assert rec.runs[e.info["run"]]["arch"] == rec.arch, name
        assert e.kind in ("op", "launch") and e.known.any(), name
        assert (e.base in H.OPS) if e.kind == "op" else (e.base in R.LAUNCHES), name
    recorded = [i for i, run in enumerate(rec.runs) if "seeded" not in run.get("how", "")]
    if recorded:  # the latest --record run wrote the whole op corpus
        assert {f"op:{n}" for n in H.OPS} <= {n for n, e in rec.entries.items() if e.info["run"] == recorded[-1]}


def _entry(name: str) -> H.Entry:
    return _record(DATA / "sm_90.npz").entries[name]


def test_a_wrong_simulated_value_is_caught(monkeypatch):
    """A simulator that truncates tf32 instead of rounding it misses the chip's cvt.rna.tf32.f32
    bits and, through the TCA-SpMM kernel, the chip's C beyond the accumulation bound."""
    import ptx.mma

    def truncate(x):
        return (np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)

    op, launch = _entry("op:cvt.rna.tf32.f32#issue34"), _entry("launch:spmm.tca.tf32#issue34-skewed")
    assert not _check(op) and not _check(launch)
    monkeypatch.setattr(ptx.mma, "round_tf32", truncate)
    lines = _check(op)
    assert lines and re.match(r"op:cvt\.rna\.tf32\.f32#issue34\[\d+\]: inputs \(0x[0-9a-f]{8}\): hardware 0x", lines[0])
    lines = _check(launch)
    assert lines and all("> bound" in ln or "more of 5" in ln for ln in lines), lines


def test_a_changed_record_is_caught():
    e = _entry("op:add.f32#issue34")
    arrays = dict(e.arrays, out=e.arrays["out"].copy())
    arrays["out"][17] ^= 1  # one ulp off
    (line,) = H.check_op(H.Entry(e.name, arrays, e.info))
    assert line.startswith(f"{e.name}[17]: inputs (0x{int(e.arrays['in0'][17]):08x}, ")
    e = _entry("launch:spmm.tca.fp16#issue34-device_b")
    out = e.arrays["out"].copy()
    out[0, 1] += 1e-3  # the chip's value was 0.7137088; the bound there is about 2e-5
    (line,) = R.check_launch(H.Entry(e.name, dict(e.arrays, out=out), e.info))
    assert line.startswith(f"{e.name}[0, 1]: hardware ") and "> bound" in line


def test_unknown_outputs_are_not_compared():
    e = _entry("launch:spmm.tca.bf16#issue34-skewed")
    assert int(e.known.sum()) == 5 and np.isnan(e.arrays["out"][~e.known]).all()


def test_recording_writes_what_the_check_reads(tmp_path):
    """`hwrecord.record` on the simulator (standing in for a GPU) merges into an existing record:
    same-named entries replaced, others kept, a run added; its entries pass the check."""
    path = tmp_path / "sm_90.npz"
    old = H.Record("sm_90", [{"device": "x", "arch": "sm_90", "date": "d", "commit": "c"}])
    keep = H.op_entry(H.OPS["mul.f32"], [np.zeros(3, np.uint32)] * 2, np.zeros(3, np.uint32), {"source": "s", "run": 0})
    stale = H.op_entry(H.OPS["add.f32"], [np.zeros(2, np.uint32)] * 2, np.ones(2, np.uint32), {"source": "s", "run": 0})
    old.add(keep)
    old.add(stale)
    H.save(path, old)
    written, skipped = R.record(simdriver, tmp_path, "test", ops=["add.f32", "cvt.rn.bf16.f32"],
                                launches=["elementwise.min", "spmm.window8.bf16"])  # fmt: skip
    assert written == path and skipped == []
    rec = H.load(path)
    assert len(rec.runs) == 2 and rec.runs[1]["device"] == simdriver.device().name and rec.runs[1]["command"] == "test"
    assert set(rec.entries) == {"op:mul.f32", "op:add.f32", "op:cvt.rn.bf16.f32", "launch:elementwise.min",
                                "launch:spmm.window8.bf16"}  # fmt: skip
    assert rec.entries["launch:elementwise.min"].info["params"] == {"prim": "min", "rows": 9, "cols": 44}
    add = rec.entries["op:add.f32"]
    assert add.info["run"] == 1 and add.arrays["in0"].size == H.OPS["add.f32"].inputs()[0].size
    assert rec.entries["op:mul.f32"].info["run"] == 0
    for name in ("op:add.f32", "op:cvt.rn.bf16.f32", "launch:elementwise.min", "launch:spmm.window8.bf16"):
        assert not _check(rec.entries[name]), name


def test_recording_needs_a_gpu(tmp_path, capsys, monkeypatch):
    from ptx import driver

    monkeypatch.setattr(driver, "available", lambda: False)
    assert R.main(["--out", str(tmp_path)]) == 2
    assert "hwrecord: no GPU to record: " in capsys.readouterr().err and not list(tmp_path.iterdir())


def test_record_files_are_checked(tmp_path):
    bad = tmp_path / "x.npz"
    np.savez(bad, a=np.zeros(2))
    with pytest.raises(ValueError, match="no 'meta' entry"):
        H.load(bad)
    with pytest.raises(ValueError, match="takes 2 operand arrays"):
        H.run(H.OPS["add.f32"], [np.zeros(4, np.uint32)], simdriver)


# ---------------------------------------------------------------------------- the corpus


#: instructions that move or multiply-accumulate floats without a corpus form of their own
NOT_ARITHMETIC = ("mma", "wgmma", "ld", "st", "mov", "selp", "shfl")


def _ptx_float_forms(text: str) -> set[str]:
    """Float instruction forms of a PTX text (mma/wgmma accumulate: launches cover them)."""
    forms = set()
    for line in text.splitlines():
        m = re.match(r"\s*(?:@!?%\w+\s+)?([a-z][\w.]*)\s", line)
        if m is None:
            continue
        ins = m.group(1)
        if re.search(r"\.(f16|bf16|tf32|f32|f64)\b", ins) and ins.split(".")[0] not in NOT_ARITHMETIC:
            forms.add(ins)
    return forms


def _more_kernels():
    """Elementwise kernels of every primitive, GEMMs with a ReLU last touch (both families)."""
    from minijit.cuda import elementwise, gemm, gemm_sm90
    from minijit.cuda.operation import CudaTensorOperation

    for prim in ("copy", "relu", "add", "sub", "mul", "div", "min", "max"):
        op = CudaTensorOperation()
        unary = prim in ("copy", "relu")
        op.setup("fp32", "none", prim, "none", "mn", ("prim",) * 2, (8, 8), (8, 1), (0, 0) if unary else (8, 1), (1, 8))
        yield elementwise.generate(op.kernel_spec()).text
    for dtype in ("fp16", "fp32"):
        op = CudaTensorOperation()
        op.setup(dtype, "zero", "gemm", "relu", "mnk", ("prim",) * 3, (64, 64, 64), (64, 0, 1), (0, 64, 1), (1, 64, 0))
        yield gemm.generate(op.kernel_spec()).module.text()
        yield gemm_sm90.generate(op.sm90_spec()).module.text()


def test_corpus_covers_every_float_form_the_kernels_emit():
    """Each float instruction of every kernel family's PTX (and of more variants) is an op of the corpus."""
    from minijit.cuda import families

    seen = set()
    for fam in families.FAMILIES:
        for make in fam.variants.values():
            seen |= _ptx_float_forms(make())
    for text in _more_kernels():
        seen |= _ptx_float_forms(text)
    assert seen, "no float instruction found: the pattern is wrong"
    missing = sorted(f for f in seen if f not in H.OPS)
    assert not missing, f"kernels emit float forms the corpus lacks: {missing}"


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_corpus_kernels_assemble(arch):
    """Every corpus kernel is accepted by ptxas for the GPUs that record it, without spills."""
    from ptx import toolchain

    if toolchain.find_ptxas() is None:
        pytest.skip("ptxas not found")
    for case in H.OPS.values():
        m, k = case.module()
        assert toolchain.compile(m.text(), arch=arch)[k.name].spills == 0, case.name


@pytest.mark.parametrize("name", sorted(H.OPS))
def test_corpus_inputs_cover_the_special_values(name):
    case = H.OPS[name]
    ins = case.inputs()
    assert len({a.size for a in ins}) == 1
    assert all(a.dtype == H.bits_dtype(t) for a, t in zip(ins, case.ins, strict=True))
    for a, t in zip(ins, case.ins, strict=True):
        if t == "f32":
            x = a.view(np.float32)
            assert np.isnan(x).any() and np.isinf(x).any() and (a == 0x80000000).any()
            assert ((a & 0x7F800000) == 0).sum() > 3, "subnormals"
            assert (a == 0x7FC00123).any() and (a == 0x7F800001).any(), "NaN payloads, signalling NaN"
        elif t == "f64":
            x = a.view(np.float64)
            assert np.isnan(x).any() and np.isinf(x).any() and (a == 0x0000000000000001).any()


def test_fma_corpus_holds_a_double_rounding_case():
    """fma.rn.f32 of (1 + 2^-12)^2 + 2^-80: the exact value lies just above a tie, a float64
    intermediate lands on it; the fused result rounds up."""
    a, b, c = (x.view(np.float32) for x in H.OPS["fma.rn.f32"].inputs())
    i = np.flatnonzero((a == np.float32(1 + 2.0**-12)) & (c == np.float32(2.0**-80)))
    assert i.size
    from fractions import Fraction

    exact = Fraction(float(a[i[0]])) * Fraction(float(b[i[0]])) + Fraction(float(c[i[0]]))
    tie = Fraction(1) + Fraction(1, 2**11) + Fraction(1, 2**24)
    assert exact > tie and float(np.float64(a[i[0]]) * b[i[0]] + c[i[0]]) == tie


# ---------------------------------------------------------------------------- the bound


def _chop(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 rounding toward zero (a truncating accumulator)."""
    f = x.astype(np.float32)
    over = np.abs(f.astype(np.float64)) > np.abs(x)
    return np.where(over, np.nextafter(f, np.float32(0)), f)


@pytest.mark.parametrize("k", [1, 2, 7, 64, 300])
def test_the_accumulation_bound_holds_for_rounding_and_truncating_sums(k):
    """Sums of k products of fp16 values (exact in fp32), accumulated in fp32 in order, in blocks
    of 8 with truncation, and in pairs: within `accumulation_bound` of the exact sum; a sum whose
    products are rounded to bf16 first is not (the bound tells roundings apart)."""
    rng = np.random.default_rng(k)
    a = rng.standard_normal((200, k)).astype(np.float16).astype(np.float64)
    b = rng.standard_normal((200, k)).astype(np.float16).astype(np.float64)
    prod = a * b  # exact
    exact = prod.sum(axis=1)  # float64: error k 2^-53 |.|, far below the bound
    scale = np.abs(prod).sum(axis=1)
    bound = R.accumulation_bound(k, scale)
    seq = np.zeros(200, np.float32)
    for j in range(k):
        seq = (seq + prod[:, j].astype(np.float32)).astype(np.float32)
    trunc = np.zeros(200)
    for j in range(0, k, 8):
        blk = _chop(prod[:, j : j + 8].sum(axis=1))  # one block, truncated
        trunc = _chop(trunc + blk).astype(np.float64)
    pair = prod.astype(np.float32)
    while pair.shape[1] > 1:
        if pair.shape[1] % 2:
            pair = np.concatenate([pair, np.zeros((200, 1), np.float32)], axis=1)
        pair = (pair[:, ::2] + pair[:, 1::2]).astype(np.float32)
    for got in (seq, trunc, pair[:, 0]):
        assert np.all(np.abs(got.astype(np.float64) - exact) <= bound)
    from ptx.mma import bf16_bits_to_f32, f32_to_bf16_bits

    coarse = bf16_bits_to_f32(f32_to_bf16_bits(prod.astype(np.float32))).astype(np.float64).sum(axis=1)
    assert np.any(np.abs(coarse - exact) > bound)


def test_gamma_refuses_n_u_of_one():
    assert R.gamma(1) == pytest.approx(2.0**-23)
    with pytest.raises(ValueError, match="n u < 1"):
        R.gamma(2**23)


def test_a_failing_launch_is_named_and_the_rest_recorded(tmp_path, monkeypatch):
    """A launch that faults (as the sm90a family did on the H200) is reported; what ran is kept."""

    def fault(driver, arrays, params):
        raise RuntimeError("CUDA_ERROR_MISALIGNED_ADDRESS")

    case = R.LAUNCHES["gemm.sm90a.fp16"]
    monkeypatch.setitem(R.LAUNCHES, case.name, R.LaunchCase(**{**case.__dict__, "execute": fault}))
    path, skipped = R.record(simdriver, tmp_path, "test", ops=["min.f32"], launches=[case.name, "elementwise.relu"])
    assert skipped == ["gemm.sm90a.fp16: failed: RuntimeError: CUDA_ERROR_MISALIGNED_ADDRESS"]
    assert set(H.load(path).entries) == {"op:min.f32", "launch:elementwise.relu"}
