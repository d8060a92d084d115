#!/usr/bin/env python
"""Goldens of MXNet's imperative Updater (the Module-API loop), per-index multipliers included.

NOT imported by the test-suite. Run with the MXNet 1.9.1 venv:

    /work/venvs/mxnet/bin/python tools/mxnet_updater_goldens.py

Each case builds ``opt = mx.optimizer.create(name, **kwargs)`` (with or
without ``param_idx2name``, naming a ``_bias`` and a ``_gamma``), calls
``opt.set_lr_mult``/``opt.set_wd_mult`` where the case says (before the
first step and midway), and drives ``updater = mx.optimizer.get_updater(opt)``
as ``updater(i, grad, weight)`` for i = 0..3 at every step. Written to
``tests/fixtures/mxnet_updater/<case>.npz`` (a few KB each): ``meta`` (JSON:
``optimizer``, ``kwargs``, ``idx2name`` as [index, name] pairs or null,
``calls``: [[step, method, [[key, value], ...]], ...], the call made before
step ``step``'s updates, a key being an int index or a name; ``steps``,
``n``), ``w0_i``, ``g_t_i`` and ``w_t_i`` (the weights after step t), all
float32. tests/test_mxnet_updater_multipliers.py replays them.
"""
import json
import pathlib

import mxnet as mx
import numpy as np

OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "mxnet_updater"
SHAPES = [(4, 3), (4,), (2, 4), (2,)]
IDX2NAME = [[0, "fc0_weight"], [1, "fc0_bias"], [2, "fc1_weight"], [3, "bn_gamma"]]
COMMON = dict(rescale_grad=1.0 / 16, wd=0.05, learning_rate=0.02, clip_gradient=0.5)
CASES = {
    "adam_idx2name_set_mult": dict(
        optimizer="adam", kwargs=COMMON, idx2name=IDX2NAME,
        calls=[[0, "set_lr_mult", [["fc1_weight", 0.5]]], [0, "set_wd_mult", [["fc0_weight", 2.0]]],
               [4, "set_lr_mult", [[0, 2.0], ["bn_gamma", 0.25]]],
               [4, "set_wd_mult", [["fc0_bias", 1.0], ["bn_gamma", 3.0]]]]),
    "sgd_momentum_idx2name_set_mult": dict(
        optimizer="sgd", kwargs=dict(COMMON, momentum=0.9), idx2name=IDX2NAME,
        calls=[[0, "set_wd_mult", [["bn_gamma", 0.5]]],
               [3, "set_lr_mult", [["fc0_bias", 3.0], [2, 0.5]]],
               [5, "set_wd_mult", [["fc1_weight", 0.0]]]]),
    "adam_no_idx2name": dict(optimizer="adam", kwargs=COMMON, idx2name=None, calls=[]),
}
STEPS = 8


def run(case: dict, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    w0 = [(rng.normal(size=s) * 0.5).astype(np.float32) for s in SHAPES]
    grads = [[(rng.normal(size=s) * 10).astype(np.float32) for s in SHAPES] for _ in range(STEPS)]
    kwargs = dict(case["kwargs"])
    if case["idx2name"] is not None:
        kwargs["param_idx2name"] = {i: n for i, n in case["idx2name"]}
    opt = mx.optimizer.create(case["optimizer"], **kwargs)
    updater = mx.optimizer.get_updater(opt)
    weights = [mx.nd.array(w) for w in w0]
    out = {f"w0_{i}": w for i, w in enumerate(w0)}
    for t in range(STEPS):
        for step, method, pairs in case["calls"]:
            if step == t:
                getattr(opt, method)({k: v for k, v in pairs})
        for i, w in enumerate(weights):
            out[f"g_{t}_{i}"] = grads[t][i]
            updater(i, mx.nd.array(grads[t][i]), w)
        for i, w in enumerate(weights):
            out[f"w_{t}_{i}"] = w.asnumpy().astype(np.float32)
    meta = dict(case, steps=STEPS, n=len(SHAPES), mxnet=mx.__version__)
    out["meta"] = np.asarray(json.dumps(meta))
    return out


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for seed, (name, case) in enumerate(CASES.items()):
        np.savez_compressed(OUT / f"{name}.npz", **run(case, seed))
        print("wrote", OUT / f"{name}.npz")


if __name__ == "__main__":
    main()
