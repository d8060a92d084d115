"""Parameter-file fixtures (issue 39 item 5): a tiny run in each framework, its parameter file,
its optimizer state (with the schedule position) and what the framework computes next.

Run each with its framework's venv (never imported by tests)::

    /work/venvs/mxnet/bin/python     tools/param_file_fixtures.py mxnet
    /work/venvs/paddle/bin/python    tools/param_file_fixtures.py paddle
    /work/venvs/mindspore/bin/python tools/param_file_fixtures.py mindspore

The model is the same in all three: Dense/Linear(4 -> 3), BatchNorm(3), ReLU, Dense/Linear(3 -> 2)
(Sequential, so the names are ``0.*``, ``1.*``, ``3.*``), trained with Adam under a step-decay
schedule on a fixed batch (mean squared error, BatchNorm in training mode), K steps; then the
parameter file and the optimizer state are saved, the eval-mode output on a fixed input is
recorded, and N more steps are taken with their gradients and the parameters after each.

tests/fixtures/params/<framework>/
    net.params | net.pdparams | net.ckpt        the parameter file (save_parameters / paddle.save / save_checkpoint)
    trainer.states | opt.pdopt | opt.ckpt        the optimizer state (+ scheduler) at the same step
    run.npz   meta (json): framework, version, optimizer, schedule, k, n, names (file order),
                           trainable (optimizer order), shapes, files
              file_<name>   what the framework's own loader returns for the parameter file
              x, y          the training batch;  x_eval, out_eval  eval-mode input and output at step K
              g_<t>_<name>  gradient of continuation step t (t = 0..n-1, framework names, trainable only)
              p_<t>_<name>  the trainable parameters after continuation step t
"""
import json
import os
import shutil
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "params")
K, N = 3, 3
LR, STEP, GAMMA = 0.01, 2, 0.5

rng = np.random.default_rng(0)
X = rng.standard_normal((6, 4)).astype(np.float32)
Y = rng.standard_normal((6, 2)).astype(np.float32)
X_EVAL = rng.standard_normal((5, 4)).astype(np.float32)
W0 = {"0.weight": rng.standard_normal((3, 4)).astype(np.float32) * 0.5,   # (out, in)
      "0.bias": rng.standard_normal(3).astype(np.float32) * 0.1,
      "3.weight": rng.standard_normal((2, 3)).astype(np.float32) * 0.5,
      "3.bias": rng.standard_normal(2).astype(np.float32) * 0.1}


def _write(fw, files, out, meta):
    d = os.path.join(OUT, fw)
    os.makedirs(d, exist_ok=True)
    for src in files:
        dst = os.path.join(d, os.path.basename(src))
        if os.path.exists(dst):
            os.remove(dst)
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o644)
    meta.update(k=K, n=N, lr=LR, step_size=STEP, gamma=GAMMA,
                model="Sequential(Dense(4->3), BatchNorm(3), ReLU, Dense(3->2)); MSE loss, mean over all")
    out["meta"] = np.array(json.dumps(meta))
    out.update(x=X, y=Y, x_eval=X_EVAL)
    np.savez_compressed(os.path.join(d, "run.npz"), **out)
    print(fw, "->", d, sorted(os.listdir(d)))


def mxnet_run(tmp):
    import mxnet as mx
    from mxnet import autograd, gluon, nd
    mx.random.seed(0)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(3, in_units=4), gluon.nn.BatchNorm(in_channels=3), gluon.nn.Activation("relu"),
            gluon.nn.Dense(2, in_units=3))
    net.initialize()
    structured = net._collect_params_with_prefix()
    for name, w in W0.items():
        structured[name].set_data(nd.array(w))
    trainable = [n for n, p in structured.items() if p.grad_req != "null"]
    sched = mx.lr_scheduler.FactorScheduler(step=STEP, factor=GAMMA)
    trainer = gluon.Trainer([structured[n] for n in trainable], "adam",
                            {"learning_rate": LR, "lr_scheduler": sched})
    x, y = nd.array(X), nd.array(Y)
    out = {}

    def step(t=None):
        with autograd.record():
            loss = ((net(x) - y) ** 2).mean()
        loss.backward()
        if t is not None:
            for n in trainable:
                out[f"g_{t}_{n}"] = structured[n].grad().asnumpy().copy()
        trainer.step(1)
        if t is not None:
            for n in trainable:
                out[f"p_{t}_{n}"] = structured[n].data().asnumpy().copy()

    for _ in range(K):
        step()
    pfile, sfile = os.path.join(tmp, "net.params"), os.path.join(tmp, "trainer.states")
    net.save_parameters(pfile)
    trainer.save_states(sfile)
    out["out_eval"] = net(nd.array(X_EVAL)).asnumpy()
    loaded = nd.load(pfile)
    names = list(loaded)
    for n, v in loaded.items():
        out["file_" + n] = v.asnumpy()
    for t in range(N):
        step(t)
    _write("mxnet", [pfile, sfile], out, dict(
        framework="mxnet", version=mx.__version__, optimizer="adam", names=names, trainable=trainable,
        shapes={n: list(out["file_" + n].shape) for n in names},
        schedule="mx.lr_scheduler.FactorScheduler(step=2, factor=0.5), base_lr 0.01",
        files={"params": "net.params", "state": "trainer.states"},
        trainer="gluon.Trainer([trainable parameters in net order], 'adam', ...); trainer.step(1)"))


def paddle_run(tmp):
    import paddle
    paddle.seed(0)
    net = paddle.nn.Sequential(paddle.nn.Linear(4, 3), paddle.nn.BatchNorm1D(3), paddle.nn.ReLU(),
                               paddle.nn.Linear(3, 2))
    sd = net.state_dict()
    for name, w in W0.items():
        sd[name].set_value(w.T if name.endswith("weight") else w)  # Paddle's Linear weight is (in, out)
    sched = paddle.optimizer.lr.StepDecay(LR, step_size=STEP, gamma=GAMMA)
    opt = paddle.optimizer.Adam(learning_rate=sched, parameters=net.parameters())
    x, y = paddle.to_tensor(X), paddle.to_tensor(Y)
    structured = dict(net.named_parameters())
    trainable = [n for n, p in structured.items() if not p.stop_gradient]
    out = {}

    def step(t=None):
        net.train()
        loss = ((net(x) - y) ** 2).mean()
        loss.backward()
        if t is not None:
            for n in trainable:
                out[f"g_{t}_{n}"] = structured[n].grad.numpy().copy()
        opt.step()
        opt.clear_grad()
        sched.step()
        if t is not None:
            for n in trainable:
                out[f"p_{t}_{n}"] = structured[n].numpy().copy()

    for _ in range(K):
        step()
    pfile, sfile = os.path.join(tmp, "net.pdparams"), os.path.join(tmp, "opt.pdopt")
    paddle.save(net.state_dict(), pfile)
    paddle.save(opt.state_dict(), sfile)
    net.eval()
    out["out_eval"] = net(paddle.to_tensor(X_EVAL)).numpy()
    loaded = paddle.load(pfile)
    names = [n for n in loaded if n != "StructuredToParameterName@@"]
    for n in names:
        v = loaded[n]
        out["file_" + n] = v.numpy() if hasattr(v, "numpy") else np.asarray(v)
    internal = {n: p.name for n, p in net.state_dict().items()}
    for t in range(N):
        step(t)
    _write("paddle", [pfile, sfile], out, dict(
        framework="paddle", version=paddle.__version__, optimizer="adam", names=names, trainable=trainable,
        internal_names=internal, shapes={n: list(out["file_" + n].shape) for n in names},
        schedule="paddle.optimizer.lr.StepDecay(0.01, step_size=2, gamma=0.5), sched.step() after opt.step()",
        files={"params": "net.pdparams", "state": "opt.pdopt"}))


def mindspore_run(tmp):
    import mindspore as ms
    from mindspore import Tensor, nn
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(4, 3), nn.BatchNorm1d(3), nn.ReLU(), nn.Dense(3, 2)])
    structured = {p.name: p for p in net.get_parameters()}
    for name, w in W0.items():
        structured[name].set_data(Tensor(w))
    params = net.trainable_params()
    trainable = [p.name for p in params]
    lrs = [LR * GAMMA ** (i // STEP) for i in range(K + N)]
    opt = nn.Adam(params, learning_rate=lrs)
    x, y = Tensor(X), Tensor(Y)

    def loss_fn(a, b):
        return ((net(a) - b) ** 2).mean()

    grad_fn = ms.value_and_grad(loss_fn, None, opt.parameters)
    out = {}

    def step(t=None):
        net.set_train(True)
        _, grads = grad_fn(x, y)
        if t is not None:
            for n, g in zip(trainable, grads):
                out[f"g_{t}_{n}"] = g.asnumpy().copy()
        opt(grads)
        if t is not None:
            for n in trainable:
                out[f"p_{t}_{n}"] = structured[n].asnumpy().copy()

    for _ in range(K):
        step()
    pfile, sfile = os.path.join(tmp, "net.ckpt"), os.path.join(tmp, "opt.ckpt")
    ms.save_checkpoint(net, pfile)
    ms.save_checkpoint(opt, sfile)
    net.set_train(False)
    out["out_eval"] = net(Tensor(X_EVAL)).asnumpy()
    loaded = ms.load_checkpoint(pfile)
    names = list(loaded)
    for n, v in loaded.items():
        out["file_" + n] = v.asnumpy()
    for t in range(N):
        step(t)
    _write("mindspore", [pfile, sfile], out, dict(
        framework="mindspore", version=ms.__version__, optimizer="Adam", names=names, trainable=trainable,
        shapes={n: list(out["file_" + n].shape) for n in names}, learning_rate=lrs,
        schedule="a learning-rate list: 0.01 * 0.5 ** (i // 2)",
        files={"params": "net.ckpt", "state": "opt.ckpt"}))


if __name__ == "__main__":
    import tempfile
    fw = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)  # MindSpore writes logs and rank dirs into the cwd
        try:
            {"mxnet": mxnet_run, "paddle": paddle_run, "mindspore": mindspore_run}[fw](tmp)
        finally:
            os.chdir(cwd)
