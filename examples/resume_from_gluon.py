"""Continue a Gluon (MXNet 1.9.1) training run in JAX from ``Trainer.save_states``.

The run: ``Sequential(Dense(3, in_units=4), Dense(2, in_units=3))``, ``L2Loss``,
``gluon.Trainer(params, 'adam', {'learning_rate': 0.01, 'wd': 0.01},
update_on_kvstore=False)``, batch 8, ``trainer.save_states(...)`` after 5 steps.
Its files are committed under ``tests/fixtures/mxnet/adam/``: ``trainer.states``
(what MXNet wrote) and ``trajectory.npz`` (the batches and MXNet's parameters
after each step, used here only to load the weights at step 5 and to show
that JAX continues exactly where MXNet would have gone).

Run from the repository root::

    python examples/resume_from_gluon.py           # continues for 4x the recorded steps
    python examples/resume_from_gluon.py --fast    # only the steps MXNet recorded (a smoke test)

No MXNet is needed: the states file is read with gradxform's restricted
unpickler.
"""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

import gradxform as gx
from gradxform.migrate import from_gluon_states

HERE = os.path.dirname(os.path.abspath(__file__))
CASE = os.path.join(HERE, "..", "tests", "fixtures", "mxnet", "adam")


def net(params, x):
    """Gluon Dense computes x @ W.T + b (W is (units, in_units)); no activation."""
    h = x @ params["net_dense0_weight"].T + params["net_dense0_bias"]
    return h @ params["net_dense1_weight"].T + params["net_dense1_bias"]


def loss_fn(params, x, y):
    """gluon.loss.L2Loss: 0.5 * mean over features of (pred - y)^2, per sample;
    ``loss.backward()`` on the per-sample vector differentiates its sum."""
    per_sample = 0.5 * jnp.mean((net(params, x) - y) ** 2, axis=1)
    return jnp.sum(per_sample)


def main(fast: bool = False):
    z = np.load(os.path.join(CASE, "trajectory.npz"))
    meta = json.loads(str(z["meta"]))
    k, n, batch = meta["k"], meta["n"], meta["batch_size"]
    names = meta["names"]
    batches = [(jnp.asarray(z[f"x_{t}"]), jnp.asarray(z[f"y_{t}"])) for t in range(n)]

    # The same optimizer as the Gluon run. Trainer.step(batch_size) sets
    # rescale_grad = 1/batch_size, so we do too.
    tx = gx.create("adam", learning_rate=0.01, wd=0.01, rescale_grad=1.0 / batch)

    # Weights at step k (Gluon's net.save_parameters would give the same arrays)
    # and the optimizer state MXNet saved at step k.
    params = {name: jnp.asarray(z[f"p_{k - 1}_{name}"]) for name in names}
    state = from_gluon_states(os.path.join(CASE, "trainer.states"), params, tx)

    @jax.jit
    def step(params, state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, state = tx.update(grads, state, params)
        return gx.apply_updates(params, updates), state, loss

    all_x = jnp.concatenate([b[0] for b in batches])
    all_y = jnp.concatenate([b[1] for b in batches])

    def full_loss(p):  # the loss over all recorded samples: a smooth curve
        return float(loss_fn(p, all_x, all_y)) / all_x.shape[0]

    print("step  by         batch loss  full loss  max |w - w_mxnet|")
    for t in range(k):  # the Gluon part of the run, from MXNet's recorded weights
        before = {name: jnp.asarray(z[f"p_{t - 1}_{name}"] if t else z[f"p0_{name}"]) for name in names}
        after = {name: jnp.asarray(z[f"p_{t}_{name}"]) for name in names}
        print(f"{t:4d}  mxnet      {float(loss_fn(before, *batches[t])) / batch:10.6f}  {full_loss(after):9.6f}")
    for t in range(k, n if fast else 4 * n):  # continued in JAX; the recorded batches repeat after step n-1
        x, y = batches[t % n]
        params, state, loss = step(params, state, x, y)
        diff = ""
        if t < n:  # MXNet's own continuation exists for these steps
            diff = max(float(np.max(np.abs(np.asarray(params[name]) - z[f"p_{t}_{name}"]))) for name in names)
            diff = f"{diff:.1e}"
        print(f"{t:4d}  gradxform  {float(loss) / batch:10.6f}  {full_loss(params):9.6f}  {diff}")


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fast", action="store_true", help="stop where MXNet's recording stops")
    main(ap.parse_known_args()[0].fast)  # known args only: tests run it with runpy under pytest
