#!/usr/bin/env python
"""MindSpore checkpoint-migration fixtures for gradxform.

Run with the MindSpore venv (never imported by tests):

    /work/venvs/mindspore/bin/python tools/mindspore_migration_fixtures.py [case ...]

Naming cases writes only those (FAILURES.json is rewritten only by a run of all of them).

For each case: a tiny network (Dense 4->3, Dense 3->2), gradients fed directly to the optimizer
(`opt(grads)`), K=5 steps, then `ms.save_checkpoint(opt, <case>/opt.ckpt)` (the optimizer Cell: it
holds the network parameters, its state slots, global_step, learning_rate, ...), then 5 more steps.

tests/fixtures/mindspore/<case>/
    opt.ckpt          checkpoint written after step K (K steps applied)
    trajectory.npz    meta (json): optimizer, kwargs, names, shapes, k, n, ckpt_entries
                      p0_<name>       initial params
                      g_<t>_<name>    gradient of step t (t = 0..n-1)
                      p_<t>_<name>    params after step t
                      ckpt_<tag>      what ms.load_checkpoint returns for every tag (for reader tests)
                      final_<tag>     every state tag after step n-1 (cases written since the AdaMax,
                                      Adadelta, Rprop, ASGD and AdaFactor ones were added)
A migration test: read opt.ckpt -> JAX state, run steps K..n-1 with g_<t>, compare to p_<t>.
"""
import json
import os
import shutil
import sys

import numpy as np

import mindspore as ms
from mindspore import nn, Tensor

ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
_TMP = "/tmp/ms_fixtures_cwd"
os.makedirs(_TMP, exist_ok=True)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "mindspore")
K, N = 5, 10


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dense1 = nn.Dense(4, 3)
        self.dense2 = nn.Dense(3, 2)

    def construct(self, x):
        return self.dense2(self.dense1(x))


CASES = {
    "adam": ("Adam", dict(learning_rate=0.01)),
    "adam_lr_list": ("Adam", dict(learning_rate=[round(0.01 * 0.9 ** i, 6) for i in range(N)])),
    "momentum": ("Momentum", dict(learning_rate=0.1, momentum=0.9)),
    "rmsprop_centered": ("RMSProp", dict(learning_rate=0.01, momentum=0.9, centered=True)),
    "adagrad": ("Adagrad", dict(learning_rate=0.05)),
    "ftrl": ("FTRL", dict(learning_rate=0.05, l2=0.01)),
    "lamb": ("Lamb", dict(learning_rate=0.01, weight_decay=0.01)),
    "adamweightdecay": ("AdamWeightDecay", dict(learning_rate=0.01, weight_decay=0.01)),
    # the five with CPU kernels that issue 24 added (tags: beta1_power, accum_update.<p>, ...)
    "adamax": ("AdaMax", dict(learning_rate=0.01, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.01)),
    "adadelta": ("Adadelta", dict(learning_rate=0.5, rho=0.8, epsilon=1e-4, weight_decay=0.01)),
    "rprop": ("Rprop", dict(learning_rate=0.02, etas=(0.4, 1.5), step_sizes=(1e-3, 0.05), weight_decay=0.01)),
    # t0=2: mu = 1/(t - 2) from step 3 on, so ax is an average (not the weights) when saved
    "asgd": ("ASGD", dict(learning_rate=0.05, lambd=0.01, alpha=0.5, t0=2.0, weight_decay=0.01)),
    # relative_step: the lr follows afactor_step; factored weights, unfactored biases
    "adafactor": ("AdaFactor", dict(decay_rate=0.7, beta1=0.8, weight_decay=0.01)),
    "adafactor_lr_nobeta1": ("AdaFactor", dict(learning_rate=0.01, relative_step=False, beta1=0.0,
                                               clip_threshold=0.5)),
}


def run_case(case, cls, kw):
    net = Net()
    params = net.trainable_params()
    names = [p.name for p in params]
    rng = np.random.default_rng(0)
    p0 = {}
    for p in params:
        w = rng.standard_normal(p.shape).astype(np.float32)
        p.set_data(Tensor(w))
        p0[p.name] = w
    grng = np.random.default_rng(1)
    grads = [[(grng.standard_normal(p.shape) * 0.5).astype(np.float32) for p in params] for _ in range(N)]
    opt = getattr(nn, cls)(params, **kw)
    d = os.path.join(OUT, case)
    tmpd = os.path.join(_TMP, case)
    shutil.rmtree(tmpd, ignore_errors=True)
    os.makedirs(tmpd)
    out = {}
    for n_, w in p0.items():
        out["p0_" + n_] = w
    for t in range(N):
        opt(tuple(Tensor(g) for g in grads[t]))
        for n_, g, p in zip(names, grads[t], params):
            out["g_%d_%s" % (t, n_)] = g
            out["p_%d_%s" % (t, n_)] = p.asnumpy().copy()
        if t == K - 1:
            ms.save_checkpoint(opt, os.path.join(tmpd, "opt.ckpt"))
    # the state after the last step (slots that never reach the weights, as ASGD's ax, are compared too)
    ms.save_checkpoint(opt, os.path.join(tmpd, "final.ckpt"))
    for tag, v in ms.load_checkpoint(os.path.join(tmpd, "final.ckpt")).items():
        if not isinstance(v, str) and tag not in names:
            out["final_" + tag] = v.asnumpy()
    # what the official loader sees, so a protobuf-only reader can be tested against it
    loaded = ms.load_checkpoint(os.path.join(tmpd, "opt.ckpt"))
    entries = {}
    for tag, v in loaded.items():
        if isinstance(v, str):
            entries[tag] = {"type": "str", "value": v}
            continue
        a = v.asnumpy()
        out["ckpt_" + tag] = a
        entries[tag] = {"dtype": str(v.dtype), "shape": list(a.shape)}
    meta = {
        "optimizer": cls, "kwargs": kw, "names": names, "shapes": {n_: list(p0[n_].shape) for n_ in names},
        "k": K, "n": N, "framework": "mindspore", "framework_version": ms.__version__,
        "ckpt_entries": entries,
        "ckpt_written": "ms.save_checkpoint(opt, 'opt.ckpt') after step index k-1 (k steps applied)",
        "network": "Net: dense1 = nn.Dense(4, 3), dense2 = nn.Dense(3, 2) (weight shape (out, in))",
        "seeds": {"params": 0, "grads": 1, "rng": "numpy.default_rng standard_normal; grads *0.5"},
    }
    out["meta"] = np.array(json.dumps(meta))
    os.makedirs(d, exist_ok=True)
    np.savez_compressed(os.path.join(d, "trajectory.npz"), **out)
    dst = os.path.join(d, "opt.ckpt")
    if os.path.exists(dst):
        os.chmod(dst, 0o644)
        os.remove(dst)
    shutil.copyfile(os.path.join(tmpd, "opt.ckpt"), dst)
    os.chmod(dst, 0o644)


def main():
    os.chdir(_TMP)
    failures = {}
    only = sys.argv[1:]
    for case, (cls, kw) in CASES.items():
        if only and case not in only:
            continue
        try:
            run_case(case, cls, kw)
            print("ok  ", case, flush=True)
        except Exception as e:  # never fake a fixture
            shutil.rmtree(os.path.join(OUT, case), ignore_errors=True)
            failures[case] = repr(e)[:500]
            print("FAIL", case, repr(e)[:200], flush=True)
    if not only:
        with open(os.path.join(OUT, "FAILURES.json"), "w") as f:
            json.dump(failures, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
