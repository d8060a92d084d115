"""MXNet's ``mxnet.contrib.amp`` as a Gluon script calls it: each function raises a TypeError
giving the gradxform line that replaces it. The loss scale is the Trainer's:
``gradxform.Trainer(..., loss_scale='dynamic')`` is ``amp.init_trainer(trainer)`` (MXNet 1.9.1's
``LossScaler``: 2**16, a ceiling of 2**24, each new scale reaching the loss one step late;
docs/first-ten-minutes-gluon.md)::

    from gradxform.mxnet import amp      # for: from mxnet.contrib import amp
"""
from __future__ import annotations

# amp.unscale(trainer) is here too, refused as the others; it is not exported: gradxform.pieces.unscale
# is another object (a transformation) under that name
__all__ = ["init", "init_trainer", "scale_loss"]

_TRAINER = ("trainer = gradxform.Trainer(params, optimizer, optimizer_params, loss_scale='dynamic') "
            "(loss_scale={'growth_interval': n} for a _scale_seq_len of n)")


def init(*args, **kwargs):
    """``amp.init()``: raises, saying what a JAX program does instead."""
    del args, kwargs
    raise TypeError("amp.init: JAX casts nothing for you; compute in float16/bfloat16 by casting the parameters "
                    "and inputs in your loss function, keep float32 master weights with the optimizer's "
                    f"multi_precision=True, and scale the loss with the Trainer: {_TRAINER}.")


def init_trainer(trainer):
    """``amp.init_trainer(trainer)``: raises, naming the Trainer keyword."""
    del trainer
    raise TypeError(f"amp.init_trainer: build the Trainer with its loss scale: {_TRAINER}.")


def scale_loss(loss, optimizer_or_trainer):
    """``with amp.scale_loss(loss, trainer) as scaled:``: raises, naming the port."""
    del loss, optimizer_or_trainer
    raise TypeError("amp.scale_loss: trainer.grads(loss_fn, batch) and trainer.compile_step(loss_fn) multiply "
                    "the loss by trainer.loss_scale themselves; gradients you compute yourself must be of "
                    f"loss * trainer.loss_scale. Build the Trainer with {_TRAINER}.")


def unscale(optimizer_or_trainer):
    """``amp.unscale(trainer)``: raises; the Trainer's update unscales."""
    del optimizer_or_trainer
    raise TypeError("amp.unscale: drop it: trainer.update(trainer.allreduce_grads(grads), batch_size) unscales, "
                    "checks the gradients for overflow and moves the scale; dividing by trainer.loss_scale "
                    "yourself would unscale twice.")
