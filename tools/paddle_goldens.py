#!/usr/bin/env python
"""Generate Paddle ASGD + paddle.optimizer.lr goldens for gradxform.

Run with the Paddle venv (never imported by tests):

    /work/venvs/paddle/bin/python tools/paddle_goldens.py

Writes tests/goldens/paddle/<case>.npz and tests/goldens/paddle/schedules.npz.

Per-case npz layout:
    meta      json: optimizer, kwargs, lr_schedule, names, groups, dtype, steps, framework_version,
              state_names (npz key -> paddle state_dict key)
    w0_<i>, g_<t>_<i>, w_<t>_<i>   (gradient is produced by loss = sum(p * g) so p.grad == g exactly;
                                   the *unclipped, undecayed* gradient is what is stored)
    lr_<t>    opt.get_lr() read before step t
    s_<state>_<i>  final accumulators d / y / m (+ master weight when multi_precision)
"""
import json
import os
import sys

import numpy as np
import paddle

from _case_runner import run_cases

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "goldens", "paddle")
STEPS = 20
NAMES = ["dense.weight", "dense.bias", "bn.gamma"]
SHAPES = [(4, 3), (3,), (2, 2, 2)]

paddle.set_device("cpu")


def make_params(dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    w0 = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    params = []
    for w, n in zip(w0, NAMES):
        p = paddle.create_parameter(list(w.shape), dtype, attr=paddle.ParamAttr(name=n))
        p.set_value(w.astype(dtype))
        params.append(p)
    return [w.astype(dtype) for w in w0], params


def make_grads(dtype="float32", seed=1):
    rng = np.random.default_rng(seed)
    return [[(rng.standard_normal(s) * 0.5).astype(np.float32).astype(dtype) for s in SHAPES]
            for _ in range(STEPS)]


def run_case(case, build, kwargs_meta, lr_schedule=None, dtype="float32", notes=None):
    w0, params = make_params(dtype)
    grads = make_grads(dtype)
    opt, sched = build(params)
    out = {}
    for i, w in enumerate(w0):
        out["w0_%d" % i] = w
    for t in range(STEPS):
        out["lr_%d" % t] = np.array(opt.get_lr(), np.float64)
        loss = None
        for p, g in zip(params, grads[t]):
            if dtype == "float32":
                term = (p * paddle.to_tensor(g)).sum()
            else:  # no fp16 'multiply' kernel on CPU: differentiate through a cast instead
                term = (p.astype("float32") * paddle.to_tensor(g.astype(np.float32))).sum()
            loss = term if loss is None else loss + term
        loss.backward()
        for p, g in zip(params, grads[t]):
            assert np.array_equal(p.grad.numpy().astype(np.float32), g.astype(np.float32)), "grad mismatch"
        opt.step()
        opt.clear_grad()
        if sched is not None:
            sched.step()
        for i, (g, p) in enumerate(zip(grads[t], params)):
            out["g_%d_%d" % (t, i)] = g
            out["w_%d_%d" % (t, i)] = p.numpy().copy()
    sd = opt.state_dict()
    state_names = {}
    for k, v in sd.items():
        if k in ("LR_Scheduler", "master_weights"):
            continue
        for i, n in enumerate(NAMES):
            if k.startswith(n + "_"):
                tag = k[len(n) + 1:]
                key = "s_%s_%d" % (tag.replace(".", "_"), i)
                out[key] = np.array(v.numpy())
                state_names[key] = k
    if "master_weights" in sd:
        for k, v in sd["master_weights"].items():
            for i, n in enumerate(NAMES):
                if k == n:
                    out["s_master_weight_%d" % i] = np.array(v.numpy())
                    state_names["s_master_weight_%d" % i] = "master_weights/" + k
    meta = {
        "optimizer": type(opt).__name__,
        "kwargs": kwargs_meta,
        "lr_schedule": lr_schedule,
        "names": NAMES,
        "shapes": [list(s) for s in SHAPES],
        "groups": None,
        "dtype": dtype,
        "steps": STEPS,
        "framework": "paddle",
        "framework_version": paddle.__version__,
        "state_names": state_names,
        "mode": "dygraph, CPU; loss=sum_i sum(p_i*g_i); loss.backward(); opt.step(); opt.clear_grad();"
                " sched.step() after opt.step() when an LRScheduler is used",
        "seeds": {"params": 0, "grads": 1, "rng": "numpy.default_rng standard_normal; grads *0.5"},
    }
    if sched is not None:
        meta["lr_scheduler_state_dict"] = sched.state_dict()
    if notes:
        meta["notes"] = notes
    out["meta"] = np.array(json.dumps(meta))
    os.makedirs(OUT, exist_ok=True)
    np.savez_compressed(os.path.join(OUT, case + ".npz"), **out)


def cases():
    C = {}
    A = paddle.optimizer.ASGD

    def add(case, kw, meta_kw=None, make_kw=None, **extra):
        def build(params):
            k = dict(kw)
            if make_kw:
                k.update(make_kw())
            return A(parameters=params, **k), None
        C[case] = dict(build=build, kwargs_meta=meta_kw if meta_kw is not None else kw, **extra)

    add("asgd_default", dict())
    add("asgd_lr_batch3", dict(learning_rate=0.05, batch_num=3))
    add("asgd_batch3_wd_float", dict(learning_rate=0.05, batch_num=3, weight_decay=0.01))
    add("asgd_batch3_l2decay", dict(learning_rate=0.05, batch_num=3),
        meta_kw=dict(learning_rate=0.05, batch_num=3, weight_decay={"type": "L2Decay", "coeff": 0.02}),
        make_kw=lambda: dict(weight_decay=paddle.regularizer.L2Decay(0.02)))
    add("asgd_batch3_l1decay", dict(learning_rate=0.05, batch_num=3),
        meta_kw=dict(learning_rate=0.05, batch_num=3, weight_decay={"type": "L1Decay", "coeff": 0.02}),
        make_kw=lambda: dict(weight_decay=paddle.regularizer.L1Decay(0.02)))
    add("asgd_batch3_clip_global_norm", dict(learning_rate=0.05, batch_num=3),
        meta_kw=dict(learning_rate=0.05, batch_num=3, grad_clip={"type": "ClipGradByGlobalNorm", "clip_norm": 1.0}),
        make_kw=lambda: dict(grad_clip=paddle.nn.ClipGradByGlobalNorm(clip_norm=1.0)))
    add("asgd_batch3_clip_value", dict(learning_rate=0.05, batch_num=3),
        meta_kw=dict(learning_rate=0.05, batch_num=3, grad_clip={"type": "ClipGradByValue", "max": 0.3,
                                                                  "min": -0.3}),
        make_kw=lambda: dict(grad_clip=paddle.nn.ClipGradByValue(max=0.3)))
    add("asgd_batch3_clip_norm", dict(learning_rate=0.05, batch_num=3),
        meta_kw=dict(learning_rate=0.05, batch_num=3, grad_clip={"type": "ClipGradByNorm", "clip_norm": 0.5}),
        make_kw=lambda: dict(grad_clip=paddle.nn.ClipGradByNorm(clip_norm=0.5)))
    add("asgd_batch3_wd_clip", dict(learning_rate=0.05, batch_num=3, weight_decay=0.05),
        meta_kw=dict(learning_rate=0.05, batch_num=3, weight_decay=0.05,
                     grad_clip={"type": "ClipGradByGlobalNorm", "clip_norm": 1.0}),
        make_kw=lambda: dict(grad_clip=paddle.nn.ClipGradByGlobalNorm(clip_norm=1.0)),
        notes="order check: clipping vs. regularization")
    add("asgd_fp16_multi_precision", dict(learning_rate=0.05, batch_num=3, multi_precision=True),
        dtype="float16")
    add("asgd_fp16_no_multi_precision", dict(learning_rate=0.05, batch_num=3, multi_precision=False),
        dtype="float16")

    def sched_build(make_sched, kw):
        def build(params):
            s = make_sched()
            return A(learning_rate=s, parameters=params, **kw), s
        return build
    C["asgd_batch3_stepdecay"] = dict(
        build=sched_build(lambda: paddle.optimizer.lr.StepDecay(learning_rate=0.1, step_size=4, gamma=0.5),
                          dict(batch_num=3)),
        kwargs_meta=dict(batch_num=3),
        lr_schedule={"type": "StepDecay", "kwargs": dict(learning_rate=0.1, step_size=4, gamma=0.5)})
    C["asgd_batch2_linearwarmup_cosine"] = dict(
        build=sched_build(lambda: paddle.optimizer.lr.LinearWarmup(
            paddle.optimizer.lr.CosineAnnealingDecay(learning_rate=0.1, T_max=10), warmup_steps=5,
            start_lr=0.0, end_lr=0.1), dict(batch_num=2)),
        kwargs_meta=dict(batch_num=2),
        lr_schedule={"type": "LinearWarmup", "kwargs": dict(
            learning_rate={"type": "CosineAnnealingDecay", "kwargs": dict(learning_rate=0.1, T_max=10)},
            warmup_steps=5, start_lr=0.0, end_lr=0.1)})
    return C


def schedules():
    L = paddle.optimizer.lr
    specs = {
        "StepDecay": (L.StepDecay, dict(learning_rate=0.5, step_size=5, gamma=0.5)),
        "MultiStepDecay": (L.MultiStepDecay, dict(learning_rate=0.5, milestones=[3, 10, 25], gamma=0.3)),
        "ExponentialDecay": (L.ExponentialDecay, dict(learning_rate=0.5, gamma=0.9)),
        "NaturalExpDecay": (L.NaturalExpDecay, dict(learning_rate=0.5, gamma=0.1)),
        "InverseTimeDecay": (L.InverseTimeDecay, dict(learning_rate=0.5, gamma=0.2)),
        "PolynomialDecay_cycle0": (L.PolynomialDecay, dict(learning_rate=0.5, decay_steps=12, end_lr=0.01,
                                                           power=2.0, cycle=False)),
        "PolynomialDecay_cycle1": (L.PolynomialDecay, dict(learning_rate=0.5, decay_steps=12, end_lr=0.01,
                                                           power=2.0, cycle=True)),
        "PiecewiseDecay": (L.PiecewiseDecay, dict(boundaries=[4, 9, 20], values=[0.5, 0.2, 0.05, 0.01])),
        "CosineAnnealingDecay": (L.CosineAnnealingDecay, dict(learning_rate=0.5, T_max=10, eta_min=0.01)),
        "LinearWarmup_float": (L.LinearWarmup, dict(learning_rate=0.5, warmup_steps=8, start_lr=0.0, end_lr=0.5)),
        "LinearWarmup_sched": (None, None),
        "NoamDecay": (L.NoamDecay, dict(d_model=64, warmup_steps=10, learning_rate=1.0)),
        "LambdaDecay": (L.LambdaDecay, None),
        "MultiplicativeDecay": (L.MultiplicativeDecay, None),
        "OneCycleLR_cos": (L.OneCycleLR, dict(max_learning_rate=0.5, total_steps=40)),
        "OneCycleLR_linear_3phase": (L.OneCycleLR, dict(max_learning_rate=0.5, total_steps=40, phase_pct=0.25,
                                                        anneal_strategy="linear", three_phase=True)),
        "CyclicLR_triangular": (L.CyclicLR, dict(base_learning_rate=0.1, max_learning_rate=0.5, step_size_up=6,
                                                 step_size_down=4, mode="triangular")),
        "CyclicLR_triangular2": (L.CyclicLR, dict(base_learning_rate=0.1, max_learning_rate=0.5, step_size_up=5,
                                                  mode="triangular2")),
        "CyclicLR_exp_range": (L.CyclicLR, dict(base_learning_rate=0.1, max_learning_rate=0.5, step_size_up=5,
                                                mode="exp_range", exp_gamma=0.95)),
        "LinearLR": (L.LinearLR, dict(learning_rate=0.5, total_steps=15, start_factor=0.2, end_factor=1.0)),
        "CosineAnnealingWarmRestarts": (L.CosineAnnealingWarmRestarts, dict(learning_rate=0.5, T_0=5, T_mult=2,
                                                                            eta_min=0.01)),
    }
    out, meta = {}, {}
    for name, (cls, kw) in specs.items():
        if name == "LinearWarmup_sched":
            s = L.LinearWarmup(L.PolynomialDecay(learning_rate=0.5, decay_steps=10, end_lr=0.05, power=1.0),
                               warmup_steps=6, start_lr=0.05, end_lr=0.5)
            m = {"type": "LinearWarmup", "kwargs": {"learning_rate": {"type": "PolynomialDecay", "kwargs": dict(
                learning_rate=0.5, decay_steps=10, end_lr=0.05, power=1.0)}, "warmup_steps": 6, "start_lr": 0.05,
                "end_lr": 0.5}}
        elif name == "LambdaDecay":
            s = L.LambdaDecay(learning_rate=0.5, lr_lambda=lambda e: 0.95 ** e)
            m = {"type": "LambdaDecay", "kwargs": {"learning_rate": 0.5, "lr_lambda": "lambda e: 0.95 ** e"}}
        elif name == "MultiplicativeDecay":
            s = L.MultiplicativeDecay(learning_rate=0.5, lr_lambda=lambda e: 0.95)
            m = {"type": "MultiplicativeDecay", "kwargs": {"learning_rate": 0.5, "lr_lambda": "lambda e: 0.95"}}
        else:
            s = cls(**kw)
            m = {"type": cls.__name__, "kwargs": kw}
        vals = [s()]
        for _ in range(40):
            s.step()
            vals.append(s())
        out[name] = np.array(vals, np.float64)
        m["final_state_dict"] = {k: (v if not isinstance(v, dict) else v) for k, v in s.state_dict().items()}
        meta[name] = m
    # ReduceOnPlateau with a fixed loss sequence
    losses = [1.0, 0.9, 0.85, 0.86, 0.86, 0.87, 0.84, 0.84, 0.84, 0.84, 0.84, 0.7, 0.71, 0.72, 0.73, 0.74,
              0.75, 0.76, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.5999, 0.59999, 0.61, 0.62, 0.4, 0.4, 0.4, 0.4, 0.4,
              0.4, 0.4, 0.4, 0.39, 0.39, 0.39, 0.39]
    rop = {
        "ReduceOnPlateau_min_rel": dict(learning_rate=0.5, mode="min", factor=0.5, patience=2, threshold=1e-3,
                                        threshold_mode="rel", cooldown=1, min_lr=0.02),
        "ReduceOnPlateau_min_abs": dict(learning_rate=0.5, mode="min", factor=0.5, patience=1, threshold=0.01,
                                        threshold_mode="abs", cooldown=0, min_lr=0.0),
        "ReduceOnPlateau_max_rel": dict(learning_rate=0.5, mode="max", factor=0.3, patience=3),
    }
    for name, kw in rop.items():
        s = L.ReduceOnPlateau(**kw)
        vals = [s()]
        for l in losses:
            s.step(l)
            vals.append(s())
        out[name] = np.array(vals, np.float64)
        meta[name] = {"type": "ReduceOnPlateau", "kwargs": kw, "final_state_dict": s.state_dict(),
                      "metrics_key": "ReduceOnPlateau_losses"}
    out["ReduceOnPlateau_losses"] = np.array(losses, np.float64)
    out["meta"] = np.array(json.dumps({
        "framework": "paddle", "framework_version": paddle.__version__, "entries": meta,
        "note": "each entry has 41 values: index 0 = scheduler() right after construction, index k = scheduler() "
                "after k calls of scheduler.step() (ReduceOnPlateau: step(ReduceOnPlateau_losses[k-1]))."},
        default=float))
    np.savez_compressed(os.path.join(OUT, "schedules.npz"), **out)


def main():
    # Paddle refuses to create two parameters with the same name in one process, so each case
    # runs in its own subprocess (keeps the state_dict keys exactly '<name>_d_0' etc.).
    os.makedirs(OUT, exist_ok=True)
    args = sys.argv[1:]
    if args and args[0] == "--case":
        spec = cases()[args[1]]
        run_case(args[1], **spec)
        return
    failures = run_cases(os.path.abspath(__file__), cases(), args)
    if not args or "schedules" in args:
        schedules()
        print("ok   schedules")
    if not args:
        with open(os.path.join(OUT, "FAILURES.json"), "w") as f:
            json.dump(failures, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
