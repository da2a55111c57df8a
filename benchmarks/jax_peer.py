"""The peer a researcher who knows PureJaxRL writes instead of this project: algorithms.md as one run's
pure JAX functions, `lax.scan` over the steps, `jax.vmap` over configurations and seeds, `jax.jit`.
Timed against the project's packs by peer_jax.py (which also checks that both give the same losses).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


class Linear(NamedTuple):
    w: jax.Array
    beta: jax.Array  # log step sizes (IDBD family)
    h: jax.Array
    gamma: jax.Array  # log decay rates (FADE family)
    g: jax.Array


def idbd(p: dict, s: Linear, x: jax.Array, delta: jax.Array, lam: jax.Array | float = 0.0) -> Linear:
    beta = s.beta + p["theta_alpha"] * delta * x * s.h
    a = jnp.exp(beta)
    h = s.h * jnp.maximum(1 - lam - a * x * x, 0) + a * delta * x
    return s._replace(w=(1 - lam) * s.w + a * delta * x, beta=beta, h=h)


def fade(p: dict, s: Linear, x: jax.Array, delta: jax.Array) -> Linear:
    gamma = s.gamma + p["theta_lambda"] * delta * x * s.g
    l = jnp.exp(gamma)
    g = s.g * jnp.maximum(1 - l - p["alpha"] * x * x, 0) - l * s.w
    return s._replace(w=(1 - l) * s.w + p["alpha"] * delta * x, gamma=gamma, g=g)


def fade_idbd(p: dict, s: Linear, x: jax.Array, delta: jax.Array, coupled: bool = False) -> Linear:
    beta = s.beta + p["theta"] * delta * x * s.h  # both meta steps read the old traces
    gamma = s.gamma + p["theta"] * delta * x * s.g
    a, l = jnp.exp(beta), jnp.exp(gamma)
    decay = a * l if coupled else l  # the L2-derived variant scales the decay by the step size
    c = jnp.maximum(1 - decay - a * x * x, 0)
    h = s.h * c + a * delta * x - (decay * s.w if coupled else 0)
    return Linear((1 - decay) * s.w + a * delta * x, beta, h, gamma, s.g * c - decay * s.w)


LINEAR_RULES = {
    "sgd": lambda p, s, x, delta: s._replace(w=s.w + p["alpha"] * delta * x),
    "sgd_wd": lambda p, s, x, delta: s._replace(w=(1 - p["lambda"]) * s.w + p["alpha"] * delta * x),
    "idbd": idbd,
    "idbd_wd": lambda p, s, x, delta: idbd(p, s, x, delta, p["lambda"]),
    "fade": fade,
    "fade_idbd": fade_idbd,
    "coupled": lambda p, s, x, delta: fade_idbd(p, s, x, delta, coupled=True),
}


def linear_run(rule: Callable, p: dict, w0: jax.Array, xs: jax.Array, ys: jax.Array) -> jax.Array:
    """One run's squared errors (T,) on xs (T, d), ys (T,)."""
    zero = jnp.zeros_like(w0)
    s0 = Linear(w0, zero + p.get("beta0", 0), zero, zero + p.get("gamma0", 0), zero)

    def step(s, xy):
        x, y = xy
        delta = y - s.w @ x
        return rule(p, s, x, delta), delta * delta

    return lax.scan(step, s0, (xs, ys))[1]


B1, B2, EPS = 0.9, 0.999, 1e-8


class Optimizer(NamedTuple):
    """A base optimizer as two pure functions of one parameter, as Optax has them."""

    init: Callable  # parameter -> its state
    update: Callable  # (hyperparameters, P, G, state, k: 1-based step) -> (P, state)


def adam_update(p: dict, P: jax.Array, G: jax.Array, state: tuple, k: jax.Array) -> tuple[jax.Array, tuple]:
    """torch.optim.Adam's step."""
    m, v = state
    m = m + (1 - B1) * (G - m)
    v = B2 * v + (1 - B2) * G * G
    return P - p["alpha"] / (1 - B1**k) * m / (jnp.sqrt(v) / jnp.sqrt(1 - B2**k) + EPS), (m, v)


ADAM = Optimizer(lambda P: (jnp.zeros_like(P), jnp.zeros_like(P)), adam_update)
SGD = Optimizer(lambda P: (), lambda p, P, G, state, k: (P - p["alpha"] * G, state))


def mlp_loss(params: list, x: jax.Array, y: jax.Array, slope: float, classification: bool) -> tuple[jax.Array, tuple]:
    """Loss of one sample, with (logits or prediction, head input) as aux."""
    *hidden, W, b = params
    for Wl, bl in zip(hidden[0::2], hidden[1::2]):
        z = Wl @ x + bl
        x = jnp.where(z > 0, z, slope * z)
    out = W @ x + b
    loss = -jax.nn.log_softmax(out)[y] if classification else 0.5 * jnp.sum((out - y) ** 2)
    return loss, (out, x)


def neural_run(base: Optimizer, head_fade: bool, slope: float, classification: bool, p: dict, params0: list,
               xs: jax.Array, ys: jax.Array, decoupled: bool = False) -> jax.Array:
    """One run's losses (T,); params0 = [W0, b0, W1, b1, ...]; FADE on the head (algorithms.md §2);
    `decoupled`: AdamW's decay P * (1 - alpha * lambda) before the base step."""
    head = params0[-2:]
    fade0 = ([jnp.zeros_like(P) + p["gamma0"] for P in head], [jnp.zeros_like(P) for P in head]) if head_fade else ()
    s0 = (params0, [base.init(P) for P in params0], fade0, 0)

    def step(s, xy):
        params, opt, fade, k = s
        (loss, (out, h)), grads = jax.value_and_grad(mlp_loss, has_aux=True)(params, *xy, slope, classification)
        params, k = list(params), k + 1
        if head_fade:  # decay first, then the base step with the gradient taken at P_old
            gamma, g = fade
            prob = jax.nn.softmax(out)
            q_out = prob * (1 - prob) if classification else jnp.ones_like(out)
            for i, q in zip((-2, -1), (q_out[:, None] * h**2, q_out)):
                alpha_eff = p["alpha"]
                if base is ADAM:  # alpha / (sqrt(v_hat) + eps), v_hat before this step (alpha on the first)
                    v_hat = opt[i][1] / (1 - B2 ** jnp.maximum(k - 1, 1))
                    alpha_eff = jnp.where(k > 1, p["alpha"] / (jnp.sqrt(v_hat) + EPS), p["alpha"])
                gamma[i] = jnp.clip(gamma[i] - p["theta_lambda"] * grads[i] * g[i], -15, 0)
                l = jnp.exp(gamma[i])
                g[i] = g[i] * jnp.maximum(1 - l - alpha_eff * q, 0) - l * params[i]
                params[i] = (1 - l) * params[i]
        if decoupled:
            params = [P * (1 - p["alpha"] * p["lambda"]) for P in params]
        params, opt = map(list, zip(*(base.update(p, *a, k) for a in zip(params, grads, opt))))
        return (params, opt, fade, k), loss

    return lax.scan(step, s0, (xs, ys))[1]


def pack(run: Callable) -> Callable:
    """run(p, init, xs, ys) over configs x seeds: p by config, init and stream by seed -> (C, S, T)."""
    per_seed = jax.vmap(run, in_axes=(0, None, None, None))  # a seed's configs share its stream
    return jax.jit(jax.vmap(per_seed, in_axes=(None, 0, 1, 1), out_axes=1))


def peer_program(meta: dict, init: np.ndarray) -> tuple[Callable, object]:
    """The jitted pack program of a case, and its initial weights in the program's layout."""
    if meta["workload"] == "linear":
        return pack(lambda *a: linear_run(LINEAR_RULES[meta["learner"]], *a)), jnp.asarray(init)
    sizes = meta["sizes"]
    shapes = [s for i, o in zip(sizes[:-1], sizes[1:]) for s in ((o, i), (o,))]
    ends = np.cumsum([np.prod(s) for s in shapes])
    params0 = [jnp.asarray(init[:, e - np.prod(s) : e].reshape(-1, *s)) for s, e in zip(shapes, ends)]
    learner = meta["learner"]
    if learner not in NEURAL_PEERS:
        raise ValueError(f"the JAX peer has no {learner!r}; it has {', '.join(NEURAL_PEERS)}")
    base = ADAM if "adam" in learner else SGD
    fade_head, decoupled = learner.startswith("fade"), learner == "adamw"
    return pack(lambda *a: neural_run(base, fade_head, meta["slope"], meta["classification"], *a, decoupled)), params0


NEURAL_PEERS = ("sgd", "adam", "adamw", "fade_sgd", "fade_adam")  # the network learners written here
