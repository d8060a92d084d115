#!/usr/bin/env python
"""Goldens of Paddle's scheduler objects (``paddle.optimizer.lr``, 3.3.1) for gradxform.paddle.lr.

Run with the Paddle venv (never imported by tests):

    /work/venvs/paddle/bin/python tools/paddle_lr_goldens.py

Writes tests/goldens/paddle/lr_schedulers.npz:

    meta            json: framework_version, HELPERS (the Python source of the user subclasses and lambdas,
                    exec'd in paddle.optimizer.lr's namespace here and in gradxform.paddle.lr's by the test),
                    cases {key: {"expr": constructor expression, "metrics": bool, "state_dict_mid": ...,
                    "state_dict_end": ...}}, epochs (the step(epoch) sequence), e2e {...}
    v_<key>         last_lr after construction and after each of 40 step() calls (41 float64)
    rt_<key>        the same 41 values, where after 20 steps state_dict() went into a fresh object
                    (set_state_dict) that made the last 20 steps
    ep_<key>        last_lr after step(epoch=e) for e in meta["epochs"] (the classes that take it)
    metrics         the 40 metrics fed to ReduceOnPlateau.step(metrics)
    e2e_<case>_w<t>_<i>   parameter i after update t of the end-to-end runs; e2e_<case>_lr  opt.get_lr()
                    read after opt.step() and before scheduler.step(); e2e_w0_<i>, e2e_g<t>_<i>
"""
import json
import math
import os

import numpy as np
import paddle
from paddle.optimizer import lr as LR

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "goldens", "paddle", "lr_schedulers.npz")
STEPS = 40

paddle.set_device("cpu")

# A user's code, as PaddleNLP / PaddleClas write it: subclasses with Python control flow.
HELPERS = '''
class LinearDecayWithWarmup(LambdaDecay):
    """PaddleNLP's (paddlenlp/transformers/optimization.py), verbatim but for is_integer."""
    def __init__(self, learning_rate, total_steps, warmup, last_epoch=-1, verbose=False):
        warmup_steps = warmup if isinstance(warmup, int) else int(math.floor(warmup * total_steps))

        def lr_lambda(current_step):
            if current_step < warmup_steps:
                return float(current_step) / float(max(1, warmup_steps))
            return max(0.0, float(total_steps - current_step) / float(max(1, total_steps - warmup_steps)))

        super().__init__(learning_rate, lr_lambda, last_epoch, verbose)


class WarmupPoly(LRScheduler):
    """An LRScheduler subclass overriding get_lr with if / float / max on last_epoch and base_lr."""
    def __init__(self, learning_rate, warmup, total, end_lr=1e-3, last_epoch=-1, verbose=False):
        self.warmup, self.total, self.end_lr = warmup, total, end_lr
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self):
        if self.last_epoch < self.warmup:
            return self.base_lr * float(self.last_epoch + 1) / self.warmup
        frac = float(self.last_epoch - self.warmup) / max(1, self.total - self.warmup)
        return max(self.end_lr, self.base_lr * (1.0 - frac) ** 2)


class KeepsState(LRScheduler):
    """A subclass with its own state key: halves the rate each time last_epoch hits a multiple of every."""
    def __init__(self, learning_rate, every, last_epoch=-1, verbose=False):
        self.every, self.halvings = every, 0
        super().__init__(learning_rate, last_epoch, verbose)

    def state_keys(self):
        self.keys = ['last_epoch', 'last_lr', 'halvings']

    def get_lr(self):
        if self.last_epoch > 0 and self.last_epoch % self.every == 0:
            self.halvings += 1
        return self.base_lr * 0.5 ** self.halvings


def every_third(epoch):
    return 0.8 if epoch % 3 == 0 else 0.97


def scale_iter(x):
    return 1.0 / (1.0 + 0.05 * x)
'''

CASES = {
    "NoamDecay": "NoamDecay(64, 10, learning_rate=2.0)",
    "PiecewiseDecay": "PiecewiseDecay([4, 9, 20], [0.5, 0.2, 0.05, 0.01])",
    "NaturalExpDecay": "NaturalExpDecay(0.5, 0.1)",
    "InverseTimeDecay": "InverseTimeDecay(0.5, 0.2)",
    "PolynomialDecay": "PolynomialDecay(0.5, 12, end_lr=0.01, power=2.0)",
    "PolynomialDecay_cycle": "PolynomialDecay(0.5, 12, 0.01, 2.0, True)",
    "LinearWarmup_float": "LinearWarmup(0.5, 8, 0.0, 0.5)",
    "LinearWarmup_cosine": "LinearWarmup(CosineAnnealingDecay(0.5, T_max=15, eta_min=0.01), 6, 0.05, 0.5, -1, False)",
    "LinearWarmup_step": "LinearWarmup(StepDecay(0.4, 4, gamma=0.5), warmup_steps=5, start_lr=0.0, end_lr=0.4)",
    "ExponentialDecay": "ExponentialDecay(0.5, 0.9)",
    "MultiStepDecay": "MultiStepDecay(0.5, [3, 10, 25], 0.3)",
    "StepDecay": "StepDecay(0.5, 5, 0.5)",
    "StepDecay_resumed": "StepDecay(0.5, step_size=5, gamma=0.5, last_epoch=7)",
    "LambdaDecay": "LambdaDecay(0.5, lambda e: 0.95 ** e)",
    "LambdaDecay_nlp": "LinearDecayWithWarmup(5e-5, 36, 0.1)",
    "Subclass_get_lr": "WarmupPoly(0.3, 5, 30)",
    "Subclass_state_keys": "KeepsState(0.4, 6)",
    "ReduceOnPlateau_min_rel": "ReduceOnPlateau(0.5, 'min', 0.5, 2, 0.001, 'rel', 1, 0.02)",
    "ReduceOnPlateau_max_abs": "ReduceOnPlateau(0.5, mode='max', factor=0.3, patience=3, threshold=0.01, "
                               "threshold_mode='abs')",
    "ReduceOnPlateau_eps": "ReduceOnPlateau(0.01, factor=0.5, patience=0, cooldown=2, min_lr=0.004, epsilon=0.003)",
    "CosineAnnealingDecay": "CosineAnnealingDecay(0.5, 10, 0.01)",
    "CosineAnnealingDecay_resumed": "CosineAnnealingDecay(0.5, 10, eta_min=0.01, last_epoch=4)",
    "MultiplicativeDecay": "MultiplicativeDecay(0.5, every_third)",
    "OneCycleLR_cos": "OneCycleLR(0.5, 40)",
    "OneCycleLR_linear_3phase": "OneCycleLR(0.5, 50, divide_factor=10.0, end_learning_rate=0.001, phase_pct=0.25, "
                                "anneal_strategy='linear', three_phase=True)",
    "CyclicLR_triangular": "CyclicLR(0.1, 0.5, 6, 4)",
    "CyclicLR_triangular2": "CyclicLR(0.1, 0.5, 5, mode='triangular2')",
    "CyclicLR_exp_range": "CyclicLR(0.1, 0.5, 5, mode='exp_range', exp_gamma=0.95)",
    "CyclicLR_scale_fn": "CyclicLR(0.05, 0.3, 3, 5, scale_fn=scale_iter, scale_mode='iterations')",
    "LinearLR": "LinearLR(0.5, 15, 0.2, 1.0)",
    "LinearLR_resumed": "LinearLR(0.5, total_steps=15, start_factor=0.25, end_factor=0.75, last_epoch=3)",
    "CosineAnnealingWarmRestarts": "CosineAnnealingWarmRestarts(0.5, 5, 2, 0.01)",
    "CosineAnnealingWarmRestarts_mult1": "CosineAnnealingWarmRestarts(0.5, T_0=7, eta_min=0.0)",
}
EPOCHS = [3, 7, 1, 12, 30, 0, 19]  # step(epoch=e) in this order
EPOCH_CASES = ["StepDecay", "CosineAnnealingDecay", "LinearWarmup_cosine", "CosineAnnealingWarmRestarts",
               "CosineAnnealingWarmRestarts_mult1", "PolynomialDecay_cycle", "CyclicLR_triangular2"]
# a metric that improves, stalls, wobbles and improves again (ties included)
METRICS = [1.0, 0.9, 0.85, 0.85, 0.86, 0.84, 0.84, 0.84, 0.83, 0.7, 0.7, 0.71, 0.69, 0.69, 0.69, 0.69, 0.5, 0.52,
           0.51, 0.5, 0.5, 0.49, 0.49, 0.49, 0.49, 0.49, 0.3, 0.31, 0.3, 0.3, 0.29, 0.29, 0.29, 0.29, 0.29, 0.29,
           0.2, 0.2, 0.2, 0.2]


def namespace():
    ns = {name: getattr(LR, name) for name in LR.__all__}
    ns["math"] = math
    exec(HELPERS, ns)
    return ns


def advance(s, t, metrics):
    if metrics:
        s.step(METRICS[t])
    else:
        s.step()


def jsonable(d):
    return {k: (jsonable(v) if isinstance(v, dict) else (float(v) if isinstance(v, (np.floating,)) else v))
            for k, v in d.items()}


def scheduler_cases(out, meta):
    ns = namespace()
    for key, expr in CASES.items():
        metrics = key.startswith("ReduceOnPlateau")
        s = eval(expr, ns)
        vals = [s()]
        rt = [s()]
        fresh = None
        for t in range(STEPS):
            advance(s, t, metrics)
            vals.append(s())
            if t < STEPS // 2:
                rt.append(s())
                if t == STEPS // 2 - 1:
                    mid = s.state_dict()
                    fresh = eval(expr, ns)
                    fresh.set_state_dict(dict(mid))
            else:
                advance(fresh, t, metrics)
                rt.append(fresh())
        out["v_" + key] = np.array(vals, np.float64)
        out["rt_" + key] = np.array(rt, np.float64)
        meta["cases"][key] = {"expr": expr, "metrics": metrics, "state_dict_mid": jsonable(mid),
                              "state_dict_end": jsonable(s.state_dict())}
    for key in EPOCH_CASES:
        s = eval(CASES[key], ns)
        got = []
        for e in EPOCHS:
            s.step(epoch=e)
            got.append(s())
        out["ep_" + key] = np.array(got, np.float64)


E2E_SHAPES = [(4, 3), (3,)]
E2E_STEPS = 12
E2E = {
    # scheduler.step() after every optimizer.step() (PaddleNLP)
    "momentum_per_batch": dict(opt="Momentum(learning_rate=sched, momentum=0.9, parameters=params, "
                                   "weight_decay=0.01)",
                               sched="LinearWarmup(CosineAnnealingDecay(0.2, T_max=8), 4, 0.0, 0.2)", every=1),
    # scheduler.step() every 3 updates, an epoch of 3 batches (PaddleClas by_epoch)
    "sgd_per_epoch": dict(opt="SGD(learning_rate=sched, parameters=params)",
                          sched="WarmupPoly(0.3, 1, 4)", every=3),
}


def end_to_end(out, meta):
    rng = np.random.default_rng(0)
    w0 = [rng.standard_normal(s).astype(np.float32) for s in E2E_SHAPES]
    grads = [[(rng.standard_normal(s) * 0.5).astype(np.float32) for s in E2E_SHAPES] for _ in range(E2E_STEPS)]
    for i, w in enumerate(w0):
        out[f"e2e_w0_{i}"] = w
    for t in range(E2E_STEPS):
        for i, g in enumerate(grads[t]):
            out[f"e2e_g{t}_{i}"] = g
    for case, spec in E2E.items():
        ns = namespace()
        params = []
        for i, w in enumerate(w0):
            p = paddle.create_parameter(list(w.shape), "float32", attr=paddle.ParamAttr(name=f"{case}_p{i}"))
            p.set_value(w)
            params.append(p)
        sched = eval(spec["sched"], ns)
        ns.update(sched=sched, params=params, SGD=paddle.optimizer.SGD, Momentum=paddle.optimizer.Momentum)
        opt = eval(spec["opt"], ns)
        logged = []
        for t in range(E2E_STEPS):
            loss = sum((p * paddle.to_tensor(g)).sum() for p, g in zip(params, grads[t]))
            loss.backward()
            opt.step()
            opt.clear_grad()
            logged.append(opt.get_lr())  # after step(), before scheduler.step()
            if (t + 1) % spec["every"] == 0:
                sched.step()
            for i, p in enumerate(params):
                out[f"e2e_{case}_w{t}_{i}"] = p.numpy().copy()
        out[f"e2e_{case}_lr"] = np.array(logged, np.float64)
        meta["e2e"][case] = dict(spec, steps=E2E_STEPS)


def main():
    out, meta = {}, {"framework": "paddle", "framework_version": paddle.__version__, "steps": STEPS,
                     "helpers": HELPERS, "cases": {}, "epochs": EPOCHS, "epoch_cases": EPOCH_CASES, "e2e": {},
                     "e2e_shapes": [list(s) for s in E2E_SHAPES],
                     "mode": "dygraph, CPU; loss = sum_i sum(p_i * g_i); loss.backward(); opt.step(); "
                             "opt.clear_grad(); scheduler.step() every `every` updates"}
    scheduler_cases(out, meta)
    end_to_end(out, meta)
    out["metrics"] = np.array(METRICS, np.float64)
    out["meta"] = np.array(json.dumps(meta))
    np.savez_compressed(OUT, **out)
    print(f"wrote {OUT}: {len(meta['cases'])} scheduler cases, {len(meta['e2e'])} end-to-end runs")


if __name__ == "__main__":
    main()
