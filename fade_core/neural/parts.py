"""The parts of the neural learners of algorithms.md §2, each written once, as plain rules.

Every engine takes its update arithmetic from here (`fade_core/rulebind.py` says how a rule
is bound): the torch engine binds torch's ops to these functions and runs them on tensors;
the CPU engine's per-parameter functions are printed from them as numba code
(`cpu_elements.py`), the Triton engines' as a Triton function (`triton_rule.py`), the CUDA
kernel's as C (`c_source.py`). Only the loops, the
passes over memory and the layouts stay in an engine.

Element rules (traced: branch-free arithmetic on one parameter, the primitives of
rulebind, literals in the run's dtype) and per-run or per-step scalars (`adam_scalars`,
`clip_bound`, `shrink`: float64, on the host, as torch.optim computes them) are both plain
functions; `update` composes the parts of one learner, its parts chosen by keyword-only
flags that are Python values at trace time (an engine's compile-time constants), in the order
of torch_ops: FADE's decay, weight decay, the base step with the gradient taken at the old
weights, clipping.

A new part is a function here and its flag in `update`, and its line in rules.py's `PARTS`. A
part's hyperparameters are the parameters of its functions named as hyperparameters
(`fade_core/hyperparameters.py`; `lam` is `lambda`): `rules.PARTS` reads them from here. A
researcher's base step is a function of their own in the same form (`own.py`).
"""

from __future__ import annotations

# The primitives (rulebind.PLAIN): every engine binds its own; called as it stands, a rule
# computes in plain Python floats.
from fade_core.rulebind import clamp, div_approx, exp, fma, lerp, maximum, minimum, sqrt, where  # noqa: F401

GAMMA_MIN, GAMMA_MAX = -15.0, 0.0  # FADE's clamp of the log decay rate
BETA1, BETA2, EPS = 0.9, 0.999, 1e-8  # Adam, as torch.optim.Adam's defaults


# -- FADE ---------------------------------------------------------------------------------
def fade_decay(gamma, trace, grad, theta_lambda):
    """FADE's meta-update of a parameter's log decay rate -> (gamma, decay = exp(gamma))."""
    gamma = clamp(gamma - theta_lambda * grad * trace, GAMMA_MIN, GAMMA_MAX)
    return gamma, exp(gamma)


def fade_apply(decay, trace, w, q, alpha_eff):
    """FADE's trace with the old w, then the decayed w -> (trace, w); q: the curvature
    (input^2, times p(1-p) on a classification head), alpha_eff: the base step's step size."""
    trace = fma(trace, maximum(fma(-alpha_eff, q, 1 - decay), 0), -(decay * w))
    return trace, w * (1 - decay)


# -- weight decay -------------------------------------------------------------------------
def coupled_decay(grad, w, lam):
    """L2 in the gradient (torch.optim.SGD's weight_decay: d = G + lambda * P)."""
    return grad + lam * w


def shrink(alpha, lam):
    """AdamW's decay factor of a run (per run, in the run's dtype)."""
    return 1 - alpha * lam


def decoupled_decay(w, factor):
    return w * factor


# -- base steps -----------------------------------------------------------------------------
def sgd(w, grad, alpha):
    return w - alpha * grad


def adam_scalars(alpha, k):
    """Adam's per-step scalars for step k (1-based), float64 as torch.optim.Adam computes them
    on the host -> (step = alpha / (1 - beta1^k), sqrt(1 - beta2^k), 1 / (1 - beta2^(k-1))
    (FADE's v_hat before the update; 0 on the first step), 1 - beta1, beta2, 1 - beta2, eps):
    the coefficients `adam` and `adam_alpha_eff` read, in this order (`ac`)."""
    return (alpha / (1 - BETA1**k), sqrt(1 - BETA2**k), where(k > 1, 1 / (1 - BETA2 ** (k - 1)), 0),
            1 - BETA1, BETA2, 1 - BETA2, EPS)


def adam(m, v, w, grad, step, sqrt_bc2, m_weight, beta2, v_weight, eps):
    """torch.optim.Adam on one parameter -> (m, v, w): sqrt(v) divided by sqrt(bias correction
    2) (not times its reciprocal), m by torch's lerp_."""
    m = lerp(m, grad, m_weight)
    v = beta2 * v + v_weight * grad * grad
    return m, v, w - step * m / (sqrt(v) / sqrt_bc2 + eps)


def adam_alpha_eff(v, alpha, first_step, inv_bc2, eps):
    """Adam's step size as FADE's trace sees it: alpha / (sqrt(v_hat) + eps), v_hat before this
    step's update; alpha on the first step."""
    return where(first_step, alpha, alpha / (sqrt(v * inv_bc2) + eps))


# -- clipping -------------------------------------------------------------------------------
def clip_bound(kappa, fan_in):
    """A layer's bound kappa / sqrt(fan_in) (per run)."""
    return kappa / sqrt(fan_in)


def clip(w, bound):
    return clamp(w, -bound, bound)


# -- one learner ----------------------------------------------------------------------------
UPDATE_INPUTS = ("w", "grad", "q", "alpha", "lam", "factor", "theta", "bound", "m", "v", "gamma", "trace",
                 "first_step", "step", "sqrt_bc2", "inv_bc2", "m_weight", "beta2", "v_weight", "eps")
UPDATE_OUTPUTS = ("w", "m", "v", "gamma", "trace")


def update(w, grad, q, alpha, lam, factor, theta, bound, m, v, gamma, trace,
           first_step, step, sqrt_bc2, inv_bc2, m_weight, beta2, v_weight, eps,
           *, base="sgd", weight_decay="none", clip_on=False, fade_on=False):
    """One parameter's whole update -> (w, m, v, gamma, trace). Inputs a learner's parts do
    not read are returned as they came (placeholders): `factor` is `shrink`'s value, the Adam
    coefficients `adam_scalars`' (rounded to the run's dtype), `bound` `clip_bound`'s. `base`:
    "sgd", "adam", or a researcher's base step bound to the caller's primitives and its
    hyperparameters, (w, grad, m, v, alpha) -> (w, m, v) (`own.OwnBase.step`; alpha is then
    also FADE's step size, as under SGD)."""
    if fade_on:
        alpha_eff = adam_alpha_eff(v, alpha, first_step, inv_bc2, eps) if base == "adam" else alpha
        gamma, decay = fade_decay(gamma, trace, grad, theta)
        trace, w = fade_apply(decay, trace, w, q, alpha_eff)
    if weight_decay == "coupled":
        grad = coupled_decay(grad, w, lam)
    if weight_decay == "decoupled":
        w = decoupled_decay(w, factor)
    if base == "adam":
        m, v, w = adam(m, v, w, grad, step, sqrt_bc2, m_weight, beta2, v_weight, eps)
    elif base == "sgd":
        w = sgd(w, grad, alpha)
    else:
        w, m, v = base(w, grad, m, v, alpha)
    if clip_on:
        w = clip(w, bound)
    return w, m, v, gamma, trace
