"""A neural base step of the researcher's own: checked from its source, and bound like a built-in part.

A neural learner of one's own is the built-in parts (FADE's decay, weight decay, clipping:
`rules.NeuralLearner`) around a base step of one's own in place of SGD or Adam, written in the
form of `parts.py`'s rules:

    from fade_core.neural import hyperparameter, sqrt

    @hyperparameter("rho", "decay of the mean square", low=0.0, high=1.0)   # optional
    def rmsprop(w, grad, v, alpha, rho, eps):
        v = rho * v + (1 - rho) * grad * grad
        return w - alpha * grad / (sqrt(v) + eps), v

The arguments: the parameter `w`, its gradient `grad`, then 0 to 2 names of the step's own
per-parameter state (each starts at 0, and is held where Adam keeps m and v), then `alpha` (the
step size; FADE's trace sees it as the step size, as under SGD), then 0 to 6 hyperparameters of
its own; it returns the new `w` and the new state, in that order. Its body is straight-line
arithmetic (+, -, *, /, numbers, and fade_core.rulebind's primitives: exp, sqrt, fma,
div_approx, where, maximum, minimum, clamp, lerp; a comparison only as where's condition):
every engine traces or binds it as it does `parts.update` (fade_core/expression.py), so it is
checked here, before anything runs, with the line of the first thing no engine can run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from fade_core.expression import RuleError as TraceError
from fade_core.expression import TRACING, Node, Value, trace
from fade_core.hyperparameters import HYPERPARAMETERS, Hyperparameter
from fade_core.learners import register
from fade_core.linear.own import Form, RuleError, _where, check_body, hyperparameter, own_ranges, rule_source, source_digest
from fade_core.neural.rules import NEURAL_LEARNERS, NeuralLearner
from fade_core.rulebind import PLAIN, bind, parameters, plain_parameters

MAX_STATE = 2  # the state buffers every engine keeps per parameter (Adam's m and v)
MAX_HYPERPARAMETERS = 6
PART = Form({"exp": 1, "sqrt": 1, "fma": 3, "div_approx": 2, "where": 3, "maximum": 2, "minimum": 2, "clamp": 3,
             "lerp": 3}, {name: (f,) for name, f in PLAIN.items()}, True, "use where, maximum, minimum or clamp")
FORM = "def NAME(w, grad, up to 2 state names (not hyperparameters' names), alpha, up to 6 hyperparameters)"

__all__ = ["OwnBase", "RuleError", "hyperparameter", "own_base", "own_learner"]


@dataclass(frozen=True)
class OwnBase:
    """A researcher's base step, checked: `parts.update` calls it (bound by `step`) in place of sgd or adam."""

    name: str  # the function's name
    rule: Callable
    state: tuple[str, ...] = ()  # its per-parameter state, in the rule's order (in m, then v)
    hyperparameters: tuple[str, ...] = ()  # its own, after alpha, in the rule's order
    own: tuple[Hyperparameter, ...] = ()  # those not built in, with their ranges
    digest: str = ""  # of its source (16 hex digits): in its learner's key (fade_core.learners)

    def step(self, primitives: Mapping[str, object], hp: Mapping[str, object]) -> Callable:
        """The base step as `parts.update` calls it, (w, grad, m, v, alpha) -> (w, m, v): the rule
        bound to `primitives`, its state read from m (then v), its hyperparameters from `hp`; a
        state slot it does not have is returned as it came."""
        rule = bind(self.rule, primitives)
        own = [hp[name] for name in self.hyperparameters]
        held = len(self.state)

        def base_step(w, grad, m, v, alpha):
            out = rule(w, grad, *(m, v)[:held], alpha, *own)
            out = out if isinstance(out, tuple) else (out,)
            return (out[0], *out[1:], *(m, v)[held:])

        return base_step

    def traced_step(self) -> Callable:
        """`step` for a tracer (fade_core/expression.py): its hyperparameters as inputs named as they are."""
        return self.step(TRACING, {name: Value(Node("var", value=name)) for name in self.hyperparameters})


def _signature(rule: Callable) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(state names, hyperparameter names) of a rule in the form FORM; RuleError otherwise."""
    try:
        plain = plain_parameters(rule)
    except (TypeError, ValueError):
        raise RuleError(f"{rule!r}: not a function; a base step is {FORM}") from None
    names = plain or parameters(rule)
    at = names.index("alpha") if "alpha" in names else -1
    state, hps = names[2:at], names[at + 1:]
    if (names[:2] != ("w", "grad") or at < 0 or plain is None or len(state) > MAX_STATE
            or len(hps) > MAX_HYPERPARAMETERS or set(state) & set(HYPERPARAMETERS)):
        raise RuleError(f"{_where(rule)}: base step {rule.__name__}({', '.join(names)}) is not in the documented form "
                        f"{FORM}, without defaults or *args")
    return state, hps


def own_base(rule: Callable, taken: tuple[str, ...] = ()) -> OwnBase:
    """The researcher's base step `rule`, checked (RuleError naming the problem and the line);
    `taken`: the hyperparameters of the learner's other parts, which its own may not be named."""
    state, hps = _signature(rule)
    ending = f"`return w, {', '.join(state)}` (the new w and state)" if state else "`return w` (the new w)"
    check_body(rule, PART, 1 + len(state), ending)
    for name in hps:
        if name in taken:
            raise RuleError(f"{_where(rule)}: hyperparameter {name} of {rule.__name__} is one of the learner's other "
                            "parts'; rename it")
    try:
        trace(rule, (*("w", "grad"), *state, "alpha", *hps))
    except (TraceError, NameError, TypeError) as err:  # what the form check lets through and no engine can run
        raise RuleError(f"{_where(rule)}: base step {rule.__name__} does not trace: {err}") from None
    source = rule_source(rule)
    return OwnBase(rule.__name__, rule, state, hps, own_ranges(rule, hps), source_digest(source)[:16])


def own_learner(name: str, rule: Callable, weight_decay: str = "none", clip: bool = False, fade: str = "none"):
    """The NeuralLearner `name`: the built-in parts given around the researcher's base step `rule`
    (RuleError naming the problem and the line; ValueError for an unknown part), registered under its
    key `name@digest` (fade_core.learners)."""
    if name in NEURAL_LEARNERS:
        raise RuleError(f"{name}: the name of a built-in neural learner; give the learner another name")
    others = NeuralLearner(name, "sgd", weight_decay, clip, fade).hyperparameters[1:]
    return register(NeuralLearner(name, own_base(rule, others), weight_decay, clip, fade))
