"""Writes tests/fixtures/<framework>/kernel_order.npz: MindSpore 2.10's ``nn.Momentum``,
``nn.SGD``, ``nn.RMSProp`` and ``nn.Adagrad`` (PyNative), or Paddle 3.3.1's ``Momentum``,
``SGD`` and ``Adamax`` (dygraph), on the CPU, 6 steps over 1,024 float32 weights whose
gradients span e^-10..e^10.

What it pins is the kernels' roundings: most of these CPU kernels compute every product on
its own (no fused multiply-add), so ``v = round(mu * v) + g; w -= round(lr * v)``; gradxform
marks those products (`gradxform._rounding.rounded`) and a jitted step is then the kernel's
(tests/test_kernel_order_ms_paddle.py). Not here: MindSpore FTRL (the kernel assigns the
weight, an additive update cannot always reproduce it) and Paddle RMSProp/Adagrad (Eigen's
approximate sqrt, host-dependent): tools/*_NOTES.md. Run once per framework:

    /work/venvs/mindspore/bin/python tools/kernel_order_golden.py
    /work/venvs/paddle/bin/python tools/kernel_order_golden.py
"""
from __future__ import annotations

import importlib.util
import json
import os

import numpy as np

N, STEPS = 1024, 6
FIXTURES = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures")
# name -> (class, keywords): gradxform's factory takes the same keywords
MINDSPORE = {
    "momentum": ("Momentum", dict(learning_rate=0.01, momentum=0.9)),
    "momentum_wd_loss_scale": ("Momentum", dict(learning_rate=0.01, momentum=0.9, weight_decay=0.01, loss_scale=4.0)),
    "sgd": ("SGD", dict(learning_rate=0.01)),
    "sgd_momentum_wd": ("SGD", dict(learning_rate=0.01, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    "sgd_nesterov": ("SGD", dict(learning_rate=0.01, momentum=0.9, nesterov=True)),
    "rmsprop": ("RMSProp", dict(learning_rate=0.01)),
    "rmsprop_momentum_wd": ("RMSProp", dict(learning_rate=0.01, momentum=0.9, weight_decay=0.01)),
    "rmsprop_centered": ("RMSProp", dict(learning_rate=0.01, momentum=0.9, centered=True)),
    "adagrad": ("Adagrad", dict(learning_rate=0.01)),
    "adagrad_wd_loss_scale": ("Adagrad", dict(learning_rate=0.01, weight_decay=0.01, loss_scale=4.0)),
}
PADDLE = {
    "momentum": ("Momentum", dict(learning_rate=0.01, momentum=0.9)),
    "momentum_nesterov_l2": ("Momentum", dict(learning_rate=0.01, momentum=0.9, use_nesterov=True,
                                              weight_decay=0.01)),
    "sgd": ("SGD", dict(learning_rate=0.01)),
    "sgd_l2": ("SGD", dict(learning_rate=0.01, weight_decay=0.01)),
    "adamax": ("Adamax", dict(learning_rate=0.001)),
    "adamax_l2": ("Adamax", dict(learning_rate=0.001, weight_decay=0.01)),
}


def inputs():
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal(N).astype(np.float32)
    grads = (rng.standard_normal((STEPS, N)) * np.exp(rng.uniform(-10, 10, (STEPS, N)))).astype(np.float32)
    return w0, grads


def record_mindspore(w0, grads):
    import mindspore as ms
    from mindspore import Parameter, Tensor, nn
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    out = {}
    for name, (cls, kw) in MINDSPORE.items():
        p = Parameter(Tensor(w0.copy()), name="w")
        opt = getattr(nn, cls)([p], **kw)
        out[f"w_{name}"] = np.stack([(opt((Tensor(g),)), p.asnumpy().copy())[1] for g in grads])
    return "mindspore", MINDSPORE, out


def record_paddle(w0, grads):
    import paddle
    paddle.set_device("cpu")
    out = {}
    for name, (cls, kw) in PADDLE.items():
        w = paddle.create_parameter(shape=[N], dtype="float32",
                                    default_initializer=paddle.nn.initializer.Assign(w0.copy()))
        opt = getattr(paddle.optimizer, cls)(parameters=[w], **kw)
        ws = []
        for g in grads:
            w._set_grad_ivar(paddle.to_tensor(g))
            opt.step()
            ws.append(w.numpy().copy())
        out[f"w_{name}"] = np.stack(ws)
    return "paddle", PADDLE, out


def main():
    w0, grads = inputs()
    record = record_mindspore if importlib.util.find_spec("mindspore") else record_paddle
    framework, configs, out = record(w0, grads)
    path = os.path.join(FIXTURES, framework, "kernel_order.npz")
    np.savez_compressed(path, w0=w0, g=grads, configs=json.dumps(configs), **out)
    print("wrote", path)


if __name__ == "__main__":
    main()
