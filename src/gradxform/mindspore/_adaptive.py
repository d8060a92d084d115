"""MindSpore (2.x) / TinyMS per-coordinate rules: Adagrad, ProximalAdagrad,
FTRL, RMSProp.

Sources: ``mindspore/nn/optim/ada_grad.py`` (``ApplyAdagrad``),
``proximal_ada_grad.py`` (``ApplyProximalAdagrad``), ``ftrl.py``
(``ApplyFtrl``), ``rmsprop.py`` (``ApplyRMSProp``/``ApplyCenteredRMSProp``).
Each rule uses the learning rate inside its formula, so each is one piece
that reads ``lr`` from the step context.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._registry import Declaration, registered_name
from .._base import GradientTransformation, context_value, needs_params, transformation
from .._spec import Fusion, declare
from .._hyper import hyper_scalar
from .._tree import full_like_params
from ._common import check_bool, check_float, parse
from ._groups import group_keys_but
from .._ranges import POSITIVE
from .._types import Hyper, ParamTree
from .._domains import FINITE, NON_NEGATIVE_FINITE, non_negative_if
from .._rounding import rounded

__all__ = ["adagrad", "proximal_adagrad", "ftrl", "rmsprop", "AccumState", "MindSporeFtrlState", "RMSPropState"]
# FTRL divides by the learning rate (check_positive_float in MindSpore)
DECLARED = (  # registered as 'mindspore.<name>' by the family's __init__ (gradxform._registry.Declaration)
    Declaration('adagrad', classes=('Adagrad',), migrates=True),
    Declaration('proximal_adagrad', classes=('ProximalAdagrad',), migrates=True),
    Declaration('ftrl', classes=('FTRL',), ranges={"learning_rate": POSITIVE}, migrates=True,
                group_keys=group_keys_but("lr")),
    Declaration('rmsprop', classes=('RMSProp',), migrates=True),
)



# ApplyAdagrad's CPU kernel adds this inside the square root (apply_adagrad_cpu_kernel.cc)
_ADAGRAD_EPS = 1e-8


class AccumState(NamedTuple):
    hyper: Hyper
    accum: ParamTree
    domains = {"accum": NON_NEGATIVE_FINITE}  # starts at accum >= 0, then += g^2


def _adagrad_step(accum: float, update_slots: bool) -> GradientTransformation:
    """``ApplyAdagrad`` in the CPU kernel's order (see `adagrad`)."""

    def init(params):
        return AccumState({}, full_like_params(params, accum))

    def one(g, a, l):
        l = l.astype(g.dtype)
        # the kernel's 1 / sqrt(h + 1e-8), rounded on its own (XLA would fold it into rsqrt),
        # times the rounded lr * g; no product contracted into the subtraction
        inv = 1 / rounded(jnp.sqrt(a + jnp.asarray(_ADAGRAD_EPS, g.dtype)))
        return -rounded(rounded(l * g) * inv)

    @declare(needs=("lr",), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params
        lr = context_value(extra_args, "lr", update)
        h = jax.tree.map(lambda a, g: a + rounded(g * g), state.accum, updates) if update_slots else state.accum
        return jax.tree.map(one, updates, h, lr), AccumState(state.hyper, h)

    return transformation(init, update)


def adagrad(accum=0.1, learning_rate=0.001, update_slots=True, loss_scale=1.0, weight_decay=0.0, *,
            params=None, groups=None, skip_nonfinite=False) -> GradientTransformation:
    """MindSpore Adagrad (``nn.Adagrad`` -> ``ApplyAdagrad``)::

        g = (g + weight_decay * loss_scale * w) / loss_scale   (no decay for 'beta'/'gamma')
        h += g * g          (only when update_slots; h starts at accum)
        w -= (lr * g) * (1 / sqrt(h + 1e-8))

    in the order of MindSpore 2.10's CPU kernel
    (``ops/kernel/cpu/native/apply_adagrad_cpu_kernel.cc`` ``LaunchApplyAdagrad``:
    ``var -= lr * grad * (one / sqrt(accum + eps))``, ``eps = 1e-8``), every
    product rounded on its own (no fused multiply-add): a jitted step is that
    kernel's to the last bit (tests/test_kernel_order_ms_paddle.py). The GPU
    kernel writes ``lr * g / sqrt(h)`` without the 1e-8; it changes ``h`` only
    where ``h < 0.25`` (by an ulp) and keeps ``h = g = 0`` finite.
    (The seed prints ``h += g``; the kernel accumulates the square, as here.)
    Warning: MindSpore 2.10's CPU ``ApplyAdagrad`` kernel ignores
    ``update_slots=False`` (it always accumulates); the seed's rule, kept here,
    leaves ``h`` at ``accum``.
    Args: accum: float >= 0; update_slots: bool (static); others as
    `gradxform.mindspore.momentum`.
    """
    owner = registered_name(adagrad)
    o = parse(owner, learning_rate, weight_decay, loss_scale, groups, params=params, skip_nonfinite=skip_nonfinite)
    accum = check_float(owner, "accum", accum, low=0.0)
    check_bool(owner, "update_slots", update_slots)
    return o.build(o.head(), _adagrad_step(accum, update_slots))


def _proximal_adagrad_step(accum: float, l1: float, l2: float) -> GradientTransformation:
    """``ApplyProximalAdagrad`` (CPU and GPU kernels, TensorFlow's op)::

        h += g^2;  a = lr / sqrt(h);  v = w - a * g
        w' = sign(v) * max(|v| - a * l1, 0) / (1 + a * l2);   emits w' - w
    """

    def init(params):
        return AccumState({"l1": hyper_scalar(l1), "l2": hyper_scalar(l2)}, full_like_params(params, accum))

    @declare(needs=("lr",), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        if params is None:
            raise needs_params(update)
        lr = context_value(extra_args, "lr", update)
        l1, l2 = state.hyper["l1"], state.hyper["l2"]
        h = jax.tree.map(lambda a, g: a + g * g, state.accum, updates)

        def one(g, a, w, lr_):
            rate = lr_.astype(g.dtype) / jnp.sqrt(a)   # the adaptive rate, shrinkage included
            v = w.astype(g.dtype) - g * rate
            new = jnp.sign(v) * jnp.maximum(jnp.abs(v) - rate * l1.astype(g.dtype), 0.0) \
                / (1 + l2.astype(g.dtype) * rate)
            return (new - w).astype(g.dtype)

        return jax.tree.map(one, updates, h, params, lr), AccumState(state.hyper, h)

    return transformation(init, update)


def proximal_adagrad(accum=0.1, learning_rate=0.001, l1=0.0, l2=0.0, use_locking=False, loss_scale=1.0,
                     weight_decay=0.0, *, params=None, groups=None, skip_nonfinite=False) -> GradientTransformation:
    """MindSpore ProximalAdagrad (``nn.ProximalAdagrad`` -> ``ApplyProximalAdagrad``)::

        g = (g + weight_decay * loss_scale * w) / loss_scale   (no decay for 'beta'/'gamma')
        h += g^2;   a = lr / sqrt(h);   v = w - a * g
        w = sign(v) * max(|v| - a * l1, 0) / (1 + a * l2)

    Args: accum, l1, l2: floats >= 0 (l1, l2 hyperparameters); use_locking
    accepted and ignored; others as `gradxform.mindspore.momentum`.

    The shrinkage uses the adaptive rate ``a = lr / sqrt(h)``, as MindSpore's
    CPU kernel (golden ``proximaladagrad_l1_l2``) and GPU kernel
    (``CalApplyProximalAdagradKernel``: ``learning_rate = lr * rsqrt(accum)``)
    both do, like TensorFlow's ``ApplyProximalAdagrad``. The seed and
    MindSpore's op documentation write ``lr`` there; the kernels agree with
    each other, so the framework's code wins. The two agree when l1 = l2 = 0.
    """
    owner = registered_name(proximal_adagrad)
    o = parse(owner, learning_rate, weight_decay, loss_scale, groups, params=params, skip_nonfinite=skip_nonfinite)
    accum = check_float(owner, "accum", accum, low=0.0)
    l1 = check_float(owner, "l1", l1)
    l2 = check_float(owner, "l2", l2)
    check_bool(owner, "use_locking", use_locking)
    return o.build(o.head(), _proximal_adagrad_step(accum, l1, l2))


def _divided(x, c):
    """``x / c`` for a scalar ``c``, as a true division: XLA rewrites a division by a
    broadcast scalar into ``x * (1 / c)`` (an ulp off in about half the cases); a
    divisor that depends on the element (the same value, NaN where ``x`` is) keeps it."""
    return x / jnp.where(jnp.isnan(x), jnp.nan, c)


def _power(x, e):
    """``x ** e``; ``e = 0.5`` (FTRL's default ``lr_power = -0.5``) as a square root,
    correctly rounded like the kernels' ``pow`` (XLA's ``pow`` goes through exp/log)."""
    return jnp.where(e == 0.5, jnp.sqrt(x), jnp.power(x, e))


class MindSporeFtrlState(NamedTuple):
    hyper: Hyper
    accum: ParamTree
    linear: ParamTree
    domains = {"accum": NON_NEGATIVE_FINITE, "linear": FINITE}


def _ftrl_step(initial_accum: float, lr_power: float, l1: float, l2: float) -> GradientTransformation:
    """``ApplyFtrl`` as MindSpore's GPU kernel computes it (``p = lr_power``)::

        m' = m + g * g
        u += g - ((m'^-p - m^-p) / lr) * w
        w' = (sign(u) * l1 - u) / (m'^-p / lr + 2 * l2)  if |u| > l1  else 0;   emits w' - w

    in the CPU dense kernel's order (``apply_ftrl_cpu_kernel.cc``), every product
    rounded on its own, ``/ lr`` a true division, ``m^0.5`` a square root: ``m``
    and ``u`` are that kernel's to the last bit; ``w'`` is too where
    ``w + (w' - w) == w'`` (the kernel assigns ``w'``; the update is added).
    (The CPU dense kernel differs for l1 > 0: see `ftrl`.)
    """

    def init(params):
        return MindSporeFtrlState({"lr_power": hyper_scalar(lr_power), "l1": hyper_scalar(l1), "l2": hyper_scalar(l2)},
                         full_like_params(params, initial_accum), jax.tree.map(jnp.zeros_like, params))

    @declare(needs=("lr",), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        if params is None:
            raise needs_params(update)
        lr_tree = context_value(extra_args, "lr", update)
        h = state.hyper
        p, l1, l2 = h["lr_power"], h["l1"], h["l2"]

        def one(g, m, u, w, lr):
            p_, l1_, l2_, lr = (x.astype(g.dtype) for x in (p, l1, l2, lr))
            w = w.astype(g.dtype)
            m2 = m + rounded(g * g)
            pw_new, pw_old = _power(m2, -p_), _power(m, -p_)
            u2 = u + (g - rounded(_divided(pw_new - pw_old, lr) * w))
            quad = rounded(_divided(pw_new, lr) + rounded(2 * l2_))
            new = jnp.where(jnp.abs(u2) > l1_, (jnp.sign(u2) * l1_ - u2) / quad, jnp.zeros_like(u2))
            return (new - w).astype(g.dtype), m2, u2

        leaves, treedef = jax.tree.flatten(updates)
        res = [one(*a) for a in zip(leaves, treedef.flatten_up_to(state.accum), treedef.flatten_up_to(state.linear),
                                    treedef.flatten_up_to(params), treedef.flatten_up_to(lr_tree))]
        col = lambda i: treedef.unflatten([r[i] for r in res])  # noqa: E731
        return col(0), MindSporeFtrlState(h, col(1), col(2))

    return transformation(init, update)


def ftrl(initial_accum=0.1, learning_rate=0.001, lr_power=-0.5, l1=0.0, l2=0.0, use_locking=False,
         loss_scale=1.0, weight_decay=0.0, *, params=None, groups=None, skip_nonfinite=False) -> GradientTransformation:
    """MindSpore FTRL (``nn.FTRL`` -> ``ApplyFtrl``)::

        g = (g + weight_decay * loss_scale * w) / loss_scale   (all parameters decayed)
        m' = m + g^2;  u += g - (m'^-p - m^-p) / lr * w
        w = (sign(u) * l1 - u) / (m'^-p / lr + 2 * l2)  if |u| > l1  else 0

    Args: initial_accum >= 0; learning_rate: a float > 0 (no dynamic or
    per-group learning rate, as MindSpore); lr_power <= 0; l1, l2 >= 0;
    use_locking accepted and ignored. Without groups every parameter is
    decayed (MindSpore's FTRL has no beta/gamma filter).

    ``p = lr_power`` enters only as ``m^-p`` (the CPU sparse kernel takes
    ``sqrt`` for p = -0.5, the same value); ``|u| > l1`` is strict, so
    ``|u| == l1`` gives ``w = 0``.

    Which kernel: for a dense gradient ``nn.FTRL`` (``nn/optim/ftrl.py``
    ``_tensor_run_opt``) calls ``P.ApplyFtrl``; for a ``RowTensor`` gradient
    ``P.SparseApplyFtrl`` (``P.FusedSparseFtrl`` when ``target='CPU'``). The
    rule above is the one of the GPU ``ApplyFtrl``
    (``mindspore/ccsrc/plugin/device/gpu/kernel/cuda_impl/cuda_ops/ftrl_impl.cu``:
    ``l1 * Sgn(linear) - linear``), of the GPU ``SparseApplyFtrl``
    (``cuda_ops/sparse_ftrl_impl.cu``), of the CPU ``SparseApplyFtrl`` /
    ``FusedSparseFtrl`` (``plugin/device/cpu/kernel/sparse_apply_ftrl_cpu_kernel.cc``:
    ``Sign(linear) * l1 - linear``) and of ``ApplyFtrl``'s documentation; it
    is what gradxform computes. MindSpore 2.10's CPU dense ``ApplyFtrl``
    (``plugin/device/cpu/kernel/apply_ftrl_cpu_kernel.cc``) writes
    ``linear ? l1 : -l1`` for the sign, i.e. ``w = (l1 - u) / (...)`` once
    ``|u| > l1``: the two differ where ``u < -l1`` (by ``2 l1 / (...)``) and
    agree when l1 = 0. Following the GPU (main) kernel, gradxform does not
    reproduce that CPU-only rule: a MindSpore CPU run with dense gradients and
    l1 > 0 differs from gradxform there (golden ``ftrl_l1_l2``), while the
    goldens ``ftrl_sparse_*`` (tools/mindspore_ftrl_goldens.py: MindSpore's
    CPU sparse kernel fed every row) record the rule above.
    """
    owner = registered_name(ftrl)
    if isinstance(learning_rate, bool) or not isinstance(learning_rate, float):
        raise TypeError(f"{owner}(learning_rate=...): learning_rate must be a float; got {learning_rate!r}.")
    check_float(owner, "learning_rate", learning_rate)
    o = parse(owner, learning_rate, weight_decay, loss_scale, groups, allow_dynamic_lr=False,
              params=params, skip_nonfinite=skip_nonfinite)
    initial_accum = check_float(owner, "initial_accum", initial_accum, low=0.0)
    lr_power = check_float(owner, "lr_power", lr_power)
    l1 = check_float(owner, "l1", l1)
    l2 = check_float(owner, "l2", l2)
    check_bool(owner, "use_locking", use_locking)
    return o.build(o.head(decay_filter=None), _ftrl_step(initial_accum, lr_power, l1, l2))


class RMSPropState(NamedTuple):
    hyper: Hyper
    mean_square: ParamTree
    mean_grad: ParamTree
    moment: ParamTree
    domains = {"mean_square": non_negative_if("decay", at_most=1.0), "mean_grad": FINITE, "moment": FINITE}


def _rmsprop_step(decay: float, momentum: float, epsilon: float, centered: bool) -> GradientTransformation:
    """``ApplyRMSProp`` / ``ApplyCenteredRMSProp`` in the CPU kernels' order (``ms`` starts
    at 1, MindSpore's init; ``c = 1 - decay``; see `rmsprop`)."""

    def init(params):
        return RMSPropState({"decay": hyper_scalar(decay), "momentum": hyper_scalar(momentum),
                             "epsilon": hyper_scalar(epsilon)},
                            jax.tree.map(jnp.ones_like, params),
                            jax.tree.map(jnp.zeros_like, params) if centered else (),
                            jax.tree.map(jnp.zeros_like, params))

    def plain(h, g, ms, mom, lr):
        # nnacl RMSPropUnuseCenterFp32 (AVX, contracted): ms += (g*g - ms)*c and
        # mom = mom*mu + q are fused multiply-adds, as XLA writes them
        d, mu, e, lr = (x.astype(g.dtype) for x in (h["decay"], h["momentum"], h["epsilon"], lr))
        ms = (g * g - ms) * (1 - d) + ms
        mom = mom * mu + rounded(g * lr) / rounded(jnp.sqrt(ms + e))
        return -mom, ms, (), mom

    def center(h, g, ms, mg, mom, lr):
        # RMSPropCpuKernelMod::LaunchRMSPropUseCenter (C++, not contracted): every
        # product rounded; no update of mom and w where ms - mg^2 + eps > 0 fails
        d, mu, e, lr = (x.astype(g.dtype) for x in (h["decay"], h["momentum"], h["epsilon"], lr))
        c = 1 - d
        ms = rounded((rounded(g * g) - ms) * c) + ms
        mg = rounded((g - mg) * c) + mg
        den = (ms - rounded(mg * mg)) + e
        new = rounded(mom * mu) + rounded(g * lr) / rounded(jnp.sqrt(den))
        on = den > 0
        return jnp.where(on, -new, jnp.zeros_like(new)), ms, mg, jnp.where(on, new, mom)

    @declare(needs=("lr",), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params
        lr = context_value(extra_args, "lr", update)
        h = state.hyper
        leaves, treedef = jax.tree.flatten(updates)
        flat = lambda t: treedef.flatten_up_to(t)  # noqa: E731
        if centered:
            res = [center(h, *a) for a in zip(leaves, flat(state.mean_square), flat(state.mean_grad),
                                               flat(state.moment), flat(lr))]
        else:
            res = [plain(h, *a) for a in zip(leaves, flat(state.mean_square), flat(state.moment), flat(lr))]
        col = lambda i: treedef.unflatten([r[i] for r in res])  # noqa: E731
        return col(0), RMSPropState(h, col(1), col(2) if centered else state.mean_grad, col(3))

    return transformation(init, update)


def rmsprop(learning_rate=0.1, decay=0.9, momentum=0.0, epsilon=1e-10, use_locking=False, centered=False,
            loss_scale=1.0, weight_decay=0.0, *,
            params=None, groups=None, skip_nonfinite=False) -> GradientTransformation:
    """MindSpore RMSProp (``nn.RMSProp``)::

        g = (g + weight_decay * loss_scale * w) / loss_scale   (no decay for 'beta'/'gamma')
        s += (g * g - s) * (1 - decay)                     (s starts at 1)
        m = m * momentum + (g * lr) / sqrt(s + epsilon)    (centered: mg += (g - mg) * (1 - decay),
        w -= m                                               sqrt((s - mg * mg) + epsilon); m and w
                                                             kept where (s - mg * mg) + epsilon <= 0)

    in the order of MindSpore 2.10's CPU kernels, so that a jitted step is
    theirs to the last bit (tests/test_kernel_order_ms_paddle.py): plain,
    ``nnacl/fp32/rmsprop_fp32.c`` ``RMSPropUnuseCenterFp32``, whose AVX loop is
    compiled with fused multiply-adds (``s`` and ``m`` are two each, as XLA
    contracts them); centered, ``ops/kernel/cpu/native/rmsprop_cpu_kernel.cc``
    ``LaunchRMSPropUseCenter``, every product rounded on its own, which leaves
    ``m`` and ``w`` alone where the denominator is not positive (NaN included;
    the GPU kernel would give NaN there). The AVX loop adds epsilon after the
    square root (``sqrt(s) + epsilon``), its scalar tail, the GPU kernel and
    MindSpore's documentation inside: gradxform keeps it inside (the same
    float32 number wherever ``s`` is above about 1e7 * epsilon).
    The learning rate is inside the momentum (unlike MXNet/optax), so a
    changing lr acts on new gradients only. Args: decay, momentum: floats >= 0;
    epsilon: float > 0; centered (static); use_locking accepted and ignored.
    """
    owner = registered_name(rmsprop)
    o = parse(owner, learning_rate, weight_decay, loss_scale, groups, params=params, skip_nonfinite=skip_nonfinite)
    decay = check_float(owner, "decay", decay)
    momentum = check_float(owner, "momentum", momentum)
    epsilon = check_float(owner, "epsilon", epsilon)
    check_bool(owner, "use_locking", use_locking)
    check_bool(owner, "centered", centered)
    return o.build(o.head(), _rmsprop_step(decay, momentum, epsilon, centered))



# -- the framework's classes, in its positional order (each named in its `Declaration`) --

def Adagrad(params, accum=0.1, learning_rate=0.001, update_slots=True, loss_scale=1.0, weight_decay=0.0, *,
            skip_nonfinite=False) -> GradientTransformation:
    """``nn.Adagrad(params, accum, learning_rate, ...)``: `gradxform.mindspore.adagrad`."""
    return adagrad(params=params, accum=accum, learning_rate=learning_rate, update_slots=update_slots,
                   loss_scale=loss_scale, weight_decay=weight_decay, skip_nonfinite=skip_nonfinite)


def ProximalAdagrad(params, accum=0.1, learning_rate=0.001, l1=0.0, l2=0.0, use_locking=False, loss_scale=1.0,
                    weight_decay=0.0, *, skip_nonfinite=False) -> GradientTransformation:
    """``nn.ProximalAdagrad(params, accum, learning_rate, ...)``: `gradxform.mindspore.proximal_adagrad`."""
    return proximal_adagrad(params=params, accum=accum, learning_rate=learning_rate, l1=l1, l2=l2,
                            use_locking=use_locking, loss_scale=loss_scale, weight_decay=weight_decay,
                            skip_nonfinite=skip_nonfinite)


def FTRL(params, initial_accum=0.1, learning_rate=0.001, lr_power=-0.5, l1=0.0, l2=0.0, use_locking=False,
         loss_scale=1.0, weight_decay=0.0, *, skip_nonfinite=False) -> GradientTransformation:
    """``nn.FTRL(params, initial_accum, learning_rate, ...)``: `gradxform.mindspore.ftrl`."""
    return ftrl(params=params, initial_accum=initial_accum, learning_rate=learning_rate, lr_power=lr_power, l1=l1,
                l2=l2, use_locking=use_locking, loss_scale=loss_scale, weight_decay=weight_decay,
                skip_nonfinite=skip_nonfinite)


def RMSProp(params, learning_rate=0.1, decay=0.9, momentum=0.0, epsilon=1e-10, use_locking=False, centered=False,
            loss_scale=1.0, weight_decay=0.0, *, skip_nonfinite=False) -> GradientTransformation:
    """``nn.RMSProp(params, learning_rate, decay, momentum, ...)``: `gradxform.mindspore.rmsprop`."""
    return rmsprop(params=params, learning_rate=learning_rate, decay=decay, momentum=momentum, epsilon=epsilon,
                   use_locking=use_locking, centered=centered, loss_scale=loss_scale, weight_decay=weight_decay,
                   skip_nonfinite=skip_nonfinite)
