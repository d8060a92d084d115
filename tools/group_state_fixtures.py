"""Writes tests/fixtures/group_hyper_v1/: states of optimizers with parameter groups as the code
before issue 37 item 2 laid them out (each group's own hyperparameter a scalar ``<name>_group_<k>``).

Per-group hyperparameters are now one array per field (`gradxform._group_hyper.GroupHyper`); files
written before must still load. For each configuration below, three updates on a four-leaf tree,
then ``{"params", "state"}`` saved with `gradxform.save_state` (``<case>.gxckpt``) and the parameters
one more update gives from there (``<case>.npz``: the continuation the loaded state must reproduce).

    PYTHONPATH=$PWD/src:$PWD/tests python tools/group_state_fixtures.py   # run once, at the layout's last commit

``tests/fixtures/group_hyper_v0/`` holds the same runs written by the code before issue 37 item 3
as well (per-leaf fields a scalar per leaf, the v1 layout of `gradxform._state_v1`), so that the
two conversions are checked together: a worktree at commit a8b1d4c (the v1 fixtures' commit), with
``tests/group_cases.py`` copied in, and this tool run from here with that worktree's code:

    PYTHONPATH=<worktree>/src:$PWD/tests python tools/group_state_fixtures.py --out tests/fixtures/group_hyper_v0
"""
from __future__ import annotations

import os
import sys

import jax
import numpy as np
import optax

import gradxform as gx
from group_cases import CASES, PARAMS, grads

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "group_hyper_v1")


def record(name: str) -> None:
    tx = CASES[name]()
    params, state = PARAMS, tx.init(PARAMS)
    for k in range(3):
        u, state = tx.update(grads(k), state, params)
        params = optax.apply_updates(params, u)
    gx.save_state(os.path.join(OUT, f"{name}.gxckpt"), {"params": params, "state": state},
                  meta={"optimizer": name, "layout": os.path.basename(os.path.normpath(OUT))})
    u, _ = tx.update(grads(3), state, params)
    np.savez(os.path.join(OUT, f"{name}.npz"), **jax.tree.map(np.asarray, optax.apply_updates(params, u)))


if __name__ == "__main__":
    if "--out" in sys.argv:
        OUT = sys.argv[sys.argv.index("--out") + 1]
    os.makedirs(OUT, exist_ok=True)
    for n in CASES:
        record(n)
        print(n, sorted(k for k in gx.load_state(os.path.join(OUT, f"{n}.gxckpt")) if "_group_" in k))
