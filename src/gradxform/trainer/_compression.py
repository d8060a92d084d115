"""MXNet's gradient compression with error feedback (``kvstore.set_gradient_compression``).

Each device keeps a float32 *residual* per parameter. Before the all-reduce,
every device quantizes its own gradient plus its residual, keeps what the
quantization lost in the residual, and sends only the quantized values; the
quantized values of all devices are what gets summed. Nothing is lost, only
delayed: a small gradient accumulates in the residual until it crosses the
threshold.

``'2bit'`` (MXNet 1.x ``quantize_2bit`` / ``dequantize_2bit``,
src/kvstore/gradient_compression-inl.h), with threshold ``t > 0``::

    r += g
    q  = +t where r >= t;  -t where r <= -t;  0 elsewhere
    r -= q

``'1bit'`` (MXNet 2.x ``quantize_1bit`` / ``dequantize_1bit``), with a
threshold ``t`` (any finite float; default 0.5, as 2bit: MXNet's one
``GradientCompressionParam`` declares ``threshold`` with ``set_default(0.5)``
for every type, src/kvstore/gradient_compression.h)::

    r += g
    q  = +1 where r > t;  -1 elsewhere
    r -= q

MXNet packs q into 2 (or 1) bits per value for the wire; here the values
stay in the gradient dtype, since XLA's all-reduce sums them directly, so the
*numbers* are MXNet's while the bandwidth saving is not reproduced.
"""
from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

__all__ = ["Compression", "parse_compression"]


@dataclasses.dataclass(frozen=True)
class Compression:
    kind: str          # '2bit' or '1bit'
    threshold: float

    def quantize(self, g, r):
        """Returns ``(q, new_r)`` for one device's gradient leaf ``g`` and residual ``r``."""
        r = r + g.astype(jnp.float32)
        t = jnp.float32(self.threshold)
        if self.kind == "2bit":
            q = jnp.where(r >= t, t, jnp.where(r <= -t, -t, jnp.float32(0)))
        else:
            q = jnp.where(r > t, jnp.float32(1), jnp.float32(-1))
        return q.astype(g.dtype), r - q

    def describe(self) -> dict:
        return {"type": self.kind, "threshold": self.threshold}


def parse_compression(params) -> Compression | None:
    """Checks ``compression_params`` as MXNet does: a dict with ``type``
    ('2bit' or '1bit') and an optional ``threshold`` (default 0.5 for both,
    MXNet's ``GradientCompressionParam``; 2bit: > 0, as MXNet's ``SetParams``)."""
    if params is None:
        return None
    if not isinstance(params, dict) or "type" not in params:
        raise ValueError("Trainer(compression_params=...): must be a dict with a 'type' key, e.g. "
                         f"{{'type': '2bit', 'threshold': 0.5}}; got {params!r}.")
    unknown = sorted(set(params) - {"type", "threshold"})
    if unknown:
        raise ValueError(f"Trainer(compression_params=...): unknown key {unknown[0]!r}; the keys are "
                         "'type' and 'threshold'.")
    kind = str(params["type"]).lower()
    if kind not in ("2bit", "1bit"):
        raise ValueError(f"Trainer(compression_params=...): type must be '2bit' or '1bit'; "
                         f"got {params['type']!r}.")
    threshold = params.get("threshold", 0.5)
    try:
        threshold = float(threshold)
    except (TypeError, ValueError):
        raise TypeError(f"Trainer(compression_params=...): threshold must be a number; "
                        f"got {threshold!r}.") from None
    if not math.isfinite(threshold) or (kind == "2bit" and threshold <= 0):
        raise ValueError(f"Trainer(compression_params=...): threshold must be finite, and > 0 for 2bit "
                         f"compression; got {threshold!r}.")
    return Compression(kind, threshold)


def zeros_residual(leaf) -> jax.Array:
    return jnp.zeros(jnp.shape(leaf), jnp.float32)
