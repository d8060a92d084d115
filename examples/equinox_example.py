"""gradxform optimizers in Equinox: an optax transformation over the model's arrays.

An `equinox.nn.MLP` (its activation is a non-array leaf, which the filtered
gradients hold as None) fits ``y = sin(3x)``. The optimizer is MXNet's SGD with
momentum from gradxform; the last layer learns at a tenth of the rate, chosen
by parameter name (names are pytree paths joined by '/', e.g. 'layers/2/weight';
`gradxform.param_names` lists them). Halfway through, `gradxform.set_hyper`
changes the momentum, and the jitted step is not recompiled.

    python examples/equinox_example.py          # 2000 steps
    python examples/equinox_example.py --fast   # 100 steps (what the tests run)
"""
from __future__ import annotations

import argparse

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import gradxform


def data(seed: int, n: int = 256):
    x = np.random.default_rng(seed).uniform(-1, 1, (n, 1)).astype(np.float32)
    return jnp.asarray(x), jnp.asarray(np.sin(3 * x))


TRACES = 0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fast", action="store_true", help="100 steps (for the tests)")
    args = ap.parse_args(argv)
    steps = 100 if args.fast else args.steps

    x, y = data(args.seed)
    model = eqx.nn.MLP(1, 1, 64, depth=2, activation=jnp.tanh, key=jax.random.PRNGKey(args.seed))
    params = eqx.filter(model, eqx.is_inexact_array)
    print("parameters:", gradxform.param_names(params))
    optim = gradxform.create("sgd", learning_rate=0.05, momentum=0.9,
                             lr_mult={"layers/2/*": 0.1})   # last layer: lr * 0.1
    opt_state = optim.init(params)

    @eqx.filter_jit
    def step(model, opt_state, x, y):
        global TRACES
        TRACES += 1
        loss, grads = eqx.filter_value_and_grad(
            lambda m: jnp.mean((jax.vmap(m)(x) - y) ** 2))(model)
        updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_inexact_array))
        return eqx.apply_updates(model, updates), opt_state, loss

    for i in range(steps):
        if i == steps // 2:
            opt_state = gradxform.set_hyper(opt_state, momentum=0.5)
        model, opt_state, loss = step(model, opt_state, x, y)

    mse0 = float(jnp.mean(y ** 2))
    print(f"momentum now {float(gradxform.get_hyper(opt_state, 'momentum')):g}; final mse "
          f"{float(loss):.5f} (predicting 0: {mse0:.4f}); step traced {TRACES}x")
    assert TRACES == 1, "set_hyper must not recompile the step"
    assert float(loss) < 0.5 * mse0, "the model did not learn"


if __name__ == "__main__":
    main()
