"""Helpers the trajectory tests share: a jitted run of a transformation over recorded gradients, and
the Paddle schedule a golden's metadata describes."""
import jax
import jax.numpy as jnp
import numpy as np

import gradxform as gx
from gradxform import schedules as S


def run_jitted(tx, w0: dict, gs: list[dict]):
    """``tx`` from parameters ``w0`` over the gradients ``gs`` (dicts of NumPy arrays), one jitted update
    per step; returns (final parameters as NumPy arrays, final state)."""
    p = {k: jnp.asarray(v) for k, v in w0.items()}
    s = tx.init(p)
    step = jax.jit(tx.update)
    for g in gs:
        u, s = step({k: jnp.asarray(v) for k, v in g.items()}, s, p)
        p = gx.apply_updates(p, u)
    return {k: np.asarray(v) for k, v in p.items()}, s


def paddle_schedule(meta: dict):
    """The `gradxform.schedules` Paddle schedule (``Paddle<type>``) a golden's ``{"type", "kwargs"}`` records (nested
    schedulers, e.g. LinearWarmup's ``learning_rate``, included)."""
    kw = dict(meta["kwargs"])
    for k, v in list(kw.items()):
        if isinstance(v, dict) and "type" in v:
            kw[k] = paddle_schedule(v)
    return getattr(S, "Paddle" + meta["type"])(**kw)
