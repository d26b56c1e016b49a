"""Instruction emitters for the tensor cores and Hopper: ldmatrix, mma.sync, mbarrier, TMA, wgmma."""

from __future__ import annotations

from . import types as T
from .builder_operands import CVTA_PARAM, Param, Shared, _as_list, _fail


class _TensorCores:
    """ldmatrix, mma.sync and the sm_90(a) instructions (a part of :class:`ptx.builder.Kernel`)."""

    # ------------------------------------------------------------------ tensor cores

    def ldmatrix(self, dst, address, trans: bool = False, pred=None) -> None:
        """``ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16 {d..}, [a]``."""
        regs = _as_list(dst)
        ins = f"ldmatrix.x{len(regs)}"
        if len(regs) not in (1, 2, 4):
            _fail(ins, f"needs 1, 2 or 4 destination registers, got {len(regs)}")
        names = [self._reg(ins, f"d[{i}]", r, "b32") for i, r in enumerate(regs)]
        a = self._address(ins, address, "shared")
        t = ".trans" if trans else ""
        self._emit(
            f"ldmatrix.sync.aligned.m8n8.x{len(regs)}{t}.shared.b16 {{{', '.join(names)}}}, {a}", pred, [T.LDMATRIX]
        )

    def mma(self, shape: str, dtype: str, d, a, b, c, pred=None) -> None:
        """``mma.sync.aligned.shape.row.col.f32.dtype.dtype.f32 {d}, {a}, {b}, {c}``.

        Shapes/types: m16n8k8 (f16, bf16, tf32), m16n8k16 (f16, bf16); A/B
        fragments are .b32 registers (or .f16x2/.bf16x2 matching dtype), C/D .f32.
        """
        from .mma import MMA_SHAPES

        ins = f"mma.sync.aligned.{shape}.{dtype}"
        key = (shape, dtype)
        if key not in MMA_SHAPES:
            _fail(ins, f"unsupported shape/type; supported: {sorted(MMA_SHAPES)}")
        info = MMA_SHAPES[key]
        frag_t = {"f16": "f16x2", "bf16": "bf16x2", "tf32": "b32"}[dtype]
        groups = []
        for opname, regs, n, t in (
            ("d", d, info.regs_c, "f32"),
            ("a", a, info.regs_a, frag_t),
            ("b", b, info.regs_b, frag_t),
            ("c", c, info.regs_c, "f32"),
        ):
            regs = _as_list(regs)
            if len(regs) != n:
                _fail(ins, f"operand {opname} needs {n} registers, got {len(regs)}")
            if opname in ("a", "b") and dtype == "tf32":
                names = [self._reg(ins, f"{opname}[{i}]", r, "b32") for i, r in enumerate(regs)]
            else:
                names = [self._reg(ins, f"{opname}[{i}]", r, t) for i, r in enumerate(regs)]
            groups.append("{" + ", ".join(names) + "}")
        self._emit(
            f"mma.sync.aligned.{shape}.row.col.f32.{dtype}.{dtype}.f32 " + ", ".join(groups),
            pred,
            [info.req],
        )

    # ------------------------------------------------------------------ Hopper (sm_90 / sm_90a)

    def tensormap_param(self, name: str) -> Param:
        """A 128-byte tensor-map parameter (``.param .align 64 .b8 name[128]``, signature "tensormap")."""
        self._check_name(".param", name)
        p = Param(name, "tensormap", self)
        self.params.append(p)
        self._require(T.HOPPER_ASYNC)
        return p

    def param_address(self, dst, param: Param) -> None:
        """The *generic* address of a (tensor-map) parameter, for ``cp.async.bulk.tensor``:
        ``mov.u64 d, param; cvta.param.u64 d, d``.

        ``mov`` alone gives the parameter's address in the .param state space (PTX ISA, mov: "the
        non-generic address of the variable"), which the tensor copy does not take: its tensorMap
        operand is a generic address (PTX ISA, cp.async.bulk.tensor). On an H200 the bare ``mov``
        faulted with CUDA_ERROR_MISALIGNED_ADDRESS (the SASS used the parameter's offset as the
        address); ``cvta.param`` adds the parameter base. Needs PTX 7.7 and sm_70."""
        self._own("mov", "a", param)
        if not isinstance(param, Param):
            _fail("mov", f"operand a must be a Param, got {param!r}")
        d = self._dst("mov", dst, "u64")
        self._require(CVTA_PARAM)
        self._emit(f"mov.u64 {d}, {param.name}")
        self._emit(f"cvta.param.u64 {d}, {d}")

    def extern_shared(self, name: str, align: int = 16) -> Shared:
        """Dynamic shared memory: module-level ``.extern .shared .align A .b8 name[]`` (size set at launch)."""
        if not isinstance(align, int) or align < 1 or align & (align - 1):
            _fail(".extern .shared", f"align must be a power of two, got {align!r}")
        self._check_name(".shared", name)
        if any(s.name == name for s in self.module.extern_shared):
            _fail(".extern .shared", f"{name!r} is already declared in the module")
        s = Shared(name, "b8", 0, align, self)
        self.module.extern_shared.append(s)
        return s

    def _bar_addr(self, ins: str, bar) -> str:
        return self._address(ins, bar, "shared")

    def mbarrier_init(self, bar, count, pred=None) -> None:
        """``mbarrier.init.shared::cta.b64 [bar], count`` (expected arrivals, 1 .. 2^20-1)."""
        ins = "mbarrier.init"
        if isinstance(count, int) and not 0 < count < 1 << 20:
            _fail(ins, f"count {count} not in 1..2^20-1")
        c = self._src(ins, "count", count, "u32")
        self._emit(f"mbarrier.init.shared::cta.b64 {self._bar_addr(ins, bar)}, {c}", pred, [T.CP_ASYNC])

    def mbarrier_arrive(self, bar, state=None, pred=None) -> None:
        """``mbarrier.arrive.shared::cta.b64 state|_, [bar]``."""
        ins = "mbarrier.arrive"
        st = "_" if state is None else self._dst(ins, state, "b64")
        self._emit(f"mbarrier.arrive.shared::cta.b64 {st}, {self._bar_addr(ins, bar)}", pred, [T.HOPPER_ASYNC])

    def mbarrier_arrive_expect_tx(self, bar, tx, state=None, pred=None) -> None:
        """``mbarrier.arrive.expect_tx.shared::cta.b64 state|_, [bar], tx``: expect ``tx`` bytes, then arrive."""
        ins = "mbarrier.arrive.expect_tx"
        if isinstance(tx, int) and not 0 <= tx < 1 << 20:
            _fail(ins, f"tx-count {tx} not in 0..2^20-1")
        st = "_" if state is None else self._dst(ins, state, "b64")
        t = self._src(ins, "txCount", tx, "u32")
        self._emit(
            f"mbarrier.arrive.expect_tx.shared::cta.b64 {st}, {self._bar_addr(ins, bar)}, {t}", pred, [T.HOPPER_ASYNC]
        )

    def mbarrier_try_wait_parity(self, p, bar, parity, pred=None) -> None:
        """``mbarrier.try_wait.parity.shared::cta.b64 p, [bar], parity``: p = the phase of parity
        ``parity`` (0/1) has completed (may suspend the thread a while before answering false)."""
        ins = "mbarrier.try_wait.parity"
        d = self._dst(ins, p, "pred")
        q = self._src(ins, "phaseParity", parity, "u32")
        self._emit(
            f"mbarrier.try_wait.parity.shared::cta.b64 {d}, {self._bar_addr(ins, bar)}, {q}",
            pred,
            [T.MBARRIER_TRY_WAIT],
        )

    def fence_mbarrier_init(self) -> None:
        """``fence.mbarrier_init.release.cluster``: make mbarrier.init visible to the async proxy."""
        self._emit("fence.mbarrier_init.release.cluster", None, [T.HOPPER_ASYNC])

    def fence_proxy_async(self) -> None:
        """``fence.proxy.async.shared::cta``: order generic-proxy shared writes before async-proxy reads."""
        self._emit("fence.proxy.async.shared::cta", None, [T.HOPPER_ASYNC])

    def cp_async_bulk_tensor(self, dst, tmap, coords, bar, pred=None) -> None:
        """``cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes
        [dst], [tmap, {c0, ..}], [bar]``: one TMA box load; ``tmap`` is a .u64 register holding the
        tensor map's generic address (:meth:`param_address`), ``coords`` .s32 registers/ints,
        innermost first."""
        ins = "cp.async.bulk.tensor"
        coords = _as_list(coords)
        if not 1 <= len(coords) <= 5:
            _fail(ins, f"needs 1-5 coordinates, got {len(coords)}")
        cs = ", ".join(self._src(ins, f"c{i}", c, "s32") for i, c in enumerate(coords))
        tm = self._reg(ins, "tensorMap", tmap, "u64")
        self._emit(
            f"cp.async.bulk.tensor.{len(coords)}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
            f"{self._address(ins, dst, 'shared')}, [{tm}, {{{cs}}}], {self._bar_addr(ins, bar)}",
            pred,
            [T.HOPPER_ASYNC],
        )

    def wgmma_fence(self) -> None:
        """``wgmma.fence.sync.aligned`` (before the first wgmma and after touching its registers)."""
        self._emit("wgmma.fence.sync.aligned", None, [T.WGMMA])

    def wgmma_commit(self) -> None:
        """``wgmma.commit_group.sync.aligned``: the pending wgmma operations form one group."""
        self._emit("wgmma.commit_group.sync.aligned", None, [T.WGMMA])

    def wgmma_wait(self, n: int = 0) -> None:
        """``wgmma.wait_group.sync.aligned n``: wait until at most ``n`` groups are pending."""
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 7:
            _fail("wgmma.wait_group", f"N must be an int in 0..7, got {n!r}")
        self._emit(f"wgmma.wait_group.sync.aligned {n}", None, [T.WGMMA])

    def wgmma(
        self,
        shape: str,
        dtype: str,
        d,
        a_desc,
        b_desc,
        scale_d,
        trans_a: int = 0,
        trans_b: int = 0,
        scale_a: int = 1,
        scale_b: int = 1,
    ) -> None:
        """``wgmma.mma_async.sync.aligned.shape.f32.dtype.dtype {d}, a-desc, b-desc, scale-d, ...``.

        A (64 x K) and B (K x N) from shared memory through 64-bit descriptors (.b64 registers);
        ``d``: N/2 .f32 accumulators; ``scale_d``: a .pred (false: D = A*B) ; ``trans_a``/``trans_b``:
        1 for MN-major operands (f16/bf16 only)."""
        from .wgmma import check_shape

        ins = f"wgmma.mma_async.{shape}.{dtype}"
        try:
            _, n, _ = check_shape(shape, dtype)
        except ValueError as e:
            _fail(ins, str(e))
        regs = _as_list(d)
        if len(regs) != n // 2:
            _fail(ins, f"operand d needs {n // 2} .f32 registers, got {len(regs)}")
        names = [self._reg(ins, f"d[{i}]", r, "f32") for i, r in enumerate(regs)]
        ad = self._reg(ins, "a-desc", a_desc, "b64")
        bd = self._reg(ins, "b-desc", b_desc, "b64")
        sd = self._pred_text(ins, scale_d)
        for what, v, ok in (
            ("imm-scale-a", scale_a, (1, -1)),
            ("imm-scale-b", scale_b, (1, -1)),
            ("imm-trans-a", trans_a, (0, 1)),
            ("imm-trans-b", trans_b, (0, 1)),
        ):
            if v not in ok:
                _fail(ins, f"{what} must be one of {ok}, got {v!r}")
        if dtype == "tf32" and (trans_a or trans_b):
            _fail(ins, "tf32 operands must be K-major (imm-trans 0)")
        tail = f"{scale_a}, {scale_b}" + ("" if dtype == "tf32" else f", {trans_a}, {trans_b}")
        self._emit(
            f"wgmma.mma_async.sync.aligned.{shape}.f32.{dtype}.{dtype} "
            f"{{{', '.join(names)}}}, {ad}, {bd}, {sd}, {tail}",
            None,
            [T.WGMMA],
        )

    def setmaxnreg(self, n: int, inc: bool) -> None:
        """``setmaxnreg.{inc,dec}.sync.aligned.u32 n`` (24..256, a multiple of 8), per warpgroup."""
        if isinstance(n, bool) or not isinstance(n, int) or not 24 <= n <= 256 or n % 8:
            _fail("setmaxnreg", f"register count must be a multiple of 8 in 24..256, got {n!r}")
        self._emit(f"setmaxnreg.{'inc' if inc else 'dec'}.sync.aligned.u32 {n}", None, [T.WGMMA])
