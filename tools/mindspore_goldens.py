#!/usr/bin/env python
"""Generate MindSpore optimizer goldens for gradxform.

Run with the MindSpore venv (never imported by tests):

    /work/venvs/mindspore/bin/python tools/mindspore_goldens.py [--only CASE ...]

Writes tests/goldens/mindspore/<case>.npz and tests/goldens/mindspore/schedules.npz.

npz layout per case:
    meta      json string: optimizer, kwargs, lr_schedule, names, groups, dtype, steps,
              framework_version, state_names (npz key -> MindSpore parameter name), notes
    w0_<i>    initial params (float32)
    g_<t>_<i> gradient fed at step t (t = 0..steps-1), fed *directly* to opt(grads)
    w_<t>_<i> params after step t
    lr_<t>    value of opt.get_lr() read *before* step t (only when not group-lr)
    s_<state>_<i> / s_<state>   final optimizer state after the last step
"""
import argparse
import json
import os
import sys

import numpy as np

import mindspore as ms
from mindspore import nn, Parameter, Tensor

ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
# MindSpore writes rank_0/om/*.ir on compile failures into the cwd: keep that out of the repo.
_TMP = os.path.join("/tmp", "ms_goldens_cwd")
os.makedirs(_TMP, exist_ok=True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "goldens", "mindspore")
STEPS = 20
NAMES = ["dense.weight", "dense.bias", "bn.gamma"]
SHAPES = [(4, 3), (3,), (2, 2, 2)]


def make_params(names=NAMES, shapes=SHAPES, seed=0):
    rng = np.random.default_rng(seed)
    w0 = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    params = [Parameter(Tensor(w.copy()), name=n) for w, n in zip(w0, names)]
    return w0, params


def make_grads(shapes=SHAPES, steps=STEPS, seed=1):
    rng = np.random.default_rng(seed)
    return [[(rng.standard_normal(s) * 0.5).astype(np.float32) for s in shapes] for _ in range(steps)]


def _state_key(pname, names):
    """Map a MindSpore optimizer Parameter name to an npz state key."""
    for i, n in enumerate(names):
        if pname.endswith("." + n):
            prefix = pname[: -len(n) - 1]
            return "s_%s_%d" % (prefix.replace(".", "_"), i)
        if pname.endswith("_" + n):
            prefix = pname[: -len(n) - 1]
            return "s_%s_%d" % (prefix.replace(".", "_"), i)
    return "s_" + pname.replace(".", "_")


def collect_state(opt, names):
    state, state_names = {}, {}
    seen = set()
    for pname, p in opt.parameters_and_names():
        if p.name in names or p.name in seen:
            continue
        seen.add(p.name)
        key = _state_key(p.name, names)
        try:
            arr = p.asnumpy()
        except Exception:  # pragma: no cover
            continue
        state[key] = np.array(arr)
        state_names[key] = p.name
    return state, state_names


def run_case(case, build, kwargs_meta, lr_schedule=None, groups=None, names=NAMES, shapes=SHAPES,
             notes=None, steps=STEPS, record_lr=True):
    w0, params = make_params(names, shapes)
    grads = make_grads(shapes, steps)
    opt = build(params)
    out = {}
    for i, w in enumerate(w0):
        out["w0_%d" % i] = w
    for t in range(steps):
        if record_lr and not opt.is_group_lr:
            try:
                out["lr_%d" % t] = np.array(opt.get_lr().asnumpy(), dtype=np.float32).reshape(())
            except Exception:
                pass
        # the gradient tuple must follow opt.parameters order (order_params may permute it)
        by_name = {n: g for n, g in zip(names, grads[t])}
        gt = tuple(Tensor(by_name[p.name]) for p in opt.parameters)
        opt(gt)
        for i, (g, p) in enumerate(zip(grads[t], params)):
            out["g_%d_%d" % (t, i)] = g
            out["w_%d_%d" % (t, i)] = p.asnumpy().copy()
    state, state_names = collect_state(opt, names)
    out.update(state)
    meta = {
        "optimizer": type(opt).__name__,
        "kwargs": kwargs_meta,
        "lr_schedule": lr_schedule,
        "names": list(names),
        "shapes": [list(s) for s in shapes],
        "groups": groups,
        "dtype": "float32",
        "steps": steps,
        "framework": "mindspore",
        "framework_version": ms.__version__,
        "state_names": state_names,
        "param_order": [p.name for p in opt.parameters],
        "mode": "PYNATIVE_MODE, CPU, grads fed directly via opt(tuple_of_grads)",
        "seeds": {"params": 0, "grads": 1, "rng": "numpy.default_rng standard_normal; grads *0.5"},
    }
    if notes:
        meta["notes"] = notes
    out["meta"] = np.array(json.dumps(meta))
    os.makedirs(OUT, exist_ok=True)
    np.savez_compressed(os.path.join(OUT, case + ".npz"), **out)
    return out


# ---------------------------------------------------------------- cases
def cases():
    C = {}

    def simple(cls, **kw):
        def build(params):
            return getattr(nn, cls)(params, **kw)
        return build

    def add(case, cls, kw, **extra):
        C[case] = dict(build=simple(cls, **kw), kwargs_meta=kw, **extra)

    # Momentum
    add("momentum_plain", "Momentum", dict(learning_rate=0.1, momentum=0.9))
    add("momentum_nesterov", "Momentum", dict(learning_rate=0.1, momentum=0.9, use_nesterov=True))
    add("momentum_wd_ls", "Momentum", dict(learning_rate=0.1, momentum=0.9, weight_decay=0.01, loss_scale=2.0))
    # SGD
    add("sgd_plain", "SGD", dict(learning_rate=0.1))
    add("sgd_momentum_dampening", "SGD", dict(learning_rate=0.1, momentum=0.9, dampening=0.1))
    add("sgd_nesterov", "SGD", dict(learning_rate=0.1, momentum=0.9, nesterov=True))
    add("sgd_wd_ls", "SGD", dict(learning_rate=0.1, momentum=0.9, weight_decay=0.01, loss_scale=2.0))
    # Adam family
    add("adam_plain", "Adam", dict(learning_rate=0.01))
    add("adam_nesterov", "Adam", dict(learning_rate=0.01, use_nesterov=True))
    add("adam_wd", "Adam", dict(learning_rate=0.01, weight_decay=0.01))
    add("adam_wd_ls", "Adam", dict(learning_rate=0.01, weight_decay=0.01, loss_scale=2.0))
    add("adam_amsgrad", "Adam", dict(learning_rate=0.01, use_amsgrad=True))
    add("adam_use_lazy", "Adam", dict(learning_rate=0.01, use_lazy=True))
    add("adam_use_offload", "Adam", dict(learning_rate=0.01, use_offload=True))
    add("adamoffload", "AdamOffload", dict(learning_rate=0.01, weight_decay=0.01))
    add("adamweightdecay", "AdamWeightDecay", dict(learning_rate=0.01, weight_decay=0.01))
    add("lazyadam", "LazyAdam", dict(learning_rate=0.01))
    add("lazyadam_wd_ls", "LazyAdam", dict(learning_rate=0.01, weight_decay=0.01, loss_scale=2.0))
    # issue 15 item 7: Nesterov with weight decay at a larger lr, where the float32 beta powers
    # (1 - float32(0.999) is 1.3e-5 relative from 0.001) show past atol 1e-6
    add("lazyadam_nesterov_wd", "LazyAdam", dict(learning_rate=0.1, use_nesterov=True, weight_decay=0.01))
    add("adam_nesterov_wd_ls", "Adam", dict(learning_rate=0.1, use_nesterov=True, weight_decay=0.1,
                                            loss_scale=2.0))
    add("lamb", "Lamb", dict(learning_rate=0.01))
    add("lamb_wd", "Lamb", dict(learning_rate=0.01, weight_decay=0.01))
    # FTRL
    add("ftrl_default", "FTRL", dict())
    add("ftrl_l1_l2", "FTRL", dict(learning_rate=0.05, initial_accum=0.2, l1=0.01, l2=0.02, lr_power=-0.3))
    add("ftrl_wd_ls", "FTRL", dict(learning_rate=0.05, weight_decay=0.01, loss_scale=2.0))
    # ProximalAdagrad
    add("proximaladagrad_default", "ProximalAdagrad", dict())
    add("proximaladagrad_l1_l2", "ProximalAdagrad", dict(learning_rate=0.05, accum=0.1, l1=0.01, l2=0.02))
    add("proximaladagrad_wd_ls", "ProximalAdagrad", dict(learning_rate=0.05, weight_decay=0.01, loss_scale=2.0))
    # Adagrad
    add("adagrad_default", "Adagrad", dict(learning_rate=0.05))
    add("adagrad_accum_noslots", "Adagrad", dict(learning_rate=0.05, accum=0.3, update_slots=False))
    add("adagrad_wd_ls", "Adagrad", dict(learning_rate=0.05, weight_decay=0.01, loss_scale=2.0))
    # RMSProp
    add("rmsprop_plain", "RMSProp", dict(learning_rate=0.01, momentum=0.9))
    add("rmsprop_centered", "RMSProp", dict(learning_rate=0.01, momentum=0.9, centered=True))
    add("rmsprop_nomomentum", "RMSProp", dict(learning_rate=0.01))
    add("rmsprop_wd_ls", "RMSProp", dict(learning_rate=0.01, momentum=0.9, weight_decay=0.01, loss_scale=2.0))

    # AdaFactor (4th param with a larger 2-D shape)
    af_names = NAMES + ["extra.weight"]
    af_shapes = SHAPES + [(8, 6)]
    C["adafactor_default"] = dict(build=simple("AdaFactor"), kwargs_meta=dict(), names=af_names,
                                  shapes=af_shapes)
    C["adafactor_lr_norel"] = dict(build=simple("AdaFactor", learning_rate=0.01, relative_step=False,
                                                scale_parameter=False),
                                   kwargs_meta=dict(learning_rate=0.01, relative_step=False, scale_parameter=False),
                                   names=af_names, shapes=af_shapes)
    C["adafactor_lr_scale_wd"] = dict(build=simple("AdaFactor", learning_rate=0.01, relative_step=False,
                                                   scale_parameter=True, weight_decay=0.1, beta1=0.0),
                                      kwargs_meta=dict(learning_rate=0.01, relative_step=False,
                                                       scale_parameter=True, weight_decay=0.1, beta1=0.0),
                                      names=af_names, shapes=af_shapes)

    # LARS wrapping Momentum
    def lars_build(mkw, lkw):
        def build(params):
            return nn.LARS(nn.Momentum(params, **mkw), **lkw)
        return build
    C["lars_momentum"] = dict(build=lars_build(dict(learning_rate=0.1, momentum=0.9), {}),
                              kwargs_meta={"optimizer": {"class": "Momentum", "learning_rate": 0.1, "momentum": 0.9},
                                           "epsilon": 1e-05, "coefficient": 0.001, "use_clip": False})
    C["lars_momentum_wd_ls"] = dict(
        build=lars_build(dict(learning_rate=0.1, momentum=0.9, weight_decay=0.01, loss_scale=2.0),
                         dict(epsilon=1e-6, coefficient=0.02)),
        kwargs_meta={"optimizer": {"class": "Momentum", "learning_rate": 0.1, "momentum": 0.9,
                                   "weight_decay": 0.01, "loss_scale": 2.0},
                     "epsilon": 1e-6, "coefficient": 0.02, "use_clip": False})
    C["lars_momentum_clip"] = dict(
        build=lars_build(dict(learning_rate=0.1, momentum=0.9, weight_decay=0.01),
                         dict(coefficient=0.02, use_clip=True)),
        kwargs_meta={"optimizer": {"class": "Momentum", "learning_rate": 0.1, "momentum": 0.9,
                                   "weight_decay": 0.01},
                     "epsilon": 1e-05, "coefficient": 0.02, "use_clip": True})

    # parameter groups + order_params
    def group_build(cls, okw, spec):
        def build(params):
            by = {p.name: p for p in params}
            groups = []
            for g in spec:
                d = {k: v for k, v in g.items() if k != "params" and k != "order_params"}
                if "params" in g:
                    d["params"] = [by[n] for n in g["params"]]
                if "order_params" in g:
                    d["order_params"] = [by[n] for n in g["order_params"]]
                groups.append(d)
            return getattr(nn, cls)(groups, **okw)
        return build
    spec = [{"params": ["dense.weight", "bn.gamma"], "lr": 0.05, "weight_decay": 0.01},
            {"params": ["dense.bias"], "weight_decay": 0.02, "grad_centralization": True},
            {"order_params": ["dense.bias", "dense.weight", "bn.gamma"]}]
    C["momentum_groups"] = dict(build=group_build("Momentum", dict(learning_rate=0.1, momentum=0.9), spec),
                                kwargs_meta=dict(learning_rate=0.1, momentum=0.9), groups=spec,
                                notes="opt.parameters order follows order_params; w_/g_ indices follow 'names'")
    C["adam_groups"] = dict(build=group_build("Adam", dict(learning_rate=0.01, weight_decay=0.001), spec),
                            kwargs_meta=dict(learning_rate=0.01, weight_decay=0.001), groups=spec)
    spec_nolr = [{"params": ["dense.weight"], "weight_decay": 0.05},
                 {"params": ["dense.bias", "bn.gamma"]}]
    C["momentum_groups_wd_only"] = dict(
        build=group_build("Momentum", dict(learning_rate=0.1, momentum=0.9, weight_decay=0.01), spec_nolr),
        kwargs_meta=dict(learning_rate=0.1, momentum=0.9, weight_decay=0.01), groups=spec_nolr,
        notes="in groups mode bn.gamma IS decayed (no beta/gamma filter); group without weight_decay uses 0.01")

    # grad centralization on a conv-shaped parameter (shape[1] % 16 == 0)
    gc_names = ["conv.weight", "dense.bias", "bn.gamma"]
    gc_shapes = [(4, 16, 1, 2), (3,), (2, 2, 2)]
    spec_gc = [{"params": ["conv.weight"], "grad_centralization": True},
               {"params": ["dense.bias", "bn.gamma"]}]
    C["momentum_groups_gc"] = dict(build=group_build("Momentum", dict(learning_rate=0.1, momentum=0.9), spec_gc),
                                   kwargs_meta=dict(learning_rate=0.1, momentum=0.9), groups=spec_gc,
                                   names=gc_names, shapes=gc_shapes)

    # dynamic lr as a list
    lr_list = [round(0.1 * (0.9 ** i), 6) for i in range(STEPS)]
    C["momentum_dynamic_lr_list"] = dict(build=simple("Momentum", learning_rate=lr_list, momentum=0.9),
                                         kwargs_meta=dict(learning_rate=lr_list, momentum=0.9))
    C["adam_dynamic_lr_list"] = dict(build=simple("Adam", learning_rate=lr_list),
                                     kwargs_meta=dict(learning_rate=lr_list))

    # LearningRateSchedule with Momentum
    sched = [
        ("ExponentialDecayLR", dict(learning_rate=0.1, decay_rate=0.9, decay_steps=4, is_stair=False)),
        ("ExponentialDecayLR", dict(learning_rate=0.1, decay_rate=0.9, decay_steps=4, is_stair=True)),
        ("NaturalExpDecayLR", dict(learning_rate=0.1, decay_rate=0.9, decay_steps=4, is_stair=True)),
        ("InverseDecayLR", dict(learning_rate=0.1, decay_rate=0.9, decay_steps=4, is_stair=False)),
        ("CosineDecayLR", dict(min_lr=0.01, max_lr=0.1, decay_steps=10)),
        ("PolynomialDecayLR", dict(learning_rate=0.1, end_learning_rate=0.01, decay_steps=8, power=0.5,
                                   update_decay_steps=True)),
        ("WarmUpLR", dict(learning_rate=0.1, warmup_steps=5)),
    ]
    for cls, skw in sched:
        case = "momentum_sched_" + cls.lower() + ("_stair" if skw.get("is_stair") else "")

        def build(params, cls=cls, skw=skw):
            return nn.Momentum(params, learning_rate=getattr(nn, cls)(**skw), momentum=0.9)
        C[case] = dict(build=build, kwargs_meta=dict(momentum=0.9),
                       lr_schedule={"type": cls, "kwargs": skw})
    # a schedule with Adam as well (global_step/beta_power ordering)
    C["adam_sched_warmuplr"] = dict(
        build=lambda params: nn.Adam(params, learning_rate=nn.WarmUpLR(0.01, 5)),
        kwargs_meta=dict(), lr_schedule={"type": "WarmUpLR", "kwargs": dict(learning_rate=0.01, warmup_steps=5)})
    return C


def schedules():
    specs = {
        "ExponentialDecayLR": dict(learning_rate=0.1, decay_rate=0.9, decay_steps=4),
        "NaturalExpDecayLR": dict(learning_rate=0.1, decay_rate=0.1, decay_steps=4),
        "InverseDecayLR": dict(learning_rate=0.1, decay_rate=0.5, decay_steps=4),
    }
    out, meta = {}, {}
    steps = np.arange(41)
    for cls, kw in specs.items():
        for stair in (False, True):
            k = "%s_stair%d" % (cls, int(stair))
            s = getattr(nn, cls)(is_stair=stair, **kw)
            out[k] = np.array([s(Tensor(int(t), ms.int32)).asnumpy() for t in steps], np.float32).reshape(-1)
            meta[k] = {"type": cls, "kwargs": dict(kw, is_stair=stair)}
    extra = {
        "CosineDecayLR": ("CosineDecayLR", dict(min_lr=0.01, max_lr=0.1, decay_steps=10)),
        "PolynomialDecayLR_update0": ("PolynomialDecayLR", dict(learning_rate=0.1, end_learning_rate=0.01,
                                                                 decay_steps=8, power=0.5, update_decay_steps=False)),
        "PolynomialDecayLR_update1": ("PolynomialDecayLR", dict(learning_rate=0.1, end_learning_rate=0.01,
                                                                 decay_steps=8, power=0.5, update_decay_steps=True)),
        "PolynomialDecayLR_power2": ("PolynomialDecayLR", dict(learning_rate=0.1, end_learning_rate=0.0,
                                                                decay_steps=16, power=2.0)),
        "WarmUpLR": ("WarmUpLR", dict(learning_rate=0.1, warmup_steps=10)),
    }
    for k, (cls, kw) in extra.items():
        s = getattr(nn, cls)(**kw)
        out[k] = np.array([s(Tensor(int(t), ms.int32)).asnumpy() for t in steps], np.float32).reshape(-1)
        meta[k] = {"type": cls, "kwargs": kw}
    # dynamic_lr helpers (plain python lists)
    from mindspore.nn import dynamic_lr as D
    dl = {
        "piecewise_constant_lr": ("piecewise_constant_lr", dict(milestone=[5, 12, 41], learning_rates=[0.1, 0.05, 0.01])),
        "exponential_decay_lr": ("exponential_decay_lr", dict(learning_rate=0.1, decay_rate=0.9, total_step=41,
                                                              step_per_epoch=2, decay_epoch=3)),
        "exponential_decay_lr_stair": ("exponential_decay_lr", dict(learning_rate=0.1, decay_rate=0.9, total_step=41,
                                                                    step_per_epoch=2, decay_epoch=3, is_stair=True)),
        "natural_exp_decay_lr": ("natural_exp_decay_lr", dict(learning_rate=0.1, decay_rate=0.1, total_step=41,
                                                              step_per_epoch=2, decay_epoch=3)),
        "inverse_decay_lr": ("inverse_decay_lr", dict(learning_rate=0.1, decay_rate=0.5, total_step=41,
                                                      step_per_epoch=2, decay_epoch=3)),
        "cosine_decay_lr": ("cosine_decay_lr", dict(min_lr=0.01, max_lr=0.1, total_step=41, step_per_epoch=2,
                                                    decay_epoch=5)),
        "polynomial_decay_lr": ("polynomial_decay_lr", dict(learning_rate=0.1, end_learning_rate=0.01, total_step=41,
                                                            step_per_epoch=2, decay_epoch=5, power=0.5)),
        "polynomial_decay_lr_update": ("polynomial_decay_lr", dict(learning_rate=0.1, end_learning_rate=0.01,
                                                                   total_step=41, step_per_epoch=2, decay_epoch=5,
                                                                   power=0.5, update_decay_epoch=True)),
        "warmup_lr": ("warmup_lr", dict(learning_rate=0.1, total_step=41, step_per_epoch=2, warmup_epoch=5)),
    }
    for k, (fn, kw) in dl.items():
        try:
            vals = getattr(D, fn)(**kw)
        except Exception as e:  # record failure, never fake
            meta["dynamic_lr." + k] = {"function": fn, "kwargs": kw, "error": repr(e)}
            continue
        out["dynamic_lr." + k] = np.array(vals, np.float64)
        meta["dynamic_lr." + k] = {"function": fn, "kwargs": kw}
    out["global_step"] = steps
    out["meta"] = np.array(json.dumps({"framework": "mindspore", "framework_version": ms.__version__,
                                       "entries": meta,
                                       "note": "LearningRateSchedule entries: value of sched(Tensor(global_step,int32)) "
                                               "for global_step=0..40 (float32); dynamic_lr.* entries: the python list "
                                               "returned by mindspore.nn.dynamic_lr.<fn>(**kwargs) (float64)."}))
    np.savez_compressed(os.path.join(OUT, "schedules.npz"), **out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    os.chdir(_TMP)
    os.makedirs(OUT, exist_ok=True)
    failures = {}
    for name, spec in cases().items():
        if a.only and name not in a.only:
            continue
        try:
            run_case(name, **spec)
            print("ok  ", name, flush=True)
        except Exception as e:  # never fake a golden
            failures[name] = repr(e)[:500]
            print("FAIL", name, repr(e)[:300], flush=True)
    if not a.only or "schedules" in a.only:
        schedules()
        print("ok   schedules")
    if not a.only:
        with open(os.path.join(OUT, "FAILURES.json"), "w") as f:
            json.dump(failures, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
