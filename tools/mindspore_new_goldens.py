#!/usr/bin/env python
"""MindSpore 2.10 goldens for the optimizers issue 24 added: AdaMax, Adadelta,
Rprop, ASGD, and Adam(use_amsgrad=True) with decay, loss scale and a schedule.

Run with the MindSpore venv (never imported by tests):

    /work/venvs/mindspore/bin/python tools/mindspore_new_goldens.py [--only CASE ...]

Same harness and npz layout as tools/mindspore_goldens.py (its ``run_case``:
CPU, PYNATIVE, 20 steps, gradients fed to ``opt(grads)``), written to
tests/goldens/mindspore/rules/ so that the older parity test, which maps
class names to its own table, does not read them. Parameter ``dense.bias``
starts at zero here (a zero-initialised bias).
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mindspore_goldens as base  # noqa: E402
from mindspore import nn, Parameter, Tensor  # noqa: E402

base.OUT = os.path.join(base.ROOT, "tests", "goldens", "mindspore", "rules")
_make_params = base.make_params


def make_params(names=base.NAMES, shapes=base.SHAPES, seed=0):
    w0, _ = _make_params(names, shapes, seed)
    w0 = [np.zeros_like(w) if n.endswith("bias") else w for w, n in zip(w0, names)]
    return w0, [Parameter(Tensor(w.copy()), name=n) for w, n in zip(w0, names)]


base.make_params = make_params
SCHED = {"type": "ExponentialDecayLR", "kwargs": dict(learning_rate=0.05, decay_rate=0.8, decay_steps=3,
                                                       is_stair=True)}


def cases():
    C = {}

    def add(case, cls, kw, sched=None):
        def build(params):
            lr = {} if sched is None else {"learning_rate": getattr(nn, sched["type"])(**sched["kwargs"])}
            return getattr(nn, cls)(params, **kw, **lr)
        C[case] = dict(build=build, kwargs_meta=kw, lr_schedule=sched)

    add("adamax_default", "AdaMax", dict(learning_rate=0.01))
    add("adamax_wd_ls", "AdaMax", dict(learning_rate=0.01, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.01,
                                       loss_scale=2.0))
    add("adamax_sched", "AdaMax", dict(weight_decay=0.01), SCHED)
    add("adadelta_default", "Adadelta", dict())
    add("adadelta_wd_ls", "Adadelta", dict(learning_rate=0.5, rho=0.8, epsilon=1e-4, weight_decay=0.01,
                                           loss_scale=2.0))
    add("adadelta_sched", "Adadelta", dict(weight_decay=0.01), SCHED)
    add("rprop_default", "Rprop", dict(learning_rate=0.01))
    add("rprop_wd_etas", "Rprop", dict(learning_rate=0.02, etas=(0.4, 1.5), step_sizes=(1e-3, 0.05),
                                       weight_decay=0.01))
    add("asgd_default", "ASGD", dict(learning_rate=0.05))
    add("asgd_t0_wd", "ASGD", dict(learning_rate=0.05, lambd=0.01, alpha=0.5, t0=5.0, weight_decay=0.01))
    add("asgd_sched", "ASGD", dict(lambd=0.01, t0=8.0, weight_decay=0.01), SCHED)
    add("adam_amsgrad_wd_ls", "Adam", dict(learning_rate=0.05, use_amsgrad=True, weight_decay=0.01,
                                           loss_scale=2.0))
    add("adam_amsgrad_sched", "Adam", dict(use_amsgrad=True, weight_decay=0.01), SCHED)
    return C


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    os.chdir(base._TMP)
    os.makedirs(base.OUT, exist_ok=True)
    failures = {}
    for name, spec in cases().items():
        if a.only and name not in a.only:
            continue
        try:
            base.run_case(name, **spec)
            print("ok  ", name, flush=True)
        except Exception as e:  # never fake a golden
            failures[name] = repr(e)[:500]
            print("FAIL", name, repr(e)[:300], flush=True)
    if not a.only:
        with open(os.path.join(base.OUT, "FAILURES.json"), "w") as f:
            json.dump(failures, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
