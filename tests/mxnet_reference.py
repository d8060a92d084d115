"""A NumPy transcription of MXNet 1.9.1's optimizers (``mxnet/optimizer/optimizer.py``
and the kernels, as tools/MXNET_NOTES.md writes them out), index by index.

It follows MXNet's own control flow, not gradxform's pieces: a Python loop
over indices, ``_update_count`` before or after ``_get_lr``, the scheduler
called with ``num_update``, per-index multipliers. Scalars are float64 on
the host (as MXNet's Python side), arrays float32 (as the kernels).
"""
from __future__ import annotations

import math

import numpy as np

F = np.float32


def clip(x, c):
    return np.clip(x, -F(c), F(c)) if c else x


class Reference:
    def __init__(self, name, learning_rate=None, wd=0.0, rescale_grad=1.0, clip_gradient=None,
                 lr_scheduler=None, begin_num_update=0, lr_mults=None, wd_mults=None, multi_precision=False,
                 **opts):
        self.name, self.opts = name, opts
        own_default = {"adam": 0.001, "rmsprop": 0.001, "adamax": 0.002, "nadam": 0.001,
                       "signum": 0.01}.get(name)
        if learning_rate is None:
            learning_rate = own_default
        self.sched = lr_scheduler
        if name == "ftrl":  # Ftrl keeps its lr to itself: a scheduler runs from its own base_lr
            self.lr = opts.pop("ftrl_lr", 0.1)
            self.base = lr_scheduler.base_lr if lr_scheduler else self.lr
        else:
            if lr_scheduler is not None and learning_rate is not None and lr_scheduler.base_lr != learning_rate:
                # Optimizer.__init__: the optimizer's (own default) learning rate overwrites the
                # scheduler's base_lr (Poly/Cosine keep base_lr_orig and so ignore it)
                lr_scheduler.base_lr = learning_rate
            if learning_rate is None:
                learning_rate = 0.01 if lr_scheduler is None else lr_scheduler.base_lr
            self.lr = self.base = learning_rate
        self.wd, self.rs, self.c = wd, rescale_grad, clip_gradient
        self.begin = begin_num_update
        self.num_update = begin_num_update
        self.counts = {}
        self.lr_mults, self.wd_mults = lr_mults or {}, wd_mults or {}
        self.mp = multi_precision
        self.states = {}
        self.m_schedule = 1.0

    def _count(self, i):
        self.counts[i] = self.counts.get(i, self.begin) + 1
        self.num_update = max(self.num_update, self.counts[i])

    def _lr(self, i):
        # MXNet's Optimizer._get_lr: lr_scheduler(num_update), a stateful object of its own
        # (tests/mxnet_schedules_reference.py), never gradxform's
        lr = float(self.sched(self.num_update)) if self.sched else self.lr
        return lr * self.lr_mults.get(i, 1.0)

    def _wd(self, i):
        return self.wd * self.wd_mults.get(i, 1.0)

    def step(self, weights, grads):
        return [self.update(i, w, g) for i, (w, g) in enumerate(zip(weights, grads))]

    def update(self, i, w, g):
        if self.mp and w.dtype == np.float16:
            w32 = self.states.setdefault(("master", i), w.astype(F))
            new = self._update(i, w32, g.astype(F))
            self.states[("master", i)] = new
            return new.astype(np.float16)
        return self._update(i, w.copy(), g)

    def _update(self, i, w, g):  # noqa: C901 - one branch per optimizer, as MXNet's classes
        o, n, st = self.opts, self.name, self.states
        z = lambda: np.zeros_like(w)  # noqa: E731
        if n == "lbsgd":
            lr, wd = self._lr(i), self._wd(i)
            self._count(i)
        elif n == "adadelta":
            wd = self._wd(i)
            self._count(i)
        else:
            self._count(i)
            lr, wd = self._lr(i), self._wd(i)
        t = self.counts[i]
        rs, c = F(self.rs), self.c
        if n in ("sgd", "ccsgd"):
            gr = clip(rs * g, c)
            mom = st.get(i, z())
            mom = F(o.get("momentum", 0.0)) * mom - F(lr) * F(wd) * w - F(lr) * gr
            st[i] = mom
            return w + mom
        if n == "nag":
            mu = F(o.get("momentum", 0.0))
            gr = clip(rs * g, c)
            if mu == 0:
                return w - F(lr) * (gr + F(wd) * w)
            mom = mu * st.get(i, z())
            w_new = w - mom + (mu + 1) * (mom - F(lr) * (gr + F(wd) * w))
            st[i] = mom - F(lr) * (gr + F(wd) * w_new)
            return w_new
        if n == "adam":
            b1, b2, eps = o.get("beta1", 0.9), o.get("beta2", 0.999), o.get("epsilon", 1e-8)
            lr_t = F(lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t))
            gr = clip(rs * g + F(wd) * w, c)
            m, v = st.get(i, (z(), z()))
            m = F(b1) * m + F(1 - b1) * gr
            v = F(b2) * v + F(1 - b2) * gr * gr
            st[i] = (m, v)
            return w - lr_t * m / (np.sqrt(v) + F(eps))
        if n == "rmsprop":
            g1, g2, eps = o.get("gamma1", 0.9), o.get("gamma2", 0.9), o.get("epsilon", 1e-8)
            gr = clip(rs * g + F(wd) * w, c)
            if o.get("centered"):
                nn, gb, d = st.get(i, (z(), z(), z()))
                nn = F(1 - g1) * gr * gr + F(g1) * nn
                gb = F(1 - g1) * gr + F(g1) * gb
                d = F(g2) * d - F(lr) * (gr / np.sqrt(nn - gb * gb + F(eps)))
                st[i] = (nn, gb, d)
                w = w + d
            else:
                nn = st.get(i, z())
                nn = F(1 - g1) * gr * gr + F(g1) * nn
                st[i] = nn
                w = w - F(lr) * (gr / np.sqrt(nn + F(eps)))
            cw = o.get("clip_weights")
            return clip(w, cw) if cw else w
        if n == "adagrad":
            gr = clip(rs * g, c)
            h = st.get(i, z()) + gr * gr
            st[i] = h
            return w + (gr / np.sqrt(h + F(o.get("eps", 1e-7))) + w * F(wd)) * F(-lr)
        if n == "adadelta":
            rho, eps = F(o.get("rho", 0.9)), F(o.get("epsilon", 1e-5))
            gr = clip(rs * g, c)
            ag, ad = st.get(i, (z(), z()))
            ag = rho * ag + (1 - rho) * gr * gr
            d = np.sqrt(ad + eps) / np.sqrt(ag + eps) * gr
            ad = rho * ad + (1 - rho) * d * d
            st[i] = (ag, ad)
            return w - (d + F(wd) * w)
        if n == "adamax":
            b1, b2 = o.get("beta1", 0.9), o.get("beta2", 0.999)
            lr_t = F(lr / (1 - b1 ** t))
            gr = clip(rs * g + F(wd) * w, c)
            m, u = st.get(i, (z(), z()))
            m = F(b1) * m + F(1 - b1) * gr
            u = np.maximum(F(b2) * u, np.abs(gr))
            st[i] = (m, u)
            return w - lr_t * m / u
        if n == "nadam":
            b1, b2 = o.get("beta1", 0.9), o.get("beta2", 0.999)
            eps, sd = o.get("epsilon", 1e-8), o.get("schedule_decay", 0.004)
            gr = clip(rs * g + F(wd) * w, c)
            mt = b1 * (1 - 0.5 * 0.96 ** (t * sd))
            mt1 = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * sd))
            self.m_schedule *= mt
            nxt = self.m_schedule * mt1
            m, v = st.get(i, (z(), z()))
            m = F(b1) * m + F(1 - b1) * gr
            v = F(b2) * v + F(1 - b2) * gr * gr
            st[i] = (m, v)
            mbar = F(1 - mt) * (gr / F(1 - self.m_schedule)) + F(mt1) * (m / F(1 - nxt))
            return w - F(lr) * mbar / (np.sqrt(v / F(1 - b2 ** t)) + F(eps))
        if n == "ftml":
            b1, b2, eps = o.get("beta1", 0.6), o.get("beta2", 0.999), o.get("epsilon", 1e-8)
            gr = clip(rs * g + F(wd) * w, c)
            d, v, zz = st.get(i, (z(), z(), z()))
            v = F(b2) * v + F(1 - b2) * gr * gr
            dt = F((1 - b1 ** t) / lr) * (np.sqrt(v / F(1 - b2 ** t)) + F(eps))
            zz = F(b1) * zz + F(1 - b1) * gr - (dt - F(b1) * d) * w
            st[i] = (dt, v, zz)
            return -zz / dt
        if n == "ftrl":
            l1, beta = F(o.get("lamda1", 0.01)), F(o.get("beta", 1.0))
            gr = clip(rs * g, c)
            zz, nn = st.get(i, (z(), z()))
            zz = zz + gr - (np.sqrt(nn + gr * gr) - np.sqrt(nn)) * w / F(lr)
            nn = nn + gr * gr
            st[i] = (zz, nn)
            return (np.sign(zz) * l1 - zz) / ((beta + np.sqrt(nn)) / F(lr) + F(wd)) * (np.abs(zz) > l1)
        if n == "signum":
            mu = F(o.get("momentum", 0.9))
            if mu == 0:
                return (1 - F(lr) * F(wd)) * w - F(lr) * np.sign(g)
            gr = clip(rs * g, c)
            mom = mu * st.get(i, z()) - (1 - mu) * F(wd) * w - (1 - mu) * gr
            st[i] = mom
            return (1 - F(lr) * F(o.get("wd_lh", 0.0))) * w + F(lr) * np.sign(mom)
        if n == "dcasgd":
            gr = clip(rs * g, c)
            prev = st.get(("prev", i), w.copy())
            mom = -F(lr) * (gr + F(wd) * w + F(o.get("lamda", 0.04)) * gr * gr * (w - prev))
            st[("prev", i)] = w.copy()
            return w + mom
        if n == "lbsgd":
            bs, strategy = o.get("batch_scale", 1), o.get("warmup_strategy", "linear")
            nwup = o.get("warmup_epochs", 5) * o.get("updates_per_epoch", 32)
            cum, num = st.get(("cum", i), (z(), o.get("begin_epoch", 0) * o.get("updates_per_epoch", 32)))
            cum, num = cum + g, num + 1
            if num % bs:
                st[("cum", i)] = (cum, num)
                return w
            gm = cum / F(bs)
            st[("cum", i)] = (z(), num)
            if strategy == "lars":
                w2, g2 = float(np.sum(w * w)), float(np.sum(gm * gm))
                mult = min(max(math.sqrt(w2 / (g2 + wd * w2 + 1e-18)), 0.01), 100)
            elif num >= nwup:
                mult = float(bs)
            elif nwup <= 1:
                mult = 1.0
            else:
                frac = {"linear": num / nwup, "power2": (num * num) / (nwup * nwup),
                        "sqrt": math.sqrt(num / nwup)}[strategy]
                mult = 1.0 + (bs - 1) * frac
            lr = lr * mult
            gr = clip(rs * gm, c)
            mom = F(o.get("momentum", 0.0)) * st.get(i, z()) - F(lr) * F(wd) * w - F(lr) * gr
            st[i] = mom
            return w + mom
        raise KeyError(n)
