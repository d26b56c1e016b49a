"""What the benchmark suites report: tables, hardware and version facts, JSON, ``bench/results`` files, plots."""

from __future__ import annotations

import datetime
import json
import pathlib
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minijit.bench import UserError

__all__ = [
    "Report",
    "check_result",
    "cpu_table",
    "hardware",
    "markdown_table",
    "meta",
    "plot",
    "results_dir",
    "versions",
    "write_json",
    "write_markdown",
]

Progress = Callable[[str], None]


def quiet(_msg: str) -> None:
    """A progress callback that says nothing."""


@dataclass
class Report:
    """One suite's outcome: printed lines, the JSON document and the Markdown file for ``--write``.

    ``header`` (``# ...`` lines) and ``body`` (tables, summaries) are printed; the Markdown file
    ``results_dir() / md_name`` holds ``md_title``, one ``- fact`` line per ``md_facts`` entry and
    ``body``. ``ok`` is False when a result was wrong (exit status 1).
    """

    header: list[str]
    body: list[str]
    result: dict[str, Any]
    ok: bool
    md_name: str = ""
    md_title: str = ""
    md_facts: list[str] = field(default_factory=list)


def markdown_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows]
    return "\n".join(lines)


def check_result(got: np.ndarray, ref: np.ndarray, tol: float) -> dict[str, Any]:
    """The ``check`` of a row: max |got - ref| within ``tol * max(1, max |ref|)`` (NaN in ``got`` fails)."""
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    err = float(np.max(np.abs(got - ref))) if ref.size else 0.0
    return {"max_abs_err": err, "max_abs_ref": scale, "ok": bool(err <= tol * max(scale, 1.0))}


def fmt(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def cpu_table(rows: list[dict[str, Any]]) -> str:
    """The CPU suite's rows as a Markdown table (peers in the order they were measured).

    ``unit`` is GFLOPS, or GB/s for rows whose main primitive does no flops (copy, zero); the
    minijit and peer columns are in that unit and ``minijit/peer`` is the peer's time over minijit's.
    Rows timed in several rounds (``spread`` in the row) get a ``spread`` column: the slowest round
    over the best, minijit's then each peer's, in percent.
    """
    peer_names = list(dict.fromkeys(p["name"].split(".")[0] for r in rows for p in r["peers"]))
    head = ["config", "dtype", "threads", "time ms", "unit", "minijit"]
    for pn in peer_names:
        head += [pn, f"minijit/{pn}"]
    spreads = any("spread" in r for r in rows)
    if spreads:
        head.append("spread")
    head.append("check")
    out = []
    for r in rows:
        cells = [r["config"], r["dtype"], str(r["threads"]), f"{r['time_s'] * 1e3:.3f}", r["unit"], fmt(r["rate"])]
        for pn in peer_names:
            p = next((p for p in r["peers"] if p["name"].split(".")[0] == pn), None)
            if p is None:
                cells += ["-", "-"]
            else:
                label = f" ({p['name'].split('.')[-1]})" if "." in p["name"] else ""
                cells += [fmt(p["rate"]) + label, f"{p['ratio']:.2f}x"]
        if spreads:
            sides = [r.get("spread")] + [p.get("spread") for p in r["peers"]]
            cells.append(" / ".join("-" if x is None else f"{100 * x:.0f} %" for x in sides))
        cells.append("ok" if r["check"]["ok"] else f"ERR {r['check']['max_abs_err']:.2g}")
        out.append(cells)
    return markdown_table(head, out)


def torch_module():
    """torch when it imports, else None."""
    try:
        import torch  # type: ignore[import-not-found]
    except Exception:
        return None
    return torch


def hardware() -> dict[str, Any]:
    """CPU name, family/model (`minijit.runtime.features.cpu_id`), data caches in bytes (L1d, L2,
    L3 as the blocking model reads them), core count, ISA, OS, feature flags and the native target."""
    from minijit import packing
    from minijit.kernels import native_target
    from minijit.runtime.features import cpu_id, cpu_name, host, num_cpus

    h = host()
    flags = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "neon", "sve", "bf16") if getattr(h, f)]
    l1, l2 = packing.cache_geometries()
    info: dict[str, Any] = {
        "cpu": cpu_name(),
        "cpu_id": cpu_id(),
        "caches": {"L1d": l1.size, "L2": l2.size, "L3": packing.last_level_cache_bytes()},
        "cores": num_cpus(),
        "isa": h.isa,
        "os": h.os,
        "flags": flags,
        "native_target": native_target(),
    }
    if h.sve:
        info["sve_vl_bits"] = h.sve_vl_bits
    return info


def describe_cpu(hw: dict[str, Any]) -> str:
    """``hardware()``'s CPU in one line: name, family/model and caches ("AMD EPYC (family 25 model
    17 stepping 1; L1d 32 KiB, L2 1024 KiB, L3 32768 KiB)")."""
    caches = ", ".join(f"{level} {size // 1024} KiB" for level, size in hw.get("caches", {}).items())
    detail = "; ".join(x for x in (hw.get("cpu_id", ""), caches) if x)
    name = hw.get("cpu") or hw.get("isa", "?")
    return f"{name} ({detail})" if detail else name


def versions() -> dict[str, Any]:
    """minijit, Python, numpy, numpy's BLAS and (when importable) torch versions."""
    import minijit

    v: dict[str, Any] = {"minijit": minijit.__version__, "python": platform.python_version(), "numpy": np.__version__}
    try:
        cfg = np.show_config(mode="dicts")  # numpy >= 1.26
        blas = cfg.get("Build Dependencies", {}).get("blas", {})
        v["blas"] = f"{blas.get('name', '?')} {blas.get('version', '')}".strip()
    except Exception:
        pass
    torch = torch_module()
    if torch is not None:
        v["torch"] = torch.__version__
    return v


def meta(command: str) -> dict[str, Any]:
    """Date and command of a result."""
    return {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"), "command": command}


def write_json(path: str, result: dict[str, Any]) -> None:
    try:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None


def results_dir() -> pathlib.Path:
    """``bench/results`` of the source tree minijit runs from, else ``./bench/results``."""
    tree = pathlib.Path(__file__).resolve().parents[2] / "bench"
    return (tree if tree.is_dir() else pathlib.Path.cwd() / "bench") / "results"


def write_markdown(report: Report) -> pathlib.Path:
    """``results_dir() / report.md_name``: title, ``- fact`` lines and the body; returns the path."""
    path = results_dir() / report.md_name
    text = "\n".join([f"# {report.md_title}", "", *(f"- {f}" for f in report.md_facts), "", *report.body, ""])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e}") from None
    return path


def plot(rows: list[dict[str, Any]], path: str) -> None:
    """A grouped bar chart of minijit and peer rates (GFLOPS, GB/s for no-flop rows) per (config, threads)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['config']}\n{r['threads']}T" + ("\n(GB/s)" if r["unit"] == "GB/s" else "") for r in rows]
    series = {"minijit": [r["rate"] for r in rows]}
    for r in rows:
        for p in r["peers"]:
            series.setdefault(p["name"], [0.0] * len(rows))
    for i, r in enumerate(rows):
        for p in r["peers"]:
            series[p["name"]][i] = p["rate"]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(rows) + 2), 4.5))
    for j, (name, vals) in enumerate(series.items()):
        ax.bar([i + (j - (len(series) - 1) / 2) * width for i in range(len(rows))], vals, width, label=name)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, fontsize=7)
    units = sorted({r["unit"] for r in rows})
    ax.set_ylabel(" / ".join(units) if units else "GFLOPS")
    ax.set_title("minijit vs. peers (same run)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
