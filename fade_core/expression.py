"""A rule traced once into a small expression form, from which each backend's code is printed.

`trace(rule, inputs, flags)` runs the rule (plain Python, `fade_core/rulebind.py`'s
primitives) on `Value`s: every operation records a `Node` instead of computing, so what comes
out is the rule's arithmetic as a graph, in the order the source writes it (nothing
reassociated, no multiply-add fused unless the rule writes `fma`). `ssa(outputs)` lists the
graph's nodes once each, operands first, for a printer to name and print (the C printer of
`fade_core/neural/c_source.py`, the numba printer of `fade_core/neural/cpu_elements.py`,
the Triton printer of `fade_core/neural/triton_rule.py`).

Why a traced form rather than each backend running the rule itself (review's pitfalls): a
literal has no dtype here (`Node("const")` holds the number; a printer writes it in the run's
dtype, where numba would widen a float32 rule by a float64 literal and Triton would round a
float64 one to float32); `maximum`/`minimum` have one NaN rule, written out by every printer;
`fma` and `lerp` are nodes, so contraction is the rule's choice, never a compiler's; a branch
on a value is refused at trace time (`Value.__bool__`), as is an unknown global (the rule's
globals are its module's: a misspelled primitive is a NameError when traced).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Sequence

from fade_core.rulebind import bind

OPS = ("var", "const", "add", "sub", "mul", "div", "neg", "gt", "lt", "ge", "le",
       "exp", "sqrt", "fma", "div_approx", "where", "maximum", "minimum", "lerp")


@dataclass(frozen=True, eq=False)
class Node:
    """One operation (`op` in OPS) on `args`; a "var" names a rule input (`value` its name), a
    "const" holds a Python number (`value`). Compared by identity: a value used twice is one node."""

    op: str
    args: tuple["Node", ...] = ()
    value: object = None


class RuleError(ValueError):
    """A rule that cannot be traced: a branch on a value, an unsupported operation."""


def _node(x) -> Node:
    if isinstance(x, Value):
        return x.node
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return Node("const", value=float(x))
    raise RuleError(f"a rule computes with numbers and its inputs, not {type(x).__name__} ({x!r})")


@dataclass(frozen=True, eq=False)
class Value:
    """A traced number: arithmetic and comparisons record nodes; `bool()` is refused."""

    node: Node

    def _op(self, op: str, *others) -> "Value":
        return Value(Node(op, (self.node, *map(_node, others))))

    def _rop(self, op: str, other) -> "Value":
        return Value(Node(op, (_node(other), self.node)))

    def __add__(self, o): return self._op("add", o)
    def __radd__(self, o): return self._rop("add", o)
    def __sub__(self, o): return self._op("sub", o)
    def __rsub__(self, o): return self._rop("sub", o)
    def __mul__(self, o): return self._op("mul", o)
    def __rmul__(self, o): return self._rop("mul", o)
    def __truediv__(self, o): return self._op("div", o)
    def __rtruediv__(self, o): return self._rop("div", o)
    def __neg__(self): return self._op("neg")
    def __gt__(self, o): return self._op("gt", o)
    def __lt__(self, o): return self._op("lt", o)
    def __ge__(self, o): return self._op("ge", o)
    def __le__(self, o): return self._op("le", o)

    def __bool__(self):
        raise RuleError("a rule cannot branch on a value (an `if`, `and`, `or` or Python max/min on a traced number); "
                        "use where(condition, a, b), maximum, minimum or clamp")

    def __pow__(self, o):
        raise RuleError("a rule cannot raise a traced number to a power; write the products, or exp")


def _call(op: str) -> Callable:
    def primitive(*args):
        return Value(Node(op, tuple(map(_node, args))))
    primitive.__name__ = op
    return primitive


def _clamp(x, lo, hi):
    return TRACING["minimum"](TRACING["maximum"](x, lo), hi)


TRACING: dict[str, Callable] = {op: _call(op) for op in ("exp", "sqrt", "fma", "div_approx", "where", "maximum", "minimum", "lerp")}
TRACING["clamp"] = _clamp


def trace(rule: Callable, inputs: Sequence[str], flags: Mapping[str, object] | None = None) -> tuple[Node, ...]:
    """The output nodes of `rule` called on inputs named `inputs` (one var node each), with its
    keyword-only `flags` (the other parts of its module it calls are traced with it). A single
    result is returned as a 1-tuple."""
    traced = bind(rule, TRACING, parts=True)
    result = traced(*(Value(Node("var", value=name)) for name in inputs), **(flags or {}))
    outputs = result if isinstance(result, tuple) else (result,)
    return tuple(_node(out) for out in outputs)


def ssa(outputs: Iterable[Node]) -> list[Node]:
    """Every node `outputs` depend on, once, each after its operands (the rule's order)."""
    order: list[Node] = []
    seen: set[int] = set()
    for root in outputs:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in seen:
                continue
            if expanded:
                seen.add(id(node))
                order.append(node)
                continue
            stack.append((node, True))
            stack.extend((arg, False) for arg in reversed(node.args) if id(arg) not in seen)
    return order


def substitute(outputs: Sequence[Node], values: Mapping[str, Node]) -> tuple[Node, ...]:
    """`outputs` with each input named in `values` replaced by that node (e.g. an input the
    engine derives, as AdamW's factor from `parts.shrink`'s graph, or one it fixes as a constant):
    the graph a printer prints when an engine computes some of a rule's inputs itself."""
    done: dict[int, Node] = {}
    for node in ssa(outputs):
        if node.op == "var" and node.value in values:
            done[id(node)] = values[node.value]
        elif node.args and any(id(arg) in done for arg in node.args):
            done[id(node)] = Node(node.op, tuple(done.get(id(arg), arg) for arg in node.args), node.value)
    return tuple(done.get(id(out), out) for out in outputs)


def use_counts(outputs: Iterable[Node]) -> dict[int, int]:
    """How many operations of the graph read each node, by the node's id (an output read by none: absent)."""
    uses: dict[int, int] = {}
    for node in ssa(outputs):
        for arg in node.args:
            uses[id(arg)] = uses.get(id(arg), 0) + 1
    return uses


def contract(outputs: Sequence[Node]) -> tuple[Node, ...]:
    """`outputs` with every multiply-add written as an explicit fma, as a compiler that contracts
    (Triton's fp_fusion, NVRTC's --fmad) would fuse it: lerp(a, b, w) as fma(w, b - a, a), and
    x + p * q or p * q + x as fma(p, q, x) where the product has no other use (the right-hand
    product first when both are: beta2 * v + v_weight * g * g keeps beta2 * v). Subtractions are
    left as they are. For a printer whose target contracts anyway (triton_rule's `fused`, for the
    persistent engine): which products fuse is then the printed graph's choice, not the compiler's,
    and the registers follow it. Not for a bit-exact print: an fma rounds once where the rule
    rounds twice."""
    uses = use_counts(outputs)

    def product(node: Node) -> bool:
        return node.op == "mul" and uses[id(node)] == 1

    done: dict[int, Node] = {}
    for node in ssa(outputs):
        args = tuple(done.get(id(arg), arg) for arg in node.args)
        if node.op == "lerp":
            a, b, weight = args
            done[id(node)] = Node("fma", (weight, Node("sub", (b, a)), a))
        elif node.op == "add" and product(node.args[1]):
            done[id(node)] = Node("fma", (*args[1].args, args[0]))
        elif node.op == "add" and product(node.args[0]):
            done[id(node)] = Node("fma", (*args[0].args, args[1]))
        elif args != node.args:
            done[id(node)] = Node(node.op, args, node.value)
    return tuple(done.get(id(out), out) for out in outputs)


def constants(outputs: Iterable[Node]) -> list[float]:
    """The distinct constants of the graph, in the order `ssa` meets them."""
    values: list[float] = []
    for node in ssa(outputs):
        if node.op == "const" and node.value not in values:
            values.append(node.value)
    return values


def statements(outputs: Sequence[Node], leaf: Callable[[Node], str], render: Callable[[Node, list[str]], str],
               assign: Callable[[str, Node, str], str], prefix: str = "t") -> tuple[list[str], list[str]]:
    """The graph printed as one assignment per operation: `leaf(node)` writes an input or a
    constant in place, `render(node, operands)` an operation's expression, `assign(name, node,
    expression)` its statement. Returns the statements and each output's expression."""
    names: dict[int, str] = {}
    lines: list[str] = []

    def written(node: Node) -> str:
        return names[id(node)] if id(node) in names else leaf(node)

    for node in ssa(outputs):
        if node.op in ("var", "const"):
            continue
        name = f"{prefix}{len(names)}"
        lines.append(assign(name, node, render(node, [written(arg) for arg in node.args])))
        names[id(node)] = name
    return lines, [written(out) for out in outputs]


def is_condition(node: Node) -> bool:
    """A comparison's result (a boolean, not a number)."""
    return node.op in ("gt", "lt", "ge", "le")


INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "gt": ">", "lt": "<", "ge": ">=", "le": "<="}
