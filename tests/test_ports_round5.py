"""Issue 38 item 6: ports of real public training scripts, checked against goldens recorded
by running the scripts themselves (``tools/port_goldens.py``, one framework venv each;
``tests/goldens/ports/*.npz``).

Each test is the script's optimizer / scheduler / save-resume / attribute-reading code with
the imports changed, the model replaced by one linear layer of fixed weights and the loader
by fixed arrays (3 batches an epoch, 6 epochs). It runs straight through (saving every
epoch, as the script does) and then again from the epoch-3 files in fresh objects (the
script's resume path), and compares the parameters after EVERY step of both runs, and the
learning rate the script reads, with the framework's.

Tolerance: rtol 1e-5, atol 1e-7 on parameters (float32 both sides; the only differences are
the order of float32 sums in the loss gradient and fused vs unfused multiply-adds, about 1
ulp a step over 18 steps); the learning rates the scripts read are Python floats on both
sides (rtol 1e-7). Every change beyond the imports is listed under "Changes" in each
docstring (they are the gaps the porting report lists).
"""
import json
import math
import os
import pickle
import types
import warnings
from math import cos, pi

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform as gx
from port_sources import CUSTOM_LR_SRC, GLUONCV_LR_SRC

HERE = os.path.dirname(os.path.abspath(__file__))
GOLD = os.path.join(HERE, "goldens", "ports")
RTOL, ATOL = 1e-5, 1e-7


def golden(name):
    d = np.load(os.path.join(GOLD, name + ".npz"))
    return d, json.loads(str(d["meta"]))


def batches(d, labels=False):
    x = np.asarray(d["x"])
    y = np.asarray(d["labels"] if labels else d["y"])
    return [(jnp.asarray(x[i:i + 4]), jnp.asarray(y[i:i + 4])) for i in range(0, 12, 4)]


def check(d, prefix, traj, lrs, names):
    for n in names:
        got = np.stack([t[n] for t in traj])
        want = d[f"{prefix}_{n}"]
        assert got.shape == want.shape, (prefix, n, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"{prefix} {n}")
    np.testing.assert_allclose(np.asarray(lrs, np.float64), d[f"{prefix}_lr"], rtol=1e-7, atol=0,
                               err_msg=f"{prefix} lr")


def flat(params):
    return {"/".join(str(getattr(k, "key", k)) for k in path): np.asarray(v)
            for path, v in jax.tree_util.tree_flatten_with_path(params)[0]}


# =========================================================================================
# Paddle: PaddleVideo
# =========================================================================================



def _paddlevideo_port(cfg, d, output_dir):
    """PaddleVideo's train_model / build_lr / build_optimizer, imports changed."""
    import gradxform.paddle as paddle_optimizer              # was: paddle.optimizer
    import gradxform.paddle.lr as plr                        # was: paddle.optimizer.lr
    from gradxform.paddle.regularizer import L1Decay, L2Decay  # was: paddle.regularizer

    custom_lr = types.ModuleType("custom_lr")                # `from paddle.optimizer.lr import *`
    custom_lr.__dict__.update({k: getattr(plr, k) for k in dir(plr) if not k.startswith("_")})
    custom_lr.math = math
    exec(CUSTOM_LR_SRC, custom_lr.__dict__)

    def build_lr(cfg, num_iters):
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

    def build_optimizer(cfg, lr_scheduler, model=None, parallel=False):
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
                # was: paddle.nn.ClipGradByGlobalNorm
                cfg_copy['grad_clip'] = paddle_optimizer.ClipGradByGlobalNorm(
                    cfg_copy.get('grad_clip').get('value'))
            else:
                raise ValueError
        cfg_copy.pop('learning_rate')
        parameter_list = model                                # was: model.parameters()
        return getattr(paddle_optimizer, opt_name)(lr_scheduler, parameters=parameter_list,
                                                   **cfg_copy)

    def loss_fn(params, data):                                # the model: Linear(3, 2) + mse_loss
        x, y = data
        return jnp.mean((x @ params["linear"]["weight"] + params["linear"]["bias"] - y) ** 2)

    def train_model(resume_epoch=0):
        model_name = "port"
        train_loader = batches(d)
        model = {"linear": {"weight": jnp.asarray(d["init_linear/weight"]),
                            "bias": jnp.asarray(d["init_linear/bias"])}}
        if resume_epoch:
            filename = os.path.join(output_dir, model_name + f"_epoch_{resume_epoch:05d}")
            with open(filename + '.pdparams', 'rb') as f:     # was: paddle.load
                resume_model_dict = pickle.load(f)
            with open(filename + '.pdopt', 'rb') as f:
                resume_opt_dict = pickle.load(f)
            model = resume_model_dict      # was: model.set_state_dict(...) after build_optimizer
        lr = build_lr(cfg['learning_rate'], len(train_loader))
        optimizer = build_optimizer(cfg, lr, model=model)
        if resume_epoch:
            optimizer.set_state_dict(resume_opt_dict)
        traj, lrs = [], []
        for epoch in range(0, 6):
            if epoch < resume_epoch:
                continue
            for i, data in enumerate(train_loader):
                grads = jax.grad(loss_fn)(optimizer.parameters, data)   # was: avg_loss.backward()
                optimizer.step(grads)                                   # was: optimizer.step()
                optimizer.clear_grad()
                lrs.append(optimizer.get_lr())
                traj.append(flat(optimizer.parameters))
                if cfg['learning_rate'].get("iter_step"):
                    lr.step()
            if not cfg['learning_rate'].get("iter_step"):
                lr.step()
            with open(os.path.join(output_dir, model_name + f"_epoch_{epoch + 1:05d}.pdopt"), 'wb') as f:
                pickle.dump(optimizer.state_dict(), f)                  # was: paddle.save
            with open(os.path.join(output_dir, model_name + f"_epoch_{epoch + 1:05d}.pdparams"), 'wb') as f:
                pickle.dump(jax.device_get(optimizer.parameters), f)    # was: model.state_dict()
        return traj, lrs

    return train_model


@pytest.mark.parametrize("key", ["iter", "epoch"])
def test_paddlevideo_train_model(key, tmp_path):
    """PaddleVideo ``paddlevideo/tasks/train.py`` (``train_model``: build_lr, build_optimizer,
    resume_epoch with ``optimizer.set_state_dict(load(...pdopt))``, ``optimizer.get_lr()``
    logged every batch, ``lr.step()`` every batch when ``iter_step`` else every epoch,
    ``save(optimizer.state_dict(), ..._epoch_N.pdopt)`` every epoch), with its
    ``paddlevideo/solver/lr.py`` ``build_lr``, ``solver/optimizer.py`` ``build_optimizer``
    and ``solver/custom_lr.py`` ``CustomWarmupCosineDecay`` (an ``LRScheduler`` subclass
    that overrides ``step`` and counts ``last_epoch`` in fractions of an epoch) verbatim.
    Source: github.com/PaddlePaddle/PaddleVideo (develop; train.py as stored at
    000328e25ed1bab5ca71441ca034ce1b86a3baaa, custom_lr.py at 05237c4be792ad502c6c46f292c4dc3bf53be559).
    Configs: ``iter`` = SlowFast's shape (iter_step CustomWarmupCosineDecay, nesterov
    Momentum, L2Decay); ``epoch`` = a PiecewiseDecay stepped per epoch with
    ClipGradByGlobalNorm.

    Changes beyond imports:
    1. ``paddle.nn.ClipGradByGlobalNorm`` -> ``gradxform.paddle.ClipGradByGlobalNorm``
       (gradxform has no ``paddle.nn`` namespace; ``gradxform.paddle.nn`` does not exist).
    2. ``parameters=model.parameters()`` -> ``parameters=<params pytree>``.
    3. ``avg_loss.backward(); optimizer.step()`` -> ``optimizer.step(jax.grad(...)(optimizer.parameters, data))``.
    4. ``paddle.save`` / ``paddle.load`` -> ``pickle`` (no gradxform equivalent for the dict
       ``state_dict()`` returns; ``gradxform.save_state`` takes a pytree of arrays, not this
       dict of arrays, floats and the nested ``LR_Scheduler`` dict).
    5. The script calls ``model.set_state_dict(resume_model_dict)`` AFTER building the
       optimizer; the port must build the optimizer from the loaded parameters instead
       (the optimizer holds its own copy). With an ``nnx.Module`` this is silent: see
       ``test_paddle_nnx_model_loaded_after_optimizer_is_kept`` below.
    """
    d, meta = golden("paddlevideo_" + key)
    train_model = _paddlevideo_port(meta["config"], d, str(tmp_path))
    traj, lrs = train_model()
    check(d, "full", traj, lrs, meta["params"])
    if key == "iter":
        return       # the resume: test_paddlevideo_resume_fractional_last_epoch
    traj, lrs = train_model(resume_epoch=meta["resume_epoch"])
    check(d, "res", traj, lrs, meta["params"])


def test_paddlevideo_resume_fractional_last_epoch(tmp_path):
    """The resumed half of ``test_paddlevideo_train_model[iter]``: PaddleVideo's
    ``optimizer.set_state_dict(load(..._epoch_00003.pdopt))`` with CustomWarmupCosineDecay,
    whose ``last_epoch`` is 0 + 9 * (1/3) = 3.0, a float (Paddle's base class stores whatever
    the subclass puts there). It was refused as "a step count is an integer" (found by this port);
    a float position is now the scheduler object's own, not a step count of the state."""
    d, meta = golden("paddlevideo_iter")
    train_model = _paddlevideo_port(meta["config"], d, str(tmp_path))
    train_model()
    traj, lrs = train_model(resume_epoch=meta["resume_epoch"])
    check(d, "res", traj, lrs, meta["params"])


def test_paddle_nnx_model_loaded_after_optimizer_is_kept():
    """PaddleVideo (and PaddleSeg, PaddleClas) load the checkpoint into the model after the
    optimizer exists: ``optimizer = build_optimizer(..., model=model)`` then
    ``model.set_state_dict(resume_model_dict)``. Paddle's optimizer holds the Parameter
    objects, so it steps from the loaded values. gradxform's stateful optimizer bound to an
    ``nnx.Module`` copies the parameters at construction and writes its copy back after each
    step: the loaded weights were silently replaced by the initial ones (found by this port;
    fixed: a step reads the module's parameters first)."""
    nnx = pytest.importorskip("flax.nnx")
    import gradxform.paddle as P

    class M(nnx.Module):
        def __init__(self):
            self.linear = nnx.Linear(3, 2, rngs=nnx.Rngs(0))

    m = M()
    opt = P.Momentum(0.1, parameters=m, momentum=0.0)
    loaded = jnp.full((3, 2), 7.0)
    m.linear.kernel.value = loaded                     # model.set_state_dict(...)
    opt.step(jax.tree.map(jnp.zeros_like, opt.parameters))
    np.testing.assert_array_equal(np.asarray(m.linear.kernel.value), np.asarray(loaded))


# =========================================================================================
# MXNet / Gluon: GluonCV train_recognizer.py
# =========================================================================================



def test_gluoncv_train_recognizer(tmp_path):
    """GluonCV ``scripts/action-recognition/train_recognizer.py`` (``main``/``train``:
    ``LRSequential([LRScheduler('linear', ...warmup), LRScheduler(opt.lr_mode, ...,
    step_epoch=lr_decay_epoch)])`` as ``optimizer_params['lr_scheduler']``, ``opt.no_wd``,
    ``gluon.Trainer(..., update_on_kvstore=False)``, ``trainer.load_states(opt.resume_states)``
    and ``range(opt.resume_epoch, opt.num_epochs)``, ``trainer.step(batch_size)``,
    ``trainer.learning_rate`` logged every batch, ``trainer.save_states`` every
    ``save_frequency`` epochs) with ``gluoncv/utils/lr_scheduler.py``'s ``LRSequential`` and
    ``LRScheduler`` (subclasses of ``mx.lr_scheduler.LRScheduler``, Python state) verbatim.
    Source: github.com/dmlc/gluon-cv (master; train_recognizer.py as stored at
    35367b01da9c6b38ec6ca82e1e7b7eb0c15f0152).
    Config: lr 0.1, momentum 0.9, wd 1e-4, warmup_lr 0.01, warmup_epochs 1, lr_mode 'step',
    lr_decay_epoch '3,5', lr_decay 0.1, no_wd, 6 epochs of 3 batches of 4, save_frequency 1;
    validation dropped (the save branch kept is the one that saves every epoch).

    Changes beyond imports:
    1. ``net.collect_params('.*beta|.*gamma|.*bias').items(): v.wd_mult = 0.0`` ->
       ``optimizer_params['wd_mult'] = {'.*beta|.*gamma|.*bias': 0.0}`` (no parameter objects
       before the Trainer exists).
    2. ``ag.backward(loss); trainer.step(batch_size)`` ->
       ``trainer.step(trainer.grads(loss_fn, (x, y)), batch_size)`` (a plain ``jax.grad`` of
       ``trainer.params`` is refused with a clear error when several devices are visible:
       it wants one copy per device).
    3. ``net.load_parameters(opt.resume_params)``: not needed (``load_states`` restores the
       parameters too).
    """
    d, meta = golden("gluoncv_recognizer")
    from gradxform import lr_scheduler as mx_lrs          # was: from mxnet import lr_scheduler
    mod = types.ModuleType("gluoncv_lr_scheduler_port")
    mod.__dict__.update({"lr_scheduler": mx_lrs, "warnings": warnings, "cos": cos, "pi": pi})
    exec(GLUONCV_LR_SRC, mod.__dict__)
    LRSequential, LRScheduler = mod.LRSequential, mod.LRScheduler
    opt = types.SimpleNamespace(**meta["config"])
    save_dir = str(tmp_path)

    def loss_fn(params, x, y):                            # Dense(2) + L2Loss, summed over the batch
        pred = x @ params["linear"]["weight"] + params["linear"]["bias"]
        return jnp.sum(0.5 * jnp.mean((pred - y) ** 2, axis=1))

    def main(resume_epoch=0):
        batch_size = opt.batch_size
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
        params = {"linear": {"weight": jnp.asarray(d["init_linear/weight"]),
                             "bias": jnp.asarray(d["init_linear/bias"])}}
        train_data = batches(d)
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
            optimizer_params['wd_mult'] = {'.*beta|.*gamma|.*bias': 0.0}
        trainer = gx.Trainer(params, optimizer, optimizer_params, update_on_kvstore=False)
        if resume_epoch:
            trainer.load_states('%s/%s-%03d.states' % (save_dir, "port", resume_epoch - 1))
        traj, lrs = [], []
        for epoch in range(resume_epoch, opt.num_epochs):
            for i, (x, y) in enumerate(train_data):
                grads = trainer.grads(lambda p, b: loss_fn(p, *b), (x, y))
                trainer.step(grads, batch_size)
                lrs.append(trainer.learning_rate)
                traj.append(flat(trainer.params))
            if opt.save_frequency and save_dir and (epoch + 1) % opt.save_frequency == 0:
                trainer.save_states('%s/%s-%03d.states' % (save_dir, "port", epoch))
        return traj, lrs

    traj, lrs = main()
    check(d, "full", traj, lrs, meta["params"])
    traj, lrs = main(resume_epoch=meta["resume_epoch"])
    check(d, "res", traj, lrs, meta["params"])


# =========================================================================================
# MindSpore: models official/cv/ResNet/train.py
# =========================================================================================

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


def test_mindspore_resnet_train(tmp_path):
    """MindSpore model zoo ``official/cv/ResNet/train.py`` (``train_net``: ``init_lr`` ->
    ``src/lr_generator.py`` ``get_lr(..., start_epoch=config.start_epoch, ...)``, a dynamic lr
    list sliced from the resumed epoch; ``src/util.py`` ``init_group_params`` (decay /
    no-decay groups by ``'beta'/'gamma'/'bias' in param.name``, ``order_params``);
    ``nn.Momentum(group_params, lr, config.momentum, loss_scale=config.loss_scale)``;
    resume: ``ms.load_checkpoint(config.resume_ckpt, filter_prefix=['learning_rate',
    'global_step'])``, ``config.start_epoch = epoch_num``, ``load_param_into_net(net, ...)``,
    ``load_param_into_net(opt, ...)``; ``ModelCheckpoint`` with ``append_info`` epoch_num
    every ``save_checkpoint_epochs``). Source: github.com/mindspore-ai/models
    (train.py as stored at 145444c6454a2cf80436222310578f1abf498458, lr_generator.py at
    d499a73818e9d09ab520ef6265549b9eadcab99b, util.py at 057e87ad2038fc707c190d9831d142dfef9774c6).
    Config (resnet50_cifar10 shrunk): lr_init 0.01, lr_end 1e-5, lr_max 0.1, warmup 1 epoch,
    poly, momentum 0.9, weight_decay 1e-4, loss_scale 1024 (on CPU the script trains in
    fp32 without a loss-scale manager, so Momentum divides the unscaled gradients by 1024:
    kept as the script does it), 6 epochs of 3 batches, SoftmaxCrossEntropyWithLogits mean.

    Changes beyond imports:
    1. ``for param in net.trainable_params(): param.name`` -> ``gx.param_names(params)``.
    2. ``ms.Tensor(lr)`` -> ``jnp.asarray(lr)``; ``Model.train`` / ``TrainOneStepCell`` ->
       a jitted ``tx.update`` loop.
    3. ``ModelCheckpoint``/``ms.load_checkpoint`` -> ``gx.save_state((params, state), meta=...)``
       / ``gx.load_state``; ``filter_prefix=['global_step']`` + ``load_param_into_net(opt, ...)``
       (moments restored, step count restarted at 0 because the lr list was sliced) ->
       ``gx.load_state(..., schedule_base='optimizer')`` and ``tree_set(state, count=0)``.
    4. Found by this port: loading the whole state (the obvious port of
       ``load_param_into_net(opt, ...)``) and only resetting ``count`` trained on with a wrong
       rate and no error: the file's ``learning_rate`` base (0.01 here) was restored beside the
       NEW sliced lr list, scaling it by 0.01 / 0.036 (its first value): every resumed step used
       0.278x MindSpore's rate (params off by 2e-4 after 9 steps). Now that load refuses,
       naming both bases and ``schedule_base=``.
    """
    d, meta = golden("mindspore_resnet")
    import gradxform.mindspore as nn                     # was: import mindspore.nn as nn
    config = types.SimpleNamespace(**meta["config"], start_epoch=0, resume_ckpt="")
    data = batches(d, labels=True)

    def init_group_params(params, cfg):
        decayed_params = []
        no_decayed_params = []
        for name in gx.param_names(params):               # was: net.trainable_params(), param.name
            if 'beta' not in name and 'gamma' not in name and 'bias' not in name:
                decayed_params.append(name)
            else:
                no_decayed_params.append(name)
        group_params = [{'params': decayed_params, 'weight_decay': cfg.weight_decay},
                        {'params': no_decayed_params},
                        {'order_params': gx.param_names(params)}]
        return group_params

    def loss_fn(params, x, y):
        logits = x @ params["dense"]["weight"] + params["dense"]["bias"]
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y))

    def train_net(save_dir):
        step_size = 3
        params = {"dense": {"weight": jnp.asarray(d["init_dense/weight"]),
                            "bias": jnp.asarray(d["init_dense/bias"])}}
        if config.resume_ckpt:
            with open(config.resume_ckpt + ".meta.json") as f:
                config.start_epoch = int(json.load(f)["epoch_num"])
        lr = jnp.asarray(get_lr(lr_init=config.lr_init, lr_end=config.lr_end, lr_max=config.lr_max,
                                warmup_epochs=config.warmup_epochs, total_epochs=config.epoch_size,
                                start_epoch=config.start_epoch, steps_per_epoch=step_size,
                                lr_decay_mode=config.lr_decay_mode))
        group_params = init_group_params(params, config)
        opt = nn.Momentum(group_params, lr, config.momentum, loss_scale=config.loss_scale)
        state = opt.init(params)
        if config.resume_ckpt:
            # filter_prefix=['learning_rate', 'global_step']: the new (sliced) list's base is kept
            # (schedule_base='optimizer'; without it the load refuses, naming both bases: it was
            # silent when this was ported, see change 4) and the count restarts
            with pytest.raises(gx.CheckpointError, match="schedule_base='optimizer'"):
                gx.load_state(config.resume_ckpt, like=(params, state))
            params, state = gx.load_state(config.resume_ckpt, like=(params, state), schedule_base="optimizer")
            state = optax.tree_utils.tree_set(state, count=0)
        step = jax.jit(lambda p, s, x, y: (lambda u_s: (optax.apply_updates(p, u_s[0]), u_s[1]))(
            opt.update(jax.grad(loss_fn)(p, x, y), s, p)))
        traj, lrs = [], []
        for epoch in range(config.start_epoch, config.epoch_size):
            for x, y in data:
                lr_now = float(nn.get_lr(opt, state))    # LossCallBack's lr[cur_step]
                params, state = step(params, state, x, y)
                lrs.append(lr_now)
                traj.append(flat(params))
            if (epoch + 1) % config.save_checkpoint_epochs == 0:
                path = os.path.join(save_dir, f"resnet-{epoch + 1}_3.ckpt")
                gx.save_state(path, (params, state))
                with open(path + ".meta.json", "w") as f:
                    json.dump({"epoch_num": epoch + 1, "step_num": (epoch + 1) * step_size}, f)
        return traj, lrs

    traj, lrs = train_net(str(tmp_path))
    check(d, "full", traj, lrs, meta["params"])
    config.resume_ckpt = os.path.join(str(tmp_path), f"resnet-{meta['resume_epoch']}_3.ckpt")
    traj, lrs = train_net(str(tmp_path))
    check(d, "res", traj, lrs, meta["params"])
