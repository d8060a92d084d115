"""What a ported call is told when it is written as Gluon's, or given what JAX cannot train:
the Trainer's argument checks that say what to type."""
from __future__ import annotations

import jax
import numpy as np

__all__ = ["NO_BATCH_SIZE", "NO_GRADS", "check_params_arg", "check_stale", "gluon_call"]

NO_BATCH_SIZE = object()  # step(batch_size) called Gluon's way: see gluon_call
NO_GRADS = object()       # step() / update() / allreduce_grads() called without the gradients

_GET_GRADS = "grads = trainer.grads(loss_fn, batch)"
_WRITE = {  # what to type instead, per call
    "step": f"trainer.step(grads, batch_size) with {_GET_GRADS}",
    "update": f"trainer.update(summed, batch_size) with summed = trainer.allreduce_grads(grads), {_GET_GRADS}",
    "allreduce_grads": f"summed = trainer.allreduce_grads(grads) with {_GET_GRADS}, then "
                       "trainer.update(summed, batch_size)",
}


def _no_grads(where: str, grads) -> None:
    """Gluon's ``allreduce_grads()`` (and ``step()``/``update()`` with nothing):
    autograd left the gradients on the parameters; here they are the argument."""
    if grads is NO_GRADS or (where == "allreduce_grads" and isinstance(grads, (int, float, np.integer,
                                                                               np.floating))):
        got = "" if grads is NO_GRADS else repr(grads)
        raise TypeError(f"Trainer.{where}({got}): gradxform's Trainer takes the gradients, as JAX returns them "
                        f"(Gluon's autograd leaves them on the parameters): {_WRITE[where]}.")


def _module_hint(params) -> str:
    """What to pass instead of a Flax module (Gluon's Trainer takes ``net.collect_params()``)."""
    mods = [c.__module__ for c in type(params).__mro__]
    if any(m.startswith("flax.nnx") for m in mods):
        return (f"got {type(params).__name__}, a Flax nnx module (not all of its state is parameters): pass its "
                "parameters, Trainer(nnx.state(model, nnx.Param), ...), and write them back with "
                "nnx.update(model, trainer.params).")
    if any(m.startswith("flax.linen") for m in mods):
        return (f"got {type(params).__name__}, a Flax linen module, which holds no parameters: pass the params "
                "pytree, Trainer(variables['params'], ...) with variables = model.init(key, x).")
    return ""


def gluon_call(where: str, grads, batch_size) -> None:
    """Gluon's ``trainer.step(batch_size)`` (autograd left the gradients on the
    parameters): gradxform's Trainer takes them as an argument."""
    _no_grads(where, grads)
    if batch_size is not NO_BATCH_SIZE:
        return
    if isinstance(grads, (int, float, np.integer, np.floating)):
        raise TypeError(f"Trainer.{where}({grads!r}): gradxform's Trainer takes the gradients, as JAX returns "
                        f"them: trainer.{where}(grads, batch_size={grads!r}) with grads = trainer.grads(loss_fn, "
                        f"batch); or step = trainer.compile_step(loss_fn), then step(batch, {grads!r}).")
    raise TypeError(f"Trainer.{where}(grads): missing batch_size: trainer.{where}(grads, batch_size) "
                    "(gradients are normalized by 1/batch_size; 1 if the loss is already a mean).")


def check_params_arg(params, names, leaves) -> None:
    """``Trainer(params=...)``: a non-empty tree of floating-point arrays (a Flax
    module is told what to pass instead)."""
    if not leaves:
        raise ValueError("Trainer(params=...): no parameters (an empty pytree).")
    for name, x in zip(names, leaves):
        try:
            dtype = jax.numpy.result_type(x)
        except TypeError:
            dtype = None
        if dtype is None or not jax.numpy.issubdtype(dtype, jax.numpy.inexact):
            what = dtype if dtype is not None else f"a {type(x).__name__}, not an array"
            if _module_hint(params):
                raise TypeError(f"Trainer(params=...): {_module_hint(params)}")
            raise TypeError(f"Trainer(params=...): parameter {name!r} is {what}; parameters must be "
                            "floating-point arrays.")


def check_stale(names, present, where: str, ignore_stale_grad: bool) -> None:
    """Gluon's UserWarning for a None (stale) gradient, unless ``ignore_stale_grad``."""
    if ignore_stale_grad or all(present):
        return
    name = names[present.index(False)]
    raise UserWarning(
        f"Trainer.{where}: the gradient of Parameter `{name}` is None: it has not been computed "
        "since the last `step`. This could mean a bug in your model that made it only use a "
        "subset of the Parameters for this iteration. If you are intentionally only using a "
        "subset, call step with ignore_stale_grad=True to skip updating the Parameters with "
        "stale gradients.")
