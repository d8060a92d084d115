#!/usr/bin/env python
"""Gluon resume fixtures the per-optimizer ones (tools/mxnet_migration_fixtures.py) do not cover.

NOT imported by the test-suite. Run with the MXNet 1.9.1 venv:

    /work/venvs/mxnet/bin/python tools/mxnet_resume_fixtures.py

Written to ``tests/fixtures/mxnet_resume/`` (a few KB in all), each run being
``gluon.Trainer(net.collect_params(), ...)`` with ``trainer.save_states`` right
after step K (the file holds the state after K updates):

  order12.states, order12.npz
      A Sequential of 12 ``Dense(2, in_units=2)`` (tanh but the last), Adam.
      Gluon's Trainer numbers its parameters by sorted name: dense0_bias,
      dense0_weight, dense10_bias, dense10_weight, dense11_*, dense1_*, ...,
      which is not JAX's leaf order of ``{'dense0': {...}, ..., 'dense11': {...}}``
      (dense1 before dense10); every state has the same shape, so a wrong
      order is silent unless the trajectory is checked.
  user_sched.states, user_sched.npz
      One ``Dense(3, in_units=4, prefix='fc_')``, SGD with momentum and a
      scheduler of the script's own class, ``__main__.StepWarmup`` (a subclass
      of ``mx.lr_scheduler.LRScheduler`` with attributes of its own): the
      pickle names that class.
  user_seq.states
      The same net and one SGD step under ``__main__.Sequence``, a user
      scheduler holding two ``StepWarmup`` in a list (GluonCV's LRSequential
      pattern). Only read by the tests.

Each .npz holds ``meta`` (JSON: ``names`` in the Trainer's order, i.e.
sorted, ``shapes``, ``k``, ``n``, ``batch_size``, ``optimizer``,
``optimizer_params``, ``mxnet_version``), and, with every parameter raveled
and concatenated in ``names`` order, ``p`` of shape (n - k + 1, total): row 0
the parameters when the file was saved, row j those after step k + j - 1;
``g`` of shape (n - k, total): the raw gradients (``p.grad()``, before the
Trainer rescales them by 1/batch_size) of steps k..n-1.
"""
import json
import os

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "mxnet_resume")


class StepWarmup(mx.lr_scheduler.LRScheduler):
    """A linear warmup over ``warmup`` updates, then ``factor`` every ``step`` updates."""

    def __init__(self, base_lr=0.01, warmup=2, step=3, factor=0.5):
        super().__init__(base_lr)
        self.warmup, self.step, self.factor = warmup, step, factor

    def __call__(self, num_update):
        if num_update <= self.warmup:
            return self.base_lr * num_update / self.warmup
        return self.base_lr * self.factor ** ((num_update - self.warmup) // self.step)


class Sequence(mx.lr_scheduler.LRScheduler):
    """The first scheduler up to update ``switch``, then the second."""

    def __init__(self, schedulers, switch):
        super().__init__(schedulers[0].base_lr)
        self.schedulers, self.switch = schedulers, switch

    def __call__(self, num_update):
        return self.schedulers[0 if num_update <= self.switch else 1](num_update)


def run(case, net, optimizer, optimizer_params, x, y, k, n, batch_size):
    """Trains ``net`` n steps (saving the states after step k) and writes the case."""
    params = net.collect_params()
    names = sorted(params.keys())  # the Trainer's order (gluon.Trainer sorts a dict's keys)
    trainer = gluon.Trainer(params, optimizer, dict(optimizer_params), update_on_kvstore=False)
    assert [p.name for p in trainer._params] == names, [p.name for p in trainer._params]
    loss_fn = gluon.loss.L2Loss()
    rows_p, rows_g = [], []
    flat = lambda get: np.concatenate([get(params[m]).asnumpy().ravel() for m in names])
    for t in range(n):
        if t == k:
            trainer.save_states(os.path.join(OUT, case + ".states"))
            rows_p.append(flat(lambda p: p.data()))
        with autograd.record():
            loss = loss_fn(net(mx.nd.array(x[t])), mx.nd.array(y[t]))
        loss.backward()
        if t >= k:
            rows_g.append(flat(lambda p: p.grad()))
        trainer.step(batch_size)
        if t >= k:
            rows_p.append(flat(lambda p: p.data()))
    if k == n:
        trainer.save_states(os.path.join(OUT, case + ".states"))
    mx.nd.waitall()
    if n > k:
        meta = {"names": names, "shapes": [list(params[m].shape) for m in names], "k": k, "n": n,
                "batch_size": batch_size, "optimizer": optimizer,
                "optimizer_params": {key: v for key, v in optimizer_params.items() if key != "lr_scheduler"},
                "mxnet_version": mx.__version__}
        np.savez_compressed(os.path.join(OUT, case + ".npz"), meta=np.array(json.dumps(meta, sort_keys=True)),
                            p=np.stack(rows_p).astype(np.float32), g=np.stack(rows_g).astype(np.float32))
    print(case, {f: os.path.getsize(os.path.join(OUT, f)) for f in sorted(os.listdir(OUT)) if f.startswith(case)})


def data(seed, n, batch, din, dout):
    rs = np.random.RandomState(seed)
    return (rs.standard_normal((n, batch, din)).astype(np.float32),
            rs.standard_normal((n, batch, dout)).astype(np.float32))


def main():
    os.makedirs(OUT, exist_ok=True)
    # 12 layers named dense0..dense11 (the names Gluon gives in a fresh process)
    mx.random.seed(5)
    net = gluon.nn.Sequential()
    for i in range(12):
        net.add(gluon.nn.Dense(2, in_units=2, activation="tanh" if i < 11 else None))
    net.initialize(mx.init.Xavier(magnitude=3.0))
    x, y = data(5, 6, 4, 2, 2)
    run("order12", net, "adam", {"learning_rate": 0.05}, x, y, k=3, n=6, batch_size=4)

    x, y = data(6, 8, 4, 4, 3)
    net = gluon.nn.Dense(3, in_units=4, prefix="fc_")
    net.initialize(mx.init.Xavier())
    run("user_sched", net, "sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01,
                                   "lr_scheduler": StepWarmup(warmup=2, step=3, factor=0.5)},
        x, y, k=4, n=8, batch_size=4)

    net = gluon.nn.Dense(3, in_units=4, prefix="fc_")
    net.initialize(mx.init.Xavier())
    seq = Sequence([StepWarmup(0.1, warmup=2), StepWarmup(0.05, warmup=0, step=2)], switch=4)
    run("user_seq", net, "sgd", {"learning_rate": 0.1, "momentum": 0.9, "lr_scheduler": seq},
        x, y, k=1, n=1, batch_size=4)


if __name__ == "__main__":
    main()
