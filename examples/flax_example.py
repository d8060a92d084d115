"""gradxform optimizers in Flax: they are optax transformations, so they drop in.

A small Flax (linen) MLP fits ``y = sin(3x)`` with `flax.training.train_state.TrainState`
and ``gradxform.create('adam', ...)`` as its ``tx``; halfway through, the learning
rate is lowered with `gradxform.set_learning_rate` on ``state.opt_state``: the
learning rate is a float32 leaf of the optimizer state, so the jitted step is
not recompiled (the script checks this). The same optimizer also works with
``flax.nnx``: ``nnx.Optimizer(model, gradxform.create('adam'), wrt=nnx.Param)``
(see `train_nnx` below).

    python examples/flax_example.py            # 2000 steps, about 15 s on 2 CPU cores
    python examples/flax_example.py --fast     # 100 steps (what the tests run)
"""
from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import flax.linen as nn
from flax.training import train_state

import gradxform


class MLP(nn.Module):
    hidden: int = 64

    @nn.compact
    def __call__(self, x):
        x = nn.tanh(nn.Dense(self.hidden)(x))
        x = nn.tanh(nn.Dense(self.hidden)(x))
        return nn.Dense(1)(x)


def data(seed: int, n: int = 256):
    x = np.random.default_rng(seed).uniform(-1, 1, (n, 1)).astype(np.float32)
    return jnp.asarray(x), jnp.asarray(np.sin(3 * x))


TRACES = 0  # counts how often `train_step` is traced (compiled)


@jax.jit
def train_step(state: train_state.TrainState, x, y):
    global TRACES
    TRACES += 1

    def loss_fn(params):
        return jnp.mean((state.apply_fn({"params": params}, x) - y) ** 2)

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    # TrainState.apply_gradients calls tx.update(grads, opt_state, params).
    return state.apply_gradients(grads=grads), loss


def train_linen(steps: int, seed: int) -> float:
    x, y = data(seed)
    model = MLP()
    params = model.init(jax.random.PRNGKey(seed), x)["params"]
    # Any gradxform optimizer, with its framework's keywords. Per-parameter
    # multipliers take parameter names ('Dense_2/kernel') or globs.
    tx = gradxform.create("adam", learning_rate=1e-2, wd=1e-5, lr_mult={"Dense_2/*": 0.5})
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)
    for i in range(steps):
        if i == steps // 2:  # lower the learning rate: same shapes, no recompile
            state = state.replace(opt_state=gradxform.set_learning_rate(state.opt_state, 2e-3))
        state, loss = train_step(state, x, y)
    print(f"linen: lr now {gradxform.get_learning_rate(state.opt_state):.4g}, "
          f"final mse {float(loss):.5f}, train_step traced {TRACES}x")
    assert TRACES == 1, "changing the learning rate must not recompile the step"
    return float(loss)


def train_nnx(steps: int, seed: int) -> float:
    from flax import nnx  # noqa: PLC0415

    class Net(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.l1 = nnx.Linear(1, 64, rngs=rngs)
            self.l2 = nnx.Linear(64, 1, rngs=rngs)

        def __call__(self, x):
            return self.l2(nnx.tanh(self.l1(x)))

    x, y = data(seed)
    model = Net(nnx.Rngs(seed))
    optimizer = nnx.Optimizer(model, gradxform.create("rmsprop", learning_rate=3e-3), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer, x, y):
        loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(model)
        optimizer.update(model, grads)
        return loss

    for _ in range(steps):
        loss = step(model, optimizer, x, y)
    print(f"nnx: final mse {float(loss):.5f}")
    return float(loss)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fast", action="store_true", help="100 steps (for the tests)")
    args = ap.parse_args(argv)
    steps = 100 if args.fast else args.steps
    mse0 = float(jnp.mean(data(args.seed)[1] ** 2))
    linen_mse = train_linen(steps, args.seed)
    nnx_mse = train_nnx(steps, args.seed)
    print(f"mse of predicting 0: {mse0:.4f}")
    assert linen_mse < 0.5 * mse0 and nnx_mse < 0.5 * mse0, "the models did not learn"


if __name__ == "__main__":
    main()
