"""The ``minijit`` command line: ``bench``, ``disasm``, ``info`` and ``tune``.

    minijit bench                       # = bench cpu: default suite (~40 s on 2 cores), GFLOPS next to numpy
    minijit bench --quick               # small suite (~7 s on 2 cores)
    minijit bench cpu --config brgemm --threads 1,2 --reps 20 --json out.json --plot out.png
    minijit bench --config-file ops.json   # user-defined tensor operations (JSON, or YAML with PyYAML)
    minijit bench cuda                  # GPU: tensor-core GEMM / seed configs vs torch (--size, --iters, --write)
    minijit bench spmm                  # SpMM: TCA-SpMM vs cuSPARSE on a GPU, CPU kernel vs scipy (--quick, --write)
    minijit bench einsum                # einsum plans vs np.einsum (--target cuda: vs torch.einsum on a GPU)
    minijit bench einsum --dask         # minijit.dask vs dask.array.einsum on a LocalCluster (minijit[dask])
    minijit bench dispatch              # thread dispatch cost per execute, native team vs thread pool
    minijit bench warmup                # first calls, new shapes, fresh processes, import time vs numpy (~30 s)
    minijit bench attention             # scaled_dot_product_attention vs torch SDPA and numpy (--quick, --sweep)
    minijit disasm --config brgemm      # the generated kernels and loop nest as assembly
    minijit info                        # host features, targets, tools, tuned blockings
    minijit tune --budget 300           # time the model's best blockings per GEMM class; store the winners

This module parses the arguments, calls the suites in `minijit.bench` (`configs`, `cpu`,
`cuda`, `spmm`, `einsum`, `dispatch`, `warmup`, `attention`; `report` for tables, JSON and
``bench/results``) and prints.
The old ``bench`` flags ``--spmm``, ``--einsum``, ``--dispatch`` and ``--target cuda`` still run
their suites for one release, with a deprecation note naming the subcommand (`bench_argv`). Errors in the
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

__all__ = ["bench_argv", "build_parser", "main"]

TOOLS = ("llvm-mc", "llvm-mc-19", "llvm-mca", "llvm-mca-19", "qemu-aarch64", "ptxas")
DURATIONS = {"default": "~40 s on 2 cores", "quick": "~7 s on 2 cores"}
#: seconds of timing `minijit tune` spends in all by default (``--budget``)
TUNE_BUDGET_S = 120.0


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
#: the suites of ``minijit bench``, one subcommand each; no subcommand means ``cpu``
BENCH_SUITES = ("cpu", "cuda", "spmm", "einsum", "dispatch", "sparse-einsum", "warmup", "attention")
#: timed repetitions when --reps is not given: (--quick, default)
DEFAULT_REPS = {"cpu": (5, 10), "cuda": (10, 20), "spmm": (3, 5), "einsum": (3, 5), "einsum-cuda": (10, 20)}
DEFAULT_REPS["sparse-einsum"] = (3, 5)
DEFAULT_REPS["attention"] = (3, 5)
#: the old mode flags of ``minijit bench`` (deprecated, one release) and the subcommands they name
OLD_MODE_FLAGS = {"--spmm": "spmm", "--einsum": "einsum", "--dispatch": "dispatch"}


def _old_flags_parser() -> argparse.ArgumentParser:
    """The old mode flags (``--target cuda`` for the cuda suite, ``--spmm-n`` for spmm's ``--n``)."""
    p = _Parser(prog="minijit bench", add_help=False, allow_abbrev=False)
    modes = p.add_mutually_exclusive_group()
    for flag, suite in OLD_MODE_FLAGS.items():
        modes.add_argument(flag, dest="suite", action="store_const", const=suite)
    p.add_argument("--target")
    p.add_argument("--spmm-n")
    return p


def bench_argv(argv: list[str]) -> tuple[list[str], str | None]:
    """``argv`` (``["bench", ...]``) with the suite named, and a deprecation note or None.

    No subcommand means ``cpu``. The old flags name the new spelling: ``--spmm``, ``--einsum``,
    ``--dispatch`` and ``--target cuda`` become the subcommands spmm, einsum, dispatch and cuda
    (``--einsum --target cuda``: einsum with ``--target cuda``), ``--spmm-n`` spmm's ``--n``.
    """
    rest = list(argv[1:])
    if rest and rest[0] in (*BENCH_SUITES, "-h", "--help"):
        return list(argv), None
    old, others = _old_flags_parser().parse_known_args(rest)
    if old.suite is None and old.target != "cuda":
        return ["bench", "cpu", *rest], None
    suite = old.suite or "cuda"
    new = [suite, *others]
    if old.target is not None and not (suite == "cuda" and old.target == "cuda"):
        new += ["--target", old.target]
    if old.spmm_n is not None:
        new += ["--n" if suite == "spmm" else "--spmm-n", old.spmm_n]
    new_argv = ["bench", *new]
    return new_argv, f"minijit {shlex.join(argv)} is deprecated: use minijit {shlex.join(new_argv)}"


def _progress_of(args: argparse.Namespace) -> report.Progress:
    return lambda msg: _progress(msg, args.quiet)


def _reps(args: argparse.Namespace, suite: str) -> int:
    quick, default = DEFAULT_REPS[suite]
    return args.reps if args.reps is not None else quick if args.quick else default


def _command(args: argparse.Namespace) -> str:
    return "minijit " + shlex.join(args.argv)


def _bench_cpu(args: argparse.Namespace) -> int:
    from minijit.bench import cpu

    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UserError("--plot needs matplotlib: pip install matplotlib (or 'minijit[plot]')") from None
    if args.target == "cuda":
        raise UserError("bench cpu runs on the CPU; the GPU GEMM rows are minijit bench cuda")
    target = cpu.check_native(args.target)
    suite = configs.QUICK_SUITE if args.quick else configs.DEFAULT_SUITE
    specs = configs.select(args.config, args.config_file, suite, args.dtype)
    threads = _parse_threads(args.threads)
    reps = _reps(args, "cpu")
    rep = cpu.bench(specs, threads, target, reps, _command(args), _progress_of(args), args.rounds)
    rc = _emit(args, rep)
    if args.plot:
        report.plot(rep.result["results"], args.plot)
        _progress(f"wrote {args.plot}", args.quiet)
    return rc


def _bench_cuda(args: argparse.Namespace) -> int:
    from minijit.bench import cuda

    size = args.size if args.size is not None else cuda.QUICK_SIZE if args.quick else cuda.SIZE
    if not cuda.MIN_SIZE <= size <= cuda.MAX_SIZE:
        raise UserError(f"--size must be in {cuda.MIN_SIZE}..{cuda.MAX_SIZE}, got {size}")
    why = cuda.missing()
    if why:
        raise UserError(f"bench cuda: {why}")
    return _emit(args, cuda.bench(size, _reps(args, "cuda"), _command(args), _progress_of(args)))


def _spmm_ns(args: argparse.Namespace) -> list[int]:
    from minijit.sparse.cpu import MAX_N

    if args.n is None:
        return [64, 128] if args.quick else [128, 256, 512]
    out = []
    for part in args.n.split(","):
        try:
            n = int(part)
        except ValueError:
            raise UserError(f"--n takes comma-separated integers, got {part.strip()!r}") from None
        if not 1 <= n <= MAX_N:
            raise UserError(f"--n values must be in 1..{MAX_N}, got {n}")
        out.append(n)
    return list(dict.fromkeys(out))


def _bench_spmm(args: argparse.Namespace) -> int:
    from minijit import parallel
    from minijit.bench import spmm

    ns = _spmm_ns(args)
    threads = _one_thread_count(args.threads, "bench spmm") or parallel.default_threads()
    reps = _reps(args, "spmm")
    return _emit(args, spmm.bench(ns, reps, threads, args.quick, _command(args), _progress_of(args)))


def _bench_einsum(args: argparse.Namespace) -> int:
    from minijit import parallel
    from minijit.bench import cuda, einsum, einsum_cuda

    if args.dask:
        if args.target == "cuda" or args.dtype or args.threads or args.rows:
            raise UserError(
                "bench einsum --dask runs fp32 on CPU workers (no --target cuda, --dtype, --threads, --rows)"
            )
        from minijit.bench import dask as dask_bench

        reps = args.reps if args.reps is not None else 1 if args.quick else 2
        return _emit(args, dask_bench.bench(args.quick, reps, _command(args), _progress_of(args)))
    if args.target == "cuda":
        flags = (("--dtype", args.dtype), ("--threads", args.threads), ("--rows", args.rows))
        given = [flag for flag, value in flags if value is not None]
        if given:
            raise UserError(
                f"bench einsum --target cuda runs fp16 and tf32 on the GPU; it does not take {', '.join(given)}"
            )
        why = cuda.missing()
        if why:
            raise UserError(f"bench einsum --target cuda: {why}")
        rep = einsum_cuda.bench(args.quick, _reps(args, "einsum-cuda"), _command(args), _progress_of(args))
        return _emit(args, rep)
    threads = _one_thread_count(args.threads, "bench einsum") or parallel.default_threads()
    reps, dtype = _reps(args, "einsum"), _one_dtype(args, "bench einsum") or "fp32"
    rows = args.rows or "all"
    return _emit(args, einsum.bench(reps, threads, args.quick, _command(args), dtype, _progress_of(args), rows))


def _bench_dispatch(args: argparse.Namespace) -> int:
    from minijit import parallel
    from minijit.bench import dispatch

    threads = _one_thread_count(args.threads, "bench dispatch") or max(2, parallel.default_threads())
    return _emit(args, dispatch.bench(threads, args.quick, _command(args), _progress_of(args)))


def _bench_sparse_einsum(args: argparse.Namespace) -> int:
    from minijit import parallel
    from minijit.bench import sparse_einsum

    threads = _one_thread_count(args.threads, "bench sparse-einsum") or parallel.default_threads()
    rep = sparse_einsum.bench(
        _reps(args, "sparse-einsum"), threads, args.quick, _command(args), _progress_of(args), not args.no_pydata
    )
    return _emit(args, rep)


def _bench_attention(args: argparse.Namespace) -> int:
    from minijit.bench import attention

    shapes = attention.QUICK if args.quick else attention.SHAPES
    threads = sorted(_parse_threads(args.threads))
    dtypes = (args.dtype or "fp32,fp64").split(",")
    rep = attention.bench(
        shapes, threads, dtypes, args.rounds or 3, _reps(args, "attention"), args.sweep, _command(args),
        _progress_of(args), clock=args.clock,
    )  # fmt: skip
    return _emit(args, rep)


def _bench_warmup(args: argparse.Namespace) -> int:
    from minijit.bench import warmup

    shapes, new_shapes, processes, imports = warmup.QUICK if args.quick else warmup.DEFAULTS
    rep = warmup.bench(
        args.shapes or shapes,
        args.new_shapes or new_shapes,
        args.processes or processes,
        args.imports or imports,
        _command(args),
        _progress_of(args),
    )
    return _emit(args, rep)


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
    if args.attention:
        print(_attention_plan(args.attention, args.dtype).explain())
        if not args.config and not args.config_file and not args.generic:
            return 0
    if args.generic:
        from minijit import kernels

        for dtype in args.dtype.split(",") if args.dtype else ["fp32", "fp64"]:
            kernel = kernels.generic_gemm(dtype, target=args.target)
            print(f"// ==== generic GEMM ({args.target}, {dtype}): sizes and strides at run time")
            print(kernel.listing)
        if not args.config and not args.config_file:
            return 0
    specs = configs.select(args.config, args.config_file, (), args.dtype)
    if not specs:
        raise UserError("disasm needs --config NAME (or --config-file PATH), --generic or --attention")
    threads = _one_thread_count(args.threads, "disasm") or parallel.default_threads()
    for spec in specs:
        op = cpu.make_op(spec, threads, args.target)
        print(f"// ==== {spec.name}: {spec.description}")
        print(op.listing())
        describe = getattr(op.target_info, "describe_model", None)  # a target with a stated model (SME)
        text = describe(op.config) if describe is not None else ""
        if text:
            print(text)
    return 0


def _attention_plan(text: str, dtype: str | None):
    """The `AttentionPlan` of ``--attention H,L,S,E[,causal]`` (heads, query and key lengths, head
    width) and the first of ``--dtype`` (fp32 default)."""
    import numpy as np

    from minijit.attention.api import AttentionPlan

    parts = [p.strip() for p in text.split(",")]
    causal = parts[-1:] == ["causal"]
    parts = parts[:-1] if causal else parts
    try:
        heads, L, S, E = (int(p) for p in parts)
        if min(heads, L, S, E) < 1:
            raise ValueError
    except ValueError:
        raise UserError(f"--attention takes H,L,S,E[,causal] (positive integers), got {text!r}") from None
    name = (dtype or "fp32").split(",")[0]
    dt = {"fp32": np.float32, "fp64": np.float64}.get(name)
    if dt is None:
        raise UserError(f"--attention runs fp32 or fp64, got --dtype {name!r}")
    shape = lambda n: (heads, n, E)  # noqa: E731
    try:
        return AttentionPlan(shape(L), shape(S), shape(S), dt, mask="causal" if causal else "none")
    except (TypeError, ValueError) as e:
        raise UserError(str(e)) from None


def _targets() -> dict[str, str]:
    """Every target with how it runs here: native, emulated, or unavailable and why."""
    from minijit import targets as cpu_targets
    from minijit.bench import cuda

    qemu = shutil.which("qemu-aarch64")
    targets = {}
    for name in cpu_targets.CPU_TARGETS:
        t = cpu_targets.get_cpu(name)
        if t.native:
            targets[name] = "native" if t.supported else "not supported by this CPU"
        elif t.emulable:
            targets[name] = "emulated (qemu-aarch64)" if qemu else "unavailable (no qemu-aarch64)"
        else:
            targets[name] = "unavailable on this host"
    ok, why = cuda.target_status()
    targets["cuda"] = f"available: {why}" if ok else f"unavailable: {why}"
    return targets


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def cmd_info(args: argparse.Namespace) -> int:
    from minijit import parallel
    from minijit.cuda import families
    from minijit.runtime import codecache

    hw = report.hardware()
    gpu = families.status()
    info = {
        "hardware": hw,
        "default_threads": parallel.default_threads(),
        "targets": _targets(),
        "gpu_families": [f.as_dict() for f in gpu],
        "tools": {tool: shutil.which(tool) for tool in TOOLS},
        "versions": report.versions(),
        "optional": {m: _importable(m) for m in ("torch", "matplotlib", "yaml", "threadpoolctl", "scipy")},
        "tuned": _tuned_summary(hw["native_target"]),
        "gemm_blockings": _gemm_blockings(hw["native_target"]),
        "tune_estimate_s": _tune_estimate(),
        "code_cache": codecache.info(),
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
    print(f"gpu kernel families{f' on {gpu[0].device}' if gpu and gpu[0].device else ''}:")
    for f in gpu:
        print(f"  {f.family.name:<23} {f.state:<6} {f.why + '; ' if f.why else ''}needs {f.needs}")
    print("tools:")
    for tool, p in info["tools"].items():
        print(f"  {tool:<15} {p or 'not found'}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()))
    print("optional: " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in info["optional"].items()))
    print(f"code cache: {codecache.describe(info['code_cache'])}")
    tuned = info["tuned"]
    if tuned is not None:
        where = tuned["file"] or "off (MINIJIT_TUNE_FILE is empty)"
        state = f"{tuned['entries']} entries for this CPU" if tuned["exists"] else "no file yet (minijit tune)"
        print(f"tuned:    {where}: {state}")
    rows = info["gemm_blockings"]
    if rows:
        print(f"GEMM blockings on {hw['native_target']} (M = N = K; prims M x N x K, BR steps per call):")
        for r in rows:
            block = f"{r['m']}x{r['n']}x{r['k']} br {r['br'] or '-'}"
            print(f"  {r['dtype']} {r['size']:>5} {r['order']} t{r['threads']:<3} {block:<20} {r['source']}")
        if not any(r["source"] == "tuned" for r in rows):
            minutes = info["tune_estimate_s"] / 60
            print(
                f"  every class uses the cache model; `minijit tune` (about {minutes:.0f} min with the default"
                " --budget) times its best few blockings per class on this CPU and stores the fastest"
            )
    return 0


def _gemm_blockings(target: str) -> list[dict]:
    """`minijit.tune.class_choices` of ``minijit tune``'s default classes on the native CPU target,
    as rows (empty where the host has no native CPU target)."""
    from minijit import tune

    try:
        choices = tune.class_choices(tune.default_classes(), target)
    except ValueError:
        return []
    return [
        {
            "dtype": c.shape_class.dtype,
            "size": c.shape_class.size,
            "order": c.shape_class.order,
            "threads": c.shape_class.threads,
            "m": c.blocking.m,
            "n": c.blocking.n,
            "k": c.blocking.k,
            "br": c.blocking.br,
            "source": c.source,
        }
        for c in choices
    ]


def _tune_estimate() -> float:
    """Wall seconds ``minijit tune`` takes with its defaults (`minijit.tune.estimated_seconds`)."""
    from minijit import tune

    return tune.estimated_seconds(len(tune.default_classes()), TUNE_BUDGET_S)


def _tuned_summary(target: str) -> dict | None:
    """`minijit.tune_store.summary` of the native CPU target (None where there is none)."""
    from minijit import targets, tune_store

    try:
        return tune_store.summary(targets.get_cpu(target).name)
    except (ValueError, KeyError):
        return None


def cmd_tune(args: argparse.Namespace) -> int:
    from minijit import tune, tune_store

    if not args.budget > 0:
        raise UserError(f"--budget must be a positive number of seconds, got {args.budget}")
    threads = _parse_threads(args.threads) if args.threads else None
    try:
        classes = tune.default_classes(
            threads,
            sizes=args.size or tune.DEFAULT_SIZES,
            dtypes=args.dtype or tune.DEFAULT_DTYPES,
            orders=args.order or tune.DEFAULT_ORDERS,
        )
    except ValueError as e:
        raise UserError(str(e)) from None
    file = tune_store.path()
    if file is None:
        raise UserError("MINIJIT_TUNE_FILE is empty: the tuned-blocking store is off")
    print(f"tuning {len(classes)} GEMM classes in {args.budget:g} s of timing into {file}", flush=True)
    try:
        tune.tune(
            classes,
            args.budget,
            target=args.target,
            count=args.candidates,
            progress=lambda r: print(r.line(), flush=True),
        )
    except ValueError as e:
        raise UserError(str(e)) from None
    return 0


# ---------------------------------------------------------------------------------------------
# argument parsing
# ---------------------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        self.print_usage(sys.stderr)
        raise UserError(message)


def _dtype_list(text: str) -> str:
    """``--dtype``: fp32, fp64, or both comma-separated (argparse reports the ValueError)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or any(n not in ("fp32", "fp64") for n in names):
        raise argparse.ArgumentTypeError(f"invalid choice: {text!r} (choose from 'fp32', 'fp64', 'fp32,fp64')")
    return ",".join(dict.fromkeys(names))


def _one_dtype(args: argparse.Namespace, command: str) -> str | None:
    """The single ``--dtype`` of a command that runs one element type."""
    if args.dtype and "," in args.dtype:
        raise UserError(f"{command} runs one element type: --dtype fp32 or --dtype fp64, not {args.dtype}")
    return args.dtype


def _add_common_args(p: argparse.ArgumentParser, threads_help: str) -> None:
    names = ", ".join(configs.BUILTIN_CONFIGS)
    p.add_argument(
        "--config",
        action="append",
        metavar="NAME",
        help=f"configuration (repeatable, or comma-separated): {names}, or a name from --config-file",
    )
    p.add_argument("--config-file", metavar="PATH", help="JSON (or YAML) file of user tensor operations")
    p.add_argument(
        "--dtype",
        type=_dtype_list,
        metavar="fp32|fp64",
        help="element type(s), comma-separated for bench cpu (default: fp32 / the file's)",
    )
    p.add_argument(
        "--target",
        default="native",
        help="native (default), x86_64-avx512, x86_64-avx2, aarch64-neon, aarch64-sve, aarch64-sme",
    )
    p.add_argument("--threads", action="append", metavar="N", help=threads_help)


def _positive(text: str) -> int:
    """An argparse type: a positive integer."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {n}")
    return n


def _suite(suites, name: str, func, summary: str, details: str = "") -> argparse.ArgumentParser:
    p = suites.add_parser(name, help=summary, description=summary + details)
    p.set_defaults(func=func, suite_parser=p, write=False, plot=None)
    return p


def _add_run_args(p: argparse.ArgumentParser, quick: str, reps: str | None, write: bool) -> None:
    """The options every suite shares: --reps (where it counts repetitions), --quick, --json, --write, -q."""
    if reps is not None:
        p.add_argument("--reps", "--iters", dest="reps", type=_positive, metavar="N", help=reps)
    p.add_argument("--quick", action="store_true", help=quick)
    p.add_argument("--json", metavar="PATH", help="write the results (with hardware, date, command, versions)")
    if write:
        p.add_argument("--write", action="store_true", help="also write a Markdown file to bench/results/")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress on stderr")


def _add_bench_parsers(bench: argparse.ArgumentParser) -> None:
    """The suites of ``minijit bench``, each with the options it takes."""
    suites = bench.add_subparsers(dest="suite", metavar="{" + ",".join(BENCH_SUITES) + "}", parser_class=_Parser)
    suites.required = True
    one_thread = "threads: one positive integer or 'all' (default all)"

    p = _suite(suites, "cpu", _bench_cpu, "tensor operations on the CPU: GFLOPS next to numpy (and torch), same run")
    _add_common_args(p, "thread counts: positive integers or 'all' (repeatable or comma-separated; default all,1)")
    p.add_argument(
        "--rounds",
        type=_positive,
        metavar="N",
        help="rounds alternating minijit and its peers, each side's best round kept (default 3, one for calls"
        " over 0.2 s); more rounds give both sides more chances at a quiet spell on a noisy host",
    )
    p.add_argument("--plot", metavar="PATH", help="bar chart PNG (needs matplotlib)")
    _add_run_args(p, f"a small suite ({DURATIONS['quick']}; default {DURATIONS['default']})",
                  "timed calls per measurement (median; default 10, --quick 5)", write=False)  # fmt: skip

    p = _suite(suites, "cuda", _bench_cuda, "GPU GEMM: fp16/bf16/tf32 GEMMs and the seed configs vs torch")
    p.add_argument("--size", type=int, metavar="N", help="M = N = K of the GEMM (default 8192, --quick 4096)")
    _add_run_args(p, "size 4096", "CUDA-event-timed iterations, mean (default 20, --quick 10)", write=True)

    p = _suite(suites, "spmm", _bench_spmm, "SpMM: TCA-SpMM vs cuSPARSE on a GPU (when one answers), CPU vs scipy")
    p.add_argument("--n", metavar="N,N,...", help="dense column counts N (default 128,256,512; --quick 64,128)")
    p.add_argument("--threads", action="append", metavar="N", help=one_thread)
    _add_run_args(p, "small matrices, a few seconds on 2 cores", "best of N calls (default 5, --quick 3)", write=True)

    p = _suite(
        suites,
        "einsum",
        _bench_einsum,
        "einsum plans vs np.einsum (CPU) or torch.einsum (--target cuda)",
        ": minijit.EinsumPlan vs np.einsum(optimize=True) on real and random expressions; --target cuda:"
        " CudaEinsumPlan vs torch.einsum on GPU-sized real expressions (fp16, tf32)",
    )
    p.add_argument("--target", choices=("native", "cuda"), default="native", help="native (default) or cuda")
    p.add_argument("--dtype", choices=("fp32", "fp64"), help="element type on the CPU (default fp32)")
    p.add_argument("--threads", action="append", metavar="N", help=one_thread + "; CPU only")
    p.add_argument("--dask", action="store_true", help="minijit.dask vs dask.array.einsum on a 2-process LocalCluster")
    p.add_argument("--rows", choices=("all", "float", "typed"), help="CPU rows: all (default), the float suite"
                   " (--dtype), or typed: the int32/int64, complex64/complex128 and float16 rows")  # fmt: skip
    _add_run_args(p, "fewer and smaller cases", "timed calls (CPU: median, default 5, --quick 3;"
                  " cuda: mean, default 20, --quick 10)", write=True)  # fmt: skip

    summary = "sparse einsum: chosen vs linear schedule, tensora, sparse.einsum, scipy"
    p = _suite(suites, "sparse-einsum", _bench_sparse_einsum, summary)
    p.add_argument("--threads", action="append", metavar="N", help=one_thread)
    p.add_argument("--no-pydata", action="store_true", help="skip pydata sparse.einsum (seconds per row)")
    _add_run_args(p, "1/4-size data", "timed calls per round (median; default 5, --quick 3)", write=True)

    p = _suite(suites, "dispatch", _bench_dispatch, "thread dispatch cost per execute: native team vs thread pool")
    p.add_argument("--threads", action="append", metavar="N", help="threads of the no-op rows (default all, >= 2)")
    _add_run_args(p, "2000 tiny calls per row, not 20000 (~2 s)", None, write=False)

    summary = "scaled_dot_product_attention vs torch SDPA and numpy written out: GFLOPS, ratios, softmax share"
    p = _suite(
        suites,
        "attention",
        _bench_attention,
        summary,
        ": issue 50's shapes (--quick: small ones), fp32 and fp64, 1 and all threads, alternating rounds;"
        " --sweep also times a grid of the fused kernel's (g, s_x) tiles and ranks the plan's own",
    )
    p.add_argument("--threads", action="append", metavar="N", help="thread counts (default all,1)")
    p.add_argument("--dtype", type=_dtype_list, metavar="fp32|fp64", help="element type(s) (default fp32,fp64)")
    p.add_argument("--rounds", type=_positive, metavar="N", help="alternating rounds, best kept (default 3)")
    p.add_argument("--sweep", action="store_true", help="also time the (g, s_x) tile grid per shape")
    p.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall: elapsed time (default); cpu: the process's CPU time over all its threads (on a busy"
        " host, 1-thread rows without the waits for a core; at N threads it sums them: total work, not latency)",
    )
    _add_run_args(p, "small shapes (seconds)", "best of N calls per side and round (default 5, --quick 3)", write=True)

    p = _suite(
        suites,
        "warmup",
        _bench_warmup,
        "warm-up costs next to numpy: a loop of new matmul shapes, first calls, fresh processes, import time",
        ": (a) a loop of fp32 matmuls minijit.einsum('ij,jk->ik') of sizes drawn from 16..128, first and second"
        " pass, vs np.einsum and np.matmul; (b) the first call on a new shape; (c) a fresh process's first 64x64"
        " einsum with a cold and a warm MINIJIT_CACHE_DIR; (d) import numpy vs import numpy, minijit",
    )
    p.add_argument("--shapes", type=_positive, metavar="N", help="matmuls in the loop of (a) (default 200, --quick 50)")
    p.add_argument("--new-shapes", type=_positive, metavar="N", help="new shapes of (b) (default 20, --quick 10)")
    p.add_argument(
        "--processes", type=_positive, metavar="N", help="fresh processes per cache state in (c) (default 3, --quick 2)"
    )
    p.add_argument(
        "--imports", type=_positive, metavar="N", help="fresh processes per import line in (d) (default 10, --quick 5)"
    )
    _add_run_args(p, "fewer shapes and processes (~10 s on 2 cores)", None, write=False)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="minijit", description="minijit: JIT tensor operations; benchmark, listings, host info")
    sub = parser.add_subparsers(dest="command", metavar="{bench,disasm,info,tune}", parser_class=_Parser)
    sub.required = True

    b = sub.add_parser(
        "bench",
        help="GFLOPS of tensor operations next to numpy (and torch) in the same run",
        description="Benchmark suites, each measured next to its peers in the same run. Without a suite:"
        f" cpu (the default suite takes {DURATIONS['default']}, --quick {DURATIONS['quick']}). The old flags"
        " --spmm, --einsum, --dispatch and --target cuda still work for one release, with a deprecation note.",
    )
    _add_bench_parsers(b)

    d = sub.add_parser("disasm", help="set up a configuration and print its kernels and loop nest")
    _add_common_args(d, "thread target of the optimizer: a positive integer or 'all' (default all)")
    d.add_argument(
        "--generic", action="store_true", help="print the generic-tier GEMM kernel of the target (each --dtype)"
    )
    d.add_argument(
        "--attention",
        metavar="H,L,S,E[,causal]",
        help="print the attention plan of H heads, L queries, S keys, head width E: the IO model's derivation, "
        "the path and the fused kernel's code",
    )
    d.set_defaults(func=cmd_disasm)

    i = sub.add_parser("info", help="host features, targets (cpu and cuda) and tools")
    i.add_argument("--json", dest="json_out", action="store_true", help="print as JSON")
    i.set_defaults(func=cmd_info)

    t = sub.add_parser(
        "tune",
        help="time the cache model's best GEMM blockings on this host and store the winners",
        description="For each GEMM class (dtype, size, C/F order of in0 in1 out, threads) time the model's"
        " best few blockings within the budget and store the fastest in the user's tuned-blocking file"
        " (MINIJIT_TUNE_FILE, else $XDG_CACHE_HOME/minijit/tuned.json), which every later setup on this CPU reads.",
    )
    t.add_argument(
        "--budget",
        type=float,
        default=TUNE_BUDGET_S,
        metavar="SECONDS",
        help=f"seconds of timing in all (default {TUNE_BUDGET_S:g})",
    )
    t.add_argument("--threads", action="append", metavar="N", help="thread counts (default 1 and all)")
    t.add_argument(
        "--size", action="append", type=_positive, metavar="N", help="M = N = K (default 512 1024 2048 4096)"
    )
    t.add_argument("--dtype", action="append", choices=("fp32", "fp64"), help="default fp32 and fp64")
    t.add_argument("--order", action="append", metavar="XYZ", help="C/F order of in0, in1, out (default CCC, FFF)")
    t.add_argument(
        "--candidates", type=_positive, default=4, metavar="N", help="model-ranked blockings per class (default 4)"
    )
    t.add_argument("--target", default="native", help="CPU target (default native)")
    t.set_defaults(func=cmd_tune)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        given, note = argv, None
        if argv[:1] == ["bench"]:
            argv, note = bench_argv(argv)
            if note:
                print(note, file=sys.stderr, flush=True)
        args, extras = parser.parse_known_args(argv)
        if extras:  # the suite's own usage line, not minijit's
            getattr(args, "suite_parser", parser).error(f"unrecognized arguments: {' '.join(extras)}")
        args.argv = argv if note else given
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
