"""A base step of one's own for a neural learner (docs/own-learners.md's example; tests/test_own_neural.py runs it)."""

from fade_core.neural import hyperparameter, sqrt


@hyperparameter("rho", "decay of the mean square", low=0.0, high=1.0)
def rmsprop(w, grad, v, alpha, rho, eps):
    v = rho * v + (1 - rho) * grad * grad
    return w - alpha * grad / (sqrt(v) + eps), v
