"""MXNet 1.x learning-rate schedulers, importable as ``gradxform.lr_scheduler``
(as ``mxnet.lr_scheduler``). They live in `gradxform.schedules._mxnet`, with
the MindSpore and Paddle families, under one schedule protocol
(`gradxform.schedules._common`)."""
from .schedules.internal import CosineScheduler, FactorScheduler, LRScheduler, MultiFactorScheduler, PolyScheduler

__all__ = ["LRScheduler", "FactorScheduler", "MultiFactorScheduler", "PolyScheduler", "CosineScheduler"]
