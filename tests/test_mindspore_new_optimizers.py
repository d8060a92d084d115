"""MindSpore AdaMax, Adadelta, Rprop, ASGD and Adam(use_amsgrad=True) (issue 24)
against the goldens MindSpore 2.10 wrote on CPU (tools/mindspore_new_goldens.py:
20 steps, weight decay, loss scale where the class has one, an
ExponentialDecayLR schedule, a zero-initialised bias), and against a float64
NumPy transcription of ``mindspore/nn/optim/{adamax,adadelta,rprop,asgd,adam}.py``
(which never imports gradxform).

Tolerances: gradxform and the transcription against the goldens: rtol 1e-5,
atol 1e-6 (float32 against float32 kernels: a few ulp per step; atol for
elements near 0, the bias starts there); gradxform against the float64
transcription: rtol 2e-5, atol 2e-6 (float32 rounding accumulated over 20
steps against exact arithmetic). The transcription uses MindSpore's float32
values of the hyperparameters (``Tensor(beta1, float32)``), as the kernels do.
"""
from __future__ import annotations

import json
import math
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx

GOLD = pathlib.Path(__file__).parent / "goldens" / "mindspore" / "rules"
CASES = sorted(p.stem for p in GOLD.glob("*.npz"))


def load(case):
    z = np.load(GOLD / f"{case}.npz")
    meta = json.loads(str(z["meta"]))
    n, steps = len(meta["names"]), meta["steps"]
    w0 = [z[f"w0_{i}"] for i in range(n)]
    grads = [[z[f"g_{t}_{i}"] for i in range(n)] for t in range(steps)]
    want = [[z[f"w_{t}_{i}"] for i in range(n)] for t in range(steps)]
    return meta, w0, grads, want


def f32(x):
    return float(np.float32(x))


# -- the transcription ---------------------------------------------------------------------------

def exponential_decay_lr(learning_rate, decay_rate, decay_steps, is_stair=False):
    def lr(p):
        e = p / decay_steps
        return f32(learning_rate * decay_rate ** (math.floor(e) if is_stair else e))
    return lr


class MS:
    """``mindspore.nn.Optimizer``'s decay / scale / lr, then each class's construct, in float64."""

    def __init__(self, cls, kwargs, names, sched=None):
        kw = dict(kwargs)
        self.cls, self.names = cls, names
        default_lr = {"AdaMax": 0.001, "Adadelta": 1.0, "Rprop": 0.1, "ASGD": 0.1, "Adam": 1e-3}[cls]
        lr = kw.pop("learning_rate", default_lr)
        self.lr = sched if sched is not None else (lambda p: f32(lr))
        self.ls = kw.pop("loss_scale", 1.0)
        self.wd = kw.pop("weight_decay", 0.0) * self.ls
        self.kw = kw
        self.t = 0
        self.s = {}

    def step(self, ws, gs):
        lr = self.lr(self.t)  # get_lr() before global_step += 1
        self.t += 1
        out = []
        for i, (w, g, n) in enumerate(zip(ws, gs, self.names)):
            if "beta" not in n and "gamma" not in n:
                g = g + self.wd * w
            g = g / self.ls
            out.append(getattr(self, "_" + self.cls.lower())(i, w, g, lr))
        return out

    def _state(self, i, k, like, fill=0.0):
        return self.s.setdefault((i, k), np.full_like(like, fill) if hasattr(like, "shape") else like)

    def _adamax(self, i, w, g, lr):
        b1, b2 = f32(self.kw.get("beta1", 0.9)), f32(self.kw.get("beta2", 0.999))
        eps = f32(self.kw.get("eps", 1e-8))
        m = b1 * self._state(i, "m", w) + (1 - b1) * g
        v = np.maximum(b2 * self._state(i, "v", w), np.abs(g))
        self.s[(i, "m")], self.s[(i, "v")] = m, v
        return w - lr / (1 - b1 ** self.t) * m / (v + eps)

    def _adadelta(self, i, w, g, lr):
        rho, eps = self.kw.get("rho", 0.9), self.kw.get("epsilon", 1e-6)
        a = rho * self._state(i, "a", w) + (1 - rho) * g * g
        d = np.sqrt(self._state(i, "au", w) + eps) / np.sqrt(a + eps) * g
        self.s[(i, "a")], self.s[(i, "au")] = a, rho * self.s[(i, "au")] + (1 - rho) * d * d
        return w - lr * d

    def _rprop(self, i, w, g, lr):
        en, ep = (f32(x) for x in self.kw.get("etas", (0.5, 1.2)))
        lo, hi = self.kw.get("step_sizes", (1e-6, 50.0))
        step = np.full_like(w, lr) if self.t == 1 else self.s[(i, "step")]
        s = np.sign(g * self._state(i, "prev", w))
        eta = np.where(s > 0, ep, np.where(s < 0, en, 1.0))
        step = np.clip(step * eta, f32(lo), f32(hi))
        g = np.where(s < 0, 0.0, g)
        self.s[(i, "prev")], self.s[(i, "step")] = g, step
        return w - np.sign(g) * step

    def _asgd(self, i, w, g, lr):
        lambd, alpha, t0 = self.kw.get("lambd", 1e-4), self.kw.get("alpha", 0.75), f32(self.kw.get("t0", 1e6))
        eta = lr if self.t == 1 else self.s[(i, "eta")]
        mu = self.s.get((i, "mu"), 1.0)
        w_new = w * (1 - lambd * eta) - eta * g
        ax = self._state(i, "ax", w)
        self.s[(i, "ax")] = ax + (w_new - ax) * mu if mu != 1 else w_new
        self.s[(i, "eta")] = lr / (1 + lambd * lr * self.t) ** alpha
        self.s[(i, "mu")] = 1 / max(1.0, self.t - t0)
        return w_new

    def _adam(self, i, w, g, lr):
        assert self.kw.get("use_amsgrad")
        b1, b2, eps = f32(self.kw.get("beta1", 0.9)), f32(self.kw.get("beta2", 0.999)), self.kw.get("eps", 1e-8)
        m = b1 * self._state(i, "m", w) + (1 - b1) * g
        v = b2 * self._state(i, "v", w) + (1 - b2) * g * g
        vhat = np.maximum(self._state(i, "vhat", w), v)
        self.s[(i, "m")], self.s[(i, "v")], self.s[(i, "vhat")] = m, v, vhat
        return w - lr * math.sqrt(1 - b2 ** self.t) / (1 - b1 ** self.t) * m / (np.sqrt(vhat) + eps)


def transcription(meta, w0, grads):
    sched = meta["lr_schedule"]
    ref = MS(meta["optimizer"], meta["kwargs"], meta["names"],
             exponential_decay_lr(**sched["kwargs"]) if sched else None)
    w, out = [x.astype(np.float64) for x in w0], []
    for g in grads:
        w = ref.step(w, [x.astype(np.float64) for x in g])
        out.append(w)
    return out


def gradxform_run(meta, w0, grads, fused=False):
    kw = {k: tuple(v) if isinstance(v, list) else v for k, v in meta["kwargs"].items()}
    if meta["lr_schedule"]:
        kw["learning_rate"] = getattr(gx.schedules, meta["lr_schedule"]["type"])(**meta["lr_schedule"]["kwargs"])
    tx = getattr(gx.mindspore, meta["optimizer"])(None, **kw)  # the class, as nn.AdaMax(params, ...): None, every leaf
    if fused:
        tx = gx.fused(tx)
    names = meta["names"]
    params = {n: jnp.asarray(w) for n, w in zip(names, w0)}
    state = tx.init(params)
    step = jax.jit(lambda p, s, g: (lambda u, s2: (gx.apply_updates(p, u), s2))(*tx.update(g, s, p)))
    out = []
    for g in grads:
        params, state = step(params, state, {n: jnp.asarray(x) for n, x in zip(names, g)})
        out.append([np.asarray(params[n]) for n in names])
    return out


def compare(got, want, meta, case, **tol):
    for t, (a_t, b_t) in enumerate(zip(got, want)):
        for i, (a, b) in enumerate(zip(a_t, b_t)):
            np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), **tol,
                                       err_msg=f"{case}: step {t + 1}, {meta['names'][i]}")


def test_every_new_class_has_goldens():
    classes = {load(c)[0]["optimizer"] for c in CASES}
    assert classes == {"AdaMax", "Adadelta", "Rprop", "ASGD", "Adam"}
    assert all(not load(c)[1][1].any() for c in CASES), "dense.bias starts at zero in every case"


@pytest.mark.parametrize("case", CASES)
def test_gradxform_matches_mindspore(case):
    meta, w0, grads, want = load(case)
    compare(gradxform_run(meta, w0, grads), want, meta, case, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", CASES)
def test_transcription_matches_mindspore(case):
    meta, w0, grads, want = load(case)
    compare(transcription(meta, w0, grads), want, meta, case, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", CASES)
def test_gradxform_matches_the_transcription_fused(case):
    """On `gradxform.fused` flat buffers (every piece of these chains is elementwise)."""
    meta, w0, grads, _ = load(case)
    compare(gradxform_run(meta, w0, grads, fused=True), transcription(meta, w0, grads), meta, case,
            rtol=2e-5, atol=2e-6)


def test_params_first_as_mindspore():
    class P:  # a parameter object as trainable_params() hands out
        def __init__(self, name):
            self.name = name

    tx = gx.mindspore.AdaMax([P("dense.weight")], 0.01)
    params = {"dense.weight": jnp.ones(3), "dense.bias": jnp.ones(2)}
    u, _ = tx.update({"dense.weight": jnp.ones(3), "dense.bias": jnp.ones(2)}, tx.init(params), params)
    assert float(jnp.abs(u["dense.bias"]).max()) == 0.0 and float(jnp.abs(u["dense.weight"]).min()) > 0
    with pytest.raises(TypeError, match="etas"):
        gx.mindspore.Rprop(None, 0.1, [0.5, 1.2])
    with pytest.raises(ValueError, match="step_sizes"):
        gx.mindspore.Rprop(None, step_sizes=(1.0, 0.5))
    with pytest.raises(TypeError, match="t0"):
        gx.mindspore.ASGD(None, t0=5)
    with pytest.raises(ValueError, match="beta1"):
        gx.mindspore.AdaMax(None, beta1=1.0)


# -- each bound itself and one step past it, as MindSpore 2.10 checks them (mindspore/nn/optim/*.py) --
# adamax.py 46-48: beta1, beta2 in (0, 1) (INC_NEITHER), eps > 0 (check_positive_float);
# adadelta.py 39-40: rho in [0, 1] (INC_BOTH), epsilon >= 0 (check_non_negative_float);
# rprop.py 174-190: etas and step_sizes tuples of 2, step_sizes[0] > step_sizes[1] refused (equal
# accepted), etaminus in (0, 1) (INC_NEITHER), etaplus > 1.0. gradxform is stricter than MindSpore in
# two places, marked "stricter": rprop's step sizes and asgd's lambd/alpha/t0 must be >= 0 (MindSpore
# checks only that they are floats: rprop.py 192-193, asgd.py 165-167), so 0.0 is the accepted bound.
# Every row was run through mindspore.nn.<class> 2.10.0 by hand: the same outcome but the two stricter
# refusals (MindSpore accepts those), and loss_scale 1.0 on Rprop and ASGD.
_OK, _REFUSED = None, ValueError
BOUNDS = [
    (lambda: gx.mindspore.adamax(eps=0.0), _REFUSED, "adamax(eps="),
    (lambda: gx.mindspore.adamax(eps=1e-30), _OK, ""),
    (lambda: gx.mindspore.adamax(beta1=0.0), _REFUSED, "adamax(beta1="),
    (lambda: gx.mindspore.adamax(beta2=1.0), _REFUSED, "adamax(beta2="),
    (lambda: gx.mindspore.adadelta(rho=0.0), _OK, ""),
    (lambda: gx.mindspore.adadelta(rho=1.0), _OK, ""),
    (lambda: gx.mindspore.adadelta(rho=1.5), _REFUSED, "adadelta(rho="),
    (lambda: gx.mindspore.adadelta(rho=-0.5), _REFUSED, "adadelta(rho="),
    (lambda: gx.mindspore.adadelta(epsilon=0.0), _OK, ""),
    (lambda: gx.mindspore.adadelta(epsilon=-1e-9), _REFUSED, "adadelta(epsilon="),
    (lambda: gx.mindspore.rprop(etas=(0.0, 1.2)), _REFUSED, "rprop(etaminus="),
    (lambda: gx.mindspore.rprop(etas=(1.0, 1.2)), _REFUSED, "rprop(etaminus="),
    (lambda: gx.mindspore.rprop(etas=(0.999, 1.2)), _OK, ""),
    (lambda: gx.mindspore.rprop(etas=(0.5, 1.0)), _REFUSED, "rprop(etaplus="),
    (lambda: gx.mindspore.rprop(etas=(0.5, 1.001)), _OK, ""),
    (lambda: gx.mindspore.rprop(etas=(0.5, 1.2, 2.0)), _REFUSED, "rprop(etas="),
    (lambda: gx.mindspore.rprop(step_sizes=(1.0, 1.0)), _OK, ""),
    (lambda: gx.mindspore.rprop(step_sizes=(1.0, 0.999)), _REFUSED, "rprop(step_sizes="),
    (lambda: gx.mindspore.rprop(step_sizes=(0.0, 0.5)), _OK, ""),            # stricter: 0.0 the bound
    (lambda: gx.mindspore.rprop(step_sizes=(-1e-9, 0.5)), _REFUSED, "rprop(step_size_min="),  # stricter
    (lambda: gx.mindspore.asgd(lambd=0.0, alpha=0.5, t0=0.0), _OK, ""),       # stricter: 0.0 the bound
    (lambda: gx.mindspore.asgd(alpha=-0.5), _REFUSED, "asgd(alpha="),             # stricter
]


@pytest.mark.parametrize("make, exc, match", BOUNDS)
def test_bounds_as_mindspore_checks_them(make, exc, match):
    if exc is None:
        make()
    else:  # the optimizer the user called and the argument, not a piece inside it
        with pytest.raises(exc, match=re.escape(f"mindspore.{match}")):
            make()


def test_set_hyper_keeps_rprops_etaplus_range_and_a_unit_loss_scale():
    """``RANGES``: etaplus stays in (1, inf) under `set_hyper` (rprop.py 189). Rprop and ASGD take no
    loss_scale: MindSpore's base class then holds 1.0 (``Optimizer.__init__(learning_rate, params,
    weight_decay)``, loss_scale=1.0), and so must the state (Rprop's sign rule would hide any other)."""
    params = {"w": jnp.ones(3)}
    state = gx.mindspore.rprop().init(params)
    assert float(gx.get_hyper(gx.set_hyper(state, etaplus=1.5), "etaplus")) == 1.5
    with pytest.raises(ValueError, match="etaplus"):
        gx.set_hyper(state, etaplus=1.0)
    for make in (gx.mindspore.rprop, gx.mindspore.asgd):
        assert float(gx.get_hyper(make().init(params), "loss_scale")) == 1.0
