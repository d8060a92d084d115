"""Gluon's kvstore keywords, where its gradient compression applies, and the
loss-scaled loss the Trainer differentiates."""
from __future__ import annotations

import warnings

import jax

from ..pieces.internal import scale_loss

__all__ = ["check_kvstore", "compression_in_kvstore", "scaled_loss"]

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
    if update_on_kvstore not in (None, False, True):
        raise TypeError(f"Trainer(update_on_kvstore=...): expected None, True or False; got {update_on_kvstore!r}.")
    if update_on_kvstore:
        raise NotImplementedError(
            "Trainer(update_on_kvstore=True): sharding the optimizer state over the devices (MXNet's update on "
            "the kvstore servers) is not built yet; pass update_on_kvstore=None (every device holds the whole "
            "optimizer state and updates its own copy, with the same numbers).")
    return kvstore


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


def scaled_loss(loss_fn, has_aux: bool = False):
    """``(params, (batch, state)) -> loss * loss_scale(state)`` (with
    ``has_aux``: ``(scaled loss, aux)``) for `Trainer.grads`."""
    def scaled(params, batch_and_state):
        batch, state = batch_and_state
        if has_aux:
            loss, aux = loss_fn(params, batch)
            return scale_loss(loss, state), aux
        return scale_loss(loss_fn(params, batch), state)
    return scaled
