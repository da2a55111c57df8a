"""Base steps of one's own for neural learners: rmsprop is docs/own-learners.md's example (tests/test_own_neural.py runs
it), sgd_copy SGD's step as one's own (benchmarks/bench_own_neural.py)."""

from fade_core.neural import hyperparameter, sqrt


@hyperparameter("rho", "decay of the mean square", low=0.0, high=1.0)
def rmsprop(w, grad, v, alpha, rho, eps):
    v = rho * v + (1 - rho) * grad * grad
    return w - alpha * grad / (sqrt(v) + eps), v


def sgd_copy(w, grad, alpha):
    """SGD's step written as a base step of one's own (benchmarks/bench_own_neural.py: against the built-in)."""
    return w - alpha * grad
