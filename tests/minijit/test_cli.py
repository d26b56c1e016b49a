"""The `minijit` command line: bench (its suites as subcommands, the old flags' deprecation, JSON output,
user configs), disasm, info, errors (exit 2)."""

from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from minijit import cli
from minijit.bench import configs, report
from minijit.bench import cuda as bench_cuda
from minijit.runtime import host

native_x86 = pytest.mark.skipif(host().isa != "x86_64", reason="bench runs natively; this host is not x86-64")

TINY_GEMM = {
    "name": "tiny-gemm",
    "dtype": "fp32",
    "prim_main": "gemm",
    "dim_types": ["m", "n", "k"],
    "dim_sizes": [24, 12, 8],
    "strides_in0": [1, 0, 24],
    "strides_in1": [0, 8, 1],
    "strides_out": [1, 24, 0],
}
TINY_BRGEMM = {
    "name": "tiny-brgemm",
    "prim_first": "zero",
    "prim_main": "brgemm",
    "prim_last": "relu",
    "dim_types": ["m", "n", "k", "m", "n", "k"],
    "exec_types": ["seq", "seq", "prim", "prim", "prim", "prim"],
    "dim_sizes": [2, 2, 2, 16, 4, 4],
    "strides_in0": [128, 0, 64, 1, 0, 16],
    "strides_in1": [0, 32, 16, 0, 4, 1],
    "strides_out": [128, 64, 0, 1, 16, 0],
}


def run(argv, capsys):
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "ops.json"
    path.write_text(json.dumps({"configs": [TINY_GEMM, TINY_BRGEMM]}))
    return path


@native_x86
def test_bench_json_user_configs(config_file, tmp_path, capsys):
    out_json = tmp_path / "r.json"
    argv = ["bench", "--quick", "--config-file", str(config_file), "--reps", "1", "--threads", "1,2"]
    rc, out, err = run([*argv, "--json", str(out_json)], capsys)
    assert rc == 0, err
    assert "tiny-gemm" in out and "tiny-brgemm" in out and "minijit/numpy" in out
    assert "[1/4] tiny-gemm" in err  # progress on stderr
    data = json.loads(out_json.read_text())
    assert {"date", "command", "hardware", "versions", "settings", "results"} <= set(data)
    assert {"cpu", "cores", "isa", "flags"} <= set(data["hardware"])
    assert {"minijit", "python", "numpy"} <= set(data["versions"])
    assert data["command"].startswith("minijit bench --quick")
    rows = data["results"]
    assert [(r["config"], r["threads"]) for r in rows] == [
        ("tiny-gemm", 1),
        ("tiny-gemm", 2),
        ("tiny-brgemm", 1),
        ("tiny-brgemm", 2),
    ]
    for r in rows:
        assert r["check"]["ok"]
        assert r["gflops"] > 0 and r["time_s"] > 0 and r["flops"] > 0
        # numpy always; torch.einsum beside it where torch imports (a GEMM row)
        names = [peer["name"] for peer in r["peers"]]
        assert names == ["numpy.einsum"] + (["torch.einsum"] if report.torch_module() is not None else [])
        for peer in r["peers"]:
            assert peer["ratio"] == pytest.approx(r["gflops"] / peer["gflops"])


@native_x86
def test_bench_builtin_seed_config_tiny_reps(capsys):
    rc, out, _ = run(["bench", "--config", "gemm-256", "--threads", "1", "--reps", "1", "-q"], capsys)
    assert rc == 0
    assert "| gemm-256 | fp32 | 1 |" in out and "(matmul)" in out


@native_x86
def test_bench_rounds_are_recorded(tmp_path, capsys):
    out_json = tmp_path / "r.json"
    argv = [
        "bench",
        "--config",
        "gemm-256",
        "--threads",
        "1",
        "--reps",
        "1",
        "--rounds",
        "2",
        "-q",
        "--json",
        str(out_json),
    ]
    rc, out, _ = run(argv, capsys)
    assert rc == 0 and ", 2 rounds" in out
    data = json.loads(out_json.read_text())
    assert data["settings"]["rounds"] == 2 and [r["rounds"] for r in data["results"]] == [2]
    # every round's median is kept, per side, and the spread is the slowest over the best
    (row,) = data["results"]
    for side in (row, *row["peers"]):
        times = side["round_times_s"]
        assert len(times) == 2 and all(t > 0 for t in times)
        assert side["spread"] == pytest.approx(max(times) / min(times) - 1)
        assert side["time_s"] == min(times)
    header = next(ln for ln in out.splitlines() if ln.startswith("| config"))
    assert header.endswith("| spread | check |")
    cells = next(ln for ln in out.splitlines() if ln.startswith("| gemm-256")).split(" | ")
    assert cells[-2] == " / ".join(f"{100 * x['spread']:.0f} %" for x in (row, *row["peers"]))


@native_x86
def test_bench_yaml_config_and_fp64(tmp_path, capsys):
    yaml = pytest.importorskip("yaml")
    path = tmp_path / "ops.yaml"
    path.write_text(yaml.safe_dump([TINY_GEMM]))
    rc, out, _ = run(["bench", "--config-file", str(path), "--dtype", "fp64", "--threads", "1", "--reps", "1"], capsys)
    assert rc == 0
    assert "| tiny-gemm | fp64 | 1 |" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "--config", "nope"], "unknown config 'nope'"),
        (["bench", "--reps", "0", "--config", "gemm"], "argument --reps/--iters: must be >= 1, got 0"),
        (["bench", "--rounds", "0", "--config", "gemm"], "argument --rounds: must be >= 1, got 0"),
        (["bench", "cpu", "--reps", "x"], "argument --reps/--iters: expected a positive integer, got 'x'"),
        (["bench", "--threads", "x", "--config", "gemm"], "--threads: expected positive integers (or 'all'), got 'x'"),
        (["bench", "--dtype", "fp16"], "invalid choice"),
        (["bench", "--target", "riscv"], "target must be"),
        (["bench", "--config-file", "/nonexistent/ops.json"], "cannot read config file"),
        (["disasm"], "disasm needs --config"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2(argv, message, capsys):
    rc, _, err = run(argv, capsys)
    assert rc == 2
    assert message in err
    assert "Traceback" not in err


THREADS_RULE = "--threads: expected positive integers (or 'all'), got "


@pytest.mark.parametrize(
    "argv, value",
    [
        (["bench", "--config", "gemm", "--threads", ""], ""),  # used to run and print a table with no rows
        (["bench", "--config", "gemm", "--threads", "0"], "0"),
        (["bench", "--config", "gemm", "--threads", "abc"], "abc"),
        (["bench", "--config", "gemm", "--threads", "-1"], "-1"),
        (["bench", "--config", "gemm", "--threads", "1,,2"], ""),
        (["bench", "--config", "gemm", "--threads", "1", "--threads", "2.5"], "2.5"),
        (["bench", "spmm", "--threads", "0"], "0"),
        (["bench", "dispatch", "--threads", "x"], "x"),
        (["disasm", "--config", "gemm", "--threads", "0"], "0"),
        (["disasm", "--config", "gemm", "--threads", "abc"], "abc"),
    ],
)
def test_bad_threads_one_wording_exit_2(argv, value, capsys):
    rc, out, err = run(argv, capsys)
    assert rc == 2 and out == ""
    assert err.strip().splitlines() == [f"minijit: error: {THREADS_RULE}{value!r}"]


def test_threads_accepts_integers_and_all(monkeypatch):
    from minijit import parallel

    monkeypatch.setattr(parallel, "default_threads", lambda: 3)
    assert cli._parse_threads(None) == [3, 1]
    assert cli._parse_threads(["all,1", " 2 "]) == [3, 1, 2]
    assert cli._parse_threads(["all", "3"]) == [3]


def test_disasm_help_metavar_is_n(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["disasm", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--threads N" in out and "THREADS_N" not in out


def test_builtin_square_gemms_use_setup_defaults():
    """The built-in GEMM rows measure what a default TensorOperation.setup() call gets."""
    square = [s for s in configs.BUILTIN_CONFIGS.values() if configs.matmul_n(s.setup) is not None]
    names = {f"gemm-{n}{o}" for n in (256, 512, 1024, 2048, 4096) for o in ("", "-c")}
    mixed = {f"gemm-1024-{o.lower()}" for o in configs.LAYOUTS[2:]}
    assert {s.name for s in square} == names | mixed | {"matmul-1600"}
    for spec in square:
        assert spec.options == {}, spec.name
        suffix = spec.name.rsplit("-", 1)[-1]
        want = suffix.upper() if spec.name in mixed else "C" if suffix == "c" else "F"
        assert configs.matmul_layout(spec.setup)[1] == want
    for spec in configs.BUILTIN_CONFIGS.values():
        overrides = sorted(set(spec.options) & {"max_kernel_size", "min_kernel_size"})
        for key in overrides:  # a row that exercises non-default optimizer options says so
            assert "non-default optimizer option" in spec.description and key in spec.description, spec.name


def test_matmul_peer_computes_what_minijit_computes_in_every_layout():
    """The numpy peer of every square-GEMM layout (all F, all C, the six mixes) computes the same
    product as a TensorOperation set up with that layout's strides, on the same buffers."""
    import numpy as np

    from minijit import TensorOperation
    from minijit.bench.cpu import matmul_peer

    n = 40
    rng = np.random.default_rng(3)
    for order in configs.LAYOUTS:
        a, b = rng.uniform(-1, 1, n * n).astype(np.float32), rng.uniform(-1, 1, n * n).astype(np.float32)
        op = TensorOperation(num_threads=1)
        op.setup("fp32", "zero", "gemm", "none", "mnk", ["undefined"] * 3, [n] * 3, *configs.gemm_strides(order, n))
        got, peer = np.zeros(n * n, np.float32), np.zeros(n * n, np.float32)
        op.execute(a, b, got)
        matmul_peer(a, b, peer, n, order)()
        np.testing.assert_allclose(peer, got, rtol=1e-5, atol=1e-5, err_msg=order)


TINY_COPY = {
    "name": "tiny-copy",
    "prim_main": "copy",
    "dim_types": ["c", "c"],
    "dim_sizes": [64, 48],
    "strides_in0": [48, 1],
    "strides_in1": [0, 0],
    "strides_out": [48, 1],
}


@native_x86
def test_copy_only_row_reports_bandwidth(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(report, "torch_module", lambda: None)  # the table's columns with numpy as the one peer
    cfg = tmp_path / "ops.json"
    cfg.write_text(json.dumps([TINY_COPY, {**TINY_GEMM, "name": "tiny-gemm"}]))
    out_json = tmp_path / "r.json"
    argv = ["bench", "--config-file", str(cfg), "--threads", "1", "--reps", "1", "--json", str(out_json)]
    rc, out, err = run(argv, capsys)
    assert rc == 0, err
    assert "| config | dtype | threads | time ms | unit | minijit | numpy | minijit/numpy | spread | check |" in out
    (copy_line,) = [ln for ln in out.splitlines() if ln.startswith("| tiny-copy |")]
    cells = [c.strip() for c in copy_line.strip("|").split("|")]
    assert cells[4] == "GB/s" and "-" not in cells[5:8]
    (gemm_line,) = [ln for ln in out.splitlines() if ln.startswith("| tiny-gemm |")]
    assert " | GFLOPS | " in gemm_line
    copy, gemm = json.loads(out_json.read_text())["results"]
    assert copy["flops"] == 0 and copy["gflops"] is None and copy["unit"] == "GB/s"
    assert copy["bytes"] == 2 * 64 * 48 * 4  # in0 read + out written
    assert copy["rate"] == pytest.approx(copy["bytes"] / copy["time_s"] / 1e9)
    (peer,) = copy["peers"]
    assert peer["rate"] == pytest.approx(copy["bytes"] / peer["time_s"] / 1e9)
    assert peer["ratio"] == pytest.approx(copy["rate"] / peer["rate"])
    assert gemm["unit"] == "GFLOPS" and gemm["rate"] == pytest.approx(gemm["gflops"])


def _fake_driver(monkeypatch, *, available, ptxas, init_error=None):
    import importlib.util

    import ptx
    from ptx import driver

    monkeypatch.setattr(driver, "available", lambda: available)
    monkeypatch.setattr(ptx, "find_ptxas", lambda: ptxas)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: object() if n == "cuda.bindings" else real_find_spec(n, *a)
    )

    def init():
        if init_error is not None:
            raise init_error

    class Dev:
        name, arch = "Fake GPU", "sm_90"

    monkeypatch.setattr(driver, "init", init)
    monkeypatch.setattr(driver, "device", lambda ordinal=0: Dev())


def _info_cuda_line(capsys) -> str:
    rc, out, _ = run(["info"], capsys)
    assert rc == 0
    (line,) = [ln for ln in out.splitlines() if ln.split()[:1] == ["cuda"]]
    return line.split(None, 1)[1]


def test_info_lists_cuda_target(capsys, monkeypatch):
    from ptx import CudaError

    _fake_driver(monkeypatch, available=True, ptxas="/opt/cuda/bin/ptxas")
    assert _info_cuda_line(capsys) == "available: Fake GPU (sm_90), ptxas /opt/cuda/bin/ptxas"
    _fake_driver(monkeypatch, available=False, ptxas=None, init_error=RuntimeError("no libcuda"))
    line = _info_cuda_line(capsys)
    assert line.startswith("unavailable: ptxas not found") and "; no NVIDIA driver (libcuda" in line
    no_device = CudaError("cuInit", 100, "CUDA_ERROR_NO_DEVICE")
    _fake_driver(monkeypatch, available=False, ptxas="/opt/cuda/bin/ptxas", init_error=no_device)
    assert _info_cuda_line(capsys) == "unavailable: no GPU (cuInit: CUDA_ERROR_NO_DEVICE)"
    rc, out, _ = run(["info", "--json"], capsys)
    assert json.loads(out)["targets"]["cuda"] == "unavailable: no GPU (cuInit: CUDA_ERROR_NO_DEVICE)"


def _families(out: str) -> dict[str, str]:
    """The ``gpu kernel families`` lines of ``minijit info``: family -> the rest of its line."""
    lines = out.split("gpu kernel families", 1)[1].split("tools:", 1)[0].splitlines()[1:]
    return {ln[2:25].strip(): ln[25:].strip() for ln in lines}


def test_info_lists_gpu_families(capsys, monkeypatch):
    """Each family with whether it runs on the device and, if not, why (`minijit.cuda.families`)."""
    from minijit.cuda import families
    from ptx import toolchain

    _fake_driver(monkeypatch, available=True, ptxas="/opt/cuda/bin/ptxas")
    monkeypatch.setattr(toolchain, "ptxas_version", lambda path=None: "Cuda compilation tools, release 12.4, V12.4")
    rc, out, _ = run(["info"], capsys)
    assert rc == 0 and "gpu kernel families on Fake GPU (sm_90):" in out
    fams = _families(out)
    assert list(fams) == [f.name for f in families.FAMILIES]
    assert all(line.startswith("yes    needs ") for line in fams.values()), fams
    assert fams["sm90a GEMM (wgmma/TMA)"] == "yes    needs fp16, bf16, fp32: sm_90a (PTX 8.0)"
    _fake_driver(monkeypatch, available=False, ptxas="/opt/cuda/bin/ptxas", init_error=RuntimeError("no libcuda"))
    rc, out, _ = run(["info"], capsys)
    assert "gpu kernel families:" in out
    why = "no     no NVIDIA driver (libcuda not loadable: RuntimeError); needs "
    assert all(line.startswith(why) for line in _families(out).values())
    rc, out, _ = run(["info", "--json"], capsys)
    (mma, *_) = json.loads(out)["gpu_families"]
    assert mma["family"] == "mma.sync GEMM" and mma["runs"] == "no" and mma["why_not"].startswith("no NVIDIA driver")


def test_info_families_through_a_stub_driver(tmp_path):
    """``python -m minijit info`` with the real cuda-bindings and ``tests/ptx/fake_libcuda.c``
    (a 9.0 device named Fake H200): every family runs there."""
    import shutil

    pytest.importorskip("cuda.bindings.driver")
    from ptx import toolchain

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or toolchain.find_ptxas() is None:
        pytest.skip("needs a C compiler for the stub libcuda and ptxas")
    root = Path(__file__).resolve().parents[2]
    lib = tmp_path / "libcuda.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(root / "tests" / "ptx" / "fake_libcuda.c")], check=True)
    env = {**__import__("os").environ, "LD_LIBRARY_PATH": str(tmp_path), "PYTHONPATH": str(root)}
    r = subprocess.run([sys.executable, "-m", "minijit", "info"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "gpu kernel families on Fake H200 (sm_90):" in r.stdout
    assert {line.split()[0] for line in _families(r.stdout).values()} == {"yes"}, r.stdout


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "invalid JSON"),
        ('{"name": "x"}', "missing key(s) prim_main"),
        ('{"name": "x", "colour": 1}', "unknown key(s) colour"),
        ("[]", "no configurations"),
        (json.dumps({**TINY_GEMM, "dim_sizes": [24, 12]}), "setup lists differ in length"),
        (json.dumps({**TINY_GEMM, "strides_out": [0, 24, 0]}), "nonzero stride_out"),
        (json.dumps({**TINY_GEMM, "prim_main": "fma"}), "setup failed"),
        (json.dumps({**TINY_GEMM, "dim_sizes": "24"}), "dim_sizes must be a list"),
        (json.dumps([TINY_GEMM, TINY_GEMM]), "duplicate configuration name"),
    ],
)
def test_bad_config_file_exit_2(tmp_path, content, message, capsys):
    path = tmp_path / "bad.json"
    path.write_text(content)
    rc, _, err = run(["bench", "--config-file", str(path), "--threads", "1", "--reps", "1"], capsys)
    assert rc == 2, err
    assert message in err
    assert "Traceback" not in err


def test_plot_without_matplotlib_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    rc, _, err = run(["bench", "--config", "gemm", "--plot", str(tmp_path / "p.png")], capsys)
    assert rc == 2
    assert "--plot needs matplotlib" in err


@native_x86
def test_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")  # part of the test extra, so CI always runs this
    cfg = tmp_path / "ops.json"
    cfg.write_text(json.dumps([TINY_GEMM]))
    png = tmp_path / "bars.png"
    rc, _, err = run(["bench", "--config-file", str(cfg), "--threads", "1", "--reps", "1", "--plot", str(png)], capsys)
    assert rc == 0, err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@native_x86
def test_disasm_prints_listing(capsys):
    rc, out, _ = run(["disasm", "--config", "brgemm", "--threads", "1"], capsys)
    assert rc == 0
    assert "---- main: brgemm_fp32" in out and "---- loopnest" in out
    assert "vfmadd231ps" in out and "ret" in out


@native_x86
def test_disasm_user_config(config_file, capsys):
    rc, out, _ = run(["disasm", "--config-file", str(config_file), "--config", "tiny-gemm"], capsys)
    assert rc == 0
    assert "tiny-gemm" in out and "vfmadd231ps" in out


def test_info(capsys):
    rc, out, _ = run(["info"], capsys)
    assert rc == 0
    for word in ("CPU:", "native:", "targets:", "tools:", "llvm-mc", "qemu-aarch64", "ptxas"):
        assert word in out
    rc, out, _ = run(["info", "--json"], capsys)
    info = json.loads(out)
    assert {"hardware", "targets", "tools", "versions"} <= set(info)


def test_python_dash_m(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "minijit", "info"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "targets:" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "minijit", "bench", "--config", "nope"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and "unknown config" in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------------------------
# bench spmm and bench cuda
# ---------------------------------------------------------------------------------------------
native_spmm = pytest.mark.skipif(
    not (host().isa == "aarch64" or (host().isa == "x86_64" and host().avx2)),
    reason="no native SpMM kernel for this host",
)
SPMM_ROW = re.compile(r"^\| (dlmc_\w+|ss_\w+) \| (?!\d+ x \d+ \|)")  # result rows, not the plan table (shape column)


@pytest.fixture
def no_gpu(monkeypatch):
    """ptx.driver.available() is False, so the GPU paths behave as on a machine without a GPU."""
    from ptx import driver

    monkeypatch.setattr(driver, "available", lambda: False)


@native_spmm
def test_bench_spmm_quick_cpu_rows(no_gpu, tmp_path, capsys, monkeypatch):
    pytest.importorskip("scipy")
    monkeypatch.setattr(report, "results_dir", lambda: tmp_path / "results")
    out_json = tmp_path / "spmm.json"
    argv = ["bench", "spmm", "--quick", "--reps", "1", "--json", str(out_json), "--write"]
    rc, out, err = run(argv, capsys)
    assert rc == 0, err
    lines = out.splitlines()
    assert [ln for ln in lines if "GPU rows" in ln] == [
        "GPU rows pending: no CUDA device here (ptx.driver.available() is False); CPU section only."
    ]
    assert "| N | minijit ms | GFLOPS | scipy ms | GFLOPS | speedup | check |" in out
    rows = [ln for ln in lines if SPMM_ROW.match(ln)]
    assert len(rows) == 8 * 2  # eight matrices, N = 64 and 128
    assert all(ln.endswith("x | ok |") for ln in rows)
    (gm_line,) = [ln for ln in lines if ln.startswith("geometric-mean speedup over scipy:")]
    data = json.loads(out_json.read_text())
    assert data["command"] == "minijit " + " ".join(argv)
    results = data["results"]
    assert [(r["matrix"], r["n"]) for r in results] == [(r.split(" | ")[0][2:], int(r.split(" | ")[4])) for r in rows]
    for r in results:
        assert r["section"] == "cpu" and r["check"]["ok"] and r["peer"]["name"] == "scipy"
        assert r["rows"] <= 10000 and r["nnz"] > 0  # the quick matrices
        assert r["speedup"] == pytest.approx(r["peer"]["time_s"] / r["time_s"])
        assert r["gflops"] == pytest.approx(2 * r["nnz"] * r["n"] / r["time_s"] / 1e9)
    gm = math.exp(sum(math.log(r["speedup"]) for r in results) / len(results))
    assert data["geomean_speedup"] == {"cpu": pytest.approx(gm)}
    assert gm_line == f"geometric-mean speedup over scipy: {gm:.2f}x"
    (md,) = (tmp_path / "results").glob("spmm_cpu_*.md")
    text = md.read_text()
    assert "`minijit bench spmm --quick" in text and rows[0] in text and gm_line in text


def _spmm_nothing(self, b, c):
    return c  # C keeps the NaNs it was filled with


def _spmm_one_off(self, b, c):
    c[...] = self.csr.to_scipy() @ b
    c[-1, -1] += 0.5
    return c


@native_spmm
@pytest.mark.parametrize("broken", [_spmm_nothing, _spmm_one_off])
def test_bench_spmm_wrong_result_exits_1(broken, no_gpu, capsys, monkeypatch):
    pytest.importorskip("scipy")
    from minijit.sparse.spmm_cpu import CpuSpMM

    monkeypatch.setattr(CpuSpMM, "execute", broken)  # what SpMM(target="native") builds
    rc, out, err = run(["bench", "spmm", "--quick", "--reps", "1", "--n", "16"], capsys)
    assert rc == 1
    rows = [ln for ln in out.splitlines() if SPMM_ROW.match(ln)]
    assert len(rows) == 8 and all(" | ERR " in ln for ln in rows)
    assert err.count("WRONG RESULT") == 8


@pytest.mark.parametrize(
    "patches, message",
    [
        ({}, "bench cuda: no usable CUDA GPU: ptx.driver.available() is False"),
        ({"available": True, "ptxas": None}, "bench cuda: ptxas not found"),
        ({"available": True, "ptxas": "/bin/true", "torch": None}, "bench cuda: torch is not installed"),
    ],
)
def test_bench_cuda_without_gpu_exits_2_naming_what_is_missing(patches, message, capsys, monkeypatch):
    import ptx
    from ptx import driver

    monkeypatch.setattr(driver, "available", lambda: patches.get("available", False))
    if "ptxas" in patches:
        monkeypatch.setattr(ptx, "find_ptxas", lambda: patches["ptxas"])
    if "torch" in patches:
        monkeypatch.setitem(sys.modules, "torch", None)  # import fails
    rc, out, err = run(["bench", "cuda"], capsys)
    assert rc == 2
    assert out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("minijit: error: " + message)


def test_bench_cuda_cases_match_their_einsum():
    """Each case's setup (strides, touches) computes its einsum: the kernel's numpy model, no GPU."""
    np = pytest.importorskip("numpy")
    todo = [c for c in bench_cuda.cases(48, dims=(2, 3, 2, 32, 16, 16)) if c.dtype != "bf16"]
    assert {c.name for c in todo} == {"gemm", "seed gemm", "seed brgemm", "seed zero-brgemm-relu"}
    rng = np.random.default_rng(0)
    for case in todo:
        op = case.operation()
        npdt = np.float16 if case.dtype == "fp16" else np.float32
        a = rng.uniform(-1, 1, case.shapes[0]).astype(npdt)
        b = rng.uniform(-1, 1, case.shapes[1]).astype(npdt)
        c = np.zeros(case.shapes[2], np.float32)
        op.simulate(a, b, c)
        ref = case.reference(a, b)
        assert np.abs(c - ref).max() / np.abs(ref).max() < bench_cuda.TOL[case.dtype], (case.name, case.dtype)
        assert (c.min() >= 0) == case.relu


def test_bench_cuda_cases_at_full_size_set_up_without_gpu():
    todo = bench_cuda.cases(bench_cuda.SIZE)
    assert [(c.name, c.dtype) for c in todo[:3]] == [("gemm", dt) for dt in ("fp16", "bf16", "fp32")]
    assert len(todo) == 12
    for case in todo:
        op = case.operation()
        assert case.flops == 2.0 * 8192**3 if case.name == "gemm" else 2.0 * 8192 * 8192 * 2048
        if case.name.startswith("seed"):
            assert len(op.batch_table) == 16 * 16  # the shared m0, n0 (gridDim.z)
            assert len(op.red_table) == 32  # k0: the seq K loop or the BR dim
            assert (op.m, op.n, op.k) == (512, 512, 64)
            assert case.sizes.startswith("M=8192 N=8192 K=2048 as (m0,n0,k0,m1,n1,k1)=(16,16,32,512,512,64)")
    first_last = {c.name: (c.setup_args[0], c.setup_args[2]) for c in todo}
    assert first_last["seed zero-brgemm-relu"] == ("zero", "relu") and first_last["seed gemm"] == ("none", "none")


@pytest.mark.gpu
def test_bench_cuda_rows_on_gpu(dev, tmp_path, capsys):
    pytest.importorskip("torch")
    out_json = tmp_path / "cuda.json"
    rc, out, err = run(["bench", "cuda", "--size", "512", "--iters", "2", "--json", str(out_json)], capsys)
    assert rc == 0, err
    assert "| minijit/peer | max rel err |" in out
    data = json.loads(out_json.read_text())
    assert dev.name in data["device"]["device"] and data["device"]["ptxas"]
    rows = data["results"]
    assert {(r["case"], r["dtype"]) for r in rows} == {
        (c, dt)
        for c in ("gemm", "seed gemm", "seed brgemm", "seed zero-brgemm-relu")
        for dt in ("fp16", "bf16", "fp32")
    }
    for r in rows:
        assert r["check"]["ok"] and r["max_rel_err"] < (1e-2 if r["dtype"] == "fp32" else 1e-3), r
        assert r["tflops"] > 0 and r["peer"]["tflops"] > 0
        assert r["ratio"] == pytest.approx(r["tflops"] / r["peer"]["tflops"])
        assert f"| {r['case']} | {r['dtype']} | {r['sizes']} | {r['tflops']:.1f} |" in out
        assert f"| {r['ratio']:.2f}x | {r['max_rel_err']:.1e} | ok |" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "cuda", "--size", "0"], "--size must be in 16..16384, got 0"),
        (["bench", "cuda", "--size", "100000"], "--size must be in 16..16384, got 100000"),
        (["bench", "spmm", "--n", "0"], "--n values must be in 1..65536, got 0"),
        (["bench", "spmm", "--n", "64,x"], "--n takes comma-separated integers, got 'x'"),
        (["bench", "spmm", "--threads", "1,2"], "bench spmm takes one --threads value, got 1,2"),
        (["bench", "dispatch", "--threads", "2,3"], "bench dispatch takes one --threads value, got 2,3"),
        (["bench", "cpu", "--target", "cuda"], "bench cpu runs on the CPU; the GPU GEMM rows are minijit bench cuda"),
    ],
)
def test_bench_gpu_and_spmm_argument_errors_exit_2_with_one_line(argv, message, capsys):
    rc, out, err = run(argv, capsys)
    assert rc == 2
    assert out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("minijit: error: ") and message in line


@pytest.mark.parametrize(
    "script, args, message",
    [
        ("cuda_gemm.py", ["--size", "0"], "--size must be in 16..16384, got 0"),
        ("spmm.py", ["--repeats", "0", "--no-write"], "argument --reps/--iters: must be >= 1, got 0"),
    ],
)
def test_bench_scripts_wrap_the_cli(script, args, message):
    path = Path(__file__).resolve().parents[2] / "bench" / script
    proc = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1] == f"minijit: error: {message}", proc.stderr
    assert "deprecated" not in proc.stderr  # the wrappers use the subcommands


def test_row_major_gemm_row_checks_against_matmul(capsys):
    """A C-order GEMM row: minijit and numpy.matmul on the same row-major arrays, result checked."""
    rc = cli.main(["bench", "--config", "gemm-256-c", "--threads", "1", "--reps", "1", "-q"])
    out = capsys.readouterr().out
    assert rc == 0, out
    row = next(ln for ln in out.splitlines() if "gemm-256-c" in ln)
    assert row.endswith("| ok |") and "(matmul)" in row


def test_bench_dispatch_prints_both_backends_and_rejects_other_modes(capsys, monkeypatch, tmp_path):
    from minijit.bench import dispatch

    seen, real = {}, dispatch.measure

    def small_measure(threads, calls, gemm_calls):  # the real measurement, at tiny counts
        seen.update(threads=threads, calls=calls)
        return real(threads=threads, gemm_sizes=(64,), gemm_threads=(1,), calls=50, gemm_calls=3)

    monkeypatch.setattr(dispatch, "measure", small_measure)
    out_json = tmp_path / "dispatch.json"
    rc, out, _ = run(["bench", "dispatch", "--quick", "--threads", "2", "-q", "--json", str(out_json)], capsys)
    assert rc == 0 and seen == {"threads": 2, "calls": 2000}
    assert "minijit bench dispatch" in out and "no-op loop nest" in out and "gemm-64 C-order" in out
    assert "execute() 8-elem add" in out and " caller " in out
    for backend in dispatch.available_backends():
        assert f" {backend} " in out
    data = json.loads(out_json.read_text())
    assert data["command"] == "minijit bench dispatch --quick --threads 2 -q --json " + str(out_json)
    assert data["settings"] == {"threads": 2, "calls": 2000, "gemm_calls": 20}
    for r in data["results"]:  # every printed row, in the JSON too
        assert f"{r['case']:<20} {r['threads']:>7} {r['backend']:<8} {r['seconds'] * 1e6:>10.2f}" in out
    rc, _, err = run(["bench", "dispatch", "--einsum"], capsys)
    assert rc == 2 and "unrecognized arguments: --einsum" in err


# ---------------------------------------------------------------------------------------------
# bench subcommands, and the old mode flags (deprecated for one release)
# ---------------------------------------------------------------------------------------------
SUITE_OPTIONS = {  # each suite's options; every other suite's own options it does not take
    "cpu": {"--config", "--config-file", "--dtype", "--target", "--threads", "--rounds", "--plot", "--reps", "--quick",
            "--json", "--quiet"},
    "cuda": {"--size", "--reps", "--quick", "--json", "--write", "--quiet"},
    "spmm": {"--n", "--threads", "--reps", "--quick", "--json", "--write", "--quiet"},
    "einsum": {"--target", "--dtype", "--threads", "--dask", "--rows", "--reps", "--quick", "--json", "--write",
               "--quiet"},
    "dispatch": {"--threads", "--quick", "--json", "--quiet"},
    "sparse-einsum": {"--threads", "--no-pydata", "--reps", "--quick", "--json", "--write", "--quiet"},
}  # fmt: skip
ALL_OPTIONS = set().union(*SUITE_OPTIONS.values())


@pytest.mark.parametrize("suite", sorted(SUITE_OPTIONS))
def test_bench_suite_help_lists_its_options_only(suite, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", suite, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: minijit bench {suite} ")
    listed = set(re.findall(r"^\s+(--[a-z-]+)", out, re.M)) | set(re.findall(r", (--[a-z-]+)", out))
    assert listed - {"--help", "--iters"} == SUITE_OPTIONS[suite]


def test_bench_help_lists_the_suites(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "{cpu,cuda,spmm,einsum,dispatch,sparse-einsum,warmup,attention}" in out
    for suite in cli.BENCH_SUITES:
        assert re.search(rf"^\s+{suite}\s+\S", out, re.M), suite


@pytest.fixture
def suites_run(monkeypatch):
    """Each suite's handler replaced by a recorder: (suite, the parsed options) per call."""
    calls = []
    for suite in cli.BENCH_SUITES:
        monkeypatch.setattr(cli, f"_bench_{suite.replace('-', '_')}", lambda args: calls.append(args) or 0)
    return calls


def _options(args) -> dict:
    return {k: v for k, v in vars(args).items() if k not in ("argv", "func", "suite_parser")}


OLD_SPELLINGS = [
    (["--spmm"], ["spmm"]),
    (["--spmm", "--quick", "--spmm-n", "16,32", "--threads", "1", "-q"],
     ["spmm", "--quick", "--threads", "1", "-q", "--n", "16,32"]),
    (["--quick", "--spmm-n=64", "--spmm", "--write"], ["spmm", "--quick", "--write", "--n", "64"]),
    (["--einsum"], ["einsum"]),
    (["--einsum", "--quick", "--dtype", "fp64", "--threads", "1"],
     ["einsum", "--quick", "--dtype", "fp64", "--threads", "1"]),
    (["--einsum", "--target", "cuda", "--write"], ["einsum", "--write", "--target", "cuda"]),
    (["--target", "cuda", "--einsum"], ["einsum", "--target", "cuda"]),
    (["--dispatch", "--quick"], ["dispatch", "--quick"]),
    (["--target", "cuda"], ["cuda"]),
    (["--target=cuda", "--size", "512", "--iters", "2", "--write"],
     ["cuda", "--size", "512", "--iters", "2", "--write"]),
]  # fmt: skip


@pytest.mark.parametrize("old, new", OLD_SPELLINGS)
def test_old_bench_flags_run_the_suite_with_a_deprecation_note(old, new, suites_run, capsys):
    rc, out, err = run(["bench", *old], capsys)
    assert rc == 0 and out == ""
    assert err.splitlines() == [f"minijit bench {' '.join(old)} is deprecated: use minijit bench {' '.join(new)}"]
    rc, _, err = run(["bench", *new], capsys)
    assert rc == 0 and err == ""
    (by_old, by_new) = suites_run
    assert by_old.suite == by_new.suite == new[0]
    assert _options(by_old) == _options(by_new)
    assert by_old.argv == by_new.argv == ["bench", *new]  # results record the new spelling


@pytest.mark.parametrize(
    "argv, suite",
    [([], "cpu"), (["--quick"], "cpu"), (["--config", "gemm", "--target", "native"], "cpu"), (["cpu"], "cpu")],
)
def test_bench_without_a_suite_is_cpu_and_not_deprecated(argv, suite, suites_run, capsys):
    rc, _, err = run(["bench", *argv], capsys)
    assert rc == 0 and err == ""
    (args,) = suites_run
    assert args.suite == suite and args.argv == ["bench", *argv]  # the command as given


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--spmm", "--einsum"], "argument --einsum: not allowed with argument --spmm"),
        (["--dispatch", "--einsum"], "argument --einsum: not allowed with argument --dispatch"),
        (["--einsum", "--spmm", "--dispatch"], "argument --spmm: not allowed with argument --einsum"),
        (["spmm", "einsum"], "unrecognized arguments: einsum"),
        (["spmm", "--rounds", "2"], "unrecognized arguments: --rounds 2"),
        (["spmm", "--target", "cuda"], "unrecognized arguments: --target cuda"),
        (["spmm", "--dtype", "fp64"], "unrecognized arguments: --dtype fp64"),
        (["spmm", "--spmm-n", "64"], "unrecognized arguments: --spmm-n 64"),
        (["cuda", "--config", "gemm"], "unrecognized arguments: --config gemm"),
        (["cuda", "--threads", "1"], "unrecognized arguments: --threads 1"),
        (["cpu", "--write"], "unrecognized arguments: --write"),
        (["--write", "--config", "gemm"], "unrecognized arguments: --write"),
        (["--size", "512"], "unrecognized arguments: --size 512"),
        (["--spmm-n", "64"], "unrecognized arguments: --spmm-n 64"),
        (["dispatch", "--rounds", "2"], "unrecognized arguments: --rounds 2"),
        (["dispatch", "--reps", "2"], "unrecognized arguments: --reps 2"),
        (["einsum", "--config", "gemm"], "unrecognized arguments: --config gemm"),
        (
            ["einsum", "--target", "aarch64-neon"],
            "argument --target: invalid choice: 'aarch64-neon' (choose from 'native', 'cuda')",
        ),
        (["gpu"], "unrecognized arguments: gpu"),
    ],
)
def test_bench_options_of_another_suite_are_argparse_errors(argv, message, suites_run, capsys):
    rc, out, err = run(["bench", *argv], capsys)
    assert rc == 2 and out == "" and suites_run == []
    assert err.splitlines()[-1] == f"minijit: error: {message}"
    assert "usage: minijit bench" in err  # the usage of the parser that refused it


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--spmm", "--rounds", "2"], "unrecognized arguments: --rounds 2"),
        (["--spmm", "--target", "cuda"], "unrecognized arguments: --target cuda"),
        (["--dispatch", "--config", "gemm"], "unrecognized arguments: --config gemm"),
    ],
)
def test_old_flags_with_options_their_suite_lacks_say_both(argv, message, suites_run, capsys):
    rc, _, err = run(["bench", *argv], capsys)
    lines = err.splitlines()
    assert rc == 2 and suites_run == []
    assert lines[0].startswith(f"minijit bench {' '.join(argv)} is deprecated: use minijit bench ")
    assert lines[-1] == f"minijit: error: {message}"


def _documented_bench_commands() -> list[tuple[str, list[str]]]:
    """The ``minijit bench`` lines of the sh blocks of README.md and bench/README.md (not the ones
    with ``[optional]`` placeholders), as argument lists."""
    root = Path(__file__).resolve().parents[2]
    out = []
    for name in ("README.md", "bench/README.md"):
        for block in re.findall(r"^```sh\n(.*?)^```", (root / name).read_text(), re.S | re.M):
            for line in block.splitlines():
                cmd = line.split("#", 1)[0].strip()
                m = re.match(r"(?:python -m )?minijit (bench\b.*)", cmd)
                if m and "[" not in cmd:
                    out.append((name, shlex.split(m.group(1))))
    return out


def test_documented_bench_commands_parse_without_deprecation(suites_run, capsys):
    commands = _documented_bench_commands()
    assert {argv[1] for _, argv in commands if len(argv) > 1 and argv[1] in cli.BENCH_SUITES} >= {
        "cpu", "cuda", "spmm", "einsum", "dispatch"
    }  # fmt: skip
    for name, argv in commands:
        rc, _, err = run(argv, capsys)
        assert rc == 0 and err == "", (name, argv, err)
    assert len(suites_run) == len(commands)


@native_x86
def test_bench_cpu_subcommand_runs_a_tiny_config(config_file, tmp_path, capsys):
    out_json = tmp_path / "r.json"
    argv = ["bench", "cpu", "--config-file", str(config_file), "--config", "tiny-gemm", "--threads", "1"]
    rc, out, err = run([*argv, "--reps", "1", "--rounds", "1", "-q", "--json", str(out_json)], capsys)
    assert rc == 0 and err == ""
    assert "| tiny-gemm | fp32 | 1 |" in out and out.rstrip().endswith("| ok |")
    data = json.loads(out_json.read_text())
    assert data["command"].startswith("minijit bench cpu --config-file ")
    assert [(r["config"], r["threads"], r["check"]["ok"]) for r in data["results"]] == [("tiny-gemm", 1, True)]


def test_bench_einsum_subcommand_runs_a_tiny_case(monkeypatch, tmp_path, capsys):
    from minijit.bench import einsum as bench_einsum

    tiny = {"name": "tiny-mm", "subscripts": "ij,jk->ik", "shapes": [(12, 8), (8, 6)], "description": "t",
            "kind": "real"}  # fmt: skip
    monkeypatch.setattr(bench_einsum, "cases", lambda quick=False: [dict(tiny)])
    monkeypatch.setattr(bench_einsum, "random_cases", lambda count=4: [])
    monkeypatch.setattr(bench_einsum, "generated_cases", lambda n=2: ([], []))
    out_json = tmp_path / "e.json"
    rc, out, err = run(["bench", "einsum", "--quick", "--dtype", "fp64", "--threads", "1", "--reps", "1", "-q",
                        "--json", str(out_json)], capsys)  # fmt: skip
    assert rc == 0 and err == ""
    assert "# minijit bench einsum: " in out and "| tiny-mm | fp64 | 1 |" in out
    data = json.loads(out_json.read_text())
    (row,) = data["results"]
    assert row["check"]["ok"] and data["command"].startswith("minijit bench einsum --quick --dtype fp64")


def test_bench_cuda_per_call_us_counts_calls_between_syncs():
    """The launch-overhead figure: (time after the last call's sync - time before the first timed
    call) / calls, after one untimed warm-up call and sync."""
    ticks = iter(range(0, 100, 1))
    log = []
    clock = lambda: next(ticks) * 1e-6  # noqa: E731 - one microsecond per reading
    us = bench_cuda.per_call_us(clock, lambda: log.append("call"), lambda: log.append("sync"), 4)
    assert log == ["call", "sync", "call", "call", "call", "call", "sync"]
    assert us == pytest.approx(1 / 4)  # two clock readings, one microsecond apart, over 4 calls
    with pytest.raises(ValueError, match="calls must be >= 1"):
        bench_cuda.per_call_us(clock, lambda: None, lambda: None, 0)
