"""The ``minijit`` command line: ``bench``, ``disasm`` and ``info``.

    minijit bench                       # default suite (~40 s on 2 cores): GFLOPS next to numpy
    minijit bench --quick               # small suite (~7 s on 2 cores)
    minijit bench --config brgemm --threads 1,2 --reps 20 --json out.json --plot out.png
    minijit bench --config-file ops.json   # user-defined tensor operations (JSON, or YAML with PyYAML)
    minijit bench --target cuda         # GPU: tensor-core GEMM / seed configs vs torch (--size, --iters, --write)
    minijit bench --spmm                # SpMM: TCA-SpMM vs cuSPARSE on a GPU, CPU kernel vs scipy (--quick, --write)
    minijit disasm --config brgemm      # the generated kernels and loop nest as assembly
    minijit info                        # host features, targets, tools

This module parses the arguments, calls the suites in `minijit.bench` (`configs`, `cpu`,
`cuda`, `spmm`; `report` for tables, JSON and ``bench/results``) and prints. Errors in the
arguments or a config file print one line and exit 2; a wrong benchmark result exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import sys
from collections.abc import Sequence

from minijit.bench import UserError, configs, report

__all__ = ["build_parser", "main"]

TOOLS = ("llvm-mc", "llvm-mc-19", "llvm-mca", "llvm-mca-19", "qemu-aarch64", "ptxas")
DURATIONS = {"default": "~40 s on 2 cores", "quick": "~7 s on 2 cores"}


def _progress(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def _parse_threads(values: list[str] | None) -> list[int]:
    """``--threads`` values: comma-separated positive integers or 'all' (the default thread count)."""
    from minijit import parallel

    if values is None:
        all_ = parallel.default_threads()
        return [all_, 1] if all_ > 1 else [1]
    out = []
    for part in (p.strip() for item in values for p in item.split(",")):
        n = parallel.default_threads() if part == "all" else int(part) if part.isdecimal() else 0
        if n < 1:
            raise UserError(f"--threads: expected positive integers (or 'all'), got {part!r}")
        out.append(n)
    return list(dict.fromkeys(out))


def _one_thread_count(values: list[str] | None, flag: str) -> int | None:
    threads = None if values is None else _parse_threads(values)
    if threads is not None and len(threads) != 1:
        raise UserError(f"{flag} takes one --threads value, got {','.join(map(str, threads))}")
    return threads[0] if threads else None


def _emit(args: argparse.Namespace, rep: report.Report) -> int:
    """Print the report, write ``--json`` / ``--write`` files; the exit status."""
    print("\n".join([*rep.header, *rep.body]))
    if args.json:
        report.write_json(args.json, rep.result)
        _progress(f"wrote {args.json}", args.quiet)
    if args.write and rep.md_name:
        _progress(f"wrote {report.write_markdown(rep)}", args.quiet)
    return 0 if rep.ok else 1


# ---------------------------------------------------------------------------------------------
# bench
# ---------------------------------------------------------------------------------------------
def _bench_mode(args: argparse.Namespace) -> str:
    """The bench mode: cpu, cuda (``--target cuda``) or spmm (``--spmm``); UserError for options it does not take."""
    mode = "einsum" if args.einsum else "spmm" if args.spmm else "cuda" if args.target == "cuda" else "cpu"
    if mode == "einsum" and args.target == "cuda" and not args.spmm:
        mode = "einsum-cuda"
    elif mode == "einsum" and (args.spmm or args.target != "native"):
        raise UserError("--einsum runs on the native CPU target or on --target cuda; drop --spmm / --target")
    if mode == "spmm" and args.target != "native":
        raise UserError(
            f"--spmm chooses its devices itself (the GPU when one answers, and the CPU); drop --target {args.target}"
        )
    if mode != "cpu":
        flags = {"cuda": "--target cuda", "spmm": "--spmm", "einsum": "--einsum"}
        flag = flags.get(mode, "--einsum --target cuda")
        opts = {
            "--config": args.config,
            "--config-file": args.config_file,
            "--plot": args.plot,
            "--rounds": args.rounds,
        }
        if mode != "einsum":
            opts["--dtype"] = args.dtype
        if mode in ("cuda", "einsum-cuda"):
            opts["--threads"] = args.threads
        given = [o for o, v in opts.items() if v is not None]
        if given:
            raise UserError(f"{flag} runs its own cases; it does not take {', '.join(given)}")
    if args.size is not None and mode != "cuda":
        raise UserError("--size (the GEMM size) applies only to --target cuda")
    if args.spmm_n is not None and mode != "spmm":
        raise UserError("--spmm-n applies only to --spmm")
    if args.write and mode == "cpu":
        raise UserError("--write applies to --target cuda and --spmm (and --einsum); the CPU suite writes --json PATH")
    return mode


def _default_reps(args: argparse.Namespace) -> int:
    if args.einsum and args.target == "cuda":
        return 10 if args.quick else 20
    if args.einsum:
        return 3 if args.quick else 5
    if args.spmm:
        return 3 if args.quick else 5
    if args.target == "cuda":
        return 10 if args.quick else 20
    return 5 if args.quick else 10


def _bench_cuda(args: argparse.Namespace, command: str) -> report.Report:
    from minijit.bench import cuda

    size = args.size if args.size is not None else cuda.QUICK_SIZE if args.quick else cuda.SIZE
    if not cuda.MIN_SIZE <= size <= cuda.MAX_SIZE:
        raise UserError(f"--size must be in {cuda.MIN_SIZE}..{cuda.MAX_SIZE}, got {size}")
    why = cuda.missing()
    if why:
        raise UserError(f"--target cuda: {why}")
    return cuda.bench(size, args.reps, command, lambda msg: _progress(msg, args.quiet))


def _spmm_ns(args: argparse.Namespace) -> list[int]:
    from minijit.sparse.cpu import MAX_N

    if args.spmm_n is None:
        return [64, 128] if args.quick else [128, 256, 512]
    out = []
    for part in args.spmm_n.split(","):
        try:
            n = int(part)
        except ValueError:
            raise UserError(f"--spmm-n takes comma-separated integers, got {part.strip()!r}") from None
        if not 1 <= n <= MAX_N:
            raise UserError(f"--spmm-n values must be in 1..{MAX_N}, got {n}")
        out.append(n)
    return list(dict.fromkeys(out))


def _bench_spmm(args: argparse.Namespace, command: str) -> report.Report:
    from minijit import parallel
    from minijit.bench import spmm

    ns = _spmm_ns(args)
    threads = _one_thread_count(args.threads, "--spmm") or parallel.default_threads()
    return spmm.bench(ns, args.reps, threads, args.quick, command, lambda msg: _progress(msg, args.quiet))


def _bench_einsum(args: argparse.Namespace, command: str) -> report.Report:
    from minijit import parallel
    from minijit.bench import einsum

    threads = _one_thread_count(args.threads, "--einsum") or parallel.default_threads()
    dtype = args.dtype or "fp32"
    return einsum.bench(args.reps, threads, args.quick, command, dtype, lambda msg: _progress(msg, args.quiet))


def _bench_einsum_cuda(args: argparse.Namespace, command: str) -> report.Report:
    from minijit.bench import cuda, einsum_cuda

    why = cuda.missing()
    if why:
        raise UserError(f"--einsum --target cuda: {why}")
    return einsum_cuda.bench(args.quick, args.reps, command, lambda msg: _progress(msg, args.quiet))


def _bench_cpu(args: argparse.Namespace, command: str) -> report.Report:
    from minijit.bench import cpu

    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UserError("--plot needs matplotlib: pip install matplotlib (or 'minijit[plot]')") from None
    target = cpu.check_native(args.target)
    specs = configs.select(
        args.config, args.config_file, configs.QUICK_SUITE if args.quick else configs.DEFAULT_SUITE, args.dtype
    )
    threads = _parse_threads(args.threads)
    return cpu.bench(specs, threads, target, args.reps, command, lambda msg: _progress(msg, args.quiet), args.rounds)


def _bench_dispatch(args: argparse.Namespace) -> int:
    """``--dispatch``: the per-execute thread dispatch cost, native team against the thread pool."""
    from minijit import parallel
    from minijit.bench import dispatch

    given = {
        "--einsum": args.einsum, "--spmm": args.spmm, "--target": args.target != "native", "--config": args.config,
        "--config-file": args.config_file, "--json": args.json, "--write": args.write, "--plot": args.plot,
        "--size": args.size, "--spmm-n": args.spmm_n, "--dtype": args.dtype, "--rounds": args.rounds is not None,
    }  # fmt: skip
    taken = [flag for flag, value in given.items() if value]
    if taken:
        raise UserError(f"--dispatch runs its own cases; it does not take {', '.join(taken)}")
    threads = _one_thread_count(args.threads, "--dispatch") or max(2, parallel.default_threads())
    calls, gemm_calls = (2000, 20) if args.quick else (20000, 100)
    _progress(f"dispatch: backends {', '.join(dispatch.available_backends())}, {threads} threads", args.quiet)
    rows = dispatch.measure(threads=threads, calls=calls, gemm_calls=gemm_calls)
    hw = report.hardware()
    print(f"# minijit bench --dispatch: {report.describe_cpu(hw)}, {hw['cores']} cores (medians of {calls} tiny calls)")
    print(dispatch.report(rows))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    if args.dispatch:
        return _bench_dispatch(args)
    mode = _bench_mode(args)
    if args.reps < 1:
        raise UserError(f"--reps must be >= 1, got {args.reps}")
    if args.rounds is not None and args.rounds < 1:
        raise UserError(f"--rounds must be >= 1, got {args.rounds}")
    command = "minijit " + shlex.join(args.argv)
    run = {"cuda": _bench_cuda, "spmm": _bench_spmm, "cpu": _bench_cpu, "einsum": _bench_einsum,
           "einsum-cuda": _bench_einsum_cuda}[mode]  # fmt: skip
    rep = run(args, command)
    rc = _emit(args, rep)
    if args.plot:
        report.plot(rep.result["results"], args.plot)
        _progress(f"wrote {args.plot}", args.quiet)
    return rc


# ---------------------------------------------------------------------------------------------
# disasm, info
# ---------------------------------------------------------------------------------------------
def cmd_disasm(args: argparse.Namespace) -> int:
    from minijit import parallel
    from minijit.bench import cpu
    from minijit.kernels import check_target

    try:
        check_target(args.target)
    except ValueError as e:
        raise UserError(str(e)) from None
    specs = configs.select(args.config, args.config_file, (), args.dtype)
    if not specs:
        raise UserError("disasm needs --config NAME (or --config-file PATH)")
    threads = _one_thread_count(args.threads, "disasm") or parallel.default_threads()
    for spec in specs:
        op = cpu.make_op(spec, threads, args.target)
        print(f"// ==== {spec.name}: {spec.description}")
        print(op.listing())
    return 0


def _targets() -> dict[str, str]:
    """Every target with how it runs here: native, emulated, or unavailable and why."""
    from minijit.bench import cuda
    from minijit.kernels import TARGETS
    from minijit.runtime import host, runs_natively

    h = host()
    qemu = shutil.which("qemu-aarch64")
    targets = {}
    for t in TARGETS:
        isa = t.split("-")[0]
        if runs_natively(isa):
            ok = not (t == "x86_64-avx512" and not h.avx512) and not (t == "aarch64-sve" and not h.sve)
            targets[t] = "native" if ok else "not supported by this CPU"
        elif isa == "aarch64":
            targets[t] = "emulated (qemu-aarch64)" if qemu else "unavailable (no qemu-aarch64)"
        else:
            targets[t] = "unavailable on this host"
    ok, why = cuda.target_status()
    targets["cuda"] = f"available: {why}" if ok else f"unavailable: {why}"
    return targets


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def cmd_info(args: argparse.Namespace) -> int:
    from minijit import parallel

    hw = report.hardware()
    info = {
        "hardware": hw,
        "default_threads": parallel.default_threads(),
        "targets": _targets(),
        "tools": {tool: shutil.which(tool) for tool in TOOLS},
        "versions": report.versions(),
        "optional": {m: _importable(m) for m in ("torch", "matplotlib", "yaml", "threadpoolctl", "scipy")},
    }
    if args.json_out:
        print(json.dumps(info, indent=2))
        return 0
    print(f"CPU:      {report.describe_cpu(hw)} ({hw['isa']}, {hw['os']}), {hw['cores']} cores")
    print(f"features: {' '.join(hw['flags']) or '-'}")
    print(f"threads:  {info['default_threads']} (MINIJIT_NUM_THREADS / OMP_NUM_THREADS / CPU count)")
    print(f"native:   {hw['native_target']}")
    print("targets:")
    for t, s in info["targets"].items():
        print(f"  {t:<15} {s}")
    print("tools:")
    for tool, p in info["tools"].items():
        print(f"  {tool:<15} {p or 'not found'}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    print("optional: " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in info["optional"].items()))
    return 0


# ---------------------------------------------------------------------------------------------
# argument parsing
# ---------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        self.print_usage(sys.stderr)
        raise UserError(message)


def _add_common_args(p: argparse.ArgumentParser, threads_help: str) -> None:
    names = ", ".join(configs.BUILTIN_CONFIGS)
    p.add_argument(
        "--config",
        action="append",
        metavar="NAME",
        help=f"configuration (repeatable, or comma-separated): {names}, or a name from --config-file",
    )
    p.add_argument("--config-file", metavar="PATH", help="JSON (or YAML) file of user tensor operations")
    p.add_argument("--dtype", choices=("fp32", "fp64"), help="element type (default: fp32 / the file's)")
    p.add_argument(
        "--target",
        default="native",
        help="native (default), x86_64-avx512, x86_64-avx2, aarch64-...; bench: cuda (GPU GEMM rows vs torch)",
    )
    p.add_argument("--threads", action="append", metavar="N", help=threads_help)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="minijit", description="minijit: JIT tensor operations; benchmark, listings, host info")
    sub = parser.add_subparsers(dest="command", metavar="{bench,disasm,info}", parser_class=_Parser)
    sub.required = True

    b = sub.add_parser(
        "bench",
        help="GFLOPS of tensor operations next to numpy (and torch) in the same run",
        description=f"GFLOPS (GB/s for copy-only rows) next to numpy and torch, measured in the same run."
        f" The default suite takes {DURATIONS['default']}, --quick {DURATIONS['quick']}.",
    )
    _add_common_args(b, "thread counts: positive integers or 'all' (repeatable or comma-separated; default all,1)")
    b.add_argument(
        "--reps",
        "--iters",
        dest="reps",
        type=int,
        default=None,
        help="timed repetitions per measurement (CPU: median, default 10; cuda: mean of CUDA-event-timed"
        " iterations, default 20; --spmm: best of, default 5)",
    )
    b.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="CPU rows: rounds alternating minijit and its peers, each side's best round kept (default 3, one for"
        " calls over 0.2 s); more rounds give both sides more chances at a quiet spell on a noisy host",
    )
    b.add_argument(
        "--quick",
        action="store_true",
        help=f"a small suite ({DURATIONS['quick']}); cuda: size 4096; --spmm: small matrices",
    )
    b.add_argument("--size", type=int, default=None, help="--target cuda: M = N = K of the GEMM (default 8192)")
    b.add_argument(
        "--spmm",
        action="store_true",
        help="SpMM rows: TCA-SpMM vs cuSPARSE on a GPU (when one answers), the CPU kernel vs scipy",
    )
    b.add_argument("--spmm-n", metavar="N,N,...", help="--spmm: dense column counts N (default 128,256,512)")
    b.add_argument(
        "--einsum",
        action="store_true",
        help="einsum rows: minijit.EinsumPlan vs np.einsum(optimize=True) on real and random expressions;"
        " with --target cuda: CudaEinsumPlan vs torch.einsum on GPU-sized real expressions",
    )
    b.add_argument(
        "--dispatch",
        action="store_true",
        help="thread dispatch cost per execute: a no-op loop nest and 256/512 GEMMs, native team vs thread pool",
    )
    b.add_argument(
        "--write", action="store_true", help="cuda / --spmm / --einsum: also write a Markdown file to bench/results/"
    )
    b.add_argument("--json", metavar="PATH", help="write the results (with hardware, date, command, versions)")
    b.add_argument("--plot", metavar="PATH", help="bar chart PNG (needs matplotlib)")
    b.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")
    b.set_defaults(func=cmd_bench)

    d = sub.add_parser("disasm", help="set up a configuration and print its kernels and loop nest")
    _add_common_args(d, "thread target of the optimizer: a positive integer or 'all' (default all)")
    d.set_defaults(func=cmd_disasm)

    i = sub.add_parser("info", help="host features, targets (cpu and cuda) and tools")
    i.add_argument("--json", dest="json_out", action="store_true", help="print as JSON")
    i.set_defaults(func=cmd_info)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        args.argv = argv
        if args.command == "bench" and args.reps is None:
            args.reps = _default_reps(args)
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"minijit: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("minijit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `minijit disasm ... | head`
        with contextlib.suppress(Exception):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
