"""Mutable model state through ``Trainer.compile_step``: BatchNorm statistics and the like.

``trainer.compile_step(loss_fn, model_state=state0, sync_model_state=True)`` with
``loss_fn(params, model_state, batch) -> (loss, new_model_state)`` (``has_aux=True``:
``(loss, (new_model_state, aux))``). The Trainer holds the state (``trainer.model_state``),
passes it to every step and keeps what the step returns; it is donated to the program, as the
parameters are. Only the parameters are differentiated.

Across devices (docs/trainer.md, "Model state"):

* ``sync_model_state=True`` (default): after each step every floating-point leaf is averaged
  over all devices (of all processes), so every device holds the same state and
  ``trainer.model_state`` is one copy. For a running average (BatchNorm's ``momentum`` rule,
  linear in the batch statistics) this is, step for step, the average of Gluon's per-device
  copies that Gluon's ``save_parameters`` writes (``Parameter._reduce`` averages the contexts'
  copies). A layer given ``axis_name=gradxform.trainer.AXIS`` also averages the batch
  statistics it normalizes with: that is MXNet's ``SyncBatchNorm``, and the statistics equal a
  one-device run on the whole batch. Other leaves (integer counters, flags) take device 0's value.
* ``sync_model_state=False``: per replica, as Gluon's ``BatchNorm`` on several contexts: each
  device keeps its own state, updated from its own shard; ``trainer.model_state`` has a leading
  axis of the local devices (Gluon's ``param.list_data()``).
"""
from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np

from ..pieces.internal import scale_loss
from .._fused import FlatTree
from . import _allreduce as ar

__all__ = ["MODEL_STATE", "batch_hint", "check_aux", "compile_with_state"]


def check_aux(has_aux: bool, reduce_aux) -> None:
    """``compile_step``'s ``reduce_aux=`` against ``has_aux=``."""
    if reduce_aux not in (None, "mean", "sum"):
        raise ValueError(f"Trainer.compile_step(reduce_aux=...): expected None, 'mean' or 'sum'; got {reduce_aux!r}.")
    if reduce_aux is not None and not has_aux:
        raise ValueError("Trainer.compile_step(reduce_aux=...): needs has_aux=True (a loss function "
                         "returning (loss, aux)).")


# -- the hint for model state passed through ``batch`` -------------------------------

# what jax says when a leaf of a shard meets a whole-size array (lax's shape rules, split_batch's own)
_SHAPE_ERRORS = ("incompatible shapes", "Incompatible shapes", "shapes must", "contracting dimension",
                 "leading (batch) axis", "cannot reshape", "cannot be broadcast")


@contextlib.contextmanager
def batch_hint(where: str, batch, n: int):
    """Adds a note to a shape error raised while ``batch`` is split over ``n`` devices
    or traced: model state passed as part of ``batch`` is cut into shards too (a (32,)
    BatchNorm mean reaches the loss as (8,) on 4 devices: "add got incompatible shapes")."""
    try:
        yield
    except (TypeError, ValueError) as err:
        if n > 1 and any(words in str(err) for words in _SHAPE_ERRORS):
            err.add_note(_hint(where, batch, n))
        raise


def _hint(where: str, batch, n: int) -> str:
    leaves = jax.tree_util.tree_flatten_with_path(batch)[0]
    shown = []
    for path, x in leaves[:6]:
        s = tuple(np.shape(x))
        cut = (s[0] // n,) + s[1:] if s and s[0] % n == 0 else "not divisible"
        shown.append(f"batch{jax.tree_util.keystr(path)} {s} -> {cut}")
    more = f", ... ({len(leaves)} leaves)" if len(leaves) > 6 else ""
    return (f"Trainer.{where}: every leaf of `batch` is split along its leading axis over the {n} devices, "
            f"each device's loss_fn seeing its shard ({'; '.join(shown)}{more}). Model state (BatchNorm "
            "statistics, flax batch_stats, nnx BatchStat, equinox State) is not examples: pass it as "
            "trainer.compile_step(loss_fn, model_state=state) with loss_fn(params, model_state, batch) -> "
            "(loss, new_model_state); the Trainer keeps it up to date (docs/trainer.md, 'Model state').")


# -- the program -----------------------------------------------------------------------

def _sync(tree):
    """Inside the program: floating leaves averaged over all devices, others device 0's."""
    if jax.lax.axis_size(ar.AXIS) == 1:
        return tree

    def one(x):
        if jnp.issubdtype(x.dtype, jnp.inexact):
            return jax.lax.pmean(x, ar.AXIS)
        return jax.lax.all_gather(x, ar.AXIS)[0]

    return jax.tree.map(one, tree)


def _like(new, old):
    """``new`` (what loss_fn returned) checked against ``old`` and cast to its dtypes."""
    new_def, old_def = jax.tree.structure(new), jax.tree.structure(old)
    if new_def != old_def:
        raise ValueError("Trainer.compile_step(model_state=...): loss_fn must return (loss, new_model_state) "
                         f"with the model state's structure {old_def}; got {new_def} (a linen apply with "
                         "mutable=['batch_stats'] returns {'batch_stats': ...}: return that entry).")
    for path, a, b in zip(jax.tree_util.tree_flatten_with_path(old)[0], jax.tree.leaves(new), jax.tree.leaves(old)):
        if jnp.shape(a) != jnp.shape(b):
            raise ValueError(f"Trainer.compile_step(model_state=...): new_model_state{jax.tree_util.keystr(path[0])} "
                             f"has shape {jnp.shape(a)}; the model state's is {jnp.shape(b)}.")
    return jax.tree.map(lambda a, b: jnp.asarray(a).astype(b.dtype), new, old)


def build(tx, loss_fn, compression, *, has_rescale, devices, loss_scaled, has_aux, zero, reduce_aux, sync):
    """`_allreduce.build_compiled` with the model state as a fourth stored (donated)
    argument and result: ``loss_fn(params, model_state, shard)``; only the
    parameters are differentiated."""
    def body(params, state, r_leaves, mstate, batch, rescale):
        def loss_of(p):
            loss, rest = loss_fn(p.unravel() if isinstance(p, FlatTree) else p, mstate, batch)
            new_m, aux = rest if has_aux else (rest, None)
            return (scale_loss(loss, state) if loss_scaled else loss), (loss, new_m, aux)

        (_, (loss, new_m, aux)), grads = jax.value_and_grad(loss_of, has_aux=True)(params)
        new_m = _like(new_m, mstate)
        g_leaves = jax.tree.leaves(grads)
        params, state, r_leaves = ar.reduce_then_apply(tx, params, state, g_leaves, r_leaves, compression,
                                                       (True,) * len(g_leaves), rescale, has_rescale=has_rescale,
                                                       zero=zero)
        if sync:
            new_m = _sync(new_m)
        if reduce_aux is not None:
            aux = (jax.lax.pmean if reduce_aux == "mean" else jax.lax.psum)(aux, ar.AXIS)
        return params, state, r_leaves, new_m, jax.lax.psum(loss, ar.AXIS), aux

    S = ar.STORED
    return ar.spmap(body, in_axes=(S, S, S, S, 0, None), out_axes=(S, S, S, S, None, None if reduce_aux else 0),
                    donate_argnums=(0, 1, 2, 3), devices=devices)


def compile_with_state(trainer, loss_fn, model_state, sync: bool, has_aux: bool, reduce_aux):
    """``Trainer.compile_step(loss_fn, model_state=..., sync_model_state=...)``: places the
    state on the Trainer and returns ``run(batch, batch_size)``."""
    if sync not in (True, False):
        raise TypeError(f"Trainer.compile_step(sync_model_state=...): expected True or False; got {sync!r}.")
    _place(trainer, model_state, sync)
    key = ("model_state", loss_fn, has_aux, reduce_aux, sync)

    def make():
        return build(trainer._tx, loss_fn, trainer._compression, has_rescale=trainer._has_rescale,
                     devices=trainer._devices, loss_scaled=trainer._loss_scaled, has_aux=has_aux,
                     zero=trainer._zero, reduce_aux=reduce_aux, sync=sync)

    def run(batch, batch_size):
        rescale = trainer._rescale(batch_size, "compile_step")
        if trainer._mstate_sync is not sync:
            raise ValueError(f"Trainer.compile_step: this step was compiled with sync_model_state={sync}, but a "
                             f"later compile_step holds the model state with sync_model_state={trainer._mstate_sync}.")
        program = trainer._program(key, make)  # rebuilt if the layout changed
        trainer._feed_host_lr()
        with batch_hint("compile_step", batch, trainer._n):
            trainer._params, trainer._state, trainer._residual, trainer._mstate, loss, aux = program(
                trainer._params, trainer._state, trainer._residual, trainer._mstate,
                ar.split_batch(batch, trainer._n), rescale)
        trainer._host_lr_ran()
        trainer._after_step()
        return (loss, aux) if has_aux else loss

    return run


# -- trainer.model_state -----------------------------------------------------------------

def _place(trainer, tree, sync: bool) -> None:
    """Stores ``tree`` as the Trainer's model state: one copy (replicated), or with
    ``sync=False`` also per device (a leading axis of the local devices on every leaf,
    as ``trainer.model_state`` returns it when the Trainer already holds such a state)."""
    place, n = trainer._place, trainer._n
    old = getattr(trainer, "_mstate", None)
    per_device = False
    if not sync and old is not None and trainer._mstate_sync is False:
        try:
            like = jax.tree.structure(old).flatten_up_to(tree)
        except (ValueError, TypeError):
            like = None
        one = [tuple(np.shape(x))[0 if place.single else 1:] for x in jax.tree.leaves(old)]
        per_device = like is not None and all(tuple(np.shape(x)) == (n,) + s for x, s in zip(like, one))
    trainer._mstate = place.put_per_device(tree) if per_device else place.put(tree)
    trainer._mstate_sync = sync


def _get(trainer):
    stored = getattr(trainer, "_mstate", None)
    if stored is None:
        return None
    place = trainer._place
    if trainer._mstate_sync:
        return jax.tree.map(jnp.copy, place.one(stored))
    if place.single:
        return jax.tree.map(lambda x: jnp.copy(x)[None], stored)

    def stack(x):  # this process's devices, in mesh order, gathered on the first
        shards = sorted(x.addressable_shards, key=lambda s: s.index[0].start or 0)
        return jnp.concatenate([jax.device_put(s.data, shards[0].device) for s in shards])

    return jax.tree.map(stack, stored)


def _set(trainer, tree) -> None:
    if getattr(trainer, "_mstate", None) is None:
        raise AttributeError("Trainer.model_state: no model state yet; give the first one to "
                             "trainer.compile_step(loss_fn, model_state=state).")
    old_def, new_def = jax.tree.structure(trainer._mstate), jax.tree.structure(tree)
    if old_def != new_def:
        raise ValueError(f"Trainer.model_state = ...: expected the structure {old_def}; got {new_def}.")
    _place(trainer, tree, trainer._mstate_sync)


MODEL_STATE = property(_get, _set, doc="""The model state ``compile_step(loss_fn, model_state=...)`` carries
(BatchNorm statistics), as the last step left it; None before. With ``sync_model_state=True``
one copy (the same on every device); with False one per local device, stacked on a leading axis.
A copy: later steps leave it alone. Assign a tree of the same structure to replace it (one copy,
or with ``sync_model_state=False`` also one per device), e.g. after loading it from a checkpoint.""")
