"""Reading the committed framework goldens (tests/goldens/<family>/*.npz)."""
from __future__ import annotations

import json
import pathlib

import numpy as np

GOLDENS = pathlib.Path(__file__).parent / "goldens"


def cases(family: str, exclude=("schedulers", "schedules")) -> list[pathlib.Path]:
    return sorted(p for p in (GOLDENS / family).glob("*.npz") if p.stem not in exclude)


def meta(path) -> dict:
    """The golden's meta record alone (what `load` returns first), without reading its arrays: for
    choosing goldens at collection, which both xdist workers do for every file."""
    with np.load(path) as z:
        return json.loads(str(z["meta"]))


def load(path) -> tuple[dict, list[np.ndarray], list[list[np.ndarray]], list[list[np.ndarray]]]:
    """Returns (meta, initial weights, grads[t][i], weights[t][i])."""
    with np.load(path) as z:
        meta = json.loads(str(z["meta"]))
        n = len(meta["names"])
        steps = meta["steps"]
        w0 = [z[f"w0_{i}"] for i in range(n)]
        grads = [[z[f"g_{t}_{i}"] for i in range(n)] for t in range(steps)]
        weights = [[z[f"w_{t}_{i}"] for i in range(n)] for t in range(steps)]
    return meta, w0, grads, weights
