#!/usr/bin/env python
"""Migration fixtures: continue a Gluon (MXNet 1.9.1) training run in JAX.

NOT imported by the test-suite.  Run with the MXNet venv:

    /work/venvs/mxnet/bin/python tools/mxnet_migration_fixtures.py [substring]

For every case a tiny Gluon MLP (Dense(3, in_units=4) -> Dense(2, in_units=3), L2 loss)
is trained with ``gluon.Trainer(..., update_on_kvstore=False)`` for n=10 steps on fixed
random data; ``trainer.save_states`` is called right after step k=5.  Written to
``tests/fixtures/mxnet/<case>/``:

  trainer.states   raw bytes written by Gluon (pickle of (states_dict, optimizer))
  trajectory.npz   meta  : JSON {api, optimizer, optimizer_params, batch_size, names
                            (Trainer order == optimizer index order), k, n, dtype,
                            mxnet_version, states_file, state_layout, opt_at_k}
                   p0_<name>      initial parameters
                   x_<t>, y_<t>   the batch of step t
                   g_<t>_<name>   raw gradient after backward (p.grad(), BEFORE the
                                  trainer rescales/clips it), t = 0..n-1
                   p_<t>_<name>   parameters after step t
                   s_<name>_<path> optimizer state arrays right after step k-1 (i.e. the
                                  content of trainer.states); <path> is the position in
                                  the nested state tuple, e.g. "0", "1_0"; see
                                  meta.state_layout (null = None entry)

One Module-API case (``module_sgd_mom``) writes ``module.states`` instead
(``mod.save_optimizer_states``: pickle of the states dict only, no optimizer).
"""
import json
import os
import sys
import warnings

import numpy as np
import mxnet as mx
from mxnet import autograd, gluon

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "mxnet")
K, N, BATCH = 5, 10, 8

CASES = [
    ("sgd_mom", "sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}, "float32"),
    ("nag_mom", "nag", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}, "float32"),
    ("adam", "adam", {"learning_rate": 0.01, "wd": 0.01}, "float32"),
    ("rmsprop", "rmsprop", {"learning_rate": 0.01, "wd": 0.01}, "float32"),
    ("rmsprop_centered", "rmsprop",
     {"learning_rate": 0.01, "wd": 0.01, "centered": True, "clip_weights": 2.0}, "float32"),
    ("adagrad", "adagrad", {"learning_rate": 0.1, "wd": 0.01}, "float32"),
    ("adadelta", "adadelta", {"wd": 0.01}, "float32"),
    ("ftml", "ftml", {"learning_rate": 0.01, "wd": 0.01}, "float32"),
    ("ftrl", "ftrl", {"learning_rate": 0.1, "wd": 0.01}, "float32"),
    ("adamax", "adamax", {"learning_rate": 0.02, "wd": 0.01}, "float32"),
    ("nadam", "nadam", {"learning_rate": 0.01, "wd": 0.01}, "float32"),
    ("signum", "signum", {"learning_rate": 0.01, "wd": 0.01, "wd_lh": 0.01}, "float32"),
    # DCASGD with momentum>0 raises in 1.9.1 for every shape (see MXNET_NOTES.md), so the
    # fixture uses momentum=0 (state = (None, previous_weight)).
    ("dcasgd", "dcasgd", {"learning_rate": 0.1, "wd": 0.01}, "float32"),
    ("sgd_mom_clip_sched", "sgd",
     {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01, "clip_gradient": 0.5,
      "lr_scheduler": {"type": "FactorScheduler", "kwargs": {"step": 3, "factor": 0.5,
                                                             "base_lr": 0.1}}}, "float32"),
    ("sgd_mom_mp_fp16", "sgd",
     {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01, "multi_precision": True}, "float16"),
    ("adam_mp_fp16", "adam",
     {"learning_rate": 0.01, "wd": 0.01, "multi_precision": True}, "float16"),
    # stateless rules and the remaining layouts (added after the first fixture round)
    ("sgd_nomom", "sgd", {"learning_rate": 0.1, "wd": 0.01}, "float32"),
    ("signsgd", "signum", {"learning_rate": 0.01, "momentum": 0.0, "wd": 0.01}, "float32"),
    ("adam_sched", "adam",
     {"learning_rate": 0.01, "wd": 0.01,
      "lr_scheduler": {"type": "FactorScheduler", "kwargs": {"step": 3, "factor": 0.5,
                                                             "base_lr": 0.01}}}, "float32"),
    ("lbsgd_linear_bs2", "lbsgd",
     {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01, "warmup_strategy": "linear",
      "warmup_epochs": 1, "updates_per_epoch": 4, "batch_scale": 2}, "float32"),
    ("lbsgd_lars_bs2", "lbsgd",
     {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01, "warmup_strategy": "lars",
      "warmup_epochs": 1, "updates_per_epoch": 4, "batch_scale": 2}, "float32"),
    ("nag_mom_mp_fp16", "nag",
     {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01, "multi_precision": True}, "float16"),
    ("rmsprop_mp_fp16", "rmsprop",
     {"learning_rate": 0.01, "wd": 0.01, "multi_precision": True}, "float16"),
    ("ftml_mp_fp16", "ftml",
     {"learning_rate": 0.01, "wd": 0.01, "multi_precision": True}, "float16"),
    # Signum with a momentum other than its default, given explicitly, and an active
    # clip: the resumed buffer's EMA weights (1 - momentum) show in the signs
    ("signum_mom05_clip", "signum",
     {"learning_rate": 0.01, "momentum": 0.5, "wd": 0.01, "wd_lh": 0.02, "clip_gradient": 0.1},
     "float32"),
    # LAMB keeps Adam's (mean, var) per parameter (issue 37 item 6: it migrates now)
    ("lamb", "lamb", {"learning_rate": 0.01, "wd": 0.01}, "float32"),
    # GroupAdaGrad keeps one history per row, (rows, 1); MXNet gives it no weight decay
    ("groupadagrad", "groupadagrad", {"learning_rate": 0.1}, "float32"),
    # LARS with momentum correction under a schedule: the saved optimizer's cur_lr is the rate the
    # next step divides by (lr / last_lr), so a resumed run must carry it; the rate halves at the
    # first step after the save (num_update 6), where that ratio is 0.5
    ("lars_sched", "lars",
     {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01,
      "lr_scheduler": {"type": "FactorScheduler", "kwargs": {"step": 5, "factor": 0.5, "base_lr": 0.1}}},
     "float32"),
]


class BroadcastDense(gluon.HybridBlock):
    """Dense layer via broadcast-multiply-sum: MXNet 1.9.1 CPU has no float16
    FullyConnected backward nor float16 dot, so the float16 cases use this block (same
    parameter names/shapes/maths as gluon.nn.Dense: y = x @ W.T + b)."""

    def __init__(self, units, in_units, **kwargs):
        super(BroadcastDense, self).__init__(**kwargs)
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(units, in_units))
            self.bias = self.params.get("bias", shape=(units,))

    def hybrid_forward(self, F, x, weight, bias):
        y = F.sum(F.broadcast_mul(F.expand_dims(x, 1), F.expand_dims(weight, 0)), axis=2)
        return F.broadcast_add(y, F.expand_dims(bias, 0))


def init_values(shapes):
    rs = np.random.RandomState(123)
    return {n: (rs.standard_normal(s) * 0.5).astype(np.float32) for n, s in shapes}


def batches():
    rs = np.random.RandomState(7)
    return [(rs.standard_normal((BATCH, 4)).astype(np.float32),
             rs.standard_normal((BATCH, 2)).astype(np.float32)) for _ in range(N)]


def flatten_state(state, prefix, out):
    """Return a JSON layout of a nested state and fill out[prefix_path] = ndarray."""
    if state is None:
        return None
    if isinstance(state, mx.nd.NDArray):
        out[prefix] = state.asnumpy().copy()
        return {"nd": prefix, "dtype": np.dtype(state.dtype).name, "shape": list(state.shape)}
    if isinstance(state, (tuple, list)):
        return {"tuple" if isinstance(state, tuple) else "list":
                [flatten_state(s, "%s_%d" % (prefix, j), out) for j, s in enumerate(state)]}
    return {"python": repr(state)}


def opt_summary(opt):
    d = {
        "class": type(opt).__module__ + "." + type(opt).__name__,
        "num_update": opt.num_update,
        "begin_num_update": opt.begin_num_update,
        "_index_update_count": {str(k): v for k, v in opt._index_update_count.items()},
        "_all_index_update_counts": {str(dev): {str(k): v for k, v in c.items()}
                                     for dev, c in opt._all_index_update_counts.items()},
        "rescale_grad": opt.rescale_grad,
        "lr": opt.lr,
        "wd": opt.wd,
    }
    for attr in ("m_schedule", "momentum"):
        if hasattr(opt, attr):
            d[attr] = getattr(opt, attr)
    if opt.lr_scheduler is not None:
        d["lr_scheduler"] = {k: v for k, v in vars(opt.lr_scheduler).items()
                             if isinstance(v, (int, float, str, list))}
    return d


def write_case(case, arrays, meta):
    d = os.path.join(OUT, case)
    os.makedirs(d, exist_ok=True)
    arrays = dict(arrays)
    arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
    np.savez_compressed(os.path.join(d, "trajectory.npz"), **arrays)
    sizes = {f: os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)}
    print("wrote", case, sizes)


def gluon_case(case, optimizer, params, dtype):
    mx.random.seed(0)
    net = gluon.nn.Sequential(prefix="net_")
    with net.name_scope():
        if optimizer == "groupadagrad":  # MXNet's GroupAdaGrad takes 2-D weights only: no biases
            net.add(gluon.nn.Dense(3, in_units=4, use_bias=False), gluon.nn.Dense(2, in_units=3, use_bias=False))
            model = "Sequential(Dense(3, in_units=4, use_bias=False), Dense(2, in_units=3, use_bias=False))"
        elif dtype == "float32":
            net.add(gluon.nn.Dense(3, in_units=4), gluon.nn.Dense(2, in_units=3))
            model = "Sequential(Dense(3, in_units=4), Dense(2, in_units=3))"
        else:
            net.add(BroadcastDense(3, 4, prefix="dense0_"),
                    BroadcastDense(2, 3, prefix="dense1_"))
            model = ("Sequential(BroadcastDense(3, 4), BroadcastDense(2, 3)) "
                     "(float16: Dense semantics via broadcast_mul+sum)")
    net.initialize(mx.init.Zero(), ctx=mx.cpu())
    if dtype != "float32":
        net.cast(dtype)
    pdict = net.collect_params()
    names0 = list(pdict.keys())
    vals = init_values([(n, pdict[n].shape) for n in names0])
    for n in names0:
        pdict[n].set_data(mx.nd.array(vals[n], dtype=dtype))

    opt_params = dict(params)
    sched_spec = opt_params.pop("lr_scheduler", None)
    if sched_spec is not None:
        opt_params["lr_scheduler"] = getattr(mx.lr_scheduler, sched_spec["type"])(
            **sched_spec["kwargs"])
    with warnings.catch_warnings(record=True) as wl:
        warnings.simplefilter("always")
        trainer = gluon.Trainer(pdict, optimizer, opt_params, update_on_kvstore=False)
        names = [p.name for p in trainer._params]  # Trainer order == optimizer index
        loss_fn = gluon.loss.L2Loss()
        arrays = {}
        for n in names:
            arrays["p0_" + n] = pdict[n].data().asnumpy().copy()
        d = os.path.join(OUT, case)
        os.makedirs(d, exist_ok=True)
        layout, opt_at_k = None, None
        for t, (x, y) in enumerate(batches()):
            xb = mx.nd.array(x, dtype=dtype)
            yb = mx.nd.array(y, dtype=dtype)
            arrays["x_%d" % t] = xb.asnumpy()
            arrays["y_%d" % t] = yb.asnumpy()
            with autograd.record():
                loss = loss_fn(net(xb), yb)
            loss.backward()
            for n in names:
                # copy BEFORE step: AdaDelta rescales the gradient array in place
                arrays["g_%d_%s" % (t, n)] = pdict[n].grad().asnumpy().copy()
            trainer.step(BATCH)
            for n in names:
                arrays["p_%d_%s" % (t, n)] = pdict[n].data().asnumpy().copy()
            if t == K - 1:
                trainer.save_states(os.path.join(d, "trainer.states"))
                upd = trainer._updaters[0]
                layout = {}
                for idx, n in enumerate(names):
                    layout[n] = flatten_state(upd.states[idx], "s_" + n, arrays)
                opt_at_k = opt_summary(trainer._optimizer)
    meta = {
        "api": "gluon",
        "optimizer": optimizer,
        "optimizer_params": params,
        "batch_size": BATCH,
        "names": names,
        "k": K,
        "n": N,
        "dtype": dtype,
        "model": model,
        "loss": "gluon.loss.L2Loss (0.5*(pred-y)^2 mean over axis 1), backward of the "
                "per-sample loss vector (= sum over batch)",
        "mxnet_version": mx.__version__,
        "states_file": "trainer.states",
        "state_layout": layout,
        "opt_at_k": opt_at_k,
        "warnings": sorted(set(str(w.message) for w in wl)),
    }
    write_case(case, arrays, meta)


def module_case(case="module_sgd_mom"):
    mx.random.seed(0)
    data = mx.sym.Variable("data")
    label = mx.sym.Variable("label")
    h = mx.sym.FullyConnected(data, num_hidden=3, name="fc0")
    o = mx.sym.FullyConnected(h, num_hidden=2, name="fc1")
    sym = mx.sym.LinearRegressionOutput(o, label=label, name="lro")
    mod = mx.mod.Module(sym, data_names=["data"], label_names=["label"], context=mx.cpu())
    mod.bind(data_shapes=[("data", (BATCH, 4))], label_shapes=[("label", (BATCH, 2))])
    names = list(mod._exec_group.param_names)
    shapes = [(n, mod._exec_group.execs[0].arg_dict[n].shape) for n in names]
    vals = init_values(shapes)
    mod.init_params(arg_params={n: mx.nd.array(v) for n, v in vals.items()},
                    aux_params={}, allow_missing=False)
    params = {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}
    mod.init_optimizer(kvstore="local", optimizer="sgd", optimizer_params=dict(params))
    opt = mod._optimizer
    arrays = {}
    for n in names:
        arrays["p0_" + n] = vals[n]
    d = os.path.join(OUT, case)
    os.makedirs(d, exist_ok=True)
    layout, opt_at_k = None, None
    for t, (x, y) in enumerate(batches()):
        arrays["x_%d" % t] = x
        arrays["y_%d" % t] = y
        batch = mx.io.DataBatch(data=[mx.nd.array(x)], label=[mx.nd.array(y)])
        mod.forward_backward(batch)
        for n, g in zip(names, mod._exec_group.grad_arrays):
            arrays["g_%d_%s" % (t, n)] = g[0].asnumpy().copy()
        mod.update()
        argp, _ = mod.get_params()
        for n in names:
            arrays["p_%d_%s" % (t, n)] = argp[n].asnumpy().copy()
        if t == K - 1:
            mod.save_optimizer_states(os.path.join(d, "module.states"))
            layout = {}
            for idx, n in enumerate(names):
                layout[n] = flatten_state(mod._updater.states[idx], "s_" + n, arrays)
            opt_at_k = opt_summary(opt)
    meta = {
        "api": "module",
        "optimizer": "sgd",
        "optimizer_params": params,
        "effective": {"rescale_grad": opt.rescale_grad, "idx2name": {str(k): v for k, v in
                                                                     opt.idx2name.items()},
                      "wd_mult": opt.wd_mult, "update_on_kvstore": mod._update_on_kvstore},
        "batch_size": BATCH,
        "names": names,
        "k": K,
        "n": N,
        "dtype": "float32",
        "loss": "LinearRegressionOutput: grad = (pred - label) per sample (no 1/2, no mean), "
                "optimizer rescale_grad = 1/batch_size set by Module.init_optimizer",
        "mxnet_version": mx.__version__,
        "states_file": "module.states",
        "state_layout": layout,
        "opt_at_k": opt_at_k,
    }
    write_case(case, arrays, meta)


def main():
    only = sys.argv[1] if len(sys.argv) > 1 else None
    import logging
    logging.getLogger().setLevel(logging.ERROR)
    for case, optimizer, params, dtype in CASES:
        if only is None or only in case:
            gluon_case(case, optimizer, params, dtype)
    if only is None or only in "module_sgd_mom":
        module_case()


if __name__ == "__main__":
    main()
