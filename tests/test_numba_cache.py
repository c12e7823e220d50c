"""The numba kernel cache trusts a file only if it holds the text its name was made from
(issue 23): an edited kernel never runs, an empty one is written again, with a warning."""
from __future__ import annotations

import os

import pytest

from dslc.backends.numba import cache

SOURCE = '''
from numba import njit


@njit(cache=True)
def kernel(x):
    return x * 3 + 1
'''


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DSLC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cache, "_modules", {})  # as a new process would start
    return tmp_path / "numba"


def _file(directory):
    (path,) = [p for p in directory.iterdir() if p.name.startswith("k_") and p.suffix == ".py"]
    return path


def test_a_kernel_is_written_whole_and_private(fresh_cache):
    assert cache.module_for(SOURCE).kernel(2) == 7
    assert _file(fresh_cache).read_text() == SOURCE
    assert oct(os.stat(fresh_cache).st_mode & 0o777) == oct(0o700)
    assert not [p for p in fresh_cache.iterdir() if p.suffix == ".tmp"]


@pytest.mark.parametrize("tampered", ["def kernel(x):\n    return -1\n", ""])
def test_an_edited_or_empty_kernel_file_is_written_again_not_run(fresh_cache, monkeypatch, tampered):
    cache.module_for(SOURCE)
    path = _file(fresh_cache)
    path.write_text(tampered)
    monkeypatch.setattr(cache, "_modules", {})
    with pytest.warns(cache.KernelCacheWarning, match="does not hold the text"):
        mod = cache.module_for(SOURCE)
    assert mod.kernel(2) == 7  # the text dslc generated ran, not the file's
    assert path.read_text() == SOURCE
