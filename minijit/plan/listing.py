"""`listing`: a plan tree as text, every node as comment lines over the generated code (the
target, the configuration, the cache model's choice, chunks, peeled parts, packed operands and
each kernel's assembly)."""

from __future__ import annotations

from minijit import blocking, schedule
from minijit.ir import TensorConfig
from minijit.packing import PanelPlan
from minijit.plan.nodes import Chunk, Kernel, Node, Pack, Peel, Plan, head
from minijit.targets import CpuTarget


def listing(plan: Plan, target: CpuTarget) -> str:
    """The listing of ``plan`` on ``target``."""
    lines = ["\n".join(f"// {line}" for line in [target.name, *str(plan.config).splitlines()])]
    body = plan.body
    if isinstance(body, Peel):
        for i, part in enumerate(body.parts):
            name = ("head", "tail")[i] if len(body.parts) == 2 else f"part {i}"
            lines.append(
                f"// peeled (minijit.peeling): the {name}, from elements {part.offsets} of in0, in1, out, set up on"
                f" its own:\n{_tagged(listing(part.plan, target), f'// {name}: ')}"
            )
        return "\n".join(lines)
    if plan.blocking is not None:
        lines.append(f"// blocking (minijit.blocking): {plan.blocking.reason}")
        lines.append(f"// compiled (minijit.blocking.call_footprint): {footprint(plan.config, target)}")
        if isinstance(body, Kernel | Pack):
            lines.extend(_grid(head(body), target))
    lines.extend(_node(body, target))
    return "\n".join(lines)


def _node(node: Node, target: CpuTarget) -> list[str]:
    """The lines of a chunked, packed or plain body."""
    if isinstance(node, Chunk):
        return [_chunk_line(node), _tagged(listing(node.bodies[0], target), "// chunk: ")]
    if isinstance(node, Pack):
        return [*_fills(node, target), *_node(node.body, target)]
    if isinstance(node, Kernel):
        return _kernel(node)
    raise TypeError(f"not a plan body: {type(node).__name__}")


def _chunk_line(node: Chunk) -> str:
    if node.kind == "K":
        touches = {(p.config.prim_first.name, p.config.prim_last.name) for p in node.bodies}
        return (
            f"// chunked: {node.count} chunks of K dim {node.dim} (in0, in1, out {node.steps} bytes apart), each"
            " chunk's A (one contiguous run) packed into a buffer that stays in the cache and computed"
            f" before the next, in order on every thread (first/last touch per chunk: {sorted(touches)});"
            " the first chunk:"
        )
    return (
        f"// chunked: {node.count} chunks of the outermost loop dim (in0, in1, out {node.steps} bytes apart), each"
        " packed into a buffer that stays in the cache and computed before the next; one chunk:"
    )


def _fills(node: Pack, target: CpuTarget) -> list[str]:
    """The packed buffers and the listings of their copies."""
    lines = []
    for fill in node.fills:
        layout, n = fill.layout, len(fill.copies)
        if isinstance(layout, PanelPlan):
            lines.append(f"// {layout.describe()}")
            tags = [f"// pack {fill.tensor} ({i + 1}/{n}): " for i in range(n)]
        else:  # a padded A: the config its kernels run on
            main = str(layout.main).splitlines()[1:]
            lines.append("\n".join(f"// {line}" for line in [layout.describe(), "kernels run on:", *main]))
            tags = ["// pack: "] * n
        lines.extend(_tagged(listing(c.plan, target), tag) for c, tag in zip(fill.copies, tags, strict=True))
    return lines


def _grid(node: Kernel, target: CpuTarget) -> list[str]:
    """The model's thread grid and B panel (`minijit.schedule.gemm_grid`) of a GEMM kernel run on
    several threads, and the grid its shared loops give the threads."""
    if node.threads < 2:
        return []
    mr = max(1, target.panel_column_bytes // node.config.dtype.itemsize)
    grid = schedule.gemm_grid(node.config, node.threads, mr)
    if grid is None:
        return []
    given = schedule.shared_partition(node.config, node.threads)
    if given is None:
        loops = "no grid (ranges wrap a row of tiles)"
    else:
        loops = f"{given[0]} x {given[1]} (M x N)"
        try:
            theirs = schedule.gemm_grid(node.config, node.threads, mr, grids=[given])
        except ValueError:  # a grid the model does not cover (more parts than tiles)
            theirs = None
        if theirs is not None:
            loops += f", modelled cycles {theirs.cost:.3g}"
    return [
        f"// blocking of the threads (minijit.schedule.choose_grid): {grid.describe()}; the shared loops give {loops}"
    ]


def _kernel(node: Kernel) -> list[str]:
    lines = []
    if node.n_outer:
        lines.append(
            "// kernel order n_outer: each register block of N columns walks every M block (C streamed down"
            " its columns, the call's A block re-read from the cache per block of columns)"
        )
    if node.a_copy:
        lines.append(
            "// pack in0 inside the kernel (a_copy): each M block's first N block stores its A rows into a"
            " stack buffer that the other N blocks read; no copy pass over in0"
        )
    for name, k in {**node.primitives, "loopnest": node.loopnest}.items():
        lines.append(f"// ---- {name}: {getattr(k, 'name', name)} at {k.address:#x}\n{k.listing}")
    return lines


def footprint(config: TensorConfig, target: CpuTarget) -> str:
    """`minijit.blocking.call_footprint` of the compiled GEMM kernel of ``config`` (prim sizes, BR
    steps; register blocks of ``target.panel_column_bytes`` per A column)."""
    roles, dims = config.prim, config.dims
    size = lambda role: 1 if role is None else dims[role].size  # noqa: E731
    item = config.dtype.itemsize
    mr = max(1, target.panel_column_bytes // item)
    return blocking.call_footprint(size(roles.m), size(roles.n), size(roles.k), size(roles.br), item, mr)


def _tagged(text: str, tag: str) -> str:
    """A sub-plan's listing with its comment lines marked by ``tag``."""
    return "\n".join(line.replace("// ", tag, 1) if line.startswith("// ") else line for line in text.splitlines())
