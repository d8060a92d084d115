"""Gluon's Trainer over many devices and processes: ``step`` = ``allreduce_grads`` + ``update``."""
from ._allreduce import AXIS, per_device_grads, replicate, split_batch, unreplicate
from ._compression import Compression
from ._trainer import Trainer

__all__ = ["Trainer", "AXIS", "per_device_grads", "split_batch", "replicate", "unreplicate", "Compression"]
