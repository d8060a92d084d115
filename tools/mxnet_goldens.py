#!/usr/bin/env python
"""Generate golden optimizer trajectories from real MXNet 1.9.1.

NOT imported by the test-suite.  Run it with the MXNet venv:

    python3 -m venv /work/venvs/mxnet
    /work/venvs/mxnet/bin/pip install mxnet==1.9.1 numpy==1.23.5
    /work/venvs/mxnet/bin/python tools/mxnet_goldens.py

Writes tests/goldens/mxnet/<case>.npz and tests/goldens/mxnet/schedulers.npz.

Each optimizer is driven exactly like Gluon (update_on_kvstore=False) / Module do
it: ``opt = mx.optimizer.create(name, **kwargs)``, ``upd =
mx.optimizer.get_updater(opt)`` and then, for every step, one call
``upd(i, grad_nd, weight_nd)`` per parameter index i = 0, 1, 2 (in that order).

npz layout of a case file:
  meta            0-d str array holding JSON: optimizer, kwargs, names, idx2name,
                  lr_mult, wd_mult, scheduler, dtype, steps, mxnet_version,
                  (plus informational: shapes, big_grads, note)
  w0_<i>          initial weight of index i
  g_<t>_<i>       gradient fed at step t (t = 0..steps-1) to index i
  w_<t>_<i>       weight of index i after step t
All arrays are stored in the case dtype (float32 or float16).
"""
import json
import os
import sys
import warnings

import numpy as np
import mxnet as mx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "goldens", "mxnet")

NAMES = ["dense0_weight", "dense0_bias", "bn_gamma"]
SHAPES = [(4, 3), (3,), (2, 2, 2)]
STEPS = 20

FAILURES = []
ONLY = None  # optional substring filter on case names (command line argument)


def make_data(shapes, dtype, big):
    """Deterministic init (seed 0) and gradients (seed 1)."""
    rs_w = np.random.RandomState(0)
    w0 = [rs_w.standard_normal(s).astype(np.float32) for s in shapes]
    rs_g = np.random.RandomState(1)
    grads = []
    for _t in range(STEPS):
        gs = []
        for s in shapes:
            g = (rs_g.standard_normal(s) * 0.5).astype(np.float32)
            if big:
                # every 3rd element (flat order) x10 so that clip_gradient bites
                flat = g.reshape(-1)
                flat[::3] *= 10.0
                g = flat.reshape(s)
            gs.append(g)
        grads.append(gs)
    w0 = [w.astype(dtype) for w in w0]
    grads = [[g.astype(dtype) for g in gs] for gs in grads]
    return w0, grads


def make_scheduler(spec):
    if spec is None:
        return None
    cls = getattr(mx.lr_scheduler, spec["type"])
    return cls(**spec["kwargs"])


def run_case(case, optimizer, kwargs, *, idx2name=False, lr_mult=None,
             wd_mult=None, scheduler=None, dtype="float32", big=False,
             shapes=None, note=None, zero_bias=False, call="each", zero_init=(), zero_grad=()):
    if ONLY is not None and ONLY not in case:
        return None
    shapes = shapes or SHAPES
    lr_mult = lr_mult or {}
    wd_mult = wd_mult or {}
    w0, grads = make_data(shapes, np.dtype(dtype), big)
    if zero_bias:  # index 1 starts at 0, as a bias does (trust ratios: the "a norm is 0" branch)
        w0[1] = np.zeros_like(w0[1])
    w0 = [np.zeros_like(w) if i in zero_init else w for i, w in enumerate(w0)]
    grads = [[np.zeros_like(g) if i in zero_grad else g for i, g in enumerate(gs)] for gs in grads]

    create_kwargs = dict(kwargs)
    if idx2name:
        create_kwargs["param_idx2name"] = {i: n for i, n in enumerate(NAMES)}
    sched = make_scheduler(scheduler)
    if sched is not None:
        create_kwargs["lr_scheduler"] = sched
    try:
        with warnings.catch_warnings(record=True) as wlist:
            warnings.simplefilter("always")
            opt = mx.optimizer.create(optimizer, **create_kwargs)
            if lr_mult:
                opt.set_lr_mult(dict(lr_mult))
            if wd_mult:
                opt.set_wd_mult(dict(wd_mult))
            upd = mx.optimizer.get_updater(opt)
            weights = [mx.nd.array(w, dtype=dtype) for w in w0]
            traj = []
            for t in range(STEPS):
                if call == "list":  # as Gluon's Trainer calls it: all indices in one call
                    upd(list(range(len(shapes))), [mx.nd.array(g, dtype=dtype) for g in grads[t]], weights)
                else:
                    for i in range(len(shapes)):
                        upd(i, mx.nd.array(grads[t][i], dtype=dtype), weights[i])
                traj.append([w.asnumpy().copy() for w in weights])
    except Exception as e:  # record, never fake a golden
        msg = "%s: %s(%r) raised %s: %s" % (case, optimizer, kwargs, type(e).__name__, e)
        print("FAILED", msg)
        FAILURES.append(msg)
        return None

    meta = {
        "optimizer": optimizer,
        "kwargs": kwargs,
        "names": NAMES,
        "idx2name": bool(idx2name),
        "lr_mult": lr_mult,
        "wd_mult": wd_mult,
        "scheduler": scheduler,
        "dtype": dtype,
        "steps": STEPS,
        "mxnet_version": mx.__version__,
        "shapes": [list(s) for s in shapes],
        "big_grads": bool(big),
        "warnings": sorted(set(str(w.message) for w in wlist)),
        "call": call,
    }
    if note:
        meta["note"] = note
    if zero_init or zero_grad:
        meta["zero_init"], meta["zero_grad"] = list(zero_init), list(zero_grad)
    arrays = {"meta": np.array(json.dumps(meta))}
    for i, w in enumerate(w0):
        arrays["w0_%d" % i] = w
    for t in range(STEPS):
        for i in range(len(shapes)):
            arrays["g_%d_%d" % (t, i)] = grads[t][i]
            arrays["w_%d_%d" % (t, i)] = traj[t][i].astype(dtype)
    for k, v in arrays.items():
        if k != "meta":
            assert v.dtype == np.dtype(dtype), (k, v.dtype)
            assert np.all(np.isfinite(v)), (case, k)
    np.savez_compressed(os.path.join(OUT, case + ".npz"), **arrays)
    print("wrote", case)
    return meta


# sensible learning rates for the "defaults" cases
DEFAULT_LR = {
    "sgd": 0.1, "nag": 0.1, "signum": 0.01, "ftml": 0.01, "lbsgd": 0.1,
    "dcasgd": 0.1, "ccsgd": 0.1, "adam": 0.01, "adagrad": 0.1,
    "rmsprop": 0.01, "adadelta": 1.0, "ftrl": 0.1, "adamax": 0.02,
    "nadam": 0.01,
}

COMMON_B = {"wd": 0.01, "rescale_grad": 0.5, "clip_gradient": 1.0}


def optimizer_cases():
    # (a) defaults, (b) wd/rescale/clip + own options
    for name, lr in DEFAULT_LR.items():
        run_case("%s_default" % name, name, {"learning_rate": lr})

    def b(name, extra, case=None):
        kw = {"learning_rate": DEFAULT_LR[name]}
        kw.update(COMMON_B)
        kw.update(extra)
        run_case(case or "%s_wd_rescale_clip" % name, name, kw, big=True)

    b("sgd", {"momentum": 0.9}, "sgd_mom_wd_rescale_clip")
    b("nag", {"momentum": 0.9}, "nag_mom_wd_rescale_clip")
    b("ccsgd", {"momentum": 0.9}, "ccsgd_mom_wd_rescale_clip")
    b("signum", {"wd_lh": 0.01}, "signum_wdlh_wd_rescale_clip")
    b("signum", {"momentum": 0.0, "wd_lh": 0.01}, "signsgd_nomom_wdlh_wd_rescale_clip")
    # signsgd (momentum=0) path: wd_lh is rejected by the signsgd_update kernel
    b("signum", {"momentum": 0.0}, "signsgd_nomom_wd_rescale_clip")
    b("ftml", {})
    b("adam", {})
    b("adagrad", {})
    b("adadelta", {})
    b("ftrl", {})
    b("adamax", {})
    b("nadam", {"schedule_decay": 0.01}, "nadam_sched_decay_wd_rescale_clip")
    b("rmsprop", {"centered": False, "clip_weights": 2.0}, "rmsprop_wd_rescale_clip_clipw")
    b("rmsprop", {"centered": True, "clip_weights": 2.0}, "rmsprop_centered_wd_rescale_clip_clipw")
    # DCASGD: momentum>0 cannot run in 1.9.1 (see MXNET_NOTES.md); record the
    # failures (they land in FAILURES) and make the working momentum=0 golden.
    b("dcasgd", {"momentum": 0.9}, "dcasgd_mom_wd_rescale_clip")
    kw = {"learning_rate": 0.1, "momentum": 0.9}
    kw.update(COMMON_B)
    run_case("dcasgd_mom_shape1", "dcasgd", kw, big=True, shapes=[(1,), (1,), (1,)])
    b("dcasgd", {"momentum": 0.0}, "dcasgd_wd_rescale_clip")
    b("dcasgd", {"momentum": 0.0, "lamda": 0.5}, "dcasgd_lamda_wd_rescale_clip")
    # LBSGD warmup strategies
    for strat, bs in [("linear", 2), ("power2", 1), ("sqrt", 1), ("lars", 1),
                      ("power2", 2), ("sqrt", 2), ("lars", 2)]:
        b("lbsgd", {"momentum": 0.9, "warmup_strategy": strat, "warmup_epochs": 1,
                    "updates_per_epoch": 4, "batch_scale": bs},
          "lbsgd_%s_bs%d_mom_wd_rescale_clip" % (strat, bs))

    # (c) scheduler + lr_mult/wd_mult, and idx2name (Module rule)
    for name in ["sgd", "adam", "rmsprop", "nag"]:
        lr = DEFAULT_LR[name]
        kw = {"learning_rate": lr, "wd": 0.01}
        if name in ("sgd", "nag"):
            kw["momentum"] = 0.9
        sched = {"type": "FactorScheduler", "kwargs": {"step": 3, "factor": 0.5, "base_lr": lr}}
        mults = dict(lr_mult={"dense0_bias": 2.0}, wd_mult={"bn_gamma": 0.0})
        run_case("%s_factor_sched_mult" % name, name, kw, scheduler=sched, **mults,
                 note="name-keyed lr_mult/wd_mult WITHOUT param_idx2name: MXNet ignores them "
                      "(lookup is by int index, or by name only via idx2name)")
        run_case("%s_factor_sched_mult_idx2name" % name, name, kw, scheduler=sched,
                 idx2name=True, **mults)
        run_case("%s_idx2name" % name, name, kw, idx2name=True)

    # scheduler without learning_rate: Adam's own default learning_rate=0.001 is
    # passed to the base class and overwrites scheduler.base_lr (Factor); Poly and
    # Cosine keep using base_lr_orig, so the override is ignored there.
    fs = {"type": "FactorScheduler", "kwargs": {"step": 3, "factor": 0.5, "base_lr": 0.05}}
    cs = {"type": "CosineScheduler", "kwargs": {"max_update": 15, "base_lr": 0.05,
                                                "final_lr": 0.001, "warmup_steps": 3,
                                                "warmup_begin_lr": 0.01}}
    run_case("adam_factor_sched_nolr", "adam", {}, scheduler=fs,
             note="no learning_rate given: Adam.__init__ passes learning_rate=0.001, "
                  "which overwrites FactorScheduler.base_lr (0.05 -> 0.001)")
    run_case("adam_cosine_warmup_sched_nolr", "adam", {}, scheduler=cs,
             note="no learning_rate given: base_lr overwritten to 0.001 but CosineScheduler "
                  "uses base_lr_orig=0.05 and warmup_final_lr=0.05, so the override is moot")
    run_case("sgd_factor_sched_nolr", "sgd", {"momentum": 0.9}, scheduler=fs,
             note="no learning_rate given: SGD keeps scheduler.base_lr (0.05)")

    # (e) issue 28: Adam's bias correction with a large effect. beta1 = 0.99 makes
    # 1/(1 - beta1^t) 100 at t=1 and still 5.5 at t=20; beta1 = 0.9999999 is 1.19e-7
    # from 1 in float32 (the kernel's m) but 1e-7 in MXNet's float64 1 - beta1^t
    # (so the float64 residual of a float32 beta moves every element); beta2 likewise.
    run_case("adam_beta1_099", "adam", {"learning_rate": 0.01, "beta1": 0.99, "beta2": 0.9999})
    run_case("adam_beta1_near_one", "adam", {"learning_rate": 0.001, "beta1": 0.9999999, "beta2": 0.999})
    run_case("adam_beta2_near_one", "adam", {"learning_rate": 0.01, "beta1": 0.9, "beta2": 0.9999999})
    run_case("nadam_beta2_near_one", "nadam", {"learning_rate": 0.01, "beta2": 0.9999999})
    # LBSGD's 'lars' ratio sqrt(|w|^2 / (|g|^2 + wd |w|^2 + 1e-18)) clipped to [0.01, 100]: a
    # zero-initialised bias (ratio 0 -> 0.01) and a zero-gradient gamma with a small wd
    # (1/sqrt(wd) = 1000 -> 100); random parameters never reach either bound
    lars = {"momentum": 0.9, "warmup_strategy": "lars", "warmup_epochs": 1, "updates_per_epoch": 4,
            "batch_scale": 1}
    run_case("lbsgd_lars_zero_init", "lbsgd", dict(lars, learning_rate=0.1, wd=0.01), zero_init=(1,),
             note="dense0_bias starts at 0")
    run_case("lbsgd_lars_zero_grad", "lbsgd", dict(lars, learning_rate=1.0, wd=1e-6), zero_grad=(2,),
             note="bn_gamma gets 0 gradients")

    # (d) float16
    run_case("sgd_mom_mp_fp16", "sgd",
             {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01, "multi_precision": True},
             dtype="float16")
    run_case("sgd_nomom_mp_fp16", "sgd",
             {"learning_rate": 0.1, "wd": 0.01, "multi_precision": True}, dtype="float16")
    run_case("adam_mp_fp16", "adam",
             {"learning_rate": 0.01, "wd": 0.01, "multi_precision": True}, dtype="float16")
    run_case("nag_mom_mp_fp16", "nag",
             {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01, "multi_precision": True},
             dtype="float16")
    run_case("rmsprop_mp_fp16", "rmsprop",
             {"learning_rate": 0.01, "wd": 0.01, "multi_precision": True}, dtype="float16")
    run_case("sgd_mom_fp16_nomp", "sgd",
             {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01}, dtype="float16")


def layerwise_cases():
    """LAMB, LARS, GroupAdaGrad (issue 24): parameter 1 starts at zero, so a
    trust ratio meets a zero weight norm."""
    sched = {"type": "FactorScheduler", "kwargs": {"step": 3, "factor": 0.5, "base_lr": 0.01}}
    mults = dict(lr_mult={"dense0_bias": 2.0}, wd_mult={"bn_gamma": 0.5})
    z = dict(zero_bias=True)
    run_case("lamb_default", "lamb", {"learning_rate": 0.01}, **z)
    run_case("lamb_wd_rescale_clip", "lamb", dict(COMMON_B, learning_rate=0.01), big=True, **z)
    run_case("lamb_bounds_nobiascorr_wd_rescale_clip", "lamb",
             dict(COMMON_B, learning_rate=0.01, lower_bound=0.5, upper_bound=3.0, bias_correction=False),
             big=True, **z)
    run_case("lamb_factor_sched_mult_idx2name", "lamb", {"learning_rate": 0.01, "wd": 0.01},
             scheduler=sched, idx2name=True, **mults, **z)
    run_case("lamb_mp_fp16", "lamb", {"learning_rate": 0.01, "wd": 0.01, "multi_precision": True},
             dtype="float16", **z)
    # issue 28: index 2 gets zero gradients, so |w| > 0 meets |g| = 0 (LAMB: |u| = wd |w|; LARS: the
    # ratio's "both norms > 0" guard keeps the plain lr, where a ratio would be eta / wd)
    run_case("lamb_zero_grad_wd", "lamb", {"learning_rate": 0.01, "wd": 0.01}, zero_grad=(2,), **z)
    # LARS as Gluon's Trainer calls it (one call, all indices): momentum_correction compares
    # the learning rate per call (see gradxform.mxnet.lars)
    zl = dict(zero_bias=True, call="list")
    lsched = {"type": "FactorScheduler", "kwargs": {"step": 3, "factor": 0.5, "base_lr": 0.1}}
    run_case("lars_default", "lars", {"learning_rate": 0.1, "momentum": 0.9}, **zl)
    run_case("lars_wd_rescale_clip", "lars", dict(COMMON_B, learning_rate=0.1, momentum=0.9, eta=0.01, eps=1e-6),
             big=True, **zl)
    run_case("lars_factor_sched_mult_idx2name", "lars", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01,
                                                         "eta": 0.02},
             scheduler=lsched, idx2name=True, **mults, **zl)
    run_case("lars_factor_sched_nocorrection", "lars", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01,
                                                        "momentum_correction": False}, scheduler=lsched, **zl)
    run_case("lars_nomom_factor_sched_wd_rescale_clip", "lars", dict(COMMON_B, learning_rate=0.1, eta=0.01),
             scheduler=lsched, big=True, **zl)
    run_case("lars_zero_grad_wd", "lars", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01, "eta": 0.02},
             zero_grad=(2,), **zl)
    run_case("lars_mp_fp16", "lars", {"learning_rate": 0.1, "momentum": 0.9, "wd": 0.01, "multi_precision": True},
             dtype="float16", **zl)
    # GroupAdaGrad (mx.optimizer.contrib): 2-D weights only, no weight decay
    g2d = dict(shapes=[(4, 3), (3, 1), (2, 4)])
    run_case("groupadagrad_default", "groupadagrad", {"learning_rate": 0.1}, **g2d)
    run_case("groupadagrad_rescale_clip", "groupadagrad",
             {"learning_rate": 0.1, "eps": 1e-3, "rescale_grad": 0.5, "clip_gradient": 1.0}, big=True, **g2d)
    run_case("groupadagrad_factor_sched_mult_idx2name", "groupadagrad", {"learning_rate": 0.1},
             scheduler=dict(lsched, kwargs=dict(lsched["kwargs"], base_lr=0.1)), idx2name=True,
             lr_mult={"dense0_bias": 2.0}, **g2d)


def scheduler_golden():
    specs = {}
    base = 0.1
    for wu in [None, ("linear", 5, 0.01), ("constant", 5, 0.01)]:
        wkw = {}
        suffix = ""
        if wu is not None:
            wkw = {"warmup_steps": wu[1], "warmup_begin_lr": wu[2], "warmup_mode": wu[0]}
            suffix = "_warmup_" + wu[0]
        specs["factor" + suffix] = ("FactorScheduler",
                                    dict(step=7, factor=0.5, stop_factor_lr=1e-3,
                                         base_lr=base, **wkw))
        specs["multifactor" + suffix] = ("MultiFactorScheduler",
                                         dict(step=[10, 20, 35], factor=0.3,
                                              base_lr=base, **wkw))
        specs["poly" + suffix] = ("PolyScheduler",
                                  dict(max_update=40, base_lr=base, pwr=2,
                                       final_lr=0.001, **wkw))
        specs["cosine" + suffix] = ("CosineScheduler",
                                    dict(max_update=40, base_lr=base, final_lr=0.001,
                                         **wkw))
    # extra: FactorScheduler with step 3 factor 0.5 (as used in optimizer goldens)
    specs["factor_step3"] = ("FactorScheduler", dict(step=3, factor=0.5, base_lr=base))
    specs["poly_pwr1"] = ("PolyScheduler", dict(max_update=30, base_lr=base, pwr=1))
    arrays = {}
    meta = {"num_update": list(range(1, 61)), "mxnet_version": mx.__version__,
            "schedulers": {}}
    for key, (typ, kw) in specs.items():
        sch = getattr(mx.lr_scheduler, typ)(**kw)
        arrays["lr_" + key] = np.array([sch(n) for n in range(1, 61)], dtype=np.float64)
        meta["schedulers"][key] = {"type": typ, "kwargs": kw}
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez_compressed(os.path.join(OUT, "schedulers.npz"), **arrays)
    print("wrote schedulers")


SELECT_PATTERNS = [".*beta|.*gamma|.*bias", "dense0_.*", "dense0", "bn_(beta|gamma)", r".*dense\d_weight",
                   "head_.*|bn_.*", "bias", ".*_weight$", "my.*", ".*running_.*", "(dense0|mydense0)_bias"]


def collect_params_golden():
    """Which parameters Gluon's ``Block.collect_params(select)`` picks (``re.match``:
    anchored at the start only), for tests of gradxform's Gluon-regex selectors."""
    from mxnet.gluon import nn
    net = nn.HybridSequential(prefix="")
    with net.name_scope():
        net.add(nn.Dense(3, in_units=2, prefix="dense0_"), nn.Dense(3, in_units=3, prefix="mydense0_"),
                nn.BatchNorm(in_channels=3, prefix="bn_"), nn.Dense(2, in_units=3, prefix="head_dense1_"))
    out = {"mxnet_version": mx.__version__, "names": sorted(net.collect_params().keys()),
           "selected": {p: sorted(net.collect_params(p).keys()) for p in SELECT_PATTERNS}}
    with open(os.path.join(OUT, "collect_params_select.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    print("wrote collect_params_select")


def main():
    global ONLY
    if len(sys.argv) > 1:
        ONLY = sys.argv[1]
    os.makedirs(OUT, exist_ok=True)
    import logging
    logging.getLogger().setLevel(logging.ERROR)
    optimizer_cases()
    layerwise_cases()
    if ONLY is None or ONLY in "schedulers":
        scheduler_golden()
    if ONLY is None or ONLY in "collect_params":
        collect_params_golden()
    print("\n%d failures:" % len(FAILURES))
    for f in FAILURES:
        print("  ", f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
