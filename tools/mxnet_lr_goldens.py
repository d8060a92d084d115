#!/usr/bin/env python
"""Record MXNet 1.9.1's ``mx.lr_scheduler`` objects as the framework runs them.

NOT imported by the test-suite. Run with the MXNet venv:

    /work/venvs/mxnet/bin/python tools/mxnet_lr_goldens.py

Writes tests/goldens/mxnet/objects/lr_scheduler.npz (a folder of its own: goldens_io.cases reads every
*.npz directly under tests/goldens/mxnet as an optimizer case):
  meta              0-d str (JSON): the scheduler specs, the user-subclass runs, versions
  sched_<key>       lr at num_update = 1..40 (each object called in increasing order, as an optimizer does)
  warmup_<key>      get_warmup_lr(n) for n = 0..warmup_steps-1
  <run>_w0_<i>, <run>_g_<t>_<i>, <run>_w_<t>_<i>, <run>_lr_<t>
                    a user subclass of LRScheduler driving mx.optimizer.SGD(momentum=0.9) through
                    get_updater: initial weights, gradients, weights after update t, and the
                    learning rate the optimizer read (scheduler(num_update)) at update t
"""
import json
import os

import numpy as np
import mxnet as mx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "goldens", "mxnet", "objects", "lr_scheduler.npz")
STEPS = 12
SHAPES = [(3,), (2, 2)]

SCHEDULERS = {
    "factor_linear": ("FactorScheduler", dict(step=7, factor=0.5, base_lr=0.1, warmup_steps=5,
                                              warmup_begin_lr=0.01, warmup_mode="linear")),
    "factor_constant": ("FactorScheduler", dict(step=6, factor=0.8, stop_factor_lr=0.03, base_lr=0.1,
                                                warmup_steps=4, warmup_begin_lr=0.02, warmup_mode="constant")),
    "multifactor_linear": ("MultiFactorScheduler", dict(step=[10, 18, 30], factor=0.3, base_lr=0.2,
                                                        warmup_steps=6, warmup_begin_lr=0.0)),
    "multifactor_constant": ("MultiFactorScheduler", dict(step=[9, 25], factor=0.5, base_lr=0.2, warmup_steps=3,
                                                          warmup_begin_lr=0.05, warmup_mode="constant")),
    "poly_linear": ("PolyScheduler", dict(max_update=33, base_lr=0.3, pwr=2, final_lr=0.01, warmup_steps=5,
                                          warmup_begin_lr=0.001)),
    "poly_constant": ("PolyScheduler", dict(max_update=30, base_lr=0.3, pwr=1, final_lr=0.0, warmup_steps=7,
                                            warmup_begin_lr=0.1, warmup_mode="constant")),
    "cosine_linear": ("CosineScheduler", dict(max_update=35, base_lr=0.4, final_lr=0.02, warmup_steps=8,
                                              warmup_begin_lr=0.0)),
    "cosine_constant": ("CosineScheduler", dict(max_update=25, base_lr=0.4, final_lr=0.0, warmup_steps=4,
                                                warmup_begin_lr=0.2, warmup_mode="constant")),
}


class StepWarmup(mx.lr_scheduler.LRScheduler):
    """A user's subclass to MXNet's protocol, as d2l's and GluonCV's are written:
    Python ``if``/``while`` on num_update, and state it changes (self.count, self.base_lr)."""

    def __init__(self, step, factor, base_lr=0.1, warmup_steps=4, warmup_begin_lr=0.02, warmup_mode="linear"):
        super().__init__(base_lr, warmup_steps, warmup_begin_lr, warmup_mode)
        self.step, self.factor, self.count = step, factor, warmup_steps

    def __call__(self, num_update):
        if num_update < self.warmup_steps:
            return self.get_warmup_lr(num_update)
        while num_update > self.count + self.step:
            self.count += self.step
            self.base_lr *= self.factor
        return self.base_lr


class SmoothDecay(mx.lr_scheduler.LRScheduler):
    """A user's subclass whose __call__ is arithmetic only (traceable in JAX), reading self.base_lr."""

    def __init__(self, horizon, base_lr=0.1):
        super().__init__(base_lr)
        self.horizon = horizon

    def __call__(self, num_update):
        return self.base_lr * (1.0 - num_update / self.horizon) ** 2 + 0.001


RUNS = {
    # the optimizer's learning_rate overwrites the scheduler's base_lr (MXNet Optimizer.__init__);
    # the warmup still ends at the constructor's base_lr (warmup_final_lr)
    "stepwarmup": (StepWarmup, dict(step=3, factor=0.5, base_lr=0.1, warmup_steps=4, warmup_begin_lr=0.02),
                   dict(learning_rate=0.2, momentum=0.9, wd=0.01)),
    "smooth": (SmoothDecay, dict(horizon=30, base_lr=0.1), dict(momentum=0.9)),
}


def record_run(arrays, key, cls, skw, okw):
    sched = cls(**skw)
    opt = mx.optimizer.SGD(lr_scheduler=sched, **okw)
    upd = mx.optimizer.get_updater(opt)
    rs = np.random.RandomState(3)
    w = [mx.nd.array(rs.standard_normal(s).astype(np.float32)) for s in SHAPES]
    for i, x in enumerate(w):
        arrays[f"{key}_w0_{i}"] = x.asnumpy()
    for t in range(STEPS):
        for i, x in enumerate(w):
            g = (rs.standard_normal(SHAPES[i]) * 0.5).astype(np.float32)
            arrays[f"{key}_g_{t}_{i}"] = g
            upd(i, mx.nd.array(g), x)
        arrays[f"{key}_lr_{t}"] = np.float64(opt.learning_rate)  # what scheduler(num_update) gave at update t
        for i, x in enumerate(w):
            arrays[f"{key}_w_{t}_{i}"] = x.asnumpy()


def main():
    arrays = {}
    for key, (cls, kw) in SCHEDULERS.items():
        s = getattr(mx.lr_scheduler, cls)(**kw)
        arrays[f"sched_{key}"] = np.array([s(n) for n in range(1, 41)], np.float64)
        w = getattr(mx.lr_scheduler, cls)(**kw)
        arrays[f"warmup_{key}"] = np.array([w.get_warmup_lr(n) for n in range(kw["warmup_steps"])], np.float64)
    for key, (cls, skw, okw) in RUNS.items():
        record_run(arrays, key, cls, skw, okw)
    meta = dict(mxnet_version=mx.__version__, num_update=list(range(1, 41)), steps=STEPS,
                shapes=[list(s) for s in SHAPES],
                schedulers={k: dict(type=c, kwargs=kw) for k, (c, kw) in SCHEDULERS.items()},
                runs={k: dict(cls=c.__name__, scheduler_kwargs=skw, optimizer_kwargs=okw)
                      for k, (c, skw, okw) in RUNS.items()})
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez_compressed(OUT, **arrays)
    print("wrote", OUT, len(arrays), "arrays")


if __name__ == "__main__":
    main()
