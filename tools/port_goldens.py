#!/usr/bin/env python
"""Goldens for tests/test_ports_round5.py (issue 38 item 6, "ports of your own").

Each function below is a real public training script cut down to its optimizer, scheduler,
save/resume and attribute-reading lines, kept literally, with the model replaced by one
linear layer of fixed weights and the data loader by fixed arrays (3 batches an epoch).
It runs the script twice: straight through (saving at the end of every epoch, as the
script does), then a second process-like run that builds fresh model / scheduler /
optimizer objects and resumes from the files the first run saved at ``RESUME_EPOCH``, as
the script's own resume path does. Parameters are recorded after every optimizer step.

Run each in its framework's venv (never imported by tests):

    /work/venvs/paddle/bin/python    tools/port_goldens.py paddlevideo
    /work/venvs/mxnet/bin/python     tools/port_goldens.py gluoncv_recognizer
    /work/venvs/mindspore/bin/python tools/port_goldens.py mindspore_resnet

Writes tests/goldens/ports/<name>.npz with
    meta             json: framework and version, source, config
    x, y             the fixed data (x float32 (12, 3); y float32 (12, 2) or int32 (12,))
    init_<p>         initial parameters (gradxform names, see each function)
    full_<p>         (steps, *shape) parameter p after each step of the straight run
    res_<p>          (steps after the resume, *shape) the same for the resumed run
    full_lr, res_lr  the learning rate the script reads/logs after each step
                     (optimizer.get_lr() / trainer.learning_rate / lr[global_step])
"""
import json
import os
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "goldens", "ports")
sys.path.insert(0, os.path.join(ROOT, "tests"))
from port_sources import CUSTOM_LR_SRC, GLUONCV_LR_SRC  # noqa: E402  (the text the ports exec too)

rng = np.random.RandomState(38)
X = rng.randn(12, 3).astype(np.float32)
Y = rng.randn(12, 2).astype(np.float32)
LABELS = rng.randint(0, 4, size=12).astype(np.int32)
W0 = (rng.randn(3, 2) * 0.5).astype(np.float32)      # (in, out): Paddle's Linear layout
B0 = (rng.randn(2) * 0.1).astype(np.float32)
W0_4 = (rng.randn(4, 3) * 0.5).astype(np.float32)    # (out, in): MindSpore's Dense layout
B0_4 = (rng.randn(4) * 0.1).astype(np.float32)
BATCH = 4
BATCHES = [(X[i:i + BATCH], Y[i:i + BATCH]) for i in range(0, 12, BATCH)]
EPOCHS = 6
RESUME_EPOCH = 3


def write(name, meta, arrays):
    os.makedirs(OUT, exist_ok=True)
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    np.savez(os.path.join(OUT, name + ".npz"), meta=json.dumps(meta, sort_keys=True),
             x=X, y=Y, labels=LABELS, **arrays)
    print("wrote", name, sorted(arrays))


# ----------------------------------------------------------------------------------------
# Paddle: PaddleVideo paddlevideo/tasks/train.py (train_model), with its build_lr
# (solver/lr.py), build_optimizer (solver/optimizer.py) and CustomWarmupCosineDecay
# (solver/custom_lr.py), PaddlePaddle/PaddleVideo @ develop.
# ----------------------------------------------------------------------------------------

PADDLEVIDEO_CONFIGS = {
    # SlowFast's shape (configs/recognition/slowfast/*.yaml): iter_step warmup-cosine,
    # nesterov Momentum, L2Decay; epochs shrunk to 6, warmup to 2
    "iter": {"name": "Momentum", "momentum": 0.9,
             "learning_rate": {"iter_step": True, "name": "CustomWarmupCosineDecay",
                               "max_epoch": EPOCHS, "warmup_epochs": 2,
                               "warmup_start_lr": 0.01, "cosine_base_lr": 0.1},
             "weight_decay": {"name": "L2", "value": 1e-4}, "use_nesterov": True},
    # TSN/TSM's shape: a PiecewiseDecay stepped once an epoch, a global-norm clip
    "epoch": {"name": "Momentum", "momentum": 0.9,
              "learning_rate": {"name": "PiecewiseDecay", "boundaries": [2, 4],
                                "values": [0.1, 0.01, 0.001]},
              "weight_decay": {"name": "L2", "value": 1e-4},
              "grad_clip": {"name": "ClipGradByGlobalNorm", "value": 0.5}},
}



def paddlevideo():
    import math
    import types

    import paddle
    import paddle.optimizer.lr as plr
    from paddle.regularizer import L1Decay, L2Decay

    paddle.set_device("cpu")
    custom_lr = types.ModuleType("custom_lr")          # `from paddle.optimizer.lr import *`
    custom_lr.__dict__.update({k: getattr(plr, k) for k in dir(plr) if not k.startswith("_")})
    custom_lr.math = math
    exec(CUSTOM_LR_SRC, custom_lr.__dict__)

    def build_lr(cfg, num_iters):                       # solver/lr.py, verbatim
        cfg_copy = cfg.copy()
        if cfg_copy.get('learning_rate') and isinstance(cfg_copy['learning_rate'], dict):
            cfg_copy['learning_rate'] = build_lr(cfg_copy['learning_rate'], num_iters)
        lr_name = cfg_copy.pop('name')
        if cfg_copy.get('iter_step'):
            cfg_copy['num_iters'] = num_iters
            cfg_copy.pop('iter_step')
        if cfg_copy.get('lr_lambda'):
            cfg_copy['lr_lambda'] = eval(cfg_copy['lr_lambda'])
        return getattr(custom_lr, lr_name)(**cfg_copy)

    def build_optimizer(cfg, lr_scheduler, model=None, parallel=False):   # solver/optimizer.py
        cfg_copy = cfg.copy()
        opt_name = cfg_copy.pop('name')
        if cfg_copy.get('weight_decay'):
            if isinstance(cfg_copy.get('weight_decay'), float):
                cfg_copy['weight_decay'] = cfg_copy.get('weight_decay')
            elif 'L1' in cfg_copy.get('weight_decay').get('name').upper():
                cfg_copy['weight_decay'] = L1Decay(cfg_copy.get('weight_decay').get('value'))
            elif 'L2' in cfg_copy.get('weight_decay').get('name').upper():
                cfg_copy['weight_decay'] = L2Decay(cfg_copy.get('weight_decay').get('value'))
            else:
                raise ValueError
        if cfg_copy.get('grad_clip'):
            if isinstance(cfg_copy.get('grad_clip'), float):
                cfg_copy['grad_clip'] = cfg_copy.get('grad_clip').get('value')
            elif 'global' in cfg_copy.get('grad_clip').get('name').lower():
                cfg_copy['grad_clip'] = paddle.nn.ClipGradByGlobalNorm(
                    cfg_copy.get('grad_clip').get('value'))
            else:
                raise ValueError
        cfg_copy.pop('learning_rate')
        parameter_list = model.parameters()
        return getattr(paddle.optimizer, opt_name)(lr_scheduler, parameters=parameter_list,
                                                   **cfg_copy)

    class Model(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.linear = paddle.nn.Linear(3, 2)
            self.linear.weight.set_value(W0)
            self.linear.bias.set_value(B0)

        def forward(self, data, mode='train'):
            x, y = data
            return {'loss': paddle.nn.functional.mse_loss(self.linear(x), y)}

    def train_model(cfg, output_dir, resume_epoch=0):
        model_name = "port"
        train_loader = [(paddle.to_tensor(a), paddle.to_tensor(b)) for a, b in BATCHES]
        model = Model()
        lr = build_lr(cfg.OPTIMIZER['learning_rate'], len(train_loader))
        optimizer = build_optimizer(cfg.OPTIMIZER, lr, model=model)
        if resume_epoch:
            filename = os.path.join(output_dir, model_name + f"_epoch_{resume_epoch:05d}")
            resume_model_dict = paddle.load(filename + '.pdparams')
            resume_opt_dict = paddle.load(filename + '.pdopt')
            model.set_state_dict(resume_model_dict)
            optimizer.set_state_dict(resume_opt_dict)
        ws, bs, lrs = [], [], []
        for epoch in range(0, cfg.epochs):
            if epoch < resume_epoch:
                continue
            model.train()
            for i, data in enumerate(train_loader):
                outputs = model(data, mode='train')
                avg_loss = outputs['loss']
                avg_loss.backward()
                optimizer.step()
                optimizer.clear_grad()
                lrs.append(optimizer.get_lr())                  # record_list['lr'].update(...)
                ws.append(model.linear.weight.numpy().copy())
                bs.append(model.linear.bias.numpy().copy())
                if cfg.OPTIMIZER['learning_rate'].get("iter_step"):
                    lr.step()
            if not cfg.OPTIMIZER['learning_rate'].get("iter_step"):
                lr.step()
            paddle.save(optimizer.state_dict(),
                        os.path.join(output_dir, model_name + f"_epoch_{epoch + 1:05d}.pdopt"))
            paddle.save(model.state_dict(),
                        os.path.join(output_dir, model_name + f"_epoch_{epoch + 1:05d}.pdparams"))
        return np.stack(ws), np.stack(bs), np.array(lrs)

    class Cfg:
        def __init__(self, opt):
            self.OPTIMIZER, self.epochs = opt, EPOCHS

    for key, opt_cfg in PADDLEVIDEO_CONFIGS.items():
        with tempfile.TemporaryDirectory() as d:
            with paddle.utils.unique_name.guard():      # each run a fresh process: linear_0
                fw, fb, flr = train_model(Cfg(opt_cfg), d)
            with paddle.utils.unique_name.guard():
                rw, rb, rlr = train_model(Cfg(opt_cfg), d, resume_epoch=RESUME_EPOCH)
        write(f"paddlevideo_{key}", {
            "framework": "paddle " + paddle.__version__,
            "source": "PaddlePaddle/PaddleVideo paddlevideo/tasks/train.py + solver/{lr,optimizer,custom_lr}.py",
            "config": opt_cfg, "epochs": EPOCHS, "resume_epoch": RESUME_EPOCH,
            "params": ["linear/weight", "linear/bias"]},
            {"init_linear/weight": W0, "init_linear/bias": B0,
             "full_linear/weight": fw, "full_linear/bias": fb, "full_lr": flr,
             "res_linear/weight": rw, "res_linear/bias": rb, "res_lr": rlr})


# ----------------------------------------------------------------------------------------
# MXNet/Gluon: GluonCV scripts/action-recognition/train_recognizer.py (dmlc/gluon-cv
# @ master), its LRSequential/LRScheduler (gluoncv/utils/lr_scheduler.py).
# ----------------------------------------------------------------------------------------


GLUONCV_OPT = {"lr": 0.1, "wd": 1e-4, "momentum": 0.9, "lr_decay": 0.1, "lr_decay_period": 0,
               "lr_decay_epoch": "3,5", "warmup_lr": 0.01, "warmup_epochs": 1,
               "lr_mode": "step", "num_epochs": EPOCHS, "no_wd": True, "clip_grad": 0,
               "accumulate": 1, "batch_size": BATCH, "save_frequency": 1}


def gluoncv_recognizer():
    import types
    import warnings
    from math import cos, pi

    import mxnet as mx
    from mxnet import autograd as ag
    from mxnet import gluon, lr_scheduler as mx_lrs

    mod = types.ModuleType("gluoncv_lr_scheduler")    # importable, so save_states can pickle it
    mod.__dict__.update({"lr_scheduler": mx_lrs, "warnings": warnings, "cos": cos, "pi": pi})
    sys.modules[mod.__name__] = mod
    exec(GLUONCV_LR_SRC, mod.__dict__)
    LRSequential, LRScheduler = mod.LRSequential, mod.LRScheduler
    opt = types.SimpleNamespace(**GLUONCV_OPT)

    def main(save_dir, resume_epoch=0):
        batch_size = opt.batch_size
        context = [mx.cpu()]
        lr_decay = opt.lr_decay
        if opt.lr_decay_period > 0:
            lr_decay_epoch = list(range(opt.lr_decay_period, opt.num_epochs, opt.lr_decay_period))
        else:
            lr_decay_epoch = [int(i) for i in opt.lr_decay_epoch.split(',')]
        lr_decay_epoch = [e - opt.warmup_epochs for e in lr_decay_epoch]
        optimizer = 'sgd'
        if opt.clip_grad > 0:
            optimizer_params = {'learning_rate': opt.lr, 'wd': opt.wd, 'momentum': opt.momentum,
                                'clip_gradient': opt.clip_grad}
        else:
            optimizer_params = {'learning_rate': opt.lr, 'wd': opt.wd, 'momentum': opt.momentum}

        net = gluon.nn.Dense(2, in_units=3, prefix="dense0_")
        net.initialize(ctx=context)
        net.weight.set_data(mx.nd.array(W0.T))
        net.bias.set_data(mx.nd.array(B0))
        if resume_epoch:      # opt.resume_params
            net.load_parameters('%s/%s-%03d.params' % (save_dir, "port", resume_epoch - 1), ctx=context)

        train_data = [(mx.nd.array(a), mx.nd.array(b)) for a, b in BATCHES]
        num_batches = len(train_data) // opt.accumulate
        lr_scheduler = LRSequential([
            LRScheduler('linear', base_lr=opt.warmup_lr, target_lr=opt.lr,
                        nepochs=opt.warmup_epochs, iters_per_epoch=num_batches),
            LRScheduler(opt.lr_mode, base_lr=opt.lr, target_lr=0,
                        nepochs=opt.num_epochs - opt.warmup_epochs,
                        iters_per_epoch=num_batches,
                        step_epoch=lr_decay_epoch,
                        step_factor=lr_decay, power=2)
        ])
        optimizer_params['lr_scheduler'] = lr_scheduler

        if opt.no_wd:
            for k, v in net.collect_params('.*beta|.*gamma|.*bias').items():
                v.wd_mult = 0.0
        trainer = gluon.Trainer(net.collect_params(), optimizer, optimizer_params,
                                update_on_kvstore=False)
        if resume_epoch:      # opt.resume_states != ''
            trainer.load_states('%s/%s-%03d.states' % (save_dir, "port", resume_epoch - 1))
        L = gluon.loss.L2Loss()
        ws, bs, lrs = [], [], []
        for epoch in range(resume_epoch, opt.num_epochs):
            for i, batch in enumerate(train_data):
                data, label = [batch[0]], [batch[1]]
                with ag.record():
                    outputs = [net(X) for X in data]
                    loss = [L(yhat, y) for yhat, y in zip(outputs, label)]
                    ag.backward(loss)
                trainer.step(batch_size)
                lrs.append(trainer.learning_rate)      # sw.add_scalar('learning_rate_iter', ...)
                ws.append(net.weight.data().asnumpy().T.copy())
                bs.append(net.bias.data().asnumpy().copy())
            if opt.save_frequency and save_dir and (epoch + 1) % opt.save_frequency == 0:
                net.save_parameters('%s/%s-%03d.params' % (save_dir, "port", epoch))
                trainer.save_states('%s/%s-%03d.states' % (save_dir, "port", epoch))
        return np.stack(ws), np.stack(bs), np.array(lrs)

    with tempfile.TemporaryDirectory() as d:
        fw, fb, flr = main(d)
        rw, rb, rlr = main(d, resume_epoch=RESUME_EPOCH)
    write("gluoncv_recognizer", {
        "framework": "mxnet " + mx.__version__,
        "source": "dmlc/gluon-cv scripts/action-recognition/train_recognizer.py + gluoncv/utils/lr_scheduler.py",
        "config": GLUONCV_OPT, "epochs": EPOCHS, "resume_epoch": RESUME_EPOCH,
        "params": ["linear/weight", "linear/bias"]},
        {"init_linear/weight": W0, "init_linear/bias": B0,
         "full_linear/weight": fw, "full_linear/bias": fb, "full_lr": flr,
         "res_linear/weight": rw, "res_linear/bias": rb, "res_lr": rlr})


# ----------------------------------------------------------------------------------------
# MindSpore: mindspore-ai/models official/cv/ResNet/train.py (init_lr, init_group_params,
# resume_ckpt), src/lr_generator.py get_lr, src/util.py init_group_params.
# ----------------------------------------------------------------------------------------

RESNET_CONFIG = {"lr_init": 0.01, "lr_end": 0.00001, "lr_max": 0.1, "warmup_epochs": 1,
                 "epoch_size": EPOCHS, "lr_decay_mode": "poly", "momentum": 0.9,
                 "weight_decay": 1e-4, "loss_scale": 1024, "save_checkpoint_epochs": 1}


def _generate_poly_lr(lr_init, lr_max, total_steps, warmup_steps, start_steps):
    lr_each_step = []
    if warmup_steps != 0:
        inc_each_step = (float(lr_max) - float(lr_init)) / float(warmup_steps)
    else:
        inc_each_step = 0
    for i in range(total_steps):
        if i < warmup_steps:
            lr = float(lr_init) + inc_each_step * float(i)
        else:
            base = (1.0 - (float(i) - float(warmup_steps)) / (float(total_steps) - float(warmup_steps)))
            lr = float(lr_max) * base * base
            if lr < 0.0:
                lr = 0.0
        lr_each_step.append(lr)
    return lr_each_step[start_steps:]


def get_lr(lr_init, lr_end, lr_max, warmup_epochs, total_epochs, start_epoch, steps_per_epoch,
           lr_decay_mode):
    total_steps = steps_per_epoch * total_epochs
    warmup_steps = steps_per_epoch * warmup_epochs
    start_steps = steps_per_epoch * start_epoch
    assert lr_decay_mode == 'poly'
    lr_each_step = _generate_poly_lr(lr_init, lr_max, total_steps, warmup_steps, start_steps)
    lr_each_step = np.array(lr_each_step).astype(np.float32)
    return lr_each_step


def mindspore_resnet():
    import types

    import mindspore as ms
    import mindspore.nn as nn

    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    config = types.SimpleNamespace(**RESNET_CONFIG, start_epoch=0, resume_ckpt="")

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.dense = nn.Dense(3, 4)
            self.dense.weight.set_data(ms.Tensor(W0_4))
            self.dense.bias.set_data(ms.Tensor(B0_4))

        def construct(self, x):
            return self.dense(x)

    def init_group_params(net, cfg):
        decayed_params = []
        no_decayed_params = []
        for param in net.trainable_params():
            if 'beta' not in param.name and 'gamma' not in param.name and 'bias' not in param.name:
                decayed_params.append(param)
            else:
                no_decayed_params.append(param)
        group_params = [{'params': decayed_params, 'weight_decay': cfg.weight_decay},
                        {'params': no_decayed_params},
                        {'order_params': net.trainable_params()}]
        return group_params

    def train_net(save_dir):
        step_size = 3
        net = Net()
        if config.resume_ckpt:
            resume_param = ms.load_checkpoint(config.resume_ckpt,
                                              filter_prefix=['learning_rate', 'global_step'])
            config.start_epoch = int(resume_param.get('epoch_num', ms.Tensor(0, ms.int32)).asnumpy().item())
        lr = ms.Tensor(get_lr(lr_init=config.lr_init, lr_end=config.lr_end, lr_max=config.lr_max,
                              warmup_epochs=config.warmup_epochs, total_epochs=config.epoch_size,
                              start_epoch=config.start_epoch, steps_per_epoch=step_size,
                              lr_decay_mode=config.lr_decay_mode))
        group_params = init_group_params(net, config)
        opt = nn.Momentum(group_params, lr, config.momentum, loss_scale=config.loss_scale)
        loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction='mean')
        if config.resume_ckpt:
            ms.load_param_into_net(net, resume_param)
            ms.load_param_into_net(opt, resume_param)
        # model.train(...) on CPU: fp32, no loss-scale manager -> TrainOneStepCell(sens=1)
        train_net_cell = nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt)
        train_net_cell.set_train()
        ws, bs, lrs = [], [], []
        lr_np = lr.asnumpy()
        for epoch in range(config.start_epoch, config.epoch_size):
            for i in range(step_size):
                x = ms.Tensor(X[i * BATCH:(i + 1) * BATCH])
                y = ms.Tensor(LABELS[i * BATCH:(i + 1) * BATCH])
                train_net_cell(x, y)
                step = int(opt.global_step.asnumpy().reshape(-1)[0])
                lrs.append(float(lr_np[step - 1]))     # LossCallBack logs lr[cur_step]
                ws.append(net.dense.weight.asnumpy().T.copy())
                bs.append(net.dense.bias.asnumpy().copy())
            if (epoch + 1) % config.save_checkpoint_epochs == 0:   # ModelCheckpoint(append_info)
                ms.save_checkpoint(train_net_cell, os.path.join(save_dir, f"resnet-{epoch + 1}_3.ckpt"),
                                   append_dict={"epoch_num": epoch + 1, "step_num": (epoch + 1) * step_size})
        return np.stack(ws), np.stack(bs), np.array(lrs)

    with tempfile.TemporaryDirectory() as d:
        fw, fb, flr = train_net(d)
        config.resume_ckpt = os.path.join(d, f"resnet-{RESUME_EPOCH}_3.ckpt")
        rw, rb, rlr = train_net(d)
    write("mindspore_resnet", {
        "framework": "mindspore " + ms.__version__,
        "source": "mindspore-ai/models official/cv/ResNet/train.py + src/lr_generator.py + src/util.py",
        "config": RESNET_CONFIG, "epochs": EPOCHS, "resume_epoch": RESUME_EPOCH,
        "params": ["dense/weight", "dense/bias"]},
        {"init_dense/weight": W0_4.T, "init_dense/bias": B0_4,
         "full_dense/weight": fw, "full_dense/bias": fb, "full_lr": flr,
         "res_dense/weight": rw, "res_dense/bias": rb, "res_lr": rlr})


if __name__ == "__main__":
    {"paddlevideo": paddlevideo, "gluoncv_recognizer": gluoncv_recognizer,
     "mindspore_resnet": mindspore_resnet}[sys.argv[1]]()
