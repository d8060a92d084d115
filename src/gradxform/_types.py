"""The types that state fields are annotated with (one place, so every state reads alike)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence, Union

import jax

from ._group_values import GroupValues

__all__ = ["Hyper", "InnerState", "ParamTree", "PerLeaf"]

#: A tree of arrays: shaped like the parameters (moments, master copies, one
#: scalar per leaf for counts and multipliers), or the state of a transformation
#: a wrapper runs. (Recursive by name, so `typing.get_type_hints` resolves it
#: where it is imported.)
ParamTree = Union[jax.Array, Mapping[Any, "ParamTree"], Sequence["ParamTree"]]

#: One number per parameter leaf: a vector (an entry per leaf), `GroupValues`
#: (one entry per group of leaves that share a number; `gradxform._group_values`),
#: or a tree of scalars (a state read from a file of the v1 layout).
PerLeaf = Union[jax.Array, GroupValues, Mapping[Any, Any], Sequence[Any]]  # (not recursive: no name to resolve)

#: A piece's numeric hyperparameters by name: float32 scalars (`gradxform._hyper`),
#: set and read by name with `gradxform.set_hyper` / `gradxform.get_hyper`.
Hyper = dict[str, jax.Array]

#: The state of a transformation a wrapper runs: any optax state (optax's own
#: ``OptState`` alias names ``ArrayTree`` by a string that does not resolve here).
InnerState = Any
