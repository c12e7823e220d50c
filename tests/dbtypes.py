"""The optional db types in test parameters: leveldb runs where its extra is installed."""
from __future__ import annotations

import importlib.util

import pytest

HAVE_PLYVEL = importlib.util.find_spec("plyvel") is not None
NEEDS_LEVELDB = pytest.mark.skipif(not HAVE_PLYVEL, reason="needs the leveldb extra: pip install 'dslc[leveldb]'")


def leveldb(*values, id=None):
    """A test parameter that needs plyvel: ``leveldb()`` is the db type itself."""
    return pytest.param(*(values or ("leveldb",)), marks=NEEDS_LEVELDB, id=id)
