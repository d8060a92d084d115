"""Test setup: 4 fake CPU devices (set before JAX starts), and strict dtype promotion off-by-default
checks kept to the tests that ask for them."""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", False)


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", help="also run the tests marked slow (long fuzzing)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long test, run only with --slow")


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--slow"):
        skip = pytest.mark.skip(reason="slow: run with --slow")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip)
