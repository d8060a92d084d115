"""Paddle's ``paddle.amp`` names as a script uses them: constructing ``GradScaler`` raises a
TypeError giving the gradxform line that replaces it, with the script's own values
(`gradxform.pieces.dynamic_loss_scale`: the scale is optimizer state, and one update unscales,
checks, skips and moves the scale; docs/first-ten-minutes-paddle.md). ``auto_cast`` and
``decorate`` say what a JAX program does instead::

    from gradxform.paddle import amp      # for: from paddle import amp
"""
from __future__ import annotations

__all__ = ["GradScaler", "auto_cast", "decorate"]


class GradScaler:
    """``paddle.amp.GradScaler(...)``: raises, naming the port with these values."""

    def __init__(self, enable=True, init_loss_scaling=65536.0, incr_ratio=2.0, decr_ratio=0.5,
                 incr_every_n_steps=2000, decr_every_n_nan_or_inf=1, use_dynamic_loss_scaling=True):
        if not enable:
            line = "leave the loss scale out (GradScaler(enable=False) scales nothing)"
        elif use_dynamic_loss_scaling:
            line = (f"tx = gradxform.pieces.dynamic_loss_scale(opt, {float(init_loss_scaling)!r}, "
                    f"growth_interval={incr_every_n_steps!r}, backoff_interval={decr_every_n_nan_or_inf!r}, "
                    f"growth={float(incr_ratio)!r}, backoff={float(decr_ratio)!r}, min_scale=1.0, "
                    "check_updates=False, check_state=False)")
        else:
            line = (f"tx = gradxform.pieces.dynamic_loss_scale(opt, {float(init_loss_scaling)!r}, growth=1.0, "
                    "backoff=1.0, check_updates=False, check_state=False)")
        raise TypeError("paddle.amp.GradScaler: in gradxform the loss scale is optimizer state, on the pure "
                        f"(init, update) pair (opt built without parameters=). Write: {line}; differentiate "
                        "gradxform.scale_loss(loss, state), and one updates, state = tx.update(grads, state, "
                        "params) does scaler.step/update/minimize. Paddle switches the scaler off on CPU and under "
                        "bfloat16: leave it out there. docs/first-ten-minutes-paddle.md has the rows.")


def auto_cast(*args, **kwargs):
    """``paddle.amp.auto_cast``: raises, saying what JAX does instead."""
    del args, kwargs
    raise TypeError("paddle.amp.auto_cast: JAX has no autocast; compute in low precision by casting the "
                    "parameters and inputs in your loss function (x.astype(jnp.bfloat16)), and keep float32 master "
                    "weights with the optimizer's multi_precision=True.")


def decorate(*args, **kwargs):
    """``paddle.amp.decorate``: raises, saying what JAX does instead."""
    del args, kwargs
    raise TypeError("paddle.amp.decorate: in gradxform keep the parameters in their low precision dtype and build the "
                    "optimizer with multi_precision=True (float32 master weights in the state, as level='O2').")
