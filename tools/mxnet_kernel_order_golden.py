"""Writes tests/fixtures/mxnet/kernel_order.npz: MXNet 1.9.1's own SGD (with and without
momentum), Adam, NAG, RMSProp (plain, centered), AdaGrad, Signum and Ftrl on the CPU, called
through ``mx.optimizer.get_updater`` with lists of indices, weights and gradients, as
``gluon.Trainer._update`` calls it: 6 steps over 1,024 float32 weights (NAG .. Ftrl: the first
``N_SMALL``, for the fixture's size) whose gradients span e^-10..e^10 (one gradient array,
shared by every configuration).

What it pins is the kernels' order of operations, the last bits (tests/test_mxnet_kernel_order.py):
the pip ``libmxnet.so`` rounds every product (no FMA in its optimizer kernels), so
``multi_sgd_mom_update`` (``MultiSGDKernel``, optimizer_op-inl.h) computes
``mom = mu*mom - (lr*wd)*w - (lr*rg)*g`` (clip: ``- lr*clip(rg*g, c)``), ``w += mom``, and
``adam_update`` (``AdamUpdateKernel``) ``g' = clip(g*rg + w*wd, c)``,
``m = b1*m + (1-b1)*g'``, ``v = b2*v + ((1-b2)*g')*g'``, ``w -= (lr_t*m) / (sqrt(v) + eps)``
with ``lr_t = float32(lr * (sqrt(1 - b2**t) / (1 - b1**t)))`` computed in Python's float64.
The others' orders: the docstrings of `gradxform.mxnet.nag`, ``rmsprop``, ``adagrad``, ``signum``
and ``ftrl``.

    /work/venvs/mxnet/bin/python tools/mxnet_kernel_order_golden.py
"""
from __future__ import annotations

import json
import os

import mxnet as mx
import numpy as np

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "mxnet", "kernel_order.npz")
N, STEPS = 1024, 6
WD = dict(wd=0.01, rescale_grad=0.37)
CONFIGS = {  # name -> (optimizer, keywords)
    "sgd_mom": ("sgd", dict(learning_rate=0.01, momentum=0.9)),
    "sgd_mom_wd_clip": ("sgd", dict(learning_rate=0.01, momentum=0.9, clip_gradient=100.0, **WD)),
    "sgd_wd": ("sgd", dict(learning_rate=0.01, **WD)),
    "sgd_wd_clip": ("sgd", dict(learning_rate=0.01, clip_gradient=100.0, **WD)),
    "adam": ("adam", dict()),
    "adam_wd_clip": ("adam", dict(clip_gradient=100.0, **WD)),
    "adam_lr": ("adam", dict(learning_rate=0.003, beta1=0.8, beta2=0.99)),
    # recorded over the first N_SMALL weights (the fixture's size): NAG, RMSProp, AdaGrad, Signum, Ftrl
    "nag": ("nag", dict(learning_rate=0.01, momentum=0.9)),
    "nag_wd_clip": ("nag", dict(learning_rate=0.01, momentum=0.9, clip_gradient=100.0, **WD)),
    "nag_plain_wd": ("nag", dict(learning_rate=0.01, **WD)),
    "nag_plain_wd_clip": ("nag", dict(learning_rate=0.01, clip_gradient=100.0, **WD)),
    "rmsprop": ("rmsprop", dict()),
    "rmsprop_wd_clip": ("rmsprop", dict(clip_gradient=100.0, **WD)),
    "rmsprop_centered": ("rmsprop", dict(centered=True)),
    "rmsprop_centered_wd_clip": ("rmsprop", dict(centered=True, clip_gradient=100.0, **WD)),
    "adagrad": ("adagrad", dict(learning_rate=0.01)),
    "adagrad_wd_clip": ("adagrad", dict(learning_rate=0.01, clip_gradient=100.0, **WD)),
    "signum": ("signum", dict()),
    "signum_wd": ("signum", dict(wd_lh=0.01, **WD)),
    "signum_wd_clip": ("signum", dict(wd_lh=0.01, clip_gradient=100.0, **WD)),
    "ftrl": ("ftrl", dict()),
    "ftrl_wd_clip": ("ftrl", dict(clip_gradient=100.0, **WD)),
}
SMALL = ("nag", "rmsprop", "adagrad", "signum", "ftrl")  # optimizers recorded over w0[:N_SMALL]
N_SMALL = 256


def _flat(s):
    if s is None:
        return []
    if isinstance(s, (list, tuple)):
        return [a for x in s for a in _flat(x)]
    return [s.asnumpy().copy()]


def main():
    rng = np.random.default_rng(20240911)
    w0 = rng.standard_normal(N).astype(np.float32)
    grads = (rng.standard_normal((STEPS, N)) * np.exp(rng.uniform(-10, 10, (STEPS, N)))).astype(np.float32)
    out = {"w0": w0, "g": grads, "configs": np.asarray(json.dumps(CONFIGS))}
    for name, (opt_name, kw) in CONFIGS.items():
        n = N_SMALL if opt_name in SMALL else N
        opt = mx.optimizer.create(opt_name, **kw)
        updater = mx.optimizer.get_updater(opt)
        w = mx.nd.array(w0[:n], dtype="float32")
        ws = []
        for t in range(STEPS):
            updater([0], [mx.nd.array(grads[t, :n], dtype="float32")], [w])  # as gluon.Trainer._update
            ws.append(w.asnumpy().copy())
        out[f"w_{name}"] = np.stack(ws)
        for k, s in enumerate(_flat(updater.states[0])):  # the state after the last step
            out[f"s{k}_{name}"] = s
    np.savez_compressed(OUT, **out)
    print("wrote", OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
