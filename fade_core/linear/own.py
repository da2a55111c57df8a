"""Linear rules of the researcher's own: checked, given ranges, and registered at run time.

A researcher's rule has the form of the built-in ones (`rules.py`): the state arguments
`STATE_ARGS`, the clamp, then its hyperparameters; straight-line arithmetic (+, -, *, /,
unary minus, numbers) on them and on its own local names, and calls of `exp`, `clamp`,
`max` and `min` only; it ends with `return w, beta, h, gamma, g`. That form is what the
vector tracer (`simd.py`) and the reference engine compile, so the rule is checked here,
from its source, before anything runs: a branch on a value would silently take one side
in the tracer (its values have no truth), and any other call has no vector form.

A hyperparameter name of the rule's own (`rho`, beside the built-in `alpha`, `gamma0`)
takes any finite value unless the rule states its range with `hyperparameter`:

    from fade_core.linear import clamp, exp, hyperparameter

    @hyperparameter("rho", "leak of the decay trace", low=0.0, high=1.0)
    def fade_leaky(x, delta, w, beta, h, gamma, g, lo, hi, alpha, theta_lambda, gamma0, rho):
        ...

`own_learner` turns such a function into a `LinearLearner` and registers it under a key
that carries the digest of its source (`name@digest`), so the compiled kernels, which look
a rule up by a literal key (`intrinsics.advance`), and numba's cache files (named after
that digest, `kernel.driver`) tell two versions of one name apart.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import math
import textwrap
from dataclasses import dataclass
from typing import Callable, Mapping

from fade_core.hyperparameters import HYPERPARAMETERS, Hyperparameter
from fade_core.linear import rules
from fade_core.learner import KEYWORDS
from fade_core.learners import register
from fade_core.linear.rules import STATE_ARGS, LinearLearner
from fade_core.rulebind import parameters, plain_parameters

MAX_HYPERPARAMETERS = 8  # rows of a block's lane buffer (`intrinsics.hp_rows`) and the reference's adapters
FUNCTIONS = {"exp": 1, "clamp": 3, "max": 2, "min": 2}  # what a rule may call, with its argument count
_BOUND = {"exp": (math.exp, rules.exp), "clamp": (rules.clamp,)}  # the globals the engines rebind
_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div)
_BRANCHES = (ast.If, ast.IfExp, ast.While, ast.For, ast.Compare, ast.BoolOp, ast.Match, ast.ListComp,
             ast.GeneratorExp, ast.SetComp, ast.DictComp, ast.Try)
_LOOPS = (ast.While, ast.For, ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)
RANGES = "__fade_hyperparameters__"  # the attribute `hyperparameter` keeps a rule's stated ranges in


class RuleError(ValueError):
    """A rule not in the documented form; the message names the problem and the line."""


def hyperparameter(name: str, meaning: str = "", *, low: float = -math.inf, high: float = math.inf,
                   low_open: bool = False, high_open: bool = False) -> Callable[[Callable], Callable]:
    """Decorator: the allowed range of the rule's own hyperparameter `name` (bounds inclusive unless
    open); without it, any finite value is accepted."""

    def mark(rule: Callable) -> Callable:
        ranges = dict(getattr(rule, RANGES, {}))
        ranges[name] = Hyperparameter(name, meaning or f"{name} (a hyperparameter of {rule.__name__})", low, high,
                                      low_open, high_open)
        setattr(rule, RANGES, ranges)
        return rule

    return mark


def rule_source(rule: Callable) -> str:
    """The rule's source text (its decorators included): what is hashed and recorded."""
    try:
        return textwrap.dedent(inspect.getsource(rule))
    except (OSError, TypeError):
        raise RuleError(f"{getattr(rule, '__qualname__', rule)!r}: no source to read; a rule is a function "
                        "defined with def in a .py file") from None


def source_digest(source: str) -> str:
    """sha256 of a rule's source: what the store records and a resume compares."""
    return hashlib.sha256(source.encode()).hexdigest()


def _where(rule: Callable, node: ast.AST | None = None) -> str:
    """file:line of `node` of the rule's source (of its def without one)."""
    first = rule.__code__.co_firstlineno
    line = first if node is None else first + node.lineno - 1
    return f"{rule.__code__.co_filename}:{line}"


def _call_name(node: ast.Call) -> str:
    return node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)


@dataclass(frozen=True)
class Form:
    """What a family's rules may contain, for `check_body`: the functions a rule may call (name ->
    argument count), the objects those names must be in the rule's module (the ones the engines
    rebind), whether a comparison is a value (the neural parts' `where(x > 0, a, b)`; the linear
    tracer has none), and how to write a choice instead of a branch."""

    functions: Mapping[str, int]
    bound: Mapping[str, tuple]
    comparisons: bool
    remedy: str


LINEAR = Form(FUNCTIONS, _BOUND, False, "use max, min or clamp")
_COMPARISONS = (ast.Gt, ast.Lt, ast.GtE, ast.LtE)


def _not_straight(rule: Callable, node: ast.AST, form: Form) -> RuleError:
    """The refusal of a loop or a branch, worded as what it is (a `for` is no branch on a value)."""
    kind = type(node).__name__.lower()
    if isinstance(node, _LOOPS):
        return RuleError(f"{_where(rule, node)}: a loop ({kind}) in rule {rule.__name__}; the kernel traces "
                         "straight-line code: write the steps out, one assignment each")
    return RuleError(f"{_where(rule, node)}: a Python branch on a value ({kind}) in rule {rule.__name__}; the kernel "
                     f"traces straight-line code: {form.remedy}")


def _a_value(part: ast.AST, form: Form) -> bool:
    """A single <, >, <= or >= where the form computes with comparisons (a chain or == is a branch)."""
    return (form.comparisons and isinstance(part, ast.Compare) and len(part.ops) == 1
            and isinstance(part.ops[0], _COMPARISONS))


def _check_expression(rule: Callable, node: ast.AST, known: set[str], form: Form) -> None:
    """Straight-line arithmetic on known names, numbers and calls of the form's functions; RuleError at the
    first other thing."""
    functions = form.functions
    for part in ast.walk(node):
        if isinstance(part, _BRANCHES) and not _a_value(part, form):
            raise _not_straight(rule, part, form)
        if isinstance(part, ast.Call):
            name = _call_name(part)
            if name not in functions:
                raise RuleError(f"{_where(rule, part)}: unknown function {name} in rule {rule.__name__}; a rule may "
                                f"call {', '.join(functions)} only")
            if len(part.args) != functions[name] or part.keywords:
                raise RuleError(f"{_where(rule, part)}: {name} takes {functions[name]} positional argument(s) in "
                                f"rule {rule.__name__}")
            bound = form.bound.get(name)
            if bound and not any(rule.__globals__.get(name) is f for f in bound):
                package = "fade_core.linear" if form is LINEAR else "fade_core.neural"
                raise RuleError(f"{_where(rule, part)}: {name} in rule {rule.__name__} is not fade_core's; "
                                f"`from {package} import {name}` in its module")
        elif isinstance(part, ast.BinOp) and not isinstance(part.op, _OPERATORS):
            raise RuleError(f"{_where(rule, part)}: operator {type(part.op).__name__} in rule {rule.__name__}; a "
                            "rule uses + - * / only")
        elif isinstance(part, ast.UnaryOp) and not isinstance(part.op, (ast.USub, ast.UAdd)):
            raise RuleError(f"{_where(rule, part)}: operator {type(part.op).__name__} in rule {rule.__name__}; a "
                            "rule uses + - * / only")
        elif isinstance(part, ast.Constant) and (isinstance(part.value, bool)
                                                 or not isinstance(part.value, (int, float))):
            raise RuleError(f"{_where(rule, part)}: {part.value!r} in rule {rule.__name__}; a rule's constants are "
                            "numbers")
        elif isinstance(part, ast.Name) and part.id not in known and part.id not in functions:
            raise RuleError(f"{_where(rule, part)}: unknown name {part.id} in rule {rule.__name__}; a rule reads its "
                            "arguments and its own local names only")
        elif not (isinstance(part, (ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Call, ast.Load, ast.operator,
                                    ast.unaryop)) or _a_value(part, form) or isinstance(part, _COMPARISONS)):
            raise RuleError(f"{_where(rule, part)}: {type(part).__name__} in rule {rule.__name__}; a rule is "
                            f"arithmetic on its arguments (+ - * /, {', '.join(functions)})")


def _check_signature(rule: Callable) -> tuple[str, ...]:
    """The rule's hyperparameter names (its parameters after STATE_ARGS); RuleError if not in the form."""
    try:
        plain = plain_parameters(rule)
    except (TypeError, ValueError):
        raise RuleError(f"{rule!r}: not a function; a rule is def NAME({', '.join(STATE_ARGS)}, "
                        "hyperparameters...)") from None
    names = plain or parameters(rule)
    hps = names[len(STATE_ARGS):]
    if names[: len(STATE_ARGS)] != STATE_ARGS or plain is None or not 1 <= len(hps) <= MAX_HYPERPARAMETERS:
        raise RuleError(f"{_where(rule)}: rule {rule.__name__}({', '.join(names)}) is not in the documented form "
                        f"def NAME({', '.join(STATE_ARGS)}, then 1 to {MAX_HYPERPARAMETERS} hyperparameters), without "
                        "defaults or *args")
    return hps


def check_body(rule: Callable, form: Form, returns: int, ending: str) -> None:
    """RuleError (naming the problem and the line) unless the body of `rule` is assignments of the form's
    straight-line arithmetic ending with a return of `returns` values (`ending`: that return, as the
    documentation writes it)."""
    tree = ast.parse(rule_source(rule))
    function = tree.body[0]
    if not isinstance(function, ast.FunctionDef):
        raise RuleError(f"{_where(rule)}: rule {rule.__name__} is not a def")
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    known = set(parameters(rule))
    last = body[-1] if body else function
    values = getattr(last, "value", None)
    values = values.elts if isinstance(values, ast.Tuple) else [values] if values is not None and returns == 1 else []
    if not (isinstance(last, ast.Return) and len(values) == returns):
        raise RuleError(f"{_where(rule, last)}: rule {rule.__name__} must end with {ending}")
    for statement in body:
        assigns = isinstance(statement, ast.Assign) and len(statement.targets) == 1
        if assigns and isinstance(statement.targets[0], ast.Name):
            _check_expression(rule, statement.value, known, form)
            known.add(statement.targets[0].id)
        elif isinstance(statement, ast.AugAssign) and getattr(statement.target, "id", None) in known:
            _check_expression(rule, ast.BinOp(statement.target, statement.op, statement.value, lineno=statement.lineno),
                              known, form)
        elif statement is last:
            for value in values:
                _check_expression(rule, value, known, form)
        elif isinstance(statement, _BRANCHES):
            raise _not_straight(rule, statement, form)
        else:
            raise RuleError(f"{_where(rule, statement)}: {type(statement).__name__} in rule {rule.__name__}; a rule "
                            "is assignments (NAME = expression) and one return at its end")


def check_rule(rule: Callable) -> tuple[str, ...]:
    """RuleError (naming the problem and the line) unless `rule` is in the documented form; returns its
    hyperparameter names."""
    hps = _check_signature(rule)
    check_body(rule, LINEAR, 5, "`return w, beta, h, gamma, g` (the new state)")
    return tuple(KEYWORDS.get(n, n) for n in hps)


def own_ranges(rule: Callable, hyperparameters: tuple[str, ...]) -> tuple[Hyperparameter, ...]:
    """The rule's own hyperparameters (names not in HYPERPARAMETERS), each with its stated range or any
    finite value; RuleError for a stated range of a name the rule does not take or a built-in one."""
    stated = getattr(rule, RANGES, {})
    for name in stated:
        if name not in hyperparameters or name in HYPERPARAMETERS:
            why = ("a built-in hyperparameter keeps its range" if name in HYPERPARAMETERS
                   else "not one of its parameters")
            raise RuleError(f"{_where(rule)}: @hyperparameter({name!r}) on rule {rule.__name__}: {why}")
    return tuple(stated.get(n, Hyperparameter(n, f"{n} (a hyperparameter of {rule.__name__})"))
                 for n in hyperparameters if n not in HYPERPARAMETERS)


def own_learner(name: str, rule: Callable, summary: str = "") -> LinearLearner:
    """The researcher's `rule` as a LinearLearner named `name`, checked (RuleError) and registered under
    `name@digest` for the compiled kernels (`learners.register`)."""
    if name in rules.LINEAR_LEARNERS:
        raise RuleError(f"{name}: the name of a built-in linear learner; give the rule another name")
    hyperparameters = check_rule(rule)
    source = rule_source(rule)
    learner = LinearLearner(name, rule, summary or f"{rule.__module__}:{rule.__qualname__}",
                            own=own_ranges(rule, hyperparameters), key=f"{name}@{source_digest(source)[:16]}")
    return register(learner)
