"""The one way a rule of either family is bound to a backend: its primitives rebound by name.

A rule (`fade_core/linear/rules.py`, `fade_core/neural/parts.py`) is plain, branch-free
Python that calls a few primitives by their global names. An engine gets its code from the
rule by calling `bind(rule, primitives)`: the same code object with those global names
pointing at the engine's versions (a tracer's, torch's, numba's). Nothing but names
changes, so the rule's source stays the one text every engine runs; `parameters(rule)`
is how every caller reads a rule's arguments (never `__code__` by hand).

The primitives, and their plain-Python meaning below (what a rule computes when called as
it is, in float64):
  exp(x), sqrt(x)          rounded as the backend's library does
  fma(a, b, c)             a * b + c rounded once: written, never left to the compiler
  div_approx(a, b)         a / b where the backend may use a faster, approximate division
                           (`/` itself is IEEE division)
  where(c, a, b)           a where c else b, both sides computed (c from a comparison)
  maximum(a, b), minimum(a, b)
                           b if b > a (b < a) else a: a NaN in a stays NaN; the bound b is
                           never NaN. numba's max/min and a C `(b > a) ? b : a` agree on it.
  clamp(x, lo, hi)         minimum(maximum(x, lo), hi)
  lerp(a, b, w)            a + w * (b - a) (torch's lerp_ for |w| < 0.5)
A rule never branches on a value (`if x > 0:`): a traced value refuses `bool()`, so such a
rule fails when it is bound instead of silently taking one side; its compile-time flags
(keyword-only Python bools) are what it may branch on.
"""

from __future__ import annotations

import inspect
import math
import types
from typing import Callable, Mapping

PRIMITIVES = ("exp", "sqrt", "fma", "div_approx", "where", "maximum", "minimum", "clamp", "lerp")


exp, sqrt = math.exp, math.sqrt


def maximum(a, b):
    return b if b > a else a


def minimum(a, b):
    return b if b < a else a


def clamp(x, lo, hi):
    return minimum(maximum(x, lo), hi)


def fma(a, b, c):
    return a * b + c  # (math.fma is Python 3.13's; this plain meaning rounds twice)


def where(condition, a, b):
    return a if condition else b


def lerp(a, b, weight):
    return a + weight * (b - a)


def div_approx(a, b):
    return a / b


PLAIN: dict[str, Callable] = {
    "exp": exp, "sqrt": sqrt, "fma": fma, "div_approx": div_approx, "where": where,
    "maximum": maximum, "minimum": minimum, "clamp": clamp, "lerp": lerp,
}


def bind(rule: Callable, primitives: Mapping[str, object], parts: bool = False) -> Callable:
    """`rule` with the global names in `primitives` rebound (its other globals, defaults and
    closure as they are). With `parts`, the other functions of the rule's module that it calls
    by name (a neural learner's `update` calls `fade_decay`, `adam`, ...) are bound in the same
    scope. Used by the linear SIMD tracer, the expression tracer and the torch engine; Triton,
    which re-reads a function's source, takes printed source instead (fade_core/expression.py)."""
    scope = dict(rule.__globals__)
    if parts:
        for name, value in rule.__globals__.items():
            if isinstance(value, types.FunctionType) and value.__module__ == rule.__module__ and name not in primitives:
                scope[name] = _rebound(value, scope)
    scope.update(primitives)
    return _rebound(rule, scope)


def _rebound(function: types.FunctionType, scope: dict) -> Callable:
    return types.FunctionType(function.__code__, scope, function.__name__, function.__defaults__, function.__closure__)


def parameters(rule: Callable) -> tuple[str, ...]:
    """The names of `rule`'s positional parameters, in order (keyword-only flags left out)."""
    return tuple(name for name, p in inspect.signature(rule).parameters.items()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def plain_parameters(rule: Callable) -> tuple[str, ...] | None:
    """`rule`'s parameter names if every one is plain (positional or keyword, no default: a
    researcher's rule's form), else None; TypeError or ValueError for what has no signature."""
    found = inspect.signature(rule).parameters.values()
    return tuple(p.name for p in found) if all(p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty
                                               for p in found) else None
