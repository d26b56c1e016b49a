"""Builder: operand validation before text is written, rendering, version/target inference."""

from __future__ import annotations

import pytest

from ptx import Module, PtxTypeError, PtxVersionError, addr, sreg
from tests.ptx import kernels as K


@pytest.fixture
def k():
    return Module().kernel("t")


def _mma(k, shape: str, dtype: str, a=("b32", 4), b=("b32", 2), c=("f32", 4)):
    """``k.mma`` with d in four fresh .f32 registers and a, b, c in fresh registers of the given (type, count)."""
    return k.mma(shape, dtype, k.regs("f32", 4), k.regs(*a), k.regs(*b), k.regs(*c))


def _body_len(k):
    return len(k.body)


# --------------------------------------------------------------------------- registers and declarations


def test_registers_are_typed_and_declared_per_kernel():
    m = Module()
    k1, k2 = m.kernel("one"), m.kernel("two")
    f = k1.regs("f32", 3)
    assert [r.name for r in f] == ["%f0", "%f1", "%f2"]
    assert k2.reg("f32").name == "%f0"  # numbering is per kernel
    h = k1.reg("bf16x2")
    named = k1.reg("u32", name="count")
    text = m.text()
    assert ".reg .f32 %f<3>;" in text
    assert ".reg .b32 %bhh<1>;" in text  # no .reg .bf16x2 in PTX: declared as .b32
    assert ".reg .u32 %count;" in text
    assert h.type == "bf16x2" and named.name == "%count"


@pytest.mark.parametrize("bad", ["f8", "tf32", "u8", "x"])
def test_bad_register_type(k, bad):
    with pytest.raises(PtxTypeError, match=r"\.reg"):
        k.reg(bad)


def test_register_name_collisions(k):
    with pytest.raises(PtxTypeError, match="collides"):
        k.reg("f32", name="f3")
    k.reg("u32", name="n")
    with pytest.raises(PtxTypeError, match="already used"):
        k.param("u32", "n")
    with pytest.raises(PtxTypeError, match="identifier"):
        k.reg("u32", name="1x")


def test_shared_alignment(k):
    s = k.shared("buf", "b8", 1024, align=128)
    assert s.nbytes == 1024 and k.shared_bytes == 1024
    assert ".shared .align 128 .b8 buf[1024];" in k.text()
    with pytest.raises(PtxTypeError, match="align"):
        k.shared("x", "f32", 4, align=2)
    with pytest.raises(PtxTypeError, match="align"):
        k.shared("y", "f32", 4, align=24)


def test_registers_of_another_kernel_rejected():
    m = Module()
    a, b = m.kernel("a"), m.kernel("b")
    r = a.reg("f32")
    with pytest.raises(PtxTypeError, match="belongs to kernel 'a'"):
        b.add(b.reg("f32"), r, r)


# --------------------------------------------------------------------------- type checks raise before text is written

BAD = [
    ("add", lambda k: k.add(k.reg("f32"), k.reg("f32"), k.reg("u32")), r"add: operand b .* \.u32"),
    ("add.b32", lambda k: k.add(k.reg("b32"), k.reg("b32"), k.reg("b32")), r"add: type \.b32"),
    ("mul", lambda k: k.mul(k.reg("u32"), k.reg("u32"), k.reg("u32")), r"mul needs mode"),
    ("mul.wide", lambda k: k.mul(k.reg("u32"), k.reg("u32"), 4, mode="wide"), r"mul: operand d .*\.u64"),
    ("mad.f32", lambda k: k.mad(*k.regs("f32", 4), rnd=None), r"mad: float mad needs a rounding"),
    ("fma.u32", lambda k: k.fma(*k.regs("u32", 4)), r"fma: type \.u32"),
    ("imm range", lambda k: k.add(k.reg("u32"), k.reg("u32"), -1), r"add: operand b: immediate -1 is out of range"),
    ("imm f16", lambda k: k.mov(k.reg("f16"), 1.0), r"mov: operand a: no immediates"),
    ("mov f32<-u32", lambda k: k.mov(k.reg("f32"), k.reg("u32")), r"mov: operand a is %r0 of type \.u32"),
    ("mov special", lambda k: k.add(k.reg("u32"), sreg.tid.x, 1), r"add: operand a: special register"),
    ("setp dst", lambda k: k.setp("lt", k.reg("u32"), k.reg("u32"), 1), r"setp.lt: operand p"),
    ("setp lo on s32", lambda k: k.setp("lo", k.reg("pred"), k.reg("s32"), 1), r"setp.lo: comparison \.lo"),
    ("setp nan on u32", lambda k: k.setp("nan", k.reg("pred"), k.reg("u32"), 1), r"setp.nan"),
    ("setp lt on b32", lambda k: k.setp("lt", k.reg("pred"), k.reg("b32"), 1), r"setp.lt: comparison"),
    ("selp", lambda k: k.selp(k.reg("u32"), 1, 2, k.reg("u32")), r"selp: operand p"),
    ("bra", lambda k: k.bra("done"), r"bra: target must be a label"),
    ("guard", lambda k: k.ret(pred=k.reg("u32")), r"guard: predicate must be a \.pred"),
    ("~u32", lambda k: ~k.reg("u32"), r"only \.pred registers can be negated"),
    ("ld addr", lambda k: k.ld("global", k.reg("f32"), k.reg("u32")), r"ld.global: address register %r0 is \.u32"),
    ("ld f32<-b64", lambda k: k.ld("global", k.reg("f32"), k.reg("u64"), type="b64"), r"ld.global: operand 0"),
    ("ld v3", lambda k: k.ld("global", k.regs("f32", 3), k.reg("u64")), r"ld.global: vector length 3"),
    ("ld v4.f64", lambda k: k.ld("global", k.regs("f64", 4), k.reg("u64")), r"\.v4\.f64 exceeds 128 bits"),
    ("ld mixed", lambda k: k.ld("global", [k.reg("f32"), k.reg("u32")], k.reg("u64")), r"same type"),
    ("ld pred", lambda k: k.ld("global", k.reg("pred"), k.reg("u64")), r"predicates cannot be loaded"),
    ("ld.param", lambda k: k.ld_param(k.reg("u32"), k.param("u64", "p")), r"ld.param: operand 0"),
    (
        "ld shared from global",
        lambda k: k.ld("global", k.reg("f32"), k.shared("s", "f32", 4)),
        r"is a \.shared array",
    ),
    ("st.const", lambda k: k.st("const", k.reg("u64"), k.reg("f32")), r"st.const: state space"),
    ("st imm", lambda k: k.st("global", k.reg("u64"), 1.0), r"st.global: operand 0 must be a register"),
    ("cvta", lambda k: k.cvta(k.reg("u64"), k.reg("f64")), r"cvta: operand a is %fd0 of type \.f64"),
    ("shfl mode", lambda k: k.shfl_sync("rot", *k.regs("b32", 2), 1, 31), r"shfl.sync.rot: mode"),
    ("shfl f64", lambda k: k.shfl_sync("down", k.reg("f64"), k.reg("f64"), 1, 31), r"shfl.sync.down: operand d"),
    ("shfl lane", lambda k: k.shfl_sync("idx", *k.regs("b32", 2), 32, 31), r"shfl.sync.idx: operand b"),
    ("cvt tf32 rnd", lambda k: k.cvt(k.reg("b32"), k.reg("f32"), rnd="rn", dtype="tf32"), r"cvt.rna.tf32.f32"),
    ("cvt tf32 src", lambda k: k.cvt_tf32(k.reg("b32"), k.reg("f64")), r"cvt: operand a is %fd0 of type \.f64"),
    ("cvt tf32 dst", lambda k: k.cvt_tf32(k.reg("u64"), k.reg("f32")), r"cvt: operand d is %rd0"),
    ("cvt narrow", lambda k: k.cvt(k.reg("f16"), k.reg("f32")), r"cvt: narrowing \.f32 -> \.f16 needs rounding"),
    ("cvt widen", lambda k: k.cvt(k.reg("f32"), k.reg("f16"), rnd="rn"), r"widening .* takes no rounding"),
    ("cvt f2i", lambda k: k.cvt(k.reg("s32"), k.reg("f32"), rnd="rn"), r"float -> integer needs integer rounding"),
    ("cvt i2f", lambda k: k.cvt(k.reg("f32"), k.reg("s32")), r"integer -> float needs rounding"),
    ("cvt b32 dst", lambda k: k.cvt(k.reg("b32"), k.reg("f32"), rnd="rn"), r"cvt: destination type \.b32 needs dtype"),
    ("cvt pack one", lambda k: k.cvt(k.reg("b32"), k.reg("f32"), rnd="rn", dtype="f16x2"), r"two \.f32 sources"),
    ("cvt pack f16", lambda k: k.cvt_pack(k.reg("b32"), *k.regs("f16", 2)), r"operand a\[0\] is %h0 of type \.f16"),
    ("cvt pack dst", lambda k: k.cvt_pack(k.reg("f64"), *k.regs("f32", 2)), r"cvt: operand d is %fd0"),
    ("cp.async size", lambda k: k.cp_async(k.reg("u32"), k.reg("u64"), 12), r"cp.async.ca: cp-size 12"),
    ("cp.async.cg 8", lambda k: k.cp_async(k.reg("u32"), k.reg("u64"), 8, cache="cg"), r"cp.async.cg needs cp-size 16"),
    ("cp.async src", lambda k: k.cp_async(k.reg("u32"), k.reg("u32"), 16), r"address register %r1 is \.u32"),
    ("cp.async dst", lambda k: k.cp_async(k.reg("f32"), k.reg("u64"), 16), r"address register %f0 is \.f32"),
    ("ldmatrix x3", lambda k: k.ldmatrix(k.regs("b32", 3), k.reg("u32")), r"ldmatrix.x3: needs 1, 2 or 4"),
    ("ldmatrix f16", lambda k: k.ldmatrix(k.regs("f16", 2), k.reg("u32")), r"ldmatrix.x2: operand d\[0\]"),
    (
        "mma a count",
        lambda k: _mma(k, "m16n8k16", "f16", a=("b32", 2)),
        r"mma.sync.aligned.m16n8k16.f16: operand a needs 4 registers, got 2",
    ),
    ("mma tf32 a count", lambda k: _mma(k, "m16n8k8", "tf32", a=("b32", 2)), r"operand a needs 4 registers"),
    ("mma f16 b count", lambda k: _mma(k, "m16n8k8", "f16", a=("b32", 2)), r"operand b needs 1 registers"),
    (
        "mma c type",
        lambda k: _mma(k, "m16n8k16", "bf16", c=("u32", 4)),
        r"operand c\[0\] .* \.u32, not compatible with \.f32",
    ),
    (
        "mma bf16 with f16x2",
        lambda k: _mma(k, "m16n8k16", "bf16", a=("f16x2", 4)),
        r"operand a\[0\] .* \.f16x2, not compatible with \.bf16x2",
    ),
    ("mma shape", lambda k: _mma(k, "m16n8k32", "f16"), r"unsupported shape/type"),
    ("bar count", lambda k: k.bar_sync(1, 33), r"bar.sync: operand b"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_wrong_operands_raise_before_text(k, case):
    _, build, pattern = case
    before = list(k.body)
    with pytest.raises(PtxTypeError, match=pattern):
        build(k)
    assert k.body == before  # nothing written


# --------------------------------------------------------------------------- rendering of valid instructions


def test_rendering_samples(k):
    p = k.reg("pred")
    u, v = k.regs("u32", 2)
    rd = k.reg("u64")
    f = k.regs("f32", 4)
    h = k.reg("b32")
    bh = k.reg("b16")
    q = k.reg("b128")
    lab = k.label("loop")
    k.place(lab)
    k.mov(u, sreg.tid.x)
    k.mov(f[0], 1.0)
    k.mul(rd, u, 4, mode="wide")
    k.mad(v, u, 3, v, mode="lo")
    k.fma(f[0], f[1], f[2], f[3])
    k.setp("lt", p, u, 7)
    k.setp("gtu", p, f[0], 0.5)
    k.selp(v, 1, 0, p)
    k.ld("global", f, addr(rd, 16), nc=True)
    k.ld("global", q, rd)
    k.st("shared", addr(u, -4), f[0:2])
    k.bra(lab, pred=~p)
    k.shfl_sync("down", f[0], f[1], 16, 31, pred_out=p)
    k.cvt_tf32(h, f[0])
    k.cvt_pack(h, f[0], f[1], dtype="bf16x2")
    k.cvt(bh, f[0], rnd="rn", dtype="bf16")
    k.cvt(f[1], bh, atype="bf16")
    k.cvt(u, f[0], rnd="rzi")
    k.mov([k.reg("b16"), bh], h)
    text = k.text()
    for line in [
        "$loop_1:",
        "mov.u32 %r0, %tid.x;",
        "mov.f32 %f0, 0f3F800000;",
        "mul.wide.u32 %rd0, %r0, 4;",
        "mad.lo.u32 %r1, %r0, 3, %r1;",
        "fma.rn.f32 %f0, %f1, %f2, %f3;",
        "setp.lt.u32 %p0, %r0, 7;",
        "setp.gtu.f32 %p0, %f0, 0f3F000000;",
        "selp.u32 %r1, 1, 0, %p0;",
        "ld.global.nc.v4.f32 {%f0, %f1, %f2, %f3}, [%rd0+16];",
        "ld.global.b128 %bq0, [%rd0];",
        "st.shared.v2.f32 [%r0-4], {%f0, %f1};",
        "@!%p0 bra $loop_1;",
        "shfl.sync.down.b32 %f0|%p0, %f1, 16, 31, 0xFFFFFFFF;",
        "cvt.rna.tf32.f32 %b0, %f0;",
        "cvt.rn.bf16x2.f32 %b0, %f0, %f1;",
        "cvt.rn.bf16.f32 %hb0, %f0;",
        "cvt.f32.bf16 %f1, %hb0;",
        "cvt.rzi.u32.f32 %r0, %f0;",
        "mov.b32 {%hb1, %hb0}, %b0;",
    ]:
        assert "\t" + line in text or line + "\n" in text, line


def test_membermask_default_renders_as_hex(k):
    k.shfl_sync("bfly", *k.regs("b32", 2), 1, 31)
    assert k.body[-1] == "shfl.sync.bfly.b32 %b0, %b1, 1, 31, 0xFFFFFFFF;"


def test_bit_type_operand_accepts_same_size_registers(k):
    # PTX: a .bN operand takes any register of N bits (tf32 patterns may live in .f32 registers)
    k.cvt_tf32(k.reg("f32"), k.reg("f32"))
    _mma(k, "m16n8k8", "tf32", a=("u32", 4))


def test_unplaced_label_raises(k):
    lab = k.label()
    k.bra(lab)
    with pytest.raises(PtxTypeError, match="never placed"):
        k.text()


# --------------------------------------------------------------------------- version and target inference


def _version_target(build):
    m = Module()
    build(m.kernel("t"))
    return m.version, m.target


def test_inference_baseline():
    m, _ = K.vadd()
    assert (m.version, m.target) == ("6.0", "sm_50")
    assert ".version 6.0\n.target sm_50\n.address_size 64" in m.text()


@pytest.mark.parametrize(
    "build, expect",
    [
        (lambda k: k.shfl_sync("bfly", *k.regs("b32", 2), 1, 31), ("6.0", "sm_50")),
        (lambda k: k.add(*k.regs("f16", 3)), ("6.0", "sm_53")),
        (lambda k: k.ldmatrix(k.regs("b32", 4), k.reg("u32")), ("6.5", "sm_75")),
        (
            lambda k: _mma(k, "m16n8k8", "f16", a=("b32", 2), b=("b32", 1)),
            ("6.5", "sm_75"),
        ),
        (
            lambda k: _mma(k, "m16n8k8", "tf32"),
            ("7.0", "sm_80"),
        ),
        (
            lambda k: _mma(k, "m16n8k16", "bf16"),
            ("7.0", "sm_80"),
        ),
        (lambda k: k.cp_async(k.reg("u32"), k.reg("u64"), 16), ("7.0", "sm_80")),
        (lambda k: k.cvt_tf32(k.reg("b32"), k.reg("f32")), ("7.0", "sm_80")),
        (lambda k: k.cvt_pack(k.reg("b32"), *k.regs("f32", 2)), ("7.0", "sm_80")),
        (lambda k: k.cvt(k.reg("f32"), k.reg("bf16")), ("7.1", "sm_80")),
        (lambda k: k.ld("global", k.reg("b128"), k.reg("u64")), ("8.3", "sm_70")),
        (lambda k: k.add(*k.regs("bf16", 3)), ("7.8", "sm_90")),
    ],
)
def test_inference_per_feature(build, expect):
    assert _version_target(build) == expect


def test_explicit_target_raises_version_to_what_the_target_needs():
    m = Module(target="sm_90")
    K.vadd(m)
    assert (m.version, m.target) == ("7.8", "sm_90")
    m = Module(target="sm_90a")
    assert m.version == "8.0"


def test_explicit_version_and_target_kept():
    m = Module(version="8.0", target="sm_90")
    K.mma_ldmatrix_f16(m)
    assert ".version 8.0\n.target sm_90\n" in m.text()


def test_target_too_low_raises_at_the_instruction():
    m = Module(target="sm_75")
    k = m.kernel("t")
    k.ldmatrix(k.regs("b32", 4), k.reg("u32"))  # fine on sm_75
    with pytest.raises(PtxVersionError, match=r"sm_75 is too low for mma.m16n8k16.f16"):
        _mma(k, "m16n8k16", "f16")
    with pytest.raises(PtxVersionError, match="cp.async"):
        k.cp_async(k.reg("u32"), k.reg("u64"), 16)


def test_version_too_low_raises():
    m = Module(version="6.5")
    k = m.kernel("t")
    with pytest.raises(PtxVersionError, match=r"\.version 6\.5 is too low for cvt\.rna\.tf32\.f32"):
        k.cvt_tf32(k.reg("b32"), k.reg("f32"))
    with pytest.raises(PtxVersionError, match="does not know .target sm_80"):
        Module(version="6.5", target="sm_80")
    with pytest.raises(PtxVersionError, match="form sm_NN"):
        Module(target="compute_80")


def test_div_forms_and_errors(k):
    f, g = k.reg("f32"), k.reg("f64")
    i, b = k.reg("s32"), k.reg("b32")
    k.div(f, f, f)
    k.div(f, f, 2.0, rnd="approx")
    k.div(g, g, g, rnd="rz")
    k.div(i, i, 3, rnd=None)
    assert k.body[-4:] == [
        f"div.rn.f32 {f.name}, {f.name}, {f.name};",
        f"div.approx.f32 {f.name}, {f.name}, 0f40000000;",
        f"div.rz.f64 {g.name}, {g.name}, {g.name};",
        f"div.s32 {i.name}, {i.name}, 3;",
    ]
    with pytest.raises(PtxTypeError, match="div.f64 needs rounding"):
        k.div(g, g, g, rnd="approx")
    with pytest.raises(PtxTypeError, match="integer division .s32 takes no rounding"):
        k.div(i, i, i)
    with pytest.raises(PtxTypeError, match="not an integer, .f32 or .f64"):
        k.div(b, b, b)


# --------------------------------------------------------------------------- kernel-parameter addresses


def test_param_address_is_the_generic_address():
    """A tensor map's address for cp.async.bulk.tensor: mov gives the .param-space address, cvta.param
    the generic one (issue 34: the bare mov faulted on an H200); cvta.param needs PTX 7.7 / sm_70."""
    m = Module()
    k = m.kernel("t")
    tm, d = k.tensormap_param("tmap"), k.reg("u64")
    k.param_address(d, tm)
    assert k.body == [f"mov.u64 {d.name}, tmap;", f"cvta.param.u64 {d.name}, {d.name};"]
    m = Module()
    k = m.kernel("t")
    g = k.reg("u64")
    k.cvta(g, k.param("u64", "x"), space="param", to=False)  # the variable form
    assert k.body == [f"cvta.param.u64 {g.name}, x;"] and (m.version, m.target) == ("7.7", "sm_70")
    with pytest.raises(PtxVersionError, match=r"\.version 7\.6 is too low for cvta\.param"):
        k6 = Module(version="7.6").kernel("t")
        k6.cvta(k6.reg("u64"), k6.param("u64", "x"), space="param", to=False)


@pytest.mark.parametrize(
    "build,msg",
    [
        (lambda k: k.cvta(k.reg("u32"), k.reg("u32"), space="param", to=False), r"needs a 64-bit destination"),
        (lambda k: k.cvta(k.reg("u64"), k.param("u64", "x"), space="shared", to=False), r"not in the \.shared"),
        (lambda k: k.cvta(k.reg("u64"), k.shared("s", "b32", 4), space="param", to=False), r"not in the \.param"),
        (lambda k: k.cvta(k.reg("u64"), k.param("u64", "x"), space="param"), r"cvta\.to takes a register"),
    ],
)
def test_cvta_param_errors(k, build, msg):
    with pytest.raises(PtxTypeError, match=msg):
        build(k)
    assert k.body == []


def test_cvta_param_forms_assemble():
    from ptx import toolchain

    if toolchain.find_ptxas() is None:
        pytest.skip("ptxas not found")
    m = Module()
    k = m.kernel("t")
    p = k.param("u64", "x")
    g, back, o = k.regs("u64", 3)
    k.cvta(g, p, space="param", to=False)
    k.param_address(back, p)
    k.cvta(back, g, space="param")
    k.ld_param(o, p)
    k.st("global", addr(o), back)
    k.ret()
    for arch in ("sm_80", "sm_90"):
        assert toolchain.compile(m.text(), arch=arch)["t"].spills == 0
