"""Reading files written before per-leaf state fields became vectors (the v1 layout).

Until issue 37, a state field declared in ``per_leaf_fields`` (step counts,
multipliers, group slots, Paddle's beta powers) held a tree of scalars shaped
like the parameters: one file entry per leaf, at ``<field><leaf path>``
(``.state[1].beta1_pow['w']``). It is now one 1-D array with an entry per
leaf, at ``<field>``. `v1_plan` matches such a file to a tree of today's
layout, so `gradxform.load_state` (and the Trainer's ``load_states``) reads it:
the entries of a field are stacked in the file's order, which is the leaves'
flatten order, the order the vector keeps. Fixtures written with the v1 code:
``tests/fixtures/state_v1/`` (`tools/state_fixtures.py`).
"""
from __future__ import annotations

from typing import Sequence

import jax
import numpy as np
from jax.tree_util import GetAttrKey

from ._state_paths import leaf_vector_fields, state_paths

__all__ = ["v1_plan", "v1_stack"]


def _vector_paths(tree) -> dict[str, int]:
    """``{keystr path: length}`` of every per-leaf vector in ``tree``."""
    out = {}
    for path, node in state_paths(tree):
        for field in leaf_vector_fields(node):
            out[jax.tree_util.keystr(path + (GetAttrKey(field),))] = int(np.shape(getattr(node, field))[0])
    return out


def v1_plan(file_paths: Sequence[str], like_paths: Sequence[str], like) -> list[tuple[int, ...]] | None:
    """For each leaf of ``like`` (paths ``like_paths``), the file entries it is
    read from: one entry where the paths agree, or a per-leaf vector's entries
    in the v1 layout (its path followed by each leaf's path); None when the
    file is not ``like`` in that layout."""
    vectors = _vector_paths(like)
    if not vectors:
        return None
    plan, j = [], 0
    for p in like_paths:
        if j < len(file_paths) and file_paths[j] == p and p not in vectors:
            plan.append((j,))
            j += 1
            continue
        n = vectors.get(p)
        part = file_paths[j:j + n] if n is not None else []
        if n is None or len(part) != n or not all(f.startswith(p) and f[len(p):][:1] in ("[", ".") for f in part):
            return None
        plan.append(tuple(range(j, j + n)))
        j += n
    return plan if j == len(file_paths) else None


def v1_stack(values: Sequence, want_dtype: str) -> np.ndarray | None:
    """The vector a v1 field's entries (one scalar per leaf) make, in the
    dtype the state keeps (a bool flag of older files as int32 0/1); None when
    an entry is not a scalar."""
    if any(np.size(v) != 1 for v in values):
        return None
    return np.asarray([np.asarray(v).reshape(()) for v in values]).astype(want_dtype)
