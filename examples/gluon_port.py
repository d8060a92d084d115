"""Porting a Gluon training loop to gradxform, line by line.

Each block below shows the MXNet Gluon code as comments (``# Gluon:``) and its
gradxform counterpart right under it: the Trainer, ``trainer.step``,
``allreduce_grads`` + gradient clipping + ``update``, a per-layer ``lr_mult``,
the learning rate, and ``save_states`` / ``load_states``. The optimizers are
MXNet's own rules and give MXNet's numbers (see the README's optimizer table).

What changes, and why:

* Gluon keeps the gradients in the parameters (``loss.backward()`` fills
  ``param.grad()``); JAX returns them. So ``trainer.grads(loss_fn, batch)``
  stands for ``autograd.record()`` + ``backward()``, and the gradients are
  passed to ``step``/``update``. They come one copy per device (a leading
  device axis), as Gluon keeps one per context.
* The Trainer owns the parameters: read them as ``trainer.params``.
  ``save_states`` stores them with the optimizer state.
* Parameter names are pytree paths joined by '/' ('dense1/weight'), where
  Gluon says 'dense1_weight'; ``lr_mult``/``wd_mult`` take names or globs in
  the optimizer's keywords instead of attributes set on the Parameter.
* As in Gluon, the loss is summed over the batch and ``step(grads,
  batch_size)`` divides by ``batch_size``.

    python examples/gluon_port.py          # 5 epochs on a synthetic 10-class problem
    python examples/gluon_port.py --fast   # a few steps (what the tests run)
"""
from __future__ import annotations

import argparse
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

import gradxform


def make_data(seed: int, n: int = 2048, dim: int = 20, classes: int = 10):
    """Ten Gaussian blobs: stands in for a gluon.data.DataLoader."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 0.6, (classes, dim))
    y = rng.integers(0, classes, n).astype(np.int32)
    x = (centers[y] + rng.normal(0, 1.0, (n, dim))).astype(np.float32)
    return x, y


def batches(x, y, batch_size, rng):
    perm = rng.permutation(len(x))
    for i in range(0, len(x) - batch_size + 1, batch_size):
        idx = perm[i:i + batch_size]
        yield x[idx], y[idx]


# Gluon:
#   net = nn.Sequential()
#   net.add(nn.Dense(64, activation='relu'), nn.Dense(10))
#   net.initialize(mx.init.Xavier())
def init_net(key, dims=(20, 64, 10)):
    params = {}
    for i, (n_in, n_out) in enumerate(zip(dims[:-1], dims[1:])):
        key, k = jax.random.split(key)
        limit = np.sqrt(6.0 / (n_in + n_out))                      # Xavier (uniform)
        params[f"dense{i}"] = {"weight": jax.random.uniform(k, (n_in, n_out), minval=-limit, maxval=limit),
                               "bias": jnp.zeros((n_out,))}
    return params


def net(params, x):
    x = jax.nn.relu(x @ params["dense0"]["weight"] + params["dense0"]["bias"])
    return x @ params["dense1"]["weight"] + params["dense1"]["bias"]


# Gluon:
#   loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
#   ... loss = loss_fn(net(x), y); loss.backward()      # backward() sums over the batch
def loss_fn(params, batch):
    x, y = batch
    logp = jax.nn.log_softmax(net(params, x))
    return -jnp.sum(jnp.take_along_axis(logp, y[:, None], axis=1))


# Gluon: gluon.utils.clip_global_norm(arrays, max_norm)
def clip_global_norm(grads, max_norm):
    norm = gradxform.pieces.global_norm(grads)
    scale = jnp.minimum(1.0, max_norm / (norm + 1e-8))
    return jax.tree.map(lambda g: g * scale.astype(g.dtype), grads)


@jax.jit
def accuracy(params, x, y):
    return jnp.mean(jnp.argmax(net(params, x), axis=1) == y)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fast", action="store_true", help="1 epoch of 8 steps")
    args = ap.parse_args(argv)
    x, y = make_data(args.seed)
    x, y, x_val, y_val = x[:1536], y[:1536], x[1536:], y[1536:]
    batch_size = 64
    rng = np.random.default_rng(args.seed)
    params = init_net(jax.random.PRNGKey(args.seed))
    print("parameter names:", gradxform.param_names(params))

    # Gluon:
    #   net[1].collect_params().setattr('lr_mult', 0.1)    # the last layer learns 10x slower
    #   trainer = gluon.Trainer(net.collect_params(), 'sgd',
    #                           {'learning_rate': 0.1, 'momentum': 0.9, 'wd': 1e-4})
    trainer = gradxform.Trainer(params, "sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4,
                                                "lr_mult": {"dense1/*": 0.1}})

    epochs, max_steps = (1, 8) if args.fast else (args.epochs, None)
    for epoch in range(epochs):
        for i, batch in enumerate(batches(x, y, batch_size, rng)):
            if max_steps is not None and i == max_steps:
                break
            # Gluon:
            #   with autograd.record():
            #       loss = loss_fn(net(data), label)
            #   loss.backward()
            grads = trainer.grads(loss_fn, batch)
            # Gluon:
            #   trainer.step(batch_size)
            trainer.step(grads, batch_size)
        print(f"epoch {epoch}: validation accuracy {float(accuracy(trainer.params, x_val, y_val)):.2%}, "
              f"lr {trainer.learning_rate:g}")

    # Gradient clipping on the summed gradients: step() split in two.
    # Gluon:
    #   with autograd.record():
    #       loss = loss_fn(net(data), label)
    #   loss.backward()
    #   trainer.allreduce_grads()
    #   grads = [p.grad(mx.cpu()) for p in net.collect_params().values()]
    #   gluon.utils.clip_global_norm(grads, 5.0)
    #   trainer.update(batch_size)
    batch = next(batches(x, y, batch_size, rng))
    grads = trainer.allreduce_grads(trainer.grads(loss_fn, batch))   # sums, one copy per device
    grads = jax.vmap(clip_global_norm, in_axes=(0, None))(grads, 5.0)
    trainer.update(grads, batch_size)

    # Gluon:
    #   print(trainer.learning_rate)
    #   trainer.set_learning_rate(0.01)
    trainer.set_learning_rate(0.01)           # no recompile: the rate is a leaf of the state
    print(f"learning rate now {trainer.learning_rate:g}")

    # Gluon:
    #   trainer.save_states('net.states')
    #   ...
    #   trainer.load_states('net.states')
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "net.states")
        trainer.save_states(path)
        batch = next(batches(x, y, batch_size, rng))
        trainer.step(trainer.grads(loss_fn, batch), batch_size)
        after_one_step = trainer.params
        trainer.load_states(path)             # back to the saved parameters and momentum
        trainer.step(trainer.grads(loss_fn, batch), batch_size)
        same = jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)),
                                         after_one_step, trainer.params))
    print("resumed step is bit-identical:", same)
    assert same
    acc = float(accuracy(trainer.params, x_val, y_val))
    print(f"final validation accuracy {acc:.2%} (chance: 10%)")
    assert acc > (0.3 if args.fast else 0.6), "the model did not learn"


if __name__ == "__main__":
    main()
