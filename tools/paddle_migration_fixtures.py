#!/usr/bin/env python
"""Paddle ASGD checkpoint-migration fixtures for gradxform.

Run with the Paddle venv (never imported by tests):

    /work/venvs/paddle/bin/python tools/paddle_migration_fixtures.py

    /work/venvs/paddle/bin/python tools/paddle_migration_fixtures.py asgd_uneven_counts   # some cases
    /work/venvs/paddle/bin/python tools/paddle_migration_fixtures.py plateau   # plateau_before_metric.pdopt

Each case runs in its own subprocess (fresh unique-name counters -> parameter names
linear_0.w_0, linear_0.b_0, linear_1.w_0, linear_1.b_0 and accumulator keys '<param>_d_0' ...).

tests/fixtures/paddle/<case>/
    opt.pdopt        paddle.save(opt.state_dict(), path) after K steps (and after scheduler.step()
                     of step K-1 when a scheduler is used)
    trajectory.npz   meta (json): optimizer, kwargs, lr_schedule, names, shapes, k, n, state_keys
                     p0_<name>, g_<t>_<name>, p_<t>_<name>, lr_<t> (lr used by step t)
                     sd_<key> : numpy value of every tensor in the saved state_dict (for reader tests)
"""
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "paddle")
K, N = 5, 10

CASES = {
    "asgd_batch3": dict(kwargs=dict(learning_rate=0.05, batch_num=3), sched=None),
    "asgd_batch3_wd_stepdecay": dict(
        kwargs=dict(batch_num=3, weight_decay=0.01),
        sched={"type": "StepDecay", "kwargs": dict(learning_rate=0.1, step_size=3, gamma=0.5)}),
    # linear_1 gets no gradient at steps 1 and 3 (it is in no loss term, and clear_grad(set_to_zero=False)
    # leaves its grad None): Paddle's optimizer skips it, so its m is 3 where linear_0's is 5
    "asgd_uneven_counts": dict(
        kwargs=dict(batch_num=3),  # m 5 and 3 are different ring slots ((m - 1) % 3) at the next step
        sched={"type": "StepDecay", "kwargs": dict(learning_rate=0.1, step_size=2, gamma=0.5)},
        no_grad={1: ["linear_1.w_0", "linear_1.b_0"], 3: ["linear_1.w_0", "linear_1.b_0"]}),
}


def run_case(case):
    import paddle
    paddle.set_device("cpu")
    spec = CASES[case]
    net = paddle.nn.Sequential(paddle.nn.Linear(4, 3), paddle.nn.Linear(3, 2))
    params = net.parameters()
    names = [p.name for p in params]
    rng = np.random.default_rng(0)
    p0 = {}
    for p in params:
        w = rng.standard_normal(p.shape).astype(np.float32)
        p.set_value(w)
        p0[p.name] = w
    grng = np.random.default_rng(1)
    grads = [[(grng.standard_normal(p.shape) * 0.5).astype(np.float32) for p in params] for _ in range(N)]
    sched = None
    kw = dict(spec["kwargs"])
    if spec["sched"]:
        sched = getattr(paddle.optimizer.lr, spec["sched"]["type"])(**spec["sched"]["kwargs"])
        kw["learning_rate"] = sched
    opt = paddle.optimizer.ASGD(parameters=params, **kw)
    d = os.path.join(OUT, case)
    os.makedirs(d, exist_ok=True)
    out = {}
    for n_, w in p0.items():
        out["p0_" + n_] = w
    for t in range(N):
        out["lr_%d" % t] = np.array(opt.get_lr(), np.float64)
        loss = None
        skipped = spec.get("no_grad", {}).get(t, [])
        for p, g in zip(params, grads[t]):
            if p.name in skipped:
                continue
            term = (p * paddle.to_tensor(g)).sum()
            loss = term if loss is None else loss + term
        loss.backward()
        opt.step()
        opt.clear_grad(set_to_zero="no_grad" not in spec)
        if sched is not None:
            sched.step()
        for n_, g, p in zip(names, grads[t], params):
            out["g_%d_%s" % (t, n_)] = g
            out["p_%d_%s" % (t, n_)] = p.numpy().copy()
        if t == K - 1:
            sd = opt.state_dict()
            paddle.save(sd, os.path.join(d, "opt.pdopt"))
            state_keys = {}
            for key, v in sd.items():
                if key == "LR_Scheduler":
                    state_keys[key] = v
                    continue
                a = v.numpy()
                out["sd_" + key] = a
                state_keys[key] = {"dtype": str(a.dtype), "shape": list(a.shape)}
    meta = {
        "optimizer": "ASGD", "kwargs": spec["kwargs"], "lr_schedule": spec["sched"], "names": names,
        "no_grad": {str(t): ns for t, ns in spec.get("no_grad", {}).items()},
        "shapes": {n_: list(p0[n_].shape) for n_ in names}, "k": K, "n": N,
        "framework": "paddle", "framework_version": paddle.__version__, "state_keys": state_keys,
        "network": "paddle.nn.Sequential(Linear(4, 3), Linear(3, 2)); weight shape (in, out)",
        "pdopt_written": "paddle.save(opt.state_dict(), 'opt.pdopt') after step index k-1 "
                         "(and after that step's scheduler.step())",
        "seeds": {"params": 0, "grads": 1, "rng": "numpy.default_rng standard_normal; grads *0.5"},
    }
    out["meta"] = np.array(json.dumps(meta))
    np.savez_compressed(os.path.join(d, "trajectory.npz"), **out)


def plateau_before_metric():
    """``plateau_before_metric.pdopt``: Momentum with a ReduceOnPlateau learning rate after two
    ``opt.step()`` and no ``scheduler.step(metric)`` yet: Paddle writes ``best: None``."""
    import paddle
    paddle.set_device("cpu")
    lin = paddle.nn.Linear(3, 2)
    sched = paddle.optimizer.lr.ReduceOnPlateau(learning_rate=0.1, patience=1, cooldown=2)
    opt = paddle.optimizer.Momentum(learning_rate=sched, parameters=lin.parameters())
    for _ in range(2):
        lin(paddle.ones([4, 3])).sum().backward()
        opt.step()
        opt.clear_grad()
    paddle.save(opt.state_dict(), os.path.join(OUT, "plateau_before_metric.pdopt"))
    print(opt.state_dict()["LR_Scheduler"], [p.name for p in lin.parameters()])


def main():
    args = sys.argv[1:]
    if args == ["plateau"]:
        plateau_before_metric()
        return
    if args and args[0] == "--case":
        run_case(args[1])
        return
    for case in (args or CASES):
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--case", case],
                           capture_output=True, text=True)
        if r.returncode == 0:
            print("ok  ", case)
        else:
            print("FAIL", case, r.stderr[-2000:])


if __name__ == "__main__":
    main()
