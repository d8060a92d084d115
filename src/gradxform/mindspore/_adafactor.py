"""MindSpore (2.x) AdaFactor (``mindspore/nn/optim/adafactor.py``,
``_run_opt_with_one_number``; Shazeer & Stern 2018)."""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .._registry import Declaration, registered_name
from .._base import GradientTransformation, context_value, needs_params, transformation
from .._spec import Fusion, declare
from .._hyper import hyper_scalar
from .._ranges import POSITIVE, UNIT_HALF_OPEN, check_hyper
from ._common import check_bool, check_float, parse
from ._groups import group_keys_but
from .._types import Hyper, ParamTree
from .._domains import FINITE, NON_NEGATIVE_FINITE

__all__ = ["adafactor", "AdaFactorState"]
# weight_decay in [0, 1) (check_float_range INC_LEFT); beta1 in [0, 1) and eps > 0 as the
# seed's Raises (MindSpore's code checks only beta1 >= 0, eps >= 0; 0 = no first moment)
DECLARED = (  # registered as 'mindspore.<name>' by the family's __init__ (gradxform._registry.Declaration)
    Declaration('adafactor', classes=('AdaFactor',), migrates=True, group_keys=group_keys_but("lr", "grad_centralization"),
                ranges={"beta1": UNIT_HALF_OPEN, "weight_decay": UNIT_HALF_OPEN, "epsilon1": POSITIVE,
                        "epsilon2": POSITIVE}),
)



class AdaFactorState(NamedTuple):
    """Per parameter: ``exp_avg`` (the first moment, () without beta1),
    ``exp_avg_sq_row``/``exp_avg_sq_col`` (factored, 2+ dimensions) and
    ``exp_avg_sq`` (unfactored; float16 with ``compression``). A slot a
    leaf does not use (the factors of a vector, the full moment of a matrix)
    holds nothing, ``()``, where MindSpore keeps a 1-element zero: the state
    grows with the leaves by the rule's own buffers only. Files written
    before held that zero; `gradxform.load_state` drops it
    (``placeholder_fields``)."""
    hyper: Hyper
    exp_avg: ParamTree
    exp_avg_sq_row: ParamTree
    exp_avg_sq_col: ParamTree
    exp_avg_sq: ParamTree
    domains = {"exp_avg": FINITE, "exp_avg_sq_row": NON_NEGATIVE_FINITE, "exp_avg_sq_col": NON_NEGATIVE_FINITE,
               "exp_avg_sq": NON_NEGATIVE_FINITE}
    # fields whose unused leaves held a (1,) zero in files written before issue 37 (now nothing)
    placeholder_fields = ("exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_sq")


def _rms(x):
    return jnp.sqrt(jnp.mean(jnp.square(x)))


# For gradxform.fused: the factored moments are not shaped like the parameters.
_NOT_FUSABLE = ("MindSpore AdaFactor keeps factored second moments (a row and a column vector per "
                "matrix), which are not shaped like the parameters and cannot live in flat buffers")


def _adafactor_step(eps, clip_threshold, decay_rate, beta1, weight_decay, scale_parameter, relative_step,
                    warmup_init, compression) -> GradientTransformation:
    use_first_moment = beta1 > 0

    def init(params):
        # the factored statistics take the sharding of the reductions that update
        # them (a user's FSDP rows stay sharded; a scan carry keeps its type)
        def row(p):
            return jnp.zeros_like(jnp.sum(p, -1)) if p.ndim > 1 else ()

        def col(p):
            return jnp.zeros_like(jnp.sum(p, -2)) if p.ndim > 1 else ()

        def sq(p):
            if p.ndim > 1:
                return ()
            return jnp.zeros(p.shape, jnp.float16 if compression else p.dtype)

        params = jax.tree.map(jnp.asarray, params)
        return AdaFactorState(
            {"epsilon1": hyper_scalar(eps[0]), "epsilon2": hyper_scalar(eps[1]),
             "clip_threshold": hyper_scalar(clip_threshold), "decay_rate": hyper_scalar(decay_rate),
             "beta1": hyper_scalar(beta1), "weight_decay": hyper_scalar(weight_decay)},
            jax.tree.map(jnp.zeros_like, params) if use_first_moment else (),
            jax.tree.map(row, params), jax.tree.map(col, params), jax.tree.map(sq, params))

    @declare(needs=("lr", "count"), fusion=Fusion(refuse=_NOT_FUSABLE))
    def update(updates, state, params=None, **extra_args):
        if params is None:
            raise needs_params(update)
        h = state.hyper
        lr_tree = context_value(extra_args, "lr", update)
        count = context_value(extra_args, "count", update)
        leaves, treedef = jax.tree.flatten(updates)
        flat = lambda t: treedef.flatten_up_to(t)  # noqa: E731
        avg = flat(state.exp_avg) if use_first_moment else [None] * len(leaves)
        res = []
        for g, p, m, r, c, s, lr, t in zip(leaves, flat(params), avg, flat(state.exp_avg_sq_row),
                                           flat(state.exp_avg_sq_col), flat(state.exp_avg_sq), flat(lr_tree),
                                           flat(count)):
            if g.size == 0:
                # nothing to update, and every mean over its rows or columns is
                # 0/0: a (0, n) leaf would put NaN in its column moments (an
                # (n, 0) one in its rows), so its state stays as it was
                res.append((jnp.zeros_like(g), m, r, c, s))
                continue
            g32, p32 = g.astype(jnp.float32), p.astype(jnp.float32)
            step = t.astype(jnp.float32)
            if relative_step:
                min_step = 1e-6 * step if warmup_init else jnp.float32(1e-2)
                lr = jnp.minimum(min_step, 1.0 / jnp.sqrt(step))
            beta2t = 1.0 - jnp.power(step, -h["decay_rate"])
            lr_u = lr * jnp.maximum(h["epsilon2"], _rms(p32)) if scale_parameter else lr
            upd = g32 * g32 + h["epsilon1"]
            if g.ndim >= 2:
                r32 = r.astype(jnp.float32) * beta2t + jnp.mean(upd, -1) * (1 - beta2t)
                c32 = c.astype(jnp.float32) * beta2t + jnp.mean(upd, -2) * (1 - beta2t)
                r, c = r32.astype(r.dtype), c32.astype(c.dtype)
                r_factor = (1.0 / jnp.sqrt(r32 / jnp.mean(r32, -1, keepdims=True)))[..., None]
                c_factor = (1.0 / jnp.sqrt(c32))[..., None, :]
                u = r_factor * c_factor * g32
            else:
                s32 = s.astype(jnp.float32) * beta2t + upd * (1 - beta2t)
                s = s32.astype(s.dtype)
                u = g32 / jnp.sqrt(s32)
            u = u / jnp.maximum(_rms(u) / h["clip_threshold"], 1.0) * lr_u
            if use_first_moment:
                m = (m.astype(jnp.float32) * h["beta1"] + u * (1 - h["beta1"])).astype(m.dtype)
                u = m.astype(jnp.float32)
            delta = -u
            if weight_decay:
                delta = p32 * (-h["weight_decay"] * lr_u) - u
            res.append(((delta).astype(g.dtype), m, r, c, s))
        col_ = lambda i: treedef.unflatten([x[i] for x in res])  # noqa: E731
        return col_(0), AdaFactorState(h, col_(1) if use_first_moment else (), col_(2), col_(3), col_(4))

    return transformation(init, update)


def adafactor(learning_rate=None, eps=(1e-30, 1e-3), clip_threshold=1.0, decay_rate=0.8, beta1=0.9,
              weight_decay=0.0, scale_parameter=True, relative_step=True, warmup_init=False, compression=False,
              loss_scale=1.0, *, params=None, groups=None, skip_nonfinite=False) -> GradientTransformation:
    """MindSpore AdaFactor (``nn.AdaFactor``), at step ``t`` (1 on the first update)::

        lr = min(1e-6 t if warmup_init else 1e-2, 1/sqrt(t))   if relative_step  else learning_rate
        lr_u = lr * max(eps[1], RMS(w))  if scale_parameter  else lr
        b = 1 - t^(-decay_rate);  q = g^2 + eps[0]
        2+ dims: R = b R + (1-b) mean(q, -1);  C = b C + (1-b) mean(q, -2)
                 U = g / sqrt(R / mean(R) (x) C)
        else:    V = b V + (1-b) q;  U = g / sqrt(V)
        U = U / max(RMS(U) / clip_threshold, 1) * lr_u
        beta1 > 0: M = beta1 M + (1-beta1) U;  U = M
        w = w - weight_decay * lr_u * w - U

    Args (MindSpore's; its code's defaults win over the seed's, e.g. beta1=0.9):
      learning_rate: None with relative_step; otherwise a number, list or
        schedule (then scale_parameter is off, as MindSpore).
      eps: (eps1, eps2), floats > 0. clip_threshold: float >= 0.
      decay_rate: float in (0, 1). beta1: float in [0, 1) (0 or None: no
        first moment, static). eps > 0 and beta1 < 1 are the seed's Raises
        (MindSpore's code checks only eps >= 0 and beta1 >= 0).
      weight_decay: in [0, 1). scale_parameter, relative_step, warmup_init,
      compression (unfactored second moments stored as float16): bools.
        The update uses the float32 value of a moment before it is stored
        (MindSpore reads the stored one back: the same for float32 state;
        for float16 state this avoids eps[0]=1e-30 flushing to 0 and 0/0).
      loss_scale: accepted; MindSpore's AdaFactor never applies it (no
        ``scale_grad`` call), so neither does this.
    """
    owner = registered_name(adafactor)
    if learning_rate is not None and relative_step:
        raise ValueError(f"{owner}(learning_rate=...): cannot combine a learning_rate with relative_step=True.")
    if warmup_init and not relative_step:
        raise ValueError(f"{owner}(warmup_init=True): needs relative_step=True.")
    if learning_rate is None and not relative_step:
        raise ValueError(f"{owner}(learning_rate=None): needs relative_step=True, or give a learning_rate.")
    if beta1 is None:
        beta1 = 0.0
    fixed_lr = learning_rate is None or (isinstance(learning_rate, (int, float)) and not isinstance(learning_rate, bool))
    o = parse(owner, 0.0 if learning_rate is None else learning_rate, weight_decay, loss_scale, groups,
              params=params, skip_nonfinite=skip_nonfinite)
    if not isinstance(eps, (list, tuple)):
        raise TypeError(f"{owner}(eps=...): eps must be a list or tuple of 2 floats; got {eps!r}.")
    if len(eps) != 2:
        raise ValueError(f"{owner}(eps=...): eps must have 2 values (eps1, eps2); got {eps!r}.")
    for i, e in enumerate(eps):  # stored as epsilon1, epsilon2; each a float > 0 (the seed's Raises)
        if isinstance(e, bool) or not isinstance(e, float):
            raise TypeError(f"{owner}(eps=...): eps[{i}] must be a float; got {e!r}.")
        check_hyper(owner, f"epsilon{i + 1}", e, arg=f"eps[{i}]")
    eps = tuple(float(e) for e in eps)
    clip_threshold = check_float(owner, "clip_threshold", clip_threshold)
    decay_rate = check_float(owner, "decay_rate", decay_rate)
    check_float(owner, "weight_decay", weight_decay, ints=True)
    for name, flag in (("scale_parameter", scale_parameter), ("relative_step", relative_step),
                       ("warmup_init", warmup_init), ("compression", compression)):
        check_bool(owner, name, flag)
    beta1 = check_float(owner, "beta1", beta1, ints=True)
    step = _adafactor_step(eps, clip_threshold, decay_rate, beta1, float(weight_decay),
                           scale_parameter and fixed_lr, relative_step and fixed_lr, warmup_init, compression)
    return o.build(step)



# -- the framework's classes, in its positional order (each named in its `Declaration`) --

def AdaFactor(params, learning_rate=None, eps=(1e-30, 1e-3), clip_threshold=1.0, decay_rate=0.8, beta1=0.9,
              weight_decay=0.0, scale_parameter=True, relative_step=True, warmup_init=False, compression=False,
              loss_scale=1.0, *, skip_nonfinite=False) -> GradientTransformation:
    """``nn.AdaFactor(params, learning_rate, eps, ...)``: `gradxform.mindspore.adafactor`."""
    return adafactor(params=params, learning_rate=learning_rate, eps=eps, clip_threshold=clip_threshold,
                     decay_rate=decay_rate, beta1=beta1, weight_decay=weight_decay, scale_parameter=scale_parameter,
                     relative_step=relative_step, warmup_init=warmup_init, compression=compression,
                     loss_scale=loss_scale, skip_nonfinite=skip_nonfinite)
