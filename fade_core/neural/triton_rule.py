"""A neural learner's per-parameter update as a Triton function, printed from the rule.

The Triton engines (`triton_update`, `triton_fused_step`, `persistent`) take their update
arithmetic from here: `rule_for(learner, fade_on)` traces `parts.update` with the learner's
parts as flags (fade_core/expression.py), prints it as one `@triton.jit` function and loads
it; a kernel receives that function as a `tl.constexpr` argument and calls it on its
elements. The kernels keep only loops, memory passes and layouts.

Why printed source and not the rule rebound (rulebind.bind) as the torch engine does: Triton
re-reads a function's source and compiles that, refusing closures and non-constexpr globals,
so the function must be text in a real module file. The text is written once per rule to
`CACHE` (named by a digest of the text and of this file, so a changed rule or primitive is a
new file and a new compile, never a stale one) and imported from there.

The function is `rule_<digest>(w, grad, q, alpha, lam, theta, bound, m, v, gamma, trace,
step, sqrt_bc2, inv_bc2, EXACT)` -> (w, m, v, gamma, trace) (`ARGUMENTS`, `parts.UPDATE_OUTPUTS`):
what a kernel has per element or per run. The rule's other inputs are derived in the printed
code itself: AdamW's factor is `parts.shrink(alpha, lam)`'s graph, the first Adam step is
inv_bc2 <= 0 (`parts.adam_scalars` makes it 0 there), Adam's constant coefficients are
`parts.adam_scalars`' literals. An input a learner's parts do not read is a placeholder,
returned as it came. Nothing here names a part: a new one in `parts.update` prints as it is.

How the printed code keeps the rule's rounding (review's pitfalls):
- every literal is `tl.full([], value, DT)`, DT the dtype of w: a bare Python float would be
  float32 in Triton whatever the run's dtype;
- fma is `_fma` (tl.fma; in the interpreter a float64 product rounded once), lerp is
  a + w * (b - a) as written, so the kernels must launch with fp_fusion off where a result is
  claimed bit for bit (triton_update and triton_fused_step do). The persistent engine lets its
  products fuse and asks for the rule `fused` (`expression.contract`): its multiply-adds printed
  as the fmas the compiler would make of some of them anyway, but chosen by the print. Left to
  the compiler, Adam's moments spilled more (ptxas, adam, bytes per thread at 8 / 16 warps:
  2860 / 2900 with m, v printed first but no fmas; 2772 / 2704 with fmas in the old order;
  2772 / 1804 with both, the hand-written kernel's figures). In Triton's interpreter, which
  contracts nothing, `fused` changes the rounding: each fma's product is rounded once;
- `/` and sqrt are IEEE (`tl.div_rn`, `tl.sqrt_rn` in float32: Triton's own float32 `/` is
  approximate) unless EXACT is False (the persistent engine's knob); div_approx is Triton's `/`;
- maximum(a, b) is `_maximum`, where(b > a, b, a) (compiled: one PTX compare-and-select per
  element, see there): a NaN value stays NaN and the bound wins only strictly, as the C and
  numba printers write it, so a diverging run is labelled the same on every engine; a clamp
  (a minimum of a maximum used once, `clamps`) is `_clamp`, compiled in float32 as PTX max.NaN
  then min.NaN (NaN stays NaN too; fewer spills, see there); exp is libdevice's (numpy's in the
  interpreter).
The statements are printed in PRINT_ORDER (registers, not bits: see there).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from pathlib import Path

import triton
import triton.language as tl

from fade_core.expression import (INFIX, Node, RuleError, constants, contract, ssa, statements, substitute, trace,
                                  use_counts)
from fade_core.neural import parts
from fade_core.neural.rules import NeuralLearner
from fade_core.rulebind import parameters

# Read when the primitives are defined, as triton.jit does: the interpreter runs them with numpy.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
CACHE = Path.home() / ".cache" / "fade-sweep" / "triton"  # the printed modules, shared by a user's processes

ARGUMENTS = ("w", "grad", "q", "alpha", "lam", "theta", "bound", "m", "v", "gamma", "trace",
             "step", "sqrt_bc2", "inv_bc2")


if INTERPRET:  # numpy has no libdevice and rounds a*b+c twice

    @triton.jit
    def _exp(x):
        return tl.exp(x)

    @triton.jit
    def _fma(a, b, c):
        if c.dtype == tl.float32:  # exact product in float64, one rounding (up to a double rounding)
            return (a.to(tl.float64) * b.to(tl.float64) + c.to(tl.float64)).to(tl.float32)
        else:
            return tl.fma(a, b, c)

    @triton.jit
    def _maximum(a, b):
        return tl.where(b > a, b, a)

    @triton.jit
    def _minimum(a, b):
        return tl.where(b < a, b, a)

    @triton.jit
    def _clamp(x, lo, hi):
        return _minimum(_maximum(x, lo), hi)

else:
    from triton.language.extra.cuda import libdevice

    @triton.jit
    def _exp(x):
        return libdevice.exp(x)

    @triton.jit
    def _fma(a, b, c):
        return tl.fma(a, b, c)

    # where(b > a, b, a) as one compare-and-select per element. Triton lowers a tensor op by op, so
    # `tl.where(b > a, ...)` on a tile first computes every element's comparison and then every
    # select: a tile of predicates alive at once, which ptxas spilled (FADE's clamps at 8 warps:
    # twice the spill bytes of the hand-written kernel). Same instructions, same result, bit for bit.
    # The hand-written kernel's tl.maximum/minimum (PTX max.NaN, one instruction) spilled 4-40 B
    # less at 8 warps for sgd_wclip, adam_wclip and fade_sgd_all, more elsewhere (fade_adam at 8,
    # the clip learners at 16 warps), and differs from where() in a zero tie's sign and a NaN's payload.
    @triton.jit
    def _select(a, b, F32: tl.constexpr, F64: tl.constexpr):
        if a.dtype == tl.float32:
            return tl.inline_asm_elementwise(F32, "=r,r,r", [a, b], dtype=tl.float32, is_pure=True, pack=1)
        else:
            return tl.inline_asm_elementwise(F64, "=l,l,l", [a, b], dtype=tl.float64, is_pure=True, pack=1)

    @triton.jit
    def _maximum(a, b):
        return _select(a, b, "{ .reg .pred p; setp.gt.f32 p, $2, $1; selp.f32 $0, $2, $1, p; }",
                       "{ .reg .pred p; setp.gt.f64 p, $2, $1; selp.f64 $0, $2, $1, p; }")

    @triton.jit
    def _minimum(a, b):
        return _select(a, b, "{ .reg .pred p; setp.lt.f32 p, $2, $1; selp.f32 $0, $2, $1, p; }",
                       "{ .reg .pred p; setp.lt.f64 p, $2, $1; selp.f64 $0, $2, $1, p; }")

    # clamp(x, lo, hi) (minimum(maximum(x, lo), hi), see `clamps`) as one asm statement: in float32
    # PTX max.NaN then min.NaN, one instruction each (a NaN x stays NaN and the bounds are never
    # NaN, as with the selects above; only a zero tie's sign and a NaN's payload can differ); in
    # float64, which has no max.NaN, the two selects. ptxas, sm_90, spill stores at 8 / 16 warps:
    # sgd_wclip 472 / 652 B as the two selects (in one statement or two), 456 / 588 B so, 456 / 1184 B
    # as tl.maximum/minimum with NaN propagation (the hand-written kernel's); adam_wclip 2772 / 1840
    # B, against 2772 / 2672 B. Standalone maxima stay selects: max.NaN there spilled more for
    # fade_adam at 8 warps and the clip learners at 16.
    @triton.jit
    def _clamp(x, lo, hi):
        if x.dtype == tl.float32:
            return tl.inline_asm_elementwise("{ .reg .f32 t; max.NaN.f32 t, $1, $2; min.NaN.f32 $0, t, $3; }",
                                             "=r,r,r,r", [x, lo, hi], dtype=tl.float32, is_pure=True, pack=1)
        else:
            return tl.inline_asm_elementwise(
                "{ .reg .pred p; .reg .f64 t; setp.gt.f64 p, $2, $1; selp.f64 t, $2, $1, p;"
                " setp.lt.f64 p, $3, t; selp.f64 $0, $3, t, p; }", "=l,l,l,l", [x, lo, hi],
                dtype=tl.float64, is_pure=True, pack=1)


@triton.jit
def _quotient(a, b, EXACT: tl.constexpr):
    """a / b rounded once (IEEE; Triton's float32 `/` is approximate), or with EXACT False
    Triton's approximate float32 division (~2 ulp, a few instructions instead of a dozen)."""
    if EXACT and a.dtype == tl.float32:
        return tl.div_rn(a, b)
    else:
        return a / b


@triton.jit
def _root(a, EXACT: tl.constexpr):
    if EXACT and a.dtype == tl.float32:
        return tl.sqrt_rn(a)
    else:
        return tl.sqrt(a)


# The outputs' statements are printed in this order (the bits do not depend on it; the registers
# do): FADE's gamma and trace before w. The trace reads the old w and the decay; printed after
# w's update (parts.update's order), the old w, the new w and the decay stay alive together
# through the trace's arithmetic, a tile each, and ptxas spilled more than for the hand-written
# kernel, which wrote the trace first. Adam's m and v before w, too: printed from w's graph,
# step * m came first and stayed alive, a tile, through v's update (adam at 16 warps: 2116 B
# of spills against the hand-written kernel's 1804, which wrote m, v, then the step).
PRINT_ORDER = ("gamma", "trace", "m", "v", "w")

_CALLS = {"neg": "-{0}", "exp": "_exp({0})", "sqrt": "_root({0}, EXACT)", "div": "_quotient({0}, {1}, EXACT)",
          "div_approx": "{0} / {1}", "fma": "_fma({0}, {1}, {2})", "where": "tl.where({0}, {1}, {2})",
          "maximum": "_maximum({0}, {1})", "minimum": "_minimum({0}, {1})",
          "lerp": "{0} + {2} * ({1} - {0})", "clamp": "_clamp({0}, {1}, {2})"}


def clamps(outputs: tuple[Node, ...]) -> tuple[Node, ...]:
    """The graph with each minimum(maximum(x, lo), hi) whose maximum has no other use as one
    "clamp" node (x, lo, hi), a node of this printer's alone: printed as `_clamp`, one op (the
    rule's clamp and clip, `rulebind.clamp`, trace to exactly this pair)."""
    uses = use_counts(outputs)
    done: dict[int, Node] = {}
    for node in ssa(outputs):
        args = tuple(done.get(id(arg), arg) for arg in node.args)
        if node.op == "minimum" and node.args[0].op == "maximum" and uses[id(node.args[0])] == 1:
            done[id(node)] = Node("clamp", (*args[0].args, args[1]))
        elif any(new is not old for new, old in zip(args, node.args)):
            done[id(node)] = Node(node.op, args, node.value)
    return tuple(done.get(id(out), out) for out in outputs)


def _graph(flags: dict[str, object]) -> tuple[Node, ...]:
    """`parts.update`'s outputs for these flags (`NeuralLearner.flags`), over ARGUMENTS alone."""
    outputs = trace(parts.update, parts.UPDATE_INPUTS, flags)
    coefficients = dict(zip(("m_weight", "beta2", "v_weight", "eps"), parts.adam_scalars(1.0, 2)[3:]))
    derived = {
        "factor": trace(parts.shrink, parameters(parts.shrink))[0],
        "first_step": Node("le", (Node("var", value="inv_bc2"), Node("const", value=0.0))),
        **{name: Node("const", value=float(value)) for name, value in coefficients.items()},
    }
    return substitute(outputs, derived)


def triton_source(learner: NeuralLearner, fade_on: bool, name: str = "rule", fused: bool = False) -> str:
    """The text of a module defining `name`, one parameter's update for `learner` (FADE's part
    on it if `fade_on`) as a Triton function of ARGUMENTS and EXACT (see the module's doc);
    `fused`: its multiply-adds printed as fmas (`expression.contract`), for a kernel launched with
    fp_fusion on. RuleError (fade_core.expression) for a rule that reads an input no kernel has."""
    flags = learner.flags(fade_on)
    graph = clamps(contract(_graph(flags)) if fused else _graph(flags))
    order = [parts.UPDATE_OUTPUTS.index(output) for output in PRINT_ORDER]
    outputs = [graph[k] for k in order]
    literals = constants(outputs)

    def leaf(node: Node) -> str:
        if node.op == "const":
            return f"c{literals.index(node.value)}"
        if node.value not in ARGUMENTS:
            raise RuleError(f"learner {learner.name!r}: its rule reads {node.value!r}, which no Triton kernel passes "
                            f"(the kernels pass {', '.join(ARGUMENTS)})")
        return node.value

    def render(node: Node, a: list[str]) -> str:
        return _CALLS[node.op].format(*a) if node.op in _CALLS else f"{a[0]} {INFIX[node.op]} {a[1]}"

    lines, printed = statements(outputs, leaf, render, lambda t, node, expression: f"    {t} = {expression}")
    results = [printed[order.index(k)] for k in range(len(graph))]
    head = [f"    c{k} = tl.full([], {value!r}, DT)" for k, value in enumerate(literals)]
    return "\n".join([
        f'"""parts.update with {flags}, printed by fade_core/neural/triton_rule.py; do not edit."""',
        "import triton",
        "import triton.language as tl",
        "from fade_core.neural.triton_rule import _clamp, _exp, _fma, _maximum, _minimum, _quotient, _root",
        "",
        "",
        "@triton.jit",
        f"def {name}({', '.join(ARGUMENTS)}, EXACT: tl.constexpr):",
        "    DT = w.dtype",
        *head, *lines,
        f"    return {', '.join(results)}",
        "",
    ])


_LOADED: dict[tuple, object] = {}
_THIS_FILE = Path(__file__).read_bytes()


def rule_for(learner: NeuralLearner, fade_on: bool, fused: bool = False):
    """The Triton function of `triton_source(learner, fade_on, fused=fused)`, printed to CACHE once
    and imported (one per process and rule): a kernel's `tl.constexpr` argument."""
    key = (*sorted(learner.flags(fade_on).items()), fused)
    if key in _LOADED:
        return _LOADED[key]
    text = triton_source(learner, fade_on, "rule", fused)
    digest = hashlib.sha256(text.encode() + _THIS_FILE).hexdigest()[:16]
    name = f"rule_{digest}"
    text = text.replace("def rule(", f"def {name}(", 1)
    path = CACHE / f"{name}.py"
    if not path.exists() or path.read_text() != text:
        CACHE.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        os.replace(partial, path)  # whole or absent: another process may be reading it
    spec = importlib.util.spec_from_file_location(f"fade_core_triton_rules.{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _LOADED[key] = getattr(module, name)
    return _LOADED[key]
