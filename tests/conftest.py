"""Shared test setup: a private build cache per test session, so tests never depend on (or
fill) the user's ~/.cache/rstf, and subprocesses started by tests see the same cache."""
import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _private_build_cache(tmp_path_factory):
    if "RSTF_CACHE_DIR" not in os.environ:
        os.environ["RSTF_CACHE_DIR"] = str(tmp_path_factory.mktemp("rstf-cache"))
    yield
