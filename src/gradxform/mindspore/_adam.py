"""MindSpore (2.x) / TinyMS Adam family: Adam (nesterov, amsgrad, lazy,
offload), AdamWeightDecay, LazyAdam, AdamOffload, Lamb.

Sources: ``mindspore/nn/optim/adam.py`` (``P.Adam``, ``AdamWeightDecay``,
``AdamNoUpdateParam``), ``lazyadam.py``, ``lamb.py``; seed ``003_*.txt``.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Protocol, cast

import jax
import jax.numpy as jnp

from .._registry import Declaration, registered_name
from .._base import GradientTransformation, StepContext, chain, context_value, needs_params, run_inner, transformation
from .._spec import Fusion, LocalKey, declare
from .._elementwise import fusable
from .._hyper import hyper_scalar
from .._tree import once_per_value
from ..pieces import lazy_rows, scale_by_adam_moments, scale_by_lr
from ..pieces.internal import MomentsState, adam_emas, divided_by
from ..pieces.internal import leaf_sq_norm
from .._ranges import check_hyper
from ._common import check_bool, check_float, parse
from ._groups import group_keys_but
from .._types import Hyper, ParamTree
from .._domains import FINITE, NON_NEGATIVE_FINITE, POWER

__all__ = ["adam", "adam_weight_decay", "lazy_adam", "adam_offload", "lamb", "AmsgradState", "LambState",
           "BetaPowerState", "beta_power_correction"]
DECLARED = (  # registered as 'mindspore.<name>' by the family's __init__ (gradxform._registry.Declaration)
    Declaration('adam', classes=('Adam',), migrates=True),
    Declaration('adam_weight_decay', classes=('AdamWeightDecay',), migrates=True,
                group_keys=group_keys_but("grad_centralization")),
    Declaration('lazy_adam', classes=('LazyAdam',), migrates=True),
    Declaration('adam_offload', classes=('AdamOffload',), migrates=True),
    Declaration('lamb', classes=('Lamb',), migrates=True,
                no_goldens="MindSpore 2.10 has no CPU kernel for Lamb (tests/goldens/mindspore/FAILURES.json): "
                       "checked against a float64 transcription of lamb.py and its GPU kernel"),
)



def _c(h, x):
    return h.astype(x.dtype)


def _check_betas(owner, beta1, beta2, eps):
    check_float(owner, "beta1", beta1)
    check_float(owner, "beta2", beta2)
    check_hyper(owner, "epsilon", eps, arg="eps")


# P.Adam's kernel divides by sqrt(v) + eps last; its moments piece hands the divisor on
ADAM_DENOMINATOR = LocalKey("adam_denominator", "MindSpore Adam's moments (sqrt(v) + eps)")


def _kernel_moments(beta1, beta2, eps, nesterov: bool, *, offload: bool) -> GradientTransformation:
    """``P.Adam``'s moments in its kernel's order of operations::

        m += (g - m) * (1 - beta1);   v += (g * g - v) * (1 - beta2)

    (``offload``: AdamOffload's ``AdamNoUpdateParam`` kernel, ``AdamDeltaFp32``:
    ``m = m * beta1 + (1 - beta1) * g;  v = v * beta2 + (1 - beta2) * g * g``)

    emits ``m`` (``use_nesterov``: ``m * beta1 + (1 - beta1) * g``) and hands
    ``sqrt(v) + eps`` to the last piece, ``divided_by(ADAM_DENOMINATOR)``.

    The order is the rounding: MindSpore's CPU kernel (``nnacl/fp32/adam_fp32.c``,
    compiled with contraction, so ``fma(g - m, 1 - beta1, m)`` and
    ``fma(fma(g, g, -v), 1 - beta2, v)``) and its GPU kernel (``adam_impl.cu``,
    the same lines, contracted by nvcc) both write it so, and XLA contracts the
    same expression the same way: bit-exact with MindSpore 2.10's CPU ``Adam``
    (tests/fixtures/mindspore/adam_kernel_order.npz). ``b2 * v + (1 - b2) * g^2``
    (`gradxform.pieces.adam_emas`) is the same number up to the last bits, and
    overflows at other gradients: ``g * g`` is inf from ``|g|`` about 1.8e19,
    where MindSpore's moment becomes inf."""

    def init(params):
        z = jax.tree.map(jnp.zeros_like, params)
        return MomentsState({"beta1": hyper_scalar(beta1), "beta2": hyper_scalar(beta2),
                             "epsilon": hyper_scalar(eps)}, z, z)

    @declare(provides=(ADAM_DENOMINATOR,), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params
        h = state.hyper
        b1, b2, e = h["beta1"], h["beta2"], h["epsilon"]
        if offload:
            mu, nu = adam_emas(state.mu, state.nu, updates, b1, b2)
        else:
            mu = jax.tree.map(lambda m, g: m + (g - m) * (1 - _c(b1, g)), state.mu, updates)
            nu = jax.tree.map(lambda v, g: v + (g * g - v) * (1 - _c(b2, g)), state.nu, updates)
        if nesterov:
            out = jax.tree.map(lambda m, g: (1 - _c(b1, g)) * g + m * _c(b1, g), mu, updates)
        else:
            out = mu
        denominator = jax.tree.map(lambda v: jnp.sqrt(v) + _c(e, v), nu)
        cast(StepContext, StepContext.of(extra_args)).publish_local({ADAM_DENOMINATOR: denominator})
        return out, MomentsState(h, mu, nu)

    return transformation(init, update)


def _kernel_step_size(beta1, beta2) -> GradientTransformation:
    """``P.Adam``'s step size, ``lr * sqrt(1 - beta2_power) / (1 - beta1_power)``
    in float32 (``adam_cpu_kernel.cc``), times the numerator from
    `_kernel_moments`; the powers as `beta_power_correction` keeps them (the
    same state)."""

    def init(params):
        del params
        one = jnp.ones((), jnp.float32)
        return BetaPowerState({"beta1": hyper_scalar(beta1), "beta2": hyper_scalar(beta2)}, one, one)

    @declare(needs=("lr",), fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        del params
        lr = context_value(extra_args, "lr", update)
        p1 = state.beta1_power * state.hyper["beta1"]
        p2 = state.beta2_power * state.hyper["beta2"]
        one = jnp.ones((), jnp.float32)
        step_size = once_per_value(lambda l: l.astype(jnp.float32) * jnp.sqrt(one - p2) / (one - p1))
        out = jax.tree.map(lambda u, l: step_size(l).astype(u.dtype) * u, updates, lr)
        return out, BetaPowerState(state.hyper, p1, p2)

    return transformation(init, update)


class AmsgradState(NamedTuple):
    hyper: Hyper
    mu: ParamTree
    nu: ParamTree
    vhat: ParamTree
    domains = {"mu": FINITE, "nu": NON_NEGATIVE_FINITE, "vhat": NON_NEGATIVE_FINITE}


def _amsgrad_moments(beta1, beta2, eps) -> GradientTransformation:
    """``ApplyAdamWithAmsgradV2``: ``vhat = max(vhat, v)``; emits ``m / (sqrt(vhat) + eps)``."""

    def init(params):
        z = jax.tree.map(jnp.zeros_like, params)
        return AmsgradState({"beta1": hyper_scalar(beta1), "beta2": hyper_scalar(beta2),
                             "epsilon": hyper_scalar(eps)}, z, z, z)

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        h = state.hyper
        b1, b2, e = h["beta1"], h["beta2"], h["epsilon"]
        mu, nu = adam_emas(state.mu, state.nu, updates, b1, b2)
        vhat = jax.tree.map(jnp.maximum, state.vhat, nu)
        out = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + _c(e, v)), mu, vhat)
        return out, AmsgradState(h, mu, nu, vhat)

    return transformation(init, update)


class BetaPowerState(NamedTuple):
    hyper: Hyper
    beta1_power: jax.Array   # float32 scalars, MindSpore's Parameters of the same names (start at 1)
    beta2_power: jax.Array
    domains = {"beta1_power": POWER, "beta2_power": POWER}


def beta_power_correction(beta1, beta2) -> GradientTransformation:
    """The bias correction of MindSpore's Adam kernels (``P.Adam``,
    ``ApplyAdamWithAmsgradV2``): ``u -> u * sqrt(1 - beta2_power) / (1 - beta1_power)``
    with ``beta*_power`` kept in the state as MindSpore keeps them: float32
    scalars starting at 1, multiplied by the float32 ``beta`` before each
    update (``adam.py``: ``beta1_power = self.beta1_power * self.beta1``).

    Not `gradxform.pieces.bias_correction`'s exact ``beta^t``: MindSpore's
    betas are float32, and ``1 - float32(0.999)`` is 1.3e-5 relative from
    0.001, so the exact factor is ~6e-6 relative from MindSpore's on every
    step (7e-6 absolute on the weights after 20 Adam steps at lr 0.1, 1e-6
    at lr 0.01: issue 15 item 7). Both powers are shared by all parameters,
    as MindSpore's (bumped on every update, whatever ``update_mask`` says)."""

    def init(params):
        del params
        one = jnp.ones((), jnp.float32)
        return BetaPowerState({"beta1": hyper_scalar(beta1), "beta2": hyper_scalar(beta2)}, one, one)

    @fusable
    def update(updates, state, params=None, **extra_args):
        del params, extra_args
        p1 = state.beta1_power * state.hyper["beta1"]
        p2 = state.beta2_power * state.hyper["beta2"]
        factor = jnp.sqrt(1.0 - p2) / (1.0 - p1)
        out = jax.tree.map(lambda u: u * factor.astype(u.dtype), updates)
        return out, BetaPowerState(state.hyper, p1, p2)

    return transformation(init, update)


def _host_offered() -> bool:
    """Whether the backend has a pinned-host memory kind (CPU and GPU do; a
    backend without it keeps the moments on the device)."""
    return all("pinned_host" in {m.kind for m in d.addressable_memories()} for d in jax.local_devices())


class _MomentsLike(Protocol):
    """The state of `offloaded_moments`'s ``inner``: a NamedTuple with ``mu`` and ``nu``."""
    mu: Any
    nu: Any

    def _replace(self, **fields: Any) -> Any: ...


def offloaded_moments(inner: GradientTransformation) -> GradientTransformation:
    """Keeps ``inner``'s moment buffers (``mu``, ``nu``) in pinned host memory
    where the JAX backend has that memory kind, on the device otherwise; they
    are brought to the device for the arithmetic and written back, so the
    numbers are those of ``inner`` (MindSpore AdamOffload's intent).

    The placement is made by ``init`` and by every ``update``, eager or under
    ``jax.jit``, whatever placement the state arrives with: a state from
    ``jax.jit(tx.init)``, a restored checkpoint or ``jax.device_put`` leaves
    the first update in host memory. Sharded moments keep their sharding and
    change only their memory kind."""

    def to_host(tree):
        host = jax.memory.Space.Host
        return jax.tree.map(lambda x: jax.device_put(x, host), tree)

    def to_device(tree):  # a no-op for a moment already in device memory
        dev = jax.memory.Space.Device
        return jax.tree.map(lambda x: jax.device_put(x, dev), tree)

    def init(params):
        s = cast(_MomentsLike, inner.init(params))
        if not _host_offered():
            return s
        return s._replace(mu=to_host(s.mu), nu=to_host(s.nu))

    @declare(inner=(inner,))
    def update(updates, state, params=None, **extra_args):
        state = state._replace(mu=to_device(state.mu), nu=to_device(state.nu))
        out, new = run_inner(inner, updates, state, params, **extra_args)
        new = cast(_MomentsLike, new)
        if _host_offered():
            new = new._replace(mu=to_host(new.mu), nu=to_host(new.nu))
        return out, new

    return transformation(init, update)


def adam(learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False, use_nesterov=False,
         weight_decay=0.0, loss_scale=1.0, use_amsgrad=False, *, use_lazy=False, use_offload=False,
         params=None, groups=None, skip_nonfinite=False) -> GradientTransformation:
    """MindSpore Adam (``nn.Adam`` -> ``P.Adam``)::

        g = (g + weight_decay * loss_scale * w) / loss_scale   (no decay for 'beta'/'gamma')
        m += (g - m) * (1 - beta1);   v += (g * g - v) * (1 - beta2)
        w -= (lr * sqrt(1 - beta2^t) / (1 - beta1^t)) * m / (sqrt(v) + eps)
        use_nesterov: m in the last line is (1 - beta1) * g + m * beta1
        use_amsgrad:  v in the last line is vhat = max(vhat, v)

    Written in the order of MindSpore's kernels (CPU and GPU), so a jitted
    step on a backend that contracts multiply-adds, as XLA:CPU does, is
    MindSpore's to the last bit (`_kernel_moments`); AdamOffload's kernel
    orders its moments as ``m = m * beta1 + (1 - beta1) * g``.

    Args:
      beta1: float in (0, 1) (hyperparameter).
      beta2: float in (0, 1) (hyperparameter).
      eps: float > 0 (hyperparameter).
      use_locking: accepted and ignored (a JAX update has no concurrent writers).
      use_nesterov: bool (static).
      use_amsgrad: bool (static); combines with neither ``use_lazy`` nor
        ``use_offload``.
      use_lazy: bool (static): only rows (first axis) touched by the gradient
        change, moments included (`lazy_rows`).
      use_offload: bool (static): moments in host memory
        (`offloaded_moments`), no gradient centralization (as MindSpore).

    Others as `gradxform.mindspore.momentum`.
    """
    return _adam(registered_name(adam), learning_rate=learning_rate, beta1=beta1, beta2=beta2, eps=eps,
                 use_locking=use_locking, use_nesterov=use_nesterov, weight_decay=weight_decay, loss_scale=loss_scale,
                 use_amsgrad=use_amsgrad, use_lazy=use_lazy, use_offload=use_offload, params=params, groups=groups,
                 skip_nonfinite=skip_nonfinite)


def _adam(owner, learning_rate, beta1, beta2, eps, use_locking, use_nesterov, weight_decay, loss_scale,
          use_amsgrad=False, *, use_lazy=False, use_offload=False, params=None, groups=None,
          skip_nonfinite=False) -> GradientTransformation:
    for name, flag in (("use_locking", use_locking), ("use_nesterov", use_nesterov),
                       ("use_amsgrad", use_amsgrad), ("use_lazy", use_lazy), ("use_offload", use_offload)):
        check_bool(owner, name, flag)
    if use_lazy and use_offload:
        raise ValueError(f"{owner}(use_lazy=True, use_offload=True): the two cannot both be True.")
    if use_amsgrad and (use_lazy or use_offload):
        raise ValueError(f"{owner}(use_amsgrad=True): not available with use_lazy or use_offload.")
    o = parse(owner, learning_rate, weight_decay, loss_scale, groups, allow_gc=not use_offload,
              params=params, skip_nonfinite=skip_nonfinite)
    _check_betas(owner, beta1, beta2, eps)
    if use_amsgrad:
        body = chain(o.head(), _amsgrad_moments(beta1, beta2, eps), beta_power_correction(beta1, beta2),
                     scale_by_lr(), needs=("lr", "count"))
    else:  # P.Adam's kernel, operation for operation: the state as the pieces above keep it
        moments = _kernel_moments(beta1, beta2, eps, use_nesterov, offload=use_offload)
        body = chain(o.head(), offloaded_moments(moments) if use_offload else moments,
                     _kernel_step_size(beta1, beta2), divided_by(ADAM_DENOMINATOR), needs=("lr", "count"))
    return o.build(lazy_rows(body) if use_lazy else body)


def lazy_adam(learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False, use_nesterov=False,
              weight_decay=0.0, loss_scale=1.0, *, params=None, groups=None,
              skip_nonfinite=False) -> GradientTransformation:
    """MindSpore LazyAdam (``nn.LazyAdam``): `adam` where only the rows (first
    axis) touched by the gradient change: a row whose gradient is all zero
    keeps its weight and its moments (``FusedSparseLazyAdam``; the decay is
    applied to touched rows only). ``eps`` defaults to 1e-8 as in MindSpore's
    code (the seed says 1e-6). With dense gradients without zero rows this is `adam`."""
    return _adam(registered_name(lazy_adam), use_lazy=True, learning_rate=learning_rate, beta1=beta1, beta2=beta2,
                 eps=eps, use_locking=use_locking, use_nesterov=use_nesterov, weight_decay=weight_decay,
                 loss_scale=loss_scale, params=params, groups=groups, skip_nonfinite=skip_nonfinite)


def adam_offload(learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False, use_nesterov=False,
                 weight_decay=0.0, loss_scale=1.0, *, params=None, groups=None,
                 skip_nonfinite=False) -> GradientTransformation:
    """MindSpore AdamOffload (``nn.AdamOffload`` -> ``AdamNoUpdateParam`` on the host):
    `adam`'s numbers; the moments live in pinned host memory where the JAX
    backend supports memory kinds, on the device otherwise. No gradient
    centralization (MindSpore's AdamOffload does not apply it)."""
    return _adam(registered_name(adam_offload), use_offload=True, learning_rate=learning_rate, beta1=beta1,
                 beta2=beta2, eps=eps, use_locking=use_locking, use_nesterov=use_nesterov, weight_decay=weight_decay,
                 loss_scale=loss_scale, params=params, groups=groups, skip_nonfinite=skip_nonfinite)


def adam_weight_decay(learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0, *,
                      params=None, groups=None, skip_nonfinite=False) -> GradientTransformation:
    """MindSpore AdamWeightDecay (``nn.AdamWeightDecay`` -> ``P.AdamWeightDecay``)::

        m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g^2
        update = m / (sqrt(v) + eps) + weight_decay * w      (no decay for 'beta'/'gamma')
        w -= lr * update

    No bias correction, no loss scale, no gradient centralization (MindSpore
    has none of them here). ``weight_decay`` is decoupled from the moments.
    """
    owner = registered_name(adam_weight_decay)
    o = parse(owner, learning_rate, weight_decay, 1.0, groups,
              params=params, skip_nonfinite=skip_nonfinite)
    _check_betas(owner, beta1, beta2, eps)
    return o.build(scale_by_adam_moments(beta1, beta2, eps), o.decay(loss_scaled=False), scale_by_lr())


class LambState(NamedTuple):
    hyper: Hyper
    mu: ParamTree
    nu: ParamTree
    domains = {"mu": FINITE, "nu": NON_NEGATIVE_FINITE}


def _lamb_direction(beta1, beta2, eps, trust_ratio="update") -> GradientTransformation:
    """LAMB's layer-wise direction (bias correction ``1 - beta^t``, ``t`` from
    the step context, ``wd`` the per-leaf decay published by the decay piece)::

        m, v = EMAs;  m^ = m / (1 - beta1^t);  v^ = v / (1 - beta2^t)
        u = m^ / (sqrt(v^) + eps) + wd * w;   emits ratio * u
        "update":  ratio = |w| / |u|                           (1 when |w| or |u| is 0)
        "clipped": ratio = clip(|w| / |m^ / sqrt(v^ + eps) + wd * w|, 0, 10)   (1 when a norm is 0)
    """

    def init(params):
        z = jax.tree.map(jnp.zeros_like, params)
        return LambState({"beta1": hyper_scalar(beta1), "beta2": hyper_scalar(beta2),
                          "epsilon": hyper_scalar(eps)}, z, z)

    # fused: per-leaf norms as segment sums (another order)
    @declare(needs=("count", "wd"), fusion=Fusion(bit_exact=False, reductions=("leaf_sum",)))
    def update(updates, state, params=None, **extra_args):
        if params is None:
            raise needs_params(update)
        h = state.hyper
        b1, b2, e = h["beta1"], h["beta2"], h["epsilon"]
        count = context_value(extra_args, "count", update)
        wd = context_value(extra_args, "wd", update)
        mu, nu = adam_emas(state.mu, state.nu, updates, b1, b2)

        def corrected(m, v, t):
            t = t.astype(jnp.float32)
            return m.astype(jnp.float32) / (1 - b1 ** t), v.astype(jnp.float32) / (1 - b2 ** t)

        def direction(m, v, w, t, d):
            mh, vh = corrected(m, v, t)
            return mh / (jnp.sqrt(vh) + e) + d * w.astype(jnp.float32)

        def ratio_direction(m, v, w, t, d):  # eps inside the root: the 2022-23 GPU kernel's g_hat_var
            mh, vh = corrected(m, v, t)
            return mh / jnp.sqrt(vh + e) + d * w.astype(jnp.float32)

        def scaled(u, m, w_sq, r_sq):
            w_norm, r_norm = jnp.sqrt(w_sq), jnp.sqrt(r_sq)
            ratio = jnp.where((w_norm > 0) & (r_norm > 0), w_norm / jnp.where(r_norm > 0, r_norm, 1.0), 1.0)
            if trust_ratio == "clipped":  # NaN -> 0, then [0, 10] (lamb_gpu_kernel.h CalcTrustRatio)
                ratio = jnp.where(jnp.isnan(ratio), 0.0, jnp.clip(ratio, 0.0, 10.0))
            return (ratio * u).astype(m.dtype)

        u = jax.tree.map(direction, mu, nu, params, count, wd)
        r = u if trust_ratio == "update" else jax.tree.map(ratio_direction, mu, nu, params, count, wd)
        # the trust ratio's norms per leaf (per element of a fused buffer)
        w_sq, r_sq = leaf_sq_norm(params, extra_args), leaf_sq_norm(r, extra_args)
        return jax.tree.map(scaled, u, mu, w_sq, r_sq), LambState(h, mu, nu)

    return transformation(init, update)


def lamb(learning_rate, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0, *, trust_ratio="update",
         params=None, groups=None, skip_nonfinite=False) -> GradientTransformation:
    """MindSpore Lamb (``nn.Lamb`` -> ``Lamb`` kernel: Ascend, GPU)::

        m, v = EMAs of g, g^2;  m^ = m / (1 - beta1^t);  v^ = v / (1 - beta2^t)
        u = m^ / (sqrt(v^) + eps) + wd * w                 (wd = 0 for 'beta'/'gamma')
        w -= lr * |w| / |u| * u                            (ratio 1 when |w| or |u| is 0)

    ``trust_ratio`` (static) picks the ratio where MindSpore's backends differ:
      "update" (default): ``|w| / |u|``, the norm of the applied update, no
        clamp: the seed, Ascend (``LambApplyOptimizerAssign`` +
        ``LambApplyWeightAssign``: ratio ``w_norm / g_norm`` with g_norm the
        update's norm, 1 where a norm is 0) and the newest GPU kernel
        (``lamb_gpu_kernel.h`` CalcTrustRatio on the update's norm).
      "clipped": ``clip(|w| / |m^ / sqrt(v^ + eps) + wd * w|, 0, 10)`` (NaN
        -> 0; 1 where a norm is 0): epsilon inside the root and a clamp, as
        the 2022-23 GPU kernel (``g_hat_var`` in ``lamb_impl.cu``) and
        MindSpore 1.x's pure-Python GPU path (which also required a nonzero
        raw gradient norm and used the unfiltered wd in that norm). The
        applied update ``u`` is the same in both.
    MindSpore 2.x's Python code only calls the kernel (``_inner_ops.Lamb``).
    (The seed prints ``m / beta1^t``; that is a typo for the bias correction
    above, which MindSpore applies.) No loss scale; gradient centralization
    per group as MindSpore. MindSpore has no CPU kernel for Lamb, so this is
    checked against float64 transcriptions of both rules.
    """
    owner = registered_name(lamb)
    if trust_ratio not in ("update", "clipped"):
        raise ValueError(f"{owner}(trust_ratio=...): must be 'update' or 'clipped'; got {trust_ratio!r}.")
    o = parse(owner, learning_rate, weight_decay, 1.0, groups, params=params, skip_nonfinite=skip_nonfinite)
    _check_betas(owner, beta1, beta2, eps)
    return o.build(o.decay(loss_scaled=False, add=False), o.centralize(),
                   _lamb_direction(beta1, beta2, eps, trust_ratio), scale_by_lr())



# -- the framework's classes, in its positional order (each named in its `Declaration`) --

def Adam(params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False, use_nesterov=False,
         weight_decay=0.0, loss_scale=1.0, use_amsgrad=False, *, use_lazy=False, use_offload=False,
         skip_nonfinite=False) -> GradientTransformation:
    """``nn.Adam(params, learning_rate, beta1, ..., use_amsgrad, **kwargs)`` (kwargs: use_lazy,
    use_offload): `gradxform.mindspore.adam`."""
    return adam(params=params, learning_rate=learning_rate, beta1=beta1, beta2=beta2, eps=eps,
                use_locking=use_locking, use_nesterov=use_nesterov, weight_decay=weight_decay, loss_scale=loss_scale,
                use_amsgrad=use_amsgrad, use_lazy=use_lazy, use_offload=use_offload, skip_nonfinite=skip_nonfinite)


def LazyAdam(params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False, use_nesterov=False,
             weight_decay=0.0, loss_scale=1.0, *, skip_nonfinite=False) -> GradientTransformation:
    """``nn.LazyAdam(params, learning_rate, ...)``: `gradxform.mindspore.lazy_adam`."""
    return lazy_adam(params=params, learning_rate=learning_rate, beta1=beta1, beta2=beta2, eps=eps,
                     use_locking=use_locking, use_nesterov=use_nesterov, weight_decay=weight_decay,
                     loss_scale=loss_scale, skip_nonfinite=skip_nonfinite)


def AdamOffload(params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False,
                use_nesterov=False, weight_decay=0.0, loss_scale=1.0, *,
                skip_nonfinite=False) -> GradientTransformation:
    """``nn.AdamOffload(params, learning_rate, ...)``: `gradxform.mindspore.adam_offload`."""
    return adam_offload(params=params, learning_rate=learning_rate, beta1=beta1, beta2=beta2, eps=eps,
                        use_locking=use_locking, use_nesterov=use_nesterov, weight_decay=weight_decay,
                        loss_scale=loss_scale, skip_nonfinite=skip_nonfinite)


def AdamWeightDecay(params, learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0, *,
                    skip_nonfinite=False) -> GradientTransformation:
    """``nn.AdamWeightDecay(params, learning_rate, ...)``: `gradxform.mindspore.adam_weight_decay`."""
    return adam_weight_decay(params=params, learning_rate=learning_rate, beta1=beta1, beta2=beta2, eps=eps,
                             weight_decay=weight_decay, skip_nonfinite=skip_nonfinite)


def Lamb(params, learning_rate, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0, *, trust_ratio="update",
         skip_nonfinite=False) -> GradientTransformation:
    """``nn.Lamb(params, learning_rate, ...)``: `gradxform.mindspore.lamb`."""
    return lamb(params=params, learning_rate=learning_rate, beta1=beta1, beta2=beta2, eps=eps,
                weight_decay=weight_decay, trust_ratio=trust_ratio, skip_nonfinite=skip_nonfinite)
