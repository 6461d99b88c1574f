"""Shared test setup.

- A private build cache per test session (per pytest-xdist worker), so tests never depend on
  (or fill) the user's ~/.cache/rstf, and subprocesses started by tests see the same cache.
- TensorFlow's Eigen kernels, whatever the processor (below).
- The slowest files run first. The suite runs on two pytest-xdist workers, one file at a time
  each (`-n 2 --dist loadfile`, the README's test command); a file that takes twenty minutes
  handed out last would leave one worker idle for most of that time. Files stay whole, so a
  module's fixtures are built once.
"""
import os

import pytest

# The tests' own TensorFlow (in this process and the processes it starts) runs its Eigen
# kernels, rstf's reference (`rstf compare`'s TF Eigen): TensorFlow turns its oneDNN
# kernels on by default on AVX-512 processors, whose results differ in the last bits, and
# the tests that ask for TensorFlow's exact bits mean Eigen's. Read once, when TensorFlow
# is imported, so it is set before any test module imports it.
os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"

# The markers whose tests take minutes each, slowest first (pytest.ini describes them).
_SLOW_FIRST = ("sanitize", "model")


def _weight(item) -> int:
    for rank, marker in enumerate(_SLOW_FIRST):
        if item.get_closest_marker(marker) is not None:
            return rank
    return len(_SLOW_FIRST)


def pytest_configure(config):
    # pytest-xdist's loadfile scheduler would hand out the files with the most tests first,
    # whatever their cost; keep the collection order (below) instead.
    config.option.loadscopereorder = False


def pytest_collection_modifyitems(session, config, items):
    """Order files by their slowest test's marker, keeping each file's tests together and in
    their own order (the sort is stable)."""
    file_weight = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        file_weight[path] = min(file_weight.get(path, len(_SLOW_FIRST)), _weight(item))
    items.sort(key=lambda item: file_weight[item.nodeid.split("::", 1)[0]])


@pytest.fixture(scope="session", autouse=True)
def _private_build_cache(tmp_path_factory):
    if "RSTF_CACHE_DIR" not in os.environ:
        os.environ["RSTF_CACHE_DIR"] = str(tmp_path_factory.mktemp("rstf-cache"))
    yield
