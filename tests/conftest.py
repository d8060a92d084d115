"""Test setup: 4 fake CPU devices (set before JAX starts), and strict dtype promotion off-by-default
checks kept to the tests that ask for them."""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", False)
