#!/usr/bin/env python
"""Generate goldens for the Paddle optimizer family (SGD ... Rprop) for gradxform.

Run with the Paddle venv (never imported by tests):

    /work/venvs/paddle/bin/python tools/paddle_optimizer_goldens.py [case ...]

Writes tests/goldens/paddle/opt_<case>.npz (and opt_FAILURES.json for cases Paddle
refuses on CPU) and tests/fixtures/paddle/opt_<case>.pdopt (``paddle.save(opt.state_dict())``
after K=10 steps, for the migration tests: continue K -> 20 against the trajectory).
Each case runs in its own subprocess (Paddle refuses two parameters with one name in
a process; this also keeps accumulator names at suffix ``_0``).

npz layout: ``meta`` (json: the case spec, names, shapes, dtype, steps, state names),
``w0_<i>``, ``g_<t>_<i>`` (the raw gradient: loss = sum_i sum(p_i * g_i), so
p.grad == g, asserted), ``w_<t>_<i>`` (parameters after step t, as float32), ``lr_<t>``
(opt.get_lr() before step t), ``s_<acc>_<i>`` (final accumulators, as float32/int64).

A case spec (JSON, read by tests/test_paddle_optimizers_parity.py to build the same
optimizer in gradxform):
    optimizer: Paddle class name;  kwargs: plain keyword arguments;
    weight_decay: float | {"type": "L1Decay"|"L2Decay", "coeff": c}
    grad_clip: {"type": "ClipGradByGlobalNorm"|"ClipGradByNorm"|"ClipGradByValue", ...}
    no_clip: [names] (need_clip=False);  lr_schedule: {"type": ..., "kwargs": ...}
    groups: [{"params": [names], "learning_rate": r, "weight_decay": ...}]
    decay_names / exclude_names: the names apply_decay_param_fun / exclude_from_weight_decay_fn
    pick;
    dtype: "float32" | "bfloat16";  zero_init / zero_grad: [names] started at 0 / given 0 gradients.
"""
import json
import os
import sys

import numpy as np

from _case_runner import run_cases

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "goldens", "paddle")
STEPS = 20
K = 10  # tests/fixtures/paddle/opt_<case>.pdopt: opt.state_dict() after K steps
FIX = os.path.join(ROOT, "tests", "fixtures", "paddle")
NAMES = ["dense.weight", "dense.bias", "bn.gamma"]
SHAPES = [(4, 3), (3,), (2, 2, 2)]

L2 = lambda c: {"type": "L2Decay", "coeff": c}  # noqa: E731
L1 = lambda c: {"type": "L1Decay", "coeff": c}  # noqa: E731
GN = lambda c: {"type": "ClipGradByGlobalNorm", "clip_norm": c}  # noqa: E731
GROUPS = [{"params": ["dense.weight"], "learning_rate": 0.5, "weight_decay": L1(0.02)},
          {"params": ["dense.bias", "bn.gamma"], "weight_decay": 0.03}]


def C(optimizer, **spec):
    return dict(optimizer=optimizer, **spec)


CASES = {
    "sgd_default": C("SGD"),
    "sgd_l2_float_stepdecay": C("SGD", weight_decay=0.05,
                                lr_schedule={"type": "StepDecay", "kwargs": dict(learning_rate=0.1, step_size=4,
                                                                                 gamma=0.5)}),
    "sgd_l1_clip_value": C("SGD", kwargs=dict(learning_rate=0.1), weight_decay=L1(0.02),
                           grad_clip={"type": "ClipGradByValue", "max": 0.3}),
    "sgd_groups_global_norm": C("SGD", kwargs=dict(learning_rate=0.1), weight_decay=L2(0.01), grad_clip=GN(0.8),
                                groups=GROUPS),
    "sgd_need_clip": C("SGD", kwargs=dict(learning_rate=0.1), grad_clip=GN(0.5), no_clip=["dense.bias"]),
    "sgd_bf16": C("SGD", kwargs=dict(learning_rate=0.1), dtype="bfloat16"),
    "sgd_bf16_multi_precision": C("SGD", kwargs=dict(learning_rate=0.1, multi_precision=True), weight_decay=0.05,
                                  dtype="bfloat16"),
    "momentum_default": C("Momentum"),
    "momentum_nesterov_l2": C("Momentum", kwargs=dict(learning_rate=0.05, momentum=0.8, use_nesterov=True),
                              weight_decay=L2(0.02)),
    "momentum_l1_clip_norm": C("Momentum", kwargs=dict(learning_rate=0.05), weight_decay=L1(0.02),
                               grad_clip={"type": "ClipGradByNorm", "clip_norm": 0.5}),
    "momentum_rescale_grad": C("Momentum", kwargs=dict(learning_rate=0.05, rescale_grad=0.5)),
    "momentum_groups_piecewise": C("Momentum", kwargs=dict(momentum=0.9), weight_decay=0.01, grad_clip=GN(1.0),
                                   groups=GROUPS, lr_schedule={"type": "PiecewiseDecay", "kwargs": dict(
                                       boundaries=[5, 12], values=[0.1, 0.05, 0.01])}),
    "adam_default": C("Adam"),
    "adam_amsgrad_l2": C("Adam", kwargs=dict(learning_rate=0.01, beta1=0.8, beta2=0.99, epsilon=1e-6,
                                             amsgrad=True), weight_decay=L2(0.01)),
    "adam_lazy_clip_global": C("Adam", kwargs=dict(learning_rate=0.01, lazy_mode=True), grad_clip=GN(1.0)),
    "adam_groups_cosine": C("Adam", groups=GROUPS, lr_schedule={"type": "CosineAnnealingDecay", "kwargs": dict(
        learning_rate=0.01, T_max=10)}),
    "adamw_default": C("AdamW"),
    "adamw_decay_fun_amsgrad": C("AdamW", kwargs=dict(learning_rate=0.01, weight_decay=0.1, amsgrad=True),
                                 decay_names=["dense.weight"]),
    "adamw_groups": C("AdamW", kwargs=dict(learning_rate=0.01, weight_decay=0.05),
                      groups=[{"params": ["dense.weight"], "learning_rate": 0.5, "weight_decay": 0.2},
                              {"params": ["dense.bias", "bn.gamma"]}]),
    "adamax_default": C("Adamax"),
    "adamax_l2_clip": C("Adamax", kwargs=dict(learning_rate=0.01, beta1=0.8, beta2=0.99, epsilon=1e-6),
                        weight_decay=0.02, grad_clip=GN(1.0)),
    "adagrad_default": C("Adagrad", kwargs=dict(learning_rate=0.1)),
    "adagrad_initial_acc_l1": C("Adagrad", kwargs=dict(learning_rate=0.1, epsilon=1e-5,
                                                       initial_accumulator_value=0.2), weight_decay=L1(0.01)),
    "adadelta_default": C("Adadelta"),
    "adadelta_lr_rho": C("Adadelta", kwargs=dict(learning_rate=0.5, rho=0.9, epsilon=1e-5), weight_decay=0.01),
    "rmsprop_default": C("RMSProp", kwargs=dict(learning_rate=0.01)),
    "rmsprop_centered_momentum": C("RMSProp", kwargs=dict(learning_rate=0.01, rho=0.9, epsilon=1e-5,
                                                          momentum=0.5, centered=True), weight_decay=L2(0.01)),
    "lamb_default": C("Lamb"),
    "lamb_exclude_clip": C("Lamb", kwargs=dict(learning_rate=0.01, lamb_weight_decay=0.05), grad_clip=GN(1.0),
                           exclude_names=["dense.bias"]),
    "lamb_always_adapt": C("Lamb", kwargs=dict(learning_rate=0.01, lamb_weight_decay=0.0, always_adapt=True)),
    "nadam_default": C("NAdam"),
    "nadam_options": C("NAdam", kwargs=dict(learning_rate=0.01, beta1=0.8, beta2=0.99, epsilon=1e-6,
                                            momentum_decay=0.01), weight_decay=0.01),
    "radam_default": C("RAdam", kwargs=dict(learning_rate=0.01)),
    "radam_options": C("RAdam", kwargs=dict(learning_rate=0.01, beta1=0.8, beta2=0.9), weight_decay=L1(0.01)),
    # a group's own optimizer hyperparameters (Paddle's _update_param_group)
    "adam_group_hyper": C("Adam", kwargs=dict(learning_rate=0.01),
                          groups=[{"params": ["dense.weight"], "beta1": 0.8, "epsilon": 1e-4},
                                  {"params": ["dense.bias", "bn.gamma"], "beta2": 0.9}]),
    "adamw_group_hyper": C("AdamW", kwargs=dict(learning_rate=0.01, amsgrad=True),
                           groups=[{"params": ["dense.weight"], "beta1": 0.7, "weight_decay": 0.3},
                                   {"params": ["dense.bias", "bn.gamma"], "beta2": 0.95}]),
    "adamax_group_hyper": C("Adamax", kwargs=dict(learning_rate=0.01),
                            groups=[{"params": ["dense.weight"], "beta1": 0.7}, {"params": ["dense.bias", "bn.gamma"],
                                                                                 "epsilon": 1e-3}]),
    "adagrad_group_hyper": C("Adagrad", kwargs=dict(learning_rate=0.1),
                             groups=[{"params": ["dense.weight"], "initial_accumulator_value": 0.5},
                                     {"params": ["dense.bias", "bn.gamma"], "epsilon": 1e-3}]),
    "adadelta_group_hyper": C("Adadelta", kwargs=dict(learning_rate=0.5),
                              groups=[{"params": ["dense.weight"], "rho": 0.8}, {"params": ["dense.bias", "bn.gamma"]}]),
    "rmsprop_group_hyper": C("RMSProp", kwargs=dict(learning_rate=0.01, momentum=0.3),
                             groups=[{"params": ["dense.weight"], "rho": 0.8, "momentum": 0.6},
                                     {"params": ["dense.bias", "bn.gamma"], "epsilon": 1e-3}]),
    # a group's own 'centered' (issue 24): mean_grad exists for every parameter in Paddle
    "rmsprop_group_centered": C("RMSProp", kwargs=dict(learning_rate=0.01, momentum=0.3), weight_decay=L2(0.01),
                                groups=[{"params": ["dense.weight"], "centered": True},
                                        {"params": ["dense.bias", "bn.gamma"], "rho": 0.8}],
                                lr_schedule={"type": "StepDecay", "kwargs": dict(learning_rate=0.01, step_size=4,
                                                                                 gamma=0.5)}),
    "rmsprop_group_uncentered": C("RMSProp", kwargs=dict(learning_rate=0.01, centered=True, epsilon=1e-4),
                                  groups=[{"params": ["dense.weight", "bn.gamma"]},
                                          {"params": ["dense.bias"], "centered": False, "momentum": 0.5}]),
    "lamb_group_hyper": C("Lamb", kwargs=dict(learning_rate=0.01),
                          groups=[{"params": ["dense.weight"], "beta1": 0.8, "lamb_weight_decay": 0.1},
                                  {"params": ["dense.bias", "bn.gamma"], "beta2": 0.9}]),
    "nadam_group_hyper": C("NAdam", kwargs=dict(learning_rate=0.01),
                           groups=[{"params": ["dense.weight"], "beta1": 0.8, "momentum_decay": 0.01},
                                   {"params": ["dense.bias", "bn.gamma"], "beta2": 0.9}]),
    "radam_group_hyper": C("RAdam", kwargs=dict(learning_rate=0.01),
                           groups=[{"params": ["dense.weight"], "beta1": 0.8},
                                   {"params": ["dense.bias", "bn.gamma"], "beta2": 0.9}]),
    "momentum_group_hyper": C("Momentum", kwargs=dict(learning_rate=0.05, momentum=0.9), weight_decay=0.01,
                              groups=[{"params": ["dense.weight"], "momentum": 0.5, "use_nesterov": True},
                                      {"params": ["dense.bias", "bn.gamma"], "weight_decay": L1(0.02)}]),
    # the trust ratio's "1 when a norm is 0" guard (issue 28): a zero-initialised
    # parameter (|w| = 0, |r| > 0) and one that also gets zero gradients (|w| = |r| = 0)
    "lamb_zero_init": C("Lamb", kwargs=dict(learning_rate=0.01, lamb_weight_decay=0.01),
                        zero_init=["dense.bias"]),
    "lamb_zero_init_always_adapt": C("Lamb", kwargs=dict(learning_rate=0.01, lamb_weight_decay=0.0,
                                                         always_adapt=True),
                                     zero_init=["dense.bias", "bn.gamma"], zero_grad=["bn.gamma"]),
    "rprop_default": C("Rprop"),
    "rprop_options": C("Rprop", kwargs=dict(learning_rate=0.01, learning_rate_range=(1e-4, 0.05),
                                            etas=(0.4, 1.5)), grad_clip={"type": "ClipGradByValue", "max": 0.6}),
}


def _reg(paddle, wd):
    if isinstance(wd, dict):
        return getattr(paddle.regularizer, wd["type"])(wd["coeff"])
    return wd


def _sched(paddle, m):
    kw = dict(m["kwargs"])
    for k, v in list(kw.items()):
        if isinstance(v, dict) and "type" in v:
            kw[k] = _sched(paddle, v)
    return getattr(paddle.optimizer.lr, m["type"])(**kw)


def run_case(name):
    import paddle  # noqa: PLC0415

    paddle.set_device("cpu")
    spec = CASES[name]
    dtype = spec.get("dtype", "float32")
    rng = np.random.default_rng(0)
    w0 = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    w0 = [np.zeros_like(w) if n in spec.get("zero_init", ()) else w for w, n in zip(w0, NAMES)]
    params = []
    for w, n in zip(w0, NAMES):
        p = paddle.create_parameter(list(w.shape), dtype, attr=paddle.ParamAttr(name=n),
                                    default_initializer=paddle.nn.initializer.Constant(0.0))
        p.set_value(paddle.to_tensor(w).astype(dtype))
        if n in spec.get("no_clip", ()):
            p.need_clip = False
        params.append(p)
    w0 = [p.astype("float32").numpy() for p in params]
    grng = np.random.default_rng(1)
    grads = [[paddle.to_tensor((grng.standard_normal(s) * 0.5).astype(np.float32)).astype(dtype)
              .astype("float32").numpy() for s in SHAPES] for _ in range(STEPS)]
    # a zero row in dense.weight at some steps (lazy_mode / Rprop sign changes see it)
    for t in range(3, STEPS, 4):
        grads[t][0][1, :] = 0.0
    for i, n in enumerate(NAMES):
        if n in spec.get("zero_grad", ()):
            for t in range(STEPS):
                grads[t][i][...] = 0.0
    kw = dict(spec.get("kwargs", {}))
    if "learning_rate_range" in kw:
        kw["learning_rate_range"] = tuple(kw["learning_rate_range"])
        kw["etas"] = tuple(kw["etas"])
    sched = None
    if spec.get("lr_schedule"):
        sched = _sched(paddle, spec["lr_schedule"])
        kw["learning_rate"] = sched
    if "weight_decay" in spec:
        kw["weight_decay"] = _reg(paddle, spec["weight_decay"])
    if spec.get("grad_clip"):
        c = dict(spec["grad_clip"])
        kw["grad_clip"] = getattr(paddle.nn, c.pop("type"))(**c)
    if "decay_names" in spec:
        chosen = set(spec["decay_names"])
        kw["apply_decay_param_fun"] = lambda n: n in chosen
    if "exclude_names" in spec:
        excluded = set(spec["exclude_names"])
        kw["exclude_from_weight_decay_fn"] = lambda p: p.name in excluded
    by_name = dict(zip(NAMES, params))
    if spec.get("groups"):
        groups = []
        for g in spec["groups"]:
            g2 = {k: (_reg(paddle, v) if k == "weight_decay" else v) for k, v in g.items()}
            g2["params"] = [by_name[n] for n in g["params"]]
            groups.append(g2)
        kw["parameters"] = groups
    else:
        kw["parameters"] = params
    opt = getattr(paddle.optimizer, spec["optimizer"])(**kw)
    out = {f"w0_{i}": w for i, w in enumerate(w0)}
    for t in range(STEPS):
        out[f"lr_{t}"] = np.array(opt.get_lr(), np.float64)
        loss = None
        for p, g in zip(params, grads[t]):
            term = (p.astype("float32") * paddle.to_tensor(g)).sum()
            loss = term if loss is None else loss + term
        loss.backward()
        for p, g in zip(params, grads[t]):
            assert np.array_equal(p.grad.astype("float32").numpy(), g), "grad mismatch"
        opt.step()
        opt.clear_grad()
        if sched is not None:
            sched.step()
        if t == K - 1:  # the migration fixture: the state after K steps, as a user saves it
            os.makedirs(FIX, exist_ok=True)
            paddle.save(opt.state_dict(), os.path.join(FIX, f"opt_{name}.pdopt"))
        for i, (g, p) in enumerate(zip(grads[t], params)):
            out[f"g_{t}_{i}"] = g
            out[f"w_{t}_{i}"] = p.astype("float32").numpy()
    state_names = {}
    sd = opt.state_dict()
    for k, v in sd.items():
        if k in ("LR_Scheduler", "master_weights"):
            continue
        for i, n in enumerate(NAMES):
            if k.startswith(n + "_"):
                key = f"s_{k[len(n) + 1:]}_{i}"
                arr = v.numpy() if v.dtype != paddle.bfloat16 else v.astype("float32").numpy()
                out[key] = np.array(arr)
                state_names[key] = k
    for k, v in (sd.get("master_weights") or {}).items():
        i = NAMES.index(k)
        out[f"s_master_{i}"] = np.array(v.numpy())
        state_names[f"s_master_{i}"] = "master_weights/" + k
    meta = dict(spec, case=name, names=NAMES, shapes=[list(s) for s in SHAPES], dtype=dtype, steps=STEPS,
                framework="paddle", framework_version=paddle.__version__, state_names=state_names,
                mode="dygraph, CPU; loss=sum_i sum(p_i*g_i); backward; opt.step(); opt.clear_grad(); "
                     "sched.step() after opt.step()")
    if sched is not None:
        meta["lr_scheduler_state_dict"] = sched.state_dict()
    out["meta"] = np.array(json.dumps(meta, default=float))
    np.savez_compressed(os.path.join(OUT, f"opt_{name}.npz"), **out)


def main():
    args = sys.argv[1:]
    if args and args[0] == "--case":
        run_case(args[1])
        return
    os.makedirs(OUT, exist_ok=True)
    failures = run_cases(os.path.abspath(__file__), CASES, args)
    if not args:
        with open(os.path.join(OUT, "opt_FAILURES.json"), "w") as f:
            json.dump(failures, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
