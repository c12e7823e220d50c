"""The numba kernel cache trusts a file only if it holds the text its name was made from
(issue 23): an edited kernel never runs, an empty one is written again, with a warning.
It loads no pickle, and uses only a directory that is the user's alone (issue 38): the
hostile files and directories below are made by the tests."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
import warnings

import numpy as np
import pytest

from dslc.backends.numba import cache, compiled

SOURCE = '''
from numba import njit


@njit
def kernel(x):
    return x * 3 + 1
'''
ARRAYS = '''
import numpy as np
from numba import njit


@njit(nogil=True)
def kernel(x, k):
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = x[i] * k + i
    return out, (x.sum(), k)
'''


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("DSLC_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cache, "_modules", {})  # as a new process would start
    monkeypatch.setattr(cache, "_dirs", {})
    return tmp_path / "numba"


def _hits(fn) -> int:
    return sum(fn.stats.cache_hits.values())


def _compiled(directory):
    return sorted(p for p in directory.iterdir() if p.suffix == ".dslck")


def _run_arrays(monkeypatch):
    """Compile ARRAYS's kernel as a new process would, run it; (hits, out, (sum, k))."""
    monkeypatch.setattr(cache, "_modules", {})
    fn = cache.module_for(ARRAYS).kernel
    x = np.arange(5, dtype=np.float32)
    out, (total, k) = fn(x, 3)
    np.testing.assert_array_equal(out, x * 3 + np.arange(5))  # (by hand: x k + i)
    assert (total, k) == (10.0, 3)
    return _hits(fn)


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


NAMED = '''
import numpy as np
from numba import njit


@njit(nogil=True)
def kernel({x}, {lr}):
    {out} = np.empty_like({x})
    for {i} in range({x}.size):
        {out}[{i}] = {x}[{i}] * {lr} {op} {i}
    return {out}
'''
# (the emitter names values base_k after their blobs: two shards' optimizer islands differ in
# SgdOptimizer_0_lr_0 / SgdOptimizer_1_lr_0 alone)
SHARD0 = NAMED.format(x="cpu_0_w_0", lr="SgdOptimizer_0_lr_0", out="w_1", i="i_0", op="+")
SHARD1 = NAMED.format(x="cpu_1_w_0", lr="SgdOptimizer_1_lr_0", out="w_1", i="i_0", op="+")


def test_texts_equal_up_to_their_values_names_share_one_module_and_one_compile(fresh_cache, monkeypatch):
    x = np.arange(4, dtype=np.float64)
    first = cache.module_for(SHARD0)
    assert cache.module_for(SHARD1) is first  # (one module: compiled once in the process)
    np.testing.assert_array_equal(first.kernel(x, 2.0), x * 2 + np.arange(4))  # (by hand: x lr + i)
    assert _file(fresh_cache).read_text() == SHARD0 and len(_compiled(fresh_cache)) == 1
    monkeypatch.setattr(cache, "_modules", {})  # a new process, given the other shard's text
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (the file holds the same program: not written again)
        fn = cache.module_for(SHARD1).kernel
    np.testing.assert_array_equal(fn(x, 2.0), x * 2 + np.arange(4))
    assert _hits(fn) == 1 and len(_compiled(fresh_cache)) == 1  # its machine code, loaded
    assert _file(fresh_cache).read_text() == SHARD0


@pytest.mark.parametrize("other", [
    NAMED.format(x="cpu_0_w_0", lr="SgdOptimizer_0_lr_0", out="w_1", i="i_0", op="-"),  # another op
    NAMED.format(x="w_0", lr="w_0", out="w_1", i="i_0", op="+"),  # two values named as one
    NAMED.format(x="w_0", lr="lr_0", out="w_1", i="w_1", op="+"),  # the loop index as the output
])
def test_texts_that_differ_beyond_names_do_not_share(other):
    assert cache.canonical(other) != cache.canonical(SHARD0)
    assert cache.canonical(SHARD1) == cache.canonical(SHARD0)


# ----------------------------------------------------------------------------- compiled code, no pickle

def test_compiled_code_comes_back_from_the_cache_without_unpickling(fresh_cache, monkeypatch):
    assert _run_arrays(monkeypatch) == 0
    (made,) = _compiled(fresh_cache)
    assert not made.read_bytes().startswith(b"\x80") and made.read_bytes().startswith(compiled.MAGIC)
    assert oct(made.stat().st_mode & 0o777) == oct(0o600)

    def refuse(*args, **kwargs):
        raise AssertionError("the kernel cache unpickled something")
    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    assert _run_arrays(monkeypatch) == 1  # loaded, and right
    assert not [p for p in fresh_cache.rglob("*") if p.suffix in (".nbi", ".nbc")]


NUMBA_INDEX_BOMB = b"cos\nsystem\n(S'touch MARK'\ntR."  # (a pickle that runs a command)


def test_a_planted_numba_index_is_never_loaded(tmp_path):
    """numba's own cache would load ``.nbi`` files beside the kernel's source (in
    ``__pycache__``): a crafted one runs its command the moment it is read. dslc's cache
    never reads them, here in a fresh process whose kernel is in the cache already."""
    import numba
    from numba.core.caching import FunctionCache

    env = dict(os.environ, DSLC_CACHE_DIR=str(tmp_path / "cache"))  # (numba's settings as this process's)
    script = textwrap.dedent(f"""
        import numpy as np
        from dslc.backends.numba import cache
        fn = cache.module_for({ARRAYS!r}).kernel
        out, _ = fn(np.arange(4, dtype=np.float32), 2)
        print(sum(fn.stats.cache_hits.values()), *out.tolist())
    """)
    run = [sys.executable, "-c", script]
    first = subprocess.run(run, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0 and first.stdout.split()[0] == "0", first.stderr
    (source,) = (tmp_path / "cache" / "numba").glob("k_*.py")
    namespace = {}
    exec(compile(source.read_text(), str(source), "exec"), namespace)
    numba_files = FunctionCache(numba.njit(namespace["kernel"].py_func).py_func)._cache_file
    os.makedirs(os.path.dirname(numba_files._index_path), exist_ok=True)
    with open(numba_files._index_path, "wb") as f:  # (the old cache ran the command here: touched MARK)
        pickle.dump(numba.__version__, f, protocol=2)
        f.write(NUMBA_INDEX_BOMB)
    again = subprocess.run(run, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == ["1", "0.0", "3.0", "6.0", "9.0"]  # (x k + i, by hand)
    assert not (tmp_path / "MARK").exists()


@pytest.mark.parametrize("spoil", ["cut short", "a flipped byte", "writable by others", "a symlink", "garbage"])
def test_a_damaged_or_unsafe_compiled_file_is_compiled_again(fresh_cache, monkeypatch, spoil):
    assert _run_arrays(monkeypatch) == 0
    (made,) = _compiled(fresh_cache)
    data = made.read_bytes()
    if spoil == "cut short":
        made.write_bytes(data[:len(data) // 2])
    elif spoil == "a flipped byte":
        made.write_bytes(data[:-100] + bytes([data[-100] ^ 1]) + data[-99:])
    elif spoil == "writable by others":
        made.chmod(0o666)
    elif spoil == "a symlink":  # (a whole, valid file, but reached through a link)
        (fresh_cache.parent / "elsewhere").write_bytes(data)
        made.unlink()
        made.symlink_to(fresh_cache.parent / "elsewhere")
    else:
        made.write_bytes(compiled.MAGIC + (10 ** 9).to_bytes(8, "little") + b"{}")
    assert _run_arrays(monkeypatch) == 0  # compiled again, and right
    assert not made.is_symlink() and made.read_bytes() != b"" and oct(made.stat().st_mode & 0o777) == oct(0o600)
    assert _run_arrays(monkeypatch) == 1  # the file written again is whole


@pytest.mark.parametrize("where", ["fndesc", "env"])
def test_a_compiled_file_naming_a_module_imports_nothing(fresh_cache, monkeypatch, tmp_path, where):
    """numba finds a function's module and environment by name; a header naming one that
    is not loaded is not one dslc wrote, and the name is never imported."""
    assert _run_arrays(monkeypatch) == 0
    (made,) = _compiled(fresh_cache)
    (tmp_path / "planted_mod.py").write_text("open('MARK', 'w').write('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    data = made.read_bytes()
    start = len(compiled.MAGIC) + 8
    key = json.loads(data[start:start + int.from_bytes(data[len(compiled.MAGIC):start], "little")])["key"]
    header, obj, bitcode = compiled.unpack(key, data)
    if where == "fndesc":
        header["fndesc"]["modname"] = "planted_mod"
    else:
        header["env"]["module"] = "planted_mod"
    meta = {k: v for k, v in header.items() if k not in ("key", "object", "bitcode")}
    made.write_bytes(compiled.pack(header["key"], meta, obj, bitcode))
    assert _run_arrays(monkeypatch) == 0  # compiled again, and right
    assert not (tmp_path / "MARK").exists() and "planted_mod" not in sys.modules


def test_dslcs_own_kernels_use_the_same_cache(fresh_cache):
    import numba
    from numba import types as nt

    from dslc.backends.numba import conv
    sig = (nt.float32[:, ::1], nt.float32[:, :, :, ::1]) + (nt.int64,) * 10
    for expected_hits in (0, 1):
        fn = cache.attach(numba.njit(nogil=True)(conv._scatter_matrix_2d.py_func))
        fn.compile(sig)
        assert _hits(fn) == expected_hits
    dm = np.arange(2 * 4, dtype=np.float32).reshape(2, 4)  # c=2 k=1x1 windows of a 1x[2x2] image
    dx = np.zeros((1, 2, 2, 2), np.float32)
    fn(dm, dx, 1, 1, 2, 2, 1, 1, 1, 1, 0, 0)
    np.testing.assert_array_equal(dx, dm.reshape(1, 2, 2, 2))  # (a 1x1 kernel scatters back as it is)


# ----------------------------------------------------------------------------- the directory

def _refused(tmp_path, monkeypatch, root):
    """Compile through a cache at ``root``; the warnings raised, and where the code went."""
    monkeypatch.setenv("DSLC_CACHE_DIR", str(root))
    monkeypatch.setattr(cache, "_dirs", {})
    monkeypatch.setattr(cache, "_modules", {})
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # (the private directory: under tmp_path)
    cache._private_dir.cache_clear()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert cache.module_for(SOURCE).kernel(2) == 7
            _run_arrays(monkeypatch)
            used = cache.cache_dir()
    finally:
        cache._private_dir.cache_clear()
    return [w for w in caught if issubclass(w.category, cache.KernelCacheWarning)], used


OTHER_UID = 65534  # (nobody)


@pytest.mark.parametrize("how", ["others may write", "its group may write", "another user owns it",
                                 "anyone may write above it", "another user owns the one above"])
def test_a_cache_directory_not_the_users_alone_is_refused_with_one_warning(tmp_path, monkeypatch, how):
    root = tmp_path / "shared"
    hostile = root / "numba"
    hostile.mkdir(parents=True)
    if how in ("another user owns it", "another user owns the one above"):
        if os.geteuid() != 0:
            pytest.skip("making a directory another user owns needs root")
        os.chown(hostile if how == "another user owns it" else root, OTHER_UID, OTHER_UID)
    else:
        target, mode = {"others may write": (hostile, 0o777), "its group may write": (hostile, 0o770),
                        "anyone may write above it": (root, 0o777)}[how]
        target.chmod(mode)
        hostile.chmod(0o700) if target is root else None
    before = sorted(hostile.iterdir())
    caught, used = _refused(tmp_path, monkeypatch, root)
    assert len(caught) == 1, [str(w.message) for w in caught]
    message = str(caught[0].message)
    assert str(hostile) in message and "not used" in message and "\n" not in message
    assert used.parent == tmp_path and used.name.startswith("dslc-kernels-")
    assert os.stat(used).st_uid == os.geteuid() and oct(os.stat(used).st_mode & 0o777) == oct(0o700)
    assert _compiled(used) and sorted(hostile.iterdir()) == before  # nothing written there, nothing read


def test_a_sticky_world_writable_directory_above_is_fine(tmp_path, monkeypatch):
    root = tmp_path / "tmp-like"
    root.mkdir()
    root.chmod(0o1777)  # as /tmp: others may not rename what is ours
    caught, used = _refused(tmp_path, monkeypatch, root / "mine")
    assert caught == [] and used == root / "mine" / "numba" and _compiled(used)


def test_every_numba_function_of_dslc_keeps_its_code_in_dslcs_cache(fresh_cache):
    """No dispatcher of dslc's own modules uses numba's pickle cache (``cache=True``)."""
    import importlib
    import pkgutil

    from numba.core.dispatcher import Dispatcher

    import dslc.backends.numba as package
    found = []
    for info in pkgutil.iter_modules(package.__path__):
        mod = importlib.import_module(f"{package.__name__}.{info.name}")
        found += [(info.name, n, v) for n, v in vars(mod).items() if isinstance(v, Dispatcher)]
    assert len(found) >= 8  # (conv's and sparse's kernels at least)
    assert [(m, n) for m, n, v in found if not isinstance(v._cache, compiled.KernelCache)] == []
