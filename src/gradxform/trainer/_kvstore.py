"""Gluon's kvstore keywords, where its gradient compression applies, and the
loss-scaled loss the Trainer differentiates."""
from __future__ import annotations

import warnings

import jax

from .._ranges import check_flag
from ..pieces.internal import scale_loss

__all__ = ["check_kvstore", "compression_in_kvstore", "scaled_loss", "wants_sharding"]

_KVSTORES = ("device", "local", "nccl", "horovod", "dist_sync", "dist_device_sync", "dist_sync_device")


def check_kvstore(kvstore, update_on_kvstore):
    """Gluon's ``kvstore`` / ``update_on_kvstore``: every synchronous kvstore
    sums the gradients over all devices of all processes (the mesh's
    all-reduce); None means no kvstore (then no compression, as Gluon)."""
    if kvstore is not None and not isinstance(kvstore, str):
        raise TypeError(f"Trainer(kvstore=...): expected a kvstore type name or None; got {kvstore!r}.")
    if kvstore is not None and kvstore not in _KVSTORES:
        hint = " (asynchronous updates have no equivalent here; use 'dist_sync')" if "async" in kvstore else ""
        raise ValueError(f"Trainer(kvstore=...): {kvstore!r} is not supported{hint}; expected one of "
                         f"{', '.join(map(repr, _KVSTORES))} or None.")
    check_flag("Trainer", "update_on_kvstore", update_on_kvstore)
    return kvstore


def wants_sharding(kvstore, update_on_kvstore, shard_optimizer_state, num_devices: int) -> bool:
    """Whether the optimizer state is sharded over the devices.

    ``shard_optimizer_state`` is the plain spelling of Gluon's
    ``update_on_kvstore=True`` (MXNet's kvstore servers each updated a
    slice of the parameters); giving both with different values is an
    error. As in Gluon, there is no kvstore (so nothing to shard) with
    ``kvstore=None`` or on a single device: asked for there, it warns and
    keeps the whole state."""
    check_flag("Trainer", "shard_optimizer_state", shard_optimizer_state)
    if None not in (update_on_kvstore, shard_optimizer_state) and update_on_kvstore != shard_optimizer_state:
        raise ValueError(f"Trainer: update_on_kvstore={update_on_kvstore!r} and shard_optimizer_state="
                         f"{shard_optimizer_state!r} disagree; they are two spellings of one choice, give one.")
    wanted = bool(update_on_kvstore or shard_optimizer_state)
    if wanted and (kvstore is None or num_devices == 1):
        warnings.warn("Trainer(update_on_kvstore=True): no kvstore to update on "
                      f"(kvstore={kvstore!r} on {num_devices} device(s)), as in Gluon; every device keeps "
                      "the whole optimizer state.", UserWarning, stacklevel=3)
        return False
    return wanted


def compression_in_kvstore(compression, kvstore, num_local_devices: int):
    """``compression``, or None where Gluon has no kvstore to compress in:
    kvstore=None, or one device outside a distributed run (MXNet's
    ``_create_kvstore`` makes none there), with a warning: the gradients stay exact."""
    if compression is None:
        return None
    if kvstore is None or (num_local_devices == 1 and jax.process_count() == 1 and not kvstore.startswith("dist")):
        warnings.warn("Trainer(compression_params=...): no gradient compression without a kvstore "
                      f"(kvstore={kvstore!r} on {num_local_devices} device(s) in one process), as in Gluon; the "
                      "gradients are used uncompressed.", UserWarning, stacklevel=3)
        return None
    return compression


def scaled_loss(loss_fn, has_aux: bool):
    """``(params, (batch, state)) -> loss * loss_scale(state)`` (with
    ``has_aux``: ``(scaled loss, aux)``) for `Trainer.grads`."""
    def scaled(params, batch_and_state):
        batch, state = batch_and_state
        if has_aux:
            loss, aux = loss_fn(params, batch)
            return scale_loss(loss, state), aux
        return scale_loss(loss_fn(params, batch), state)
    return scaled
