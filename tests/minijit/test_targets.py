"""Target objects (`minijit.targets`): names in and out, capabilities against the kernels they
describe, the kernel generators behind `minijit.kernels` and its cache, the host's caches in
`minijit.runtime.features` reaching every model, no target-string parsing and no ISA decision
outside `minijit/targets/`, and every stack (dense, SpMM, sparse contractions) taking the native
ISA from `targets.native` on pinned hosts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import minijit
from minijit import TensorOperation, blocking, kernels, packing, schedule, targets
from minijit.runtime import features, host
from minijit.targets import AArch64Target, CpuTarget, CudaTarget, X86Target


@pytest.mark.parametrize("name", targets.CPU_TARGETS)
def test_every_cpu_name_gives_its_family_and_back(name):
    t = targets.get(name, sve_vl=256)
    assert isinstance(t, CpuTarget) and t.name == name == str(t)
    assert targets.get(t) is t and targets.get_cpu(t) is t and kernels.check_target(name) == name
    assert isinstance(t, AArch64Target if name.startswith("aarch64") else X86Target)
    if isinstance(t, AArch64Target):
        assert t.sve_vl == 256 and t.emulable
    assert t == targets.get(name, sve_vl=256)  # value objects: equal by family, ISA and vector length


def test_native_is_the_hosts_best_and_runs_natively():
    t = targets.get("native")
    assert t == targets.native() and t.native and t.supported
    assert t.name == kernels.native_target() == TensorOperation("native").target
    if host().isa == "x86_64":
        assert t == X86Target("avx512" if host().avx512 else "avx2")


def test_cuda_is_a_target_but_not_a_cpu_one():
    assert targets.get("cuda") == CudaTarget() and targets.get("cuda").name == "cuda"
    for bad in ("cuda", CudaTarget(), "riscv", "x86_64", "aarch64-sve2", None, 3):
        with pytest.raises(ValueError, match="target must be 'native' or one of"):
            targets.get_cpu(bad)
    with pytest.raises(ValueError, match="target must be 'native', 'cuda' or one of"):
        targets.get("x86_64-avx")


def test_bad_isa_and_vector_length_are_refused():
    with pytest.raises(ValueError, match="isa must be one of"):
        X86Target("sse2")
    with pytest.raises(ValueError, match="isa must be one of"):
        AArch64Target("sme")
    for vl in (0, 100, 2176):
        with pytest.raises(ValueError, match="sve_vl must be a multiple of 128"):
            targets.get("aarch64-sve", sve_vl=vl)


def test_capabilities_describe_the_kernels():
    """The limits and geometries the core reads are the kernel modules' own."""
    from minijit.kernels.aarch64.brgemm import NeonBrgemm
    from minijit.kernels.x86_64 import binary, brgemm, brgemm_plan, gemv, unary

    for isa in ("avx512", "avx2"):
        t = X86Target(isa)
        assert t.max_prim_size == min(m.MAX_SIZE for m in (brgemm, gemv, unary, binary))
        assert t.panel_rows("fp32") == brgemm_plan.panel_rows(isa, "fp32")
        assert t.panel_width() == brgemm_plan.panel_width(isa)
        # one A register-block column: the panel's rows of fp32
        assert t.panel_column_bytes == 4 * t.panel_rows("fp32")
        assert t.packs_panels and t.copies_a and t.fuses_touches and t.has_gemv and t.chunks_a
    assert X86Target("avx512").b_block_l2_share == 0.25 and X86Target("avx2").b_block_l2_share == 1.0
    for isa in ("neon", "sve"):
        t = AArch64Target(isa, sve_vl=512)
        assert t.max_prim_size == NeonBrgemm.MAX_SIZE and t.b_block_l2_share == 1.0
        assert not (t.packs_panels or t.copies_a or t.fuses_touches or t.has_gemv or t.chunks_a)
        assert not t.a_copy_fits(16, 4, 8, 1, "fp32")
        with pytest.raises(NotImplementedError, match="packs no micro-panels"):
            t.panel_rows("fp32")
    assert AArch64Target("neon", sve_vl=512).panel_column_bytes == 64
    assert AArch64Target("sve", sve_vl=512).panel_column_bytes == 256  # 4 vectors of 64 bytes


def test_kernels_dispatch_through_the_target_object_into_one_cache():
    kernels.cache_clear()
    native = targets.native()
    a = kernels.brgemm(16, 4, 8, target=native.name)
    assert kernels.brgemm(16, 4, 8, target=native) is a and kernels.brgemm(16, 4, 8, target="native") is a
    assert kernels.unary(8, 3, target=native) is kernels.unary(8, 3, target="native")
    neon = kernels.brgemm(16, 4, 8, target="aarch64-neon", sve_vl=256)
    assert kernels.brgemm(16, 4, 8, target=AArch64Target("neon", sve_vl=256)) is neon
    assert kernels.brgemm(16, 4, 8, target="aarch64-neon") is not neon  # another emulation worker
    assert a.name == native.brgemm(16, 4, 8).name and neon.name.startswith("neon_brgemm_16x4x8")
    with pytest.raises(ValueError, match="a_panel, zero_c: x86-64 kernel options, not ones of aarch64-sve"):
        kernels.brgemm(16, 4, 8, target="aarch64-sve", a_panel=64, zero_c=True)
    with pytest.raises(TypeError, match="unknown option"):
        X86Target("avx2").brgemm(16, 4, 8, fused=True)
    kernels.cache_clear()


def test_operations_keep_the_name_and_carry_the_object():
    op = TensorOperation("aarch64-sve", num_threads=1, sve_vl=384)
    assert op.target == "aarch64-sve" and op.target_info == AArch64Target("sve", sve_vl=384)
    assert op.native == op.target_info.native


def test_the_hosts_caches_are_read_through_features_at_each_call(monkeypatch):
    """Patching `minijit.runtime.features` reaches packing, the blocking model and the mode
    choices; packing keeps the names importable."""
    assert packing.CacheGeometry is features.CacheGeometry and packing.cache_geometries is features.cache_geometries
    geo = {1: features.CacheGeometry(48 * 1024, 12, 64), 2: features.CacheGeometry(2 << 20, 16, 64)}
    monkeypatch.setattr(features, "_sysfs_caches", lambda: {**geo, 3: features.CacheGeometry(96 << 20, 16, 64)})
    assert features.cache_geometries() == (geo[1], geo[2]) and features.last_level_cache_bytes() == 96 << 20
    assert "L2 2097152 B" in blocking.choose((512, 512, 512), 4, "x86_64-avx2").reason
    assert "L1 (49152 B)" in blocking.call_footprint(16, 6, 64, 1, 4, 16)
    # a 2 MiB A block of a 1024 x N x 512 n_outer candidate, one thread: within a quarter of its
    # slice of 96 MiB, not of 4 MiB (explicit threads: the default is the host's CPU count)
    cfg = minijit.TensorConfig.from_lists(
        "fp32", "none", "gemm", "none", "mnk", ("prim",) * 3, (1024, 64, 512), (1, 0, 1024), (0, 512, 1), (1, 1024, 0)
    )
    assert schedule.kernel_n_outer(cfg, threads=1)
    monkeypatch.setattr(features, "last_level_cache_bytes", lambda: 4 << 20)
    assert not schedule.kernel_n_outer(cfg, threads=1)


#: target-string parsing: what only `minijit/targets/` may do
FAMILY = "[\"'](x86_64|aarch64)"
PARSING = re.compile(rf"startswith\({FAMILY}|\.split\([\"']-[\"']\)|[=!]= {FAMILY}-|{FAMILY}[\"'] in ")


def test_no_target_string_parsing_outside_targets():
    root = Path(minijit.__file__).parent
    hits = []
    for path in sorted(root.rglob("*.py")):
        if path.parent.name == "targets":
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if PARSING.search(line.split("#", 1)[0]):
                hits.append(f"{path.relative_to(root)}:{i}: {line.strip()}")
    assert hits == []
    assert PARSING.search('if target.startswith("x86_64"):') and PARSING.search('t.split("-")[0]')
    assert PARSING.search('target == "aarch64-sve"') and PARSING.search('if "aarch64" in target')


#: an ISA decision: a switch on a target family or an ISA name, or a read of the host's ISA flags;
#: only `minijit/targets/` decides (and `minijit/runtime/`, which detects the host and decides
#: what runs on this machine)
ISA = r"x86_64|aarch64|avx2|avx512|neon|sve"
ISA_SWITCH = re.compile(
    rf"\bfamily\s*[!=]=|[!=]=\s*[\"']({ISA})[\"']|[\"']({ISA})[\"']\s*[!=]=|[\"']({ISA})[\"']\s+(not\s+)?in\b"
)
FLAGS = r"avx512f|avx512bw|avx512vl|avx512|avx2|fma|neon|sve"
HOST_FLAG = re.compile(rf"\.({FLAGS})\b(?!\s*\()|getattr\([^,]+,\s*[\"']({FLAGS})[\"']")
#: the sites outside `minijit/targets/` that may keep one kind of such line (a path under minijit/,
#: or a folder ending in "/"), each with its reason; every entry must still be needed
ISA_ALLOWED = {
    "kernels/": (
        ISA_SWITCH,
        "the dense generators: each emits the ISA its target hands it (`isa=self.isa`) and "
        "switches on it to pick instructions, not to pick the ISA",
    ),
    "sparse/cpu.py": (ISA_SWITCH, "the CSR SpMM generator behind `CpuTarget.spmm`: the same"),
    "sparseauto/codegen_inner.py": (
        ISA_SWITCH,
        "the x86-64 sparse-nest generator (`CpuTarget.sparse_program`): the same",
    ),
    "sparseauto/codegen_aarch64.py": (ISA_SWITCH, "the AArch64 sparse-nest generator: the same"),
    "cuda/": (ISA_SWITCH, "`family` there is the CUDA GEMM kernel family (sm90a, mma.sync), not a CPU ISA"),
    "bench/report.py": (HOST_FLAG, "prints the host's flags and SVE vector length; decides nothing"),
}


def _isa_decisions(root: Path) -> tuple[list[str], set[str]]:
    """The ISA decisions in the package at ``root`` outside its targets/ and runtime/ folders that
    `ISA_ALLOWED` does not allow, and the allow-list entries that allowed one."""
    hits, used = [], set()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("targets/", "runtime/")):
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            for pattern in (ISA_SWITCH, HOST_FLAG):
                if not pattern.search(code):
                    continue
                entry = next((k for k, (p, _) in ISA_ALLOWED.items() if p is pattern and rel.startswith(k)), None)
                if entry is None:
                    hits.append(f"{rel}:{i}: {line.strip()}")
                else:
                    used.add(entry)
    return hits, used


def test_no_isa_decision_outside_targets():
    """One native-ISA decision (issue 49 part 4): no module outside `minijit/targets/` switches on
    a family or ISA name or reads the host's ISA flags, except the generators, which emit the ISA
    their target hands them (`ISA_ALLOWED`, each entry with its reason and still needed)."""
    hits, used = _isa_decisions(Path(minijit.__file__).parent)
    assert hits == []
    assert used == set(ISA_ALLOWED), f"allow-list entries no longer needed: {set(ISA_ALLOWED) - used}"
    for line in (
        'if family == "aarch64":',
        'isa = "avx512" if h.avx512 else "avx2"',
        'if t.isa == "avx2":',
        'if "avx512" in flags:',
        "if host().avx512f:",
        'getattr(h, "avx512f", False)',
        "return h.sve",
        'if isa != "neon":',
        'if "sve" == isa:',
    ):
        assert ISA_SWITCH.search(line) or HOST_FLAG.search(line), line
    for line in ("a.fma(x, y, z)", "t.vector_lanes(dtype)", "target.spmm_isa", 'runs_natively("x86_64")'):
        assert not (ISA_SWITCH.search(line) or HOST_FLAG.search(line)), line


def test_the_isa_guard_flags_a_decision_outside_targets(tmp_path):
    """The guard fails on a decision outside targets/ (a generator's allowed switch does not hide
    a host read next to it) and passes one inside."""
    for folder, text in (
        ("targets", "if host().avx512f:\n    pass\n"),
        ("sparse", 'ISA = "avx512" if host().avx512 else "avx2"\n'),
        ("kernels", "if host().sve:\n    pass\n"),
        ("einsum", 'if target.family == "x86_64":\n    pass\n'),
    ):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "m.py").write_text(text)
    hits, _ = _isa_decisions(tmp_path)
    assert [h.split(":")[0] for h in hits] == ["einsum/m.py", "kernels/m.py", "sparse/m.py"]


@pytest.mark.parametrize(
    ("profile", "name", "spmm_isa", "lanes"),
    [
        ("zen3", "x86_64-avx2", "avx2", 4),
        ("cascadelake", "x86_64-avx512", "avx512", 8),
        ("zen4", "x86_64-avx512", "avx512", 8),
        ("neoverse-v1", "aarch64-sve", "neon", 2),  # SVE at the native target's 128 bits
        ("apple-m4", "aarch64-sme", "neon", 2),  # SME: its BRGEMM streams, everything else NEON
        ("arm-c1-ultra", "aarch64-sme", "neon", 2),
    ],
)
def test_every_stack_takes_the_native_isa_from_the_target(pin_host, profile, name, spmm_isa, lanes):
    """Dense operations, the CPU SpMM and sparse contractions (their target and the planner's
    lanes) decide the native ISA in one place, `targets.native`: on an SVE host the sparse
    contractions are SVE code and the SpMM runs the NEON kernel because the target says so
    (`CpuTarget.spmm_isa`). Decisions only: nothing runs."""
    import numpy as np

    from minijit.sparse.spmm_cpu import spmm_target
    from minijit.sparseauto.execute import cpu_target
    from minijit.sparseauto.plan import native_lanes, sparse_plan, vector_lanes
    from minijit.sparseauto.tensor import SparseTensor

    pin_host(profile)
    native = targets.native()
    assert native.name == name and native.supported
    assert kernels.native_target() == name == TensorOperation("native").target
    spmm = spmm_target()
    assert spmm == native and spmm.spmm_isa == spmm_isa
    assert cpu_target("native") == native
    assert native_lanes() == lanes == native.vector_lanes(np.float64) == vector_lanes("native", np.float64)
    rng = np.random.default_rng(3)
    t = SparseTensor.from_dense(np.where(rng.random((9, 8)) < 0.3, 1.0, 0.0).astype(np.float32))
    b = rng.standard_normal((8, 5)).astype(np.float32)
    assert native_lanes((t, b)) == 2 * lanes
    plan = sparse_plan("ij,jk->ik", t, b)
    assert plan.machine is not None and plan.machine.lanes == 2 * lanes


def test_the_sparse_isa_choices_belong_to_the_targets():
    """Vector widths, the SpMM kernel's ISA (NEON for SVE: no SVE SpMM generator) and the sparse
    nest generator behind each target (compiled, not loaded); ISA names map back to targets."""
    import numpy as np

    from minijit.sparseauto.plan import sparse_plan
    from minijit.sparseauto.tensor import SparseTensor

    rng = np.random.default_rng(3)
    nest = sparse_plan("ij,jk->ik", SparseTensor.from_dense(np.eye(9, 8)), rng.standard_normal((8, 5))).default_linear()
    # name: vector bits at sve_vl=384, the SpMM kernel's ISA, the name of its sparse nest code
    table = {
        "x86_64-avx512": (512, "avx512", "sparse_nest_avx512_fp64"),
        "x86_64-avx2": (256, "avx2", "sparse_nest_avx2_fp64"),
        "aarch64-neon": (128, "neon", "sparse_nest_neon_fp64"),
        "aarch64-sve": (384, "neon", "sparse_nest_sve_fp64"),
    }
    for name, (bits, spmm_isa, code) in table.items():
        t = targets.get_cpu(name, sve_vl=384)
        assert t.vector_bits == bits and t.vector_lanes(np.float64) == bits // 64
        assert t.vector_lanes(np.float32) == bits // 32 and t.vector_lanes("float32") == bits // 32
        assert targets.for_isa(t.isa, sve_vl=384) == t and t.spmm_isa == spmm_isa
        assert t.sparse_program(nest, {"i": 9, "j": 8, "k": 5}, "fp64").asm.name == code
    with pytest.raises(ValueError, match="isa must be one of neon, sve, avx512, avx2, got 'sse4'"):
        targets.for_isa("sse4")
    assert X86Target("avx2").extensions == "AVX2+FMA" and AArch64Target("sve").extensions == "SVE"


def test_sme_hosts_take_the_sme_target_at_their_streaming_length(pin_host):
    """A host with SME runs `AArch64SmeTarget` at its streaming vector length (SVE or not beside
    it); `supported` is the host's SME flag; an SVE host without SME keeps the SVE target."""
    from minijit.runtime import profiles
    from minijit.targets import AArch64SmeTarget

    for key, sve in (("apple-m4", False), ("arm-c1-ultra", True)):
        p = pin_host(key)
        assert p.info.sme and p.info.sme_vl_bits == 512 and p.info.sve == sve and "no project machine" in p.source
        native = targets.native()
        assert native == AArch64SmeTarget("sme", sme_vl=512) and native.name == "aarch64-sme"
        assert native.supported and AArch64Target("neon").supported
        assert AArch64Target("sve").supported == sve
    pin_host("neoverse-v1")
    assert targets.native() == AArch64Target("sve", sve_vl=128) and not AArch64SmeTarget("sme").supported
    pin_host("zen3")
    assert not AArch64SmeTarget("sme").supported
    for key, p in profiles.PROFILES.items():  # every profile validates and names itself
        assert profiles.get(key) is p and profiles.HostProfile(**vars(p)) == p
        assert p.info.sme == (p.info.sme_vl_bits > 0) and p.source


def test_x86_support_needs_avx2_and_fma(pin_host):
    """`supported` of x86-64 AVX2 is the host's AVX2 and FMA (every x86-64 kernel fuses its
    multiply-adds); no x86-64 target is supported on an AArch64 host."""
    pin_host("zen3")
    assert X86Target("avx2").supported and not X86Target("avx512").supported
    pin_host("neoverse-v1")
    assert not X86Target("avx2").supported and not X86Target("avx512").supported
    assert AArch64Target("sve").supported and AArch64Target("neon").supported


def test_targets_name_the_operation_class_serving_them():
    """The registry of operation classes lives on the target objects: the public classes import
    none of their target subclasses, and a bad entry is refused by name."""
    from minijit.cuda.operation import CudaTensorOperation
    from minijit.einsum.cuda import CudaEinsumPlan
    from minijit.sparse import SpMM
    from minijit.sparse.spmm_cpu import CpuSpMM
    from minijit.sparse.spmm_cuda import CudaSpMM

    cuda, cpu = targets.get("cuda"), targets.get("x86_64-avx2")
    assert cuda.operation_class(minijit.TensorOperation) is CudaTensorOperation
    assert cuda.operation_class(minijit.EinsumPlan) is CudaEinsumPlan
    assert cuda.operation_class(SpMM) is CudaSpMM
    assert cpu.operation_class(SpMM) is CpuSpMM
    assert cpu.operation_class(minijit.TensorOperation) is minijit.TensorOperation

    class Broken(targets.CudaTarget):
        operations = {"TensorOperation": "minijit.sparse.spmm_cpu:CpuSpMM"}  # noqa: RUF012 - a test's table

    with pytest.raises(TypeError, match="not a subclass of it"):
        Broken().operation_class(minijit.TensorOperation)
