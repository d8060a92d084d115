#!/usr/bin/env python
"""Paddle fixtures for two port checks (tests/test_paddle_port_fixes.py).

Run with the Paddle venv (never imported by tests):

    /work/venvs/paddle/bin/python tools/paddle_port_fixtures.py            # both
    /work/venvs/paddle/bin/python tools/paddle_port_fixtures.py plateau    # or group_clip

Each phase runs in its own subprocess (fresh unique-name counters: parameters
linear_0.w_0, linear_0.b_0, ...; accumulator keys '<param>_moment1_0', ...).

tests/fixtures/paddle/plateau_resume.pdopt, plateau_resume.npz (flat: a directory holding
opt.pdopt would be taken for an ASGD case by tests/test_migrate_paddle.py)
    .pdopt           phase A: Adam(learning_rate=ReduceOnPlateau(0.05, factor=0.5, patience=0,
                     threshold=0.7)) on Linear(8, 1), 2 epochs of 4 steps, ``sched.step(mean loss)``
                     after each epoch; then paddle.save(opt.state_dict(), 'plateau_resume.pdopt')
    .npz             x, y (the batch); w0, b0 (phase A's start); wk, bk (the parameters saved with
                     the .pdopt); phase B, a fresh process that loads both and runs 2 more epochs:
                     w_<t>, b_<t> after its step t, lr_<t> (opt.get_lr() at step t), loss_<t>;
                     meta (json)

tests/fixtures/paddle/group_clip_arrays.npz
    Paddle groups of plain parameters, parameters=[{'params': [w1, b1], ...}, {'params': [w2, b2]}]
    with grad_clip=ClipGradByGlobalNorm(0.1) (a global norm per group), 3 steps of
    tanh(x @ w1 + b1) @ w2 + b2, mse:  x, y, p0_<i>, and for each case <case>_p_<t>_<i> (parameter i
    after step t); meta (json: the cases)
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "tests", "fixtures", "paddle")

rs = np.random.RandomState(0)
X = rs.randn(16, 8).astype(np.float32)
Y = (np.sin(X[:, :1]) + 0.1 * rs.randn(16, 1)).astype(np.float32)
W1 = (rs.randn(8, 6) * 0.4).astype(np.float32)
B1 = (rs.randn(6) * 0.1).astype(np.float32)
W2 = (rs.randn(6, 1) * 0.4).astype(np.float32)
B2 = (rs.randn(1) * 0.1).astype(np.float32)

PLATEAU = dict(learning_rate=0.05, factor=0.5, patience=0, threshold=0.7)
EPOCHS, STEPS_PER_EPOCH = 2, 4

GROUP_CASES = {
    "sgd": dict(optimizer="SGD", kwargs=dict(learning_rate=0.1), group_extra=[{}, {}]),
    "momentum_lr": dict(optimizer="Momentum", kwargs=dict(learning_rate=0.1, momentum=0.9),
                        group_extra=[{"learning_rate": 0.5}, {}]),
}
CLIP_NORM, GROUP_STEPS = 0.1, 3


def plateau_phase(phase, tmp):
    import paddle
    from paddle import nn
    paddle.set_device("cpu")
    layer = nn.Linear(8, 1)
    if phase == "A":
        layer.weight.set_value(np.ascontiguousarray(W1[:, :1]))
        layer.bias.set_value(B2)
        w0, b0 = layer.weight.numpy().copy(), layer.bias.numpy().copy()
    else:
        layer.set_state_dict(paddle.load(os.path.join(tmp, "model.pdparams")))
    pl = paddle.optimizer.lr.ReduceOnPlateau(**PLATEAU)
    opt = paddle.optimizer.Adam(learning_rate=pl, parameters=layer.parameters())
    if phase == "B":
        opt.set_state_dict(paddle.load(os.path.join(FIX, "plateau_resume.pdopt")))
    x, y = paddle.to_tensor(X), paddle.to_tensor(Y)
    out = {}
    t = 0
    for _ in range(EPOCHS):
        tot = 0.0
        for _ in range(STEPS_PER_EPOCH):
            out[f"lr_{t}"] = np.float64(opt.get_lr())
            loss = nn.functional.mse_loss(layer(x), y)
            loss.backward()
            opt.step()
            opt.clear_grad()
            tot += float(loss)
            out[f"loss_{t}"] = np.float64(float(loss))
            out[f"w_{t}"], out[f"b_{t}"] = layer.weight.numpy().copy(), layer.bias.numpy().copy()
            t += 1
        pl.step(tot / STEPS_PER_EPOCH)
    if phase == "A":
        paddle.save(opt.state_dict(), os.path.join(FIX, "plateau_resume.pdopt"))
        paddle.save(layer.state_dict(), os.path.join(tmp, "model.pdparams"))
        np.savez(os.path.join(tmp, "a.npz"), w0=w0, b0=b0, wk=layer.weight.numpy(), bk=layer.bias.numpy(),
                 names=np.array(json.dumps([p.name for p in layer.parameters()])),
                 sched=np.array(json.dumps(pl.state_dict())))
    else:
        a = np.load(os.path.join(tmp, "a.npz"))
        meta = {"optimizer": "Adam", "scheduler": {"type": "ReduceOnPlateau", "kwargs": PLATEAU},
                "epochs": EPOCHS, "steps_per_epoch": STEPS_PER_EPOCH, "names": json.loads(str(a["names"])),
                "saved_scheduler": json.loads(str(a["sched"])), "framework_version": paddle.__version__,
                "network": "paddle.nn.Linear(8, 1), mse_loss(layer(x), y); weight shape (in, out)",
                "loop": "per epoch: 4 x (loss.backward(); opt.step(); opt.clear_grad()), then "
                        "sched.step(mean loss of the epoch)"}
        np.savez_compressed(os.path.join(FIX, "plateau_resume.npz"), x=X, y=Y, w0=a["w0"],
                            b0=a["b0"], wk=a["wk"], bk=a["bk"], meta=np.array(json.dumps(meta)), **out)


def group_clip():
    import paddle
    paddle.set_device("cpu")
    out = {"x": X, "y": Y}
    for i, a in enumerate((W1, B1, W2, B2)):
        out[f"p0_{i}"] = a
    for case, spec in GROUP_CASES.items():
        ps = [paddle.create_parameter(a.shape, "float32", default_initializer=paddle.nn.initializer.Assign(a))
              for a in (W1, B1, W2, B2)]
        groups = [dict(spec["group_extra"][0], params=ps[:2]), dict(spec["group_extra"][1], params=ps[2:])]
        opt = getattr(paddle.optimizer, spec["optimizer"])(
            parameters=groups, grad_clip=paddle.nn.ClipGradByGlobalNorm(CLIP_NORM), **spec["kwargs"])
        x, y = paddle.to_tensor(X), paddle.to_tensor(Y)
        for t in range(GROUP_STEPS):
            w1, b1, w2, b2 = ps
            loss = ((paddle.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2).mean()
            loss.backward()
            opt.step()
            opt.clear_grad()
            for i, p in enumerate(ps):
                out[f"{case}_p_{t}_{i}"] = p.numpy().copy()
    meta = {"cases": GROUP_CASES, "clip": {"type": "ClipGradByGlobalNorm", "clip_norm": CLIP_NORM},
            "steps": GROUP_STEPS, "framework_version": paddle.__version__,
            "loss": "mean((tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2); groups [w1, b1], [w2, b2]"}
    out["meta"] = np.array(json.dumps(meta))
    np.savez_compressed(os.path.join(FIX, "group_clip_arrays.npz"), **out)


def _sub(*args):
    r = subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True, text=True)
    print("ok  " if r.returncode == 0 else "FAIL", *args, "" if r.returncode == 0 else r.stderr[-2000:])
    return r.returncode == 0


def main():
    args = sys.argv[1:]
    if args and args[0] == "--plateau":
        plateau_phase(args[1], args[2])
        return
    if args and args[0] == "--group_clip":
        group_clip()
        return
    if not args or "plateau" in args:
        with tempfile.TemporaryDirectory() as tmp:
            _sub("--plateau", "A", tmp) and _sub("--plateau", "B", tmp)
    if not args or "group_clip" in args:
        _sub("--group_clip")


if __name__ == "__main__":
    main()
