"""A researcher's copy of FADE with one hyperparameter of its own, rho (the decay trace's leak): the worked
example of docs/own-learners.md, benchmarks/bench_own_linear.py's rule (rho = 1 is FADE itself, with one
multiply more per component) and tests/test_own_learners.py's."""

from fade_core.linear import clamp, exp, hyperparameter


@hyperparameter("rho", "leak of the decay trace", low=0.0, high=1.0)
def fade_leaky(x, delta, w, beta, h, gamma, g, lo, hi, alpha, theta_lambda, gamma0, rho):
    gamma = clamp(gamma + theta_lambda * delta * x * g, lo, hi)
    l = exp(gamma)
    g = rho * g * max(1 - l - alpha * x * x, 0) - l * w
    w = (1 - l) * w + alpha * delta * x
    return w, beta, h, gamma, g
