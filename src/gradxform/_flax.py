"""Flax's own serialization (``flax.serialization.to_bytes``/``from_bytes``,
as a Flax TrainState is saved) for gradxform's state classes that are not
NamedTuples: `GroupValues`, written as ``save_state`` writes it (one entry
per leaf) and read back in the target's groups where the numbers fit them,
and `EmptyState`. Registered where Flax is installed; Flax is not a
dependency (orbax-checkpoint, which reads any pytree, needs nothing here)."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ._base import EmptyState
from ._group_hyper import GroupHyper
from ._group_values import GroupValues, fitted

__all__ = ["register"]


def register() -> bool:
    """Teaches ``flax.serialization`` gradxform's state classes; False where Flax is not installed."""
    try:
        from flax import serialization  # noqa: PLC0415  (optional: only where Flax is installed)
    except ImportError:
        return False
    serialization.register_serialization_state(
        GroupValues, lambda g: {"per_leaf": np.asarray(g)},
        lambda target, state: fitted(np.asarray(state["per_leaf"]), target), override=True)
    serialization.register_serialization_state(
        EmptyState, lambda _: {}, lambda target, _: target, override=True)
    serialization.register_serialization_state(  # the groups are the target's (static, as built)
        GroupHyper, lambda g: {"values": np.asarray(g)},
        lambda target, state: GroupHyper(jnp.asarray(state["values"], jnp.float32), target.groups), override=True)
    return True


register()
