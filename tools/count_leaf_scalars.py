"""Counts, for every registered optimizer, the one-element state arrays it keeps per parameter leaf.

Issue 37 item 3: an optimizer's state should grow with the leaves by its rule's own buffers only
(optax's do). Each optimizer (its tests/cases.py row) is initialised on trees of 8 and 16 leaves of
shape (3,); a one-element array is any state leaf of size 1 or ndim 0. The figure printed is the
growth per extra leaf (0 is the target), and the total number of state arrays at 16 leaves.

    PYTHONPATH=$PWD/src:$PWD/tests python tools/count_leaf_scalars.py
"""
from __future__ import annotations

import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np

import cases


def tree(n: int):
    return {f"p{i:02d}": jnp.linspace(0.5, 1.5, 3, dtype=jnp.float32) * (i + 1) for i in range(n)}


def counts(name: str, n: int) -> tuple[int, int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state = cases.create(name).init(tree(n))
    leaves = [x for x in jax.tree.leaves(state) if hasattr(x, "shape")]
    return sum(1 for x in leaves if np.size(x) == 1 or np.ndim(x) == 0), len(leaves)


def main() -> int:
    rows = []
    for name in cases.names():
        s8, _ = counts(name, 8)
        s16, total = counts(name, 16)
        rows.append((name, (s16 - s8) / 8, total))
    for name, per, total in rows:
        print(f"{name:34s} {per:5.2f} per leaf   {total:4d} state arrays at 16 leaves")
    zero = sum(1 for _, per, _ in rows if per == 0)
    print(f"\n{zero} of {len(rows)} optimizers keep no one-element array per leaf")
    return 0


if __name__ == "__main__":
    sys.exit(main())
