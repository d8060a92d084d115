#!/usr/bin/env python
"""Record MindSpore 2.10's learning-rate objects as the framework runs them.

NOT imported by the test-suite. Run with the MindSpore venv:

    /work/venvs/mindspore/bin/python tools/mindspore_lr_goldens.py

Writes tests/goldens/mindspore/objects/lr_schedule.npz (a folder of its own: the parity
tests read every *.npz directly under tests/goldens/mindspore as an optimizer case):
  meta            0-d str (JSON): specs, runs, version
  sched_<key>     construct(Tensor(global_step, int32)) for global_step = 0..39 (float32)
  dyn_<key>       a dynamic_lr builder's list (Python floats, stored float64)
  <run>_w0_<i>, <run>_g_<t>_<i>, <run>_w_<t>_<i>, <run>_lr_<t>
                  a LearningRateSchedule subclass (model-zoo BERT's warmup + polynomial decay)
                  as learning_rate= of nn.AdamWeightDecay / nn.Momentum, driven with opt(grads):
                  initial params, gradients, params after step t, opt.get_lr() read before step t
"""
import json
import os

import numpy as np

import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common import dtype as mstype
from mindspore.nn.learning_rate_schedule import LearningRateSchedule  # not re-exported by mindspore.nn in 2.10

ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
os.makedirs("/tmp/ms_goldens_cwd", exist_ok=True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "goldens", "mindspore", "objects", "lr_schedule.npz")
STEPS = 10
NAMES = ["dense.weight", "dense.bias"]
SHAPES = [(3, 2), (2,)]

SCHEDULES = {
    "exponential": ("ExponentialDecayLR", [0.1, 0.9, 4]),
    "exponential_stair": ("ExponentialDecayLR", [0.1, 0.9, 4, True]),
    "natural_exp": ("NaturalExpDecayLR", [0.1, 0.05, 3]),
    "natural_exp_stair": ("NaturalExpDecayLR", [0.1, 0.05, 3, True]),
    "inverse": ("InverseDecayLR", [0.1, 0.5, 5]),
    "inverse_stair": ("InverseDecayLR", [0.1, 0.5, 5, True]),
    "cosine": ("CosineDecayLR", [0.01, 0.1, 30]),
    "polynomial": ("PolynomialDecayLR", [0.1, 0.01, 25, 2.0]),
    "polynomial_update": ("PolynomialDecayLR", [0.1, 0.01, 12, 0.5, True]),
    "warmup": ("WarmUpLR", [0.1, 8]),
}

DYNAMIC = {
    "piecewise_constant": ("piecewise_constant_lr", [[2, 5, 9, 12], [0.1, 0.05, 0.01, 0.001]]),
    "exponential": ("exponential_decay_lr", [0.1, 0.9, 40, 3, 2]),
    "exponential_stair": ("exponential_decay_lr", [0.1, 0.9, 40, 3, 2, True]),
    "natural_exp": ("natural_exp_decay_lr", [0.1, 0.1, 40, 3, 2]),
    "natural_exp_stair": ("natural_exp_decay_lr", [0.1, 0.1, 40, 3, 2, True]),
    "inverse": ("inverse_decay_lr", [0.1, 0.5, 40, 3, 2]),
    "inverse_stair": ("inverse_decay_lr", [0.1, 0.5, 40, 3, 2, True]),
    "cosine": ("cosine_decay_lr", [0.01, 0.1, 40, 3, 10]),
    "polynomial": ("polynomial_decay_lr", [0.1, 0.01, 40, 3, 8, 2.0]),
    "polynomial_update": ("polynomial_decay_lr", [0.1, 0.01, 40, 3, 4, 0.5, True]),
    "warmup": ("warmup_lr", [0.1, 40, 3, 5]),
}


class BertLearningRate(LearningRateSchedule):
    """model-zoo BERT's schedule (src/utils.py BertLearningRate), as written there."""

    def __init__(self, learning_rate, end_learning_rate, warmup_steps, decay_steps, power):
        super().__init__()
        self.warmup_flag = False
        if warmup_steps > 0:
            self.warmup_flag = True
            self.warmup_lr = nn.WarmUpLR(learning_rate, warmup_steps)
        self.decay_lr = nn.PolynomialDecayLR(learning_rate, end_learning_rate, decay_steps, power)
        self.warmup_steps = Tensor(np.array([warmup_steps]).astype(np.float32))
        self.greater = ops.Greater()
        self.one = Tensor(np.array([1.0]).astype(np.float32))
        self.cast = ops.Cast()

    def construct(self, global_step):
        decay_lr = self.decay_lr(global_step)
        if self.warmup_flag:
            is_warmup = self.cast(self.greater(self.warmup_steps, global_step), mstype.float32)
            warmup_lr = self.warmup_lr(global_step)
            lr = (self.one - is_warmup) * decay_lr + is_warmup * warmup_lr
        else:
            lr = decay_lr
        return lr


BERT = dict(learning_rate=0.05, end_learning_rate=0.001, warmup_steps=3, decay_steps=8, power=1.0)
RUNS = {
    "bert_adamw": ("AdamWeightDecay", dict(eps=1e-6, weight_decay=0.01)),
    "bert_momentum": ("Momentum", dict(momentum=0.9)),
}


def record_run(arrays, key, opt_name, kwargs):
    rng = np.random.default_rng(5)
    w0 = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    params = [Parameter(Tensor(w.copy()), name=n) for w, n in zip(w0, NAMES)]
    opt = getattr(nn, opt_name)(params, learning_rate=BertLearningRate(**BERT), **kwargs)
    for i, w in enumerate(w0):
        arrays[f"{key}_w0_{i}"] = w
    for t in range(STEPS):
        arrays[f"{key}_lr_{t}"] = np.array(opt.get_lr().asnumpy(), np.float32).reshape(())
        grads = [(rng.standard_normal(s) * 0.5).astype(np.float32) for s in SHAPES]
        opt(tuple(Tensor(g) for g in grads))
        for i, (g, p) in enumerate(zip(grads, params)):
            arrays[f"{key}_g_{t}_{i}"] = g
            arrays[f"{key}_w_{t}_{i}"] = p.asnumpy().copy()


def main():
    arrays = {}
    for key, (cls, args) in SCHEDULES.items():
        s = getattr(nn, cls)(*args)
        arrays[f"sched_{key}"] = np.array(
            [s(Tensor(step, mstype.int32)).asnumpy() for step in range(40)], np.float32).reshape(40)
    for key, (fn, args) in DYNAMIC.items():
        lr = getattr(nn, fn)(*args)
        assert isinstance(lr, list) and all(isinstance(v, float) for v in lr), (key, lr[:3])
        arrays[f"dyn_{key}"] = np.array(lr, np.float64)
    bert = BertLearningRate(**BERT)
    arrays["sched_bert"] = np.array([bert(Tensor(np.array([s], np.int32))).asnumpy() for s in range(40)],
                                    np.float32).reshape(40)
    for key, (opt_name, kwargs) in RUNS.items():
        record_run(arrays, key, opt_name, kwargs)
    meta = dict(mindspore_version=ms.__version__, global_step=list(range(40)), steps=STEPS,
                names=NAMES, shapes=[list(s) for s in SHAPES],
                schedules={k: dict(type=c, args=a) for k, (c, a) in SCHEDULES.items()},
                dynamic_lr={k: dict(fn=f, args=a) for k, (f, a) in DYNAMIC.items()},
                bert=BERT, runs={k: dict(optimizer=o, kwargs=kw) for k, (o, kw) in RUNS.items()},
                mode="PYNATIVE_MODE, CPU; sched_bert called with global_step of shape (1,), as the optimizer does")
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez_compressed(OUT, **arrays)
    print("wrote", OUT, len(arrays), "arrays")


if __name__ == "__main__":
    main()
