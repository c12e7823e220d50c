"""Compiled kernels on disk, in a format of dslc's own that holds no pickle.

numba's cache (``njit(cache=True)``) stores a pickled index (``.nbi``) and pickled
compile results (``.nbc``) and unpickles both when it loads them: a crafted file runs
whatever code it names. dslc's kernels use ``KernelCache`` instead. It stores one file
per function and signature, named by a hash of all the machine code depends on (the
function's text, dslc's numba backend, numba, Python, the CPU), holding::

    DSLCNB01\\n  <8-byte length>  <JSON header>  <object code>  <LLVM bitcode>

The header describes what numba needs to put the function back (its descriptor, types,
environment constants) as plain data, and the sha256 of the two code sections. Loading
parses the JSON and hands the two sections to numba's linker, as numba's own loader
does; no name in the file is imported or called. (The machine code does what it was
compiled to do, which is why the directory must be the user's own: see ``cache``.) A
compile result holding anything this format does not describe (object mode, lifted
loops, closures, constants other than numbers, strings and dtypes) is not stored: that
function compiles in each process.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from pathlib import Path

import numpy as np
from numba.core import compiler, config, environment, funcdesc, sigutils, types, typing

from dslc.runtime.files import write_whole

MAGIC = b"DSLCNB01\n"
MAX_FILE = 256 << 20  # (a kernel's code is tens of KB; a larger file is not one of ours)
_BACKEND = Path(__file__).resolve().parent


class Uncachable(Exception):
    """The compile result holds something this format does not describe."""


# ----------------------------------------------------------------------------- numba types as data

_SCALARS = {t.name: t for t in (*types.number_domain, types.boolean, types.none, types.npy_rng)}


def encode_type(t):
    """``t`` as JSON data (a name, or a list naming the kind first)."""
    got = _encoded.get(t)
    if got is None:
        got = _encoded[t] = _encode_type(t)
    return got


_encoded: dict = {}  # (numba types are interned and hashable)


def _encode_type(t):
    kind = type(t)
    if kind in (types.Integer, types.Float, types.Complex, types.Boolean, types.NoneType,
                types.NumPyRandomGeneratorType) and _SCALARS.get(t.name) == t:
        return t.name
    if kind is types.IntegerLiteral:
        return ["intlit", int(t.literal_value)]
    if kind is types.BooleanLiteral:
        return ["boollit", bool(t.literal_value)]
    if kind is types.Array:
        return ["array", encode_type(t.dtype), t.ndim, t.layout, not t.mutable, t.aligned]
    if kind is types.UniTuple:
        return ["unituple", encode_type(t.dtype), t.count]
    if kind is types.Tuple:
        return ["tuple", [encode_type(x) for x in t.types]]
    if kind is types.List and t.initial_value is None:
        return ["list", encode_type(t.dtype), bool(t.reflected)]
    raise Uncachable(f"type {t}")


def decode_type(d):
    if isinstance(d, str):
        return _SCALARS[d]
    kind, *rest = d
    if kind == "intlit":
        return types.IntegerLiteral(_int(rest[0]))
    if kind == "boollit":
        return types.BooleanLiteral(bool(rest[0]))
    if kind == "array":
        dtype, ndim, layout, readonly, aligned = rest
        if layout not in ("C", "F", "A") or not 0 <= _int(ndim) <= 32:
            raise ValueError("array type")
        return types.Array(decode_type(dtype), ndim, layout, readonly=bool(readonly), aligned=bool(aligned))
    if kind == "unituple":
        return types.UniTuple(decode_type(rest[0]), _int(rest[1]))
    if kind == "tuple":
        return types.Tuple([decode_type(x) for x in rest[0]])
    if kind == "list":
        return types.List(decode_type(rest[0]), reflected=bool(rest[1]))
    raise ValueError(f"unknown type kind {kind!r}")


def _int(v) -> int:
    if type(v) is not int:
        raise ValueError("not an integer")
    return v


# ----------------------------------------------------------------------------- a compile result as data

_FNDESC = ("native", "modname", "qualname", "unique_name", "doc", "mangled_name", "env_name", "inline",
           "noalias", "uid")
_RELOADERS = {"parfors": "_reload_parfors"}  # numba's re-initialisers a result may need, by name


def _encode_const(c):
    if c is None or type(c) in (bool, int, str) or (type(c) is float and np.isfinite(c)):
        return c
    if type(c) is np.dtype or isinstance(c, np.dtype):
        if c.fields is None and c.subdtype is None and np.dtype(c.str) == c:
            return {"dtype": c.str}
    raise Uncachable(f"an environment constant of type {type(c).__name__}")


def _decode_const(c):
    if isinstance(c, dict):
        return np.dtype(str(c["dtype"]))
    if isinstance(c, list):
        raise ValueError("constant")
    return c


def _encode_env(env) -> dict:
    name = env.globals.get("__name__")
    if not isinstance(name, str):
        raise Uncachable("an environment without a module")
    return {"module": name, "name": env.env_name, "consts": [_encode_const(c) for c in env.consts]}


def _decode_env(d):
    name = d["module"]
    if name not in sys.modules:  # (an environment names a module; never import one for it)
        raise ValueError(f"module {name!r} not loaded")
    return environment._rebuild_env(name, [_decode_const(c) for c in d["consts"]], str(d["name"]))


def encode(cres) -> tuple[dict, bytes, bytes]:
    """(header, object code, bitcode) for ``cres``; Uncachable when the format cannot hold it."""
    if cres.objectmode or cres.lifted:
        raise Uncachable("object mode or lifted loops")
    if cres.library.has_dynamic_globals:
        raise Uncachable("dynamic globals")
    libdata, fndesc, env, sig, objectmode, lifted, typeann, reload_init, envs = cres._reduce()
    name, kind, (obj, bitcode) = libdata
    if kind != "object" or type(fndesc) is not funcdesc.PythonFunctionDescriptor or fndesc.global_dict is not None:
        raise Uncachable("the function's descriptor")
    if sig.recvr is not None or sig.pysig is not None:
        raise Uncachable("the signature")
    reloaders = [k for k, f in _RELOADERS.items() if any(getattr(r, "__name__", None) == f for r in reload_init)]
    if len(reloaders) != len(reload_init):
        raise Uncachable("a reload hook")
    header = {
        "library": name,
        "fndesc": {**{k: getattr(fndesc, k) for k in _FNDESC},
                   "args": list(fndesc.args), "kws": list(fndesc.kws), "abi_tags": list(fndesc.abi_tags),
                   "restype": encode_type(fndesc.restype),
                   "argtypes": [encode_type(t) for t in fndesc.argtypes]},
        "env": _encode_env(env),
        "signature": {"return": encode_type(sig.return_type), "args": [encode_type(t) for t in sig.args]},
        # (not the type annotation: 20 KB of text for numba's inspect_types, read at each load)
        "reload": reloaders,
        "envs": [_encode_env(e) for e in envs],
    }
    return header, obj, bitcode


def decode(header: dict, obj: bytes, bitcode: bytes, target_context):
    """The compile result ``encode`` described (ValueError, KeyError or TypeError when the
    header is not one it wrote)."""
    f = header["fndesc"]
    fndesc = funcdesc.PythonFunctionDescriptor.__new__(funcdesc.PythonFunctionDescriptor)
    for k in _FNDESC:
        setattr(fndesc, k, f[k])
    for k in ("modname", "qualname", "unique_name", "doc", "mangled_name", "env_name"):
        if not isinstance(f[k], str):
            raise ValueError(f"fndesc.{k}")
    if f["modname"] not in sys.modules:  # (numba looks the module up by name: never import one for it)
        raise ValueError(f"module {f['modname']!r} not loaded")
    fndesc.args, fndesc.kws = tuple(map(str, f["args"])), tuple(f["kws"])
    fndesc.abi_tags = tuple(map(str, f["abi_tags"]))
    fndesc.restype = decode_type(f["restype"])
    fndesc.argtypes = tuple(decode_type(t) for t in f["argtypes"])
    fndesc.typemap = fndesc.calltypes = fndesc.global_dict = None
    s = header["signature"]
    sig = typing.Signature(decode_type(s["return"]), tuple(decode_type(t) for t in s["args"]), recvr=None)
    from numba.core import typed_passes
    reload_init = [getattr(typed_passes, _RELOADERS[k]) for k in header["reload"]]
    payload = ((str(header["library"]), "object", (obj, bitcode)), fndesc, _decode_env(header["env"]), sig,
               False, (), "", reload_init, tuple(_decode_env(e) for e in header["envs"]))
    return compiler.CompileResult._rebuild(target_context, *payload)


# ----------------------------------------------------------------------------- files

def _fingerprint() -> str:
    """A hash of dslc's numba backend: kernels inline its helpers, so a changed helper
    must not meet code compiled from the old one."""
    h = hashlib.sha256()
    for p in sorted(_BACKEND.glob("*.py")):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


_FINGERPRINT = _fingerprint()


def pack(key: str, header: dict, obj: bytes, bitcode: bytes) -> bytes:
    meta = dict(header, key=key, object=[len(obj), hashlib.sha256(obj).hexdigest()],
                bitcode=[len(bitcode), hashlib.sha256(bitcode).hexdigest()])
    text = json.dumps(meta, allow_nan=False, separators=(",", ":")).encode()
    return MAGIC + len(text).to_bytes(8, "little") + text + obj + bitcode


def unpack(key: str, data: bytes):
    """(header, object code, bitcode), or None when ``data`` is not a whole file of ours for ``key``."""
    start = len(MAGIC) + 8
    if not data.startswith(MAGIC) or len(data) < start:
        return None
    n = int.from_bytes(data[len(MAGIC):start], "little")
    if n > len(data) - start:
        return None
    try:
        meta = json.loads(data[start:start + n])
        (n_obj, h_obj), (n_bc, h_bc) = meta["object"], meta["bitcode"]
    except (ValueError, KeyError, TypeError):
        return None
    body = data[start + n:]
    if meta.get("key") != key or type(n_obj) is not int or type(n_bc) is not int or n_obj + n_bc != len(body):
        return None
    obj, bitcode = body[:n_obj], body[n_obj:]
    if hashlib.sha256(obj).hexdigest() != h_obj or hashlib.sha256(bitcode).hexdigest() != h_bc:
        return None  # (cut short or damaged: compile again)
    return meta, obj, bitcode


def read_private(path: Path) -> bytes | None:
    """The bytes of ``path`` if it is a regular file of this user's that no one else can
    write (never through a symlink); None otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022 \
                or st.st_size > MAX_FILE:
            return None
        chunks, left = [], st.st_size
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


class KernelCache:
    """What numba's dispatcher calls ``_cache``: load and save one function's compile
    results, in files of ``directory()`` (called at each use: the directory is checked
    and chosen when a kernel is first needed, not at import)."""

    def __init__(self, dispatcher, directory, identity: str = ""):
        """``identity``: what names the function's code beyond dslc's backend (the hash of
        a generated module's text)."""
        fn = dispatcher.py_func
        self._directory = directory
        self._closure = fn.__closure__ is not None
        opts = sorted((k, repr(v)) for k, v in dispatcher.targetoptions.items())
        self._base = json.dumps([MAGIC.decode(), _FINGERPRINT, identity, fn.__module__, fn.__qualname__,
                                 hashlib.sha256(fn.__code__.co_code).hexdigest(), opts, sys.version,
                                 _versions(), str(config.OPT), config.BOUNDSCHECK, config.DEBUGINFO_DEFAULT,
                                 config.LOOP_VECTORIZE])
        self._enabled = True

    @property
    def cache_path(self) -> str:
        return str(self._directory())

    def enable(self):
        self._enabled = True

    def disable(self):
        self._enabled = False

    def flush(self):
        pass  # (each file stands alone: nothing to forget)

    def _key(self, sig, codegen) -> str | None:
        if self._closure or not self._enabled:
            return None
        args, ret = sigutils.normalize_signature(sig)
        try:
            typed = [[encode_type(t) for t in args], None if ret is None else encode_type(ret)]
        except Uncachable:
            return None
        material = json.dumps([self._base, typed, _magic(codegen)])
        return hashlib.sha256(material.encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self._directory() / f"x_{key[:40]}.dslck"

    def has(self, sig, target_context) -> bool:
        """Whether a file for ``sig`` is there (not whether it loads: ``load_overload`` checks)."""
        target_context.refresh()
        key = self._key(sig, target_context.codegen())
        return key is not None and self._path(key).is_file()

    def load_overload(self, sig, target_context):
        target_context.refresh()
        key = self._key(sig, target_context.codegen())
        if key is None:
            return None
        data = read_private(self._path(key))
        got = unpack(key, data) if data is not None else None
        if got is None:
            return None
        header, obj, bitcode = got
        try:
            cres = decode(header, obj, bitcode, target_context)
        except Exception:  # (a header we did not write, code LLVM refuses: compile it again)
            return None
        args, _ = sigutils.normalize_signature(sig)
        if tuple(cres.signature.args) != tuple(args):
            return None
        return cres

    def save_overload(self, sig, cres):
        key = self._key(sig, cres.library.codegen)
        if key is None:
            return
        try:
            header, obj, bitcode = encode(cres)
            # the format must give back exactly what numba made, or the file is not written
            if decode_type(header["signature"]["return"]) != cres.signature.return_type or \
                    tuple(decode_type(t) for t in header["signature"]["args"]) != tuple(cres.signature.args) or \
                    decode_type(header["fndesc"]["restype"]) != cres.fndesc.restype or \
                    tuple(decode_type(t) for t in header["fndesc"]["argtypes"]) != tuple(cres.fndesc.argtypes):
                return
        except Uncachable:
            return
        try:
            write_whole(self._path(key), pack(key, header, obj, bitcode), sync=False)
        except OSError:
            pass  # (a full disk or a vanished directory costs a compile next time, nothing more)


_magics: dict = {}


def _magic(codegen) -> list[str]:
    """The target machine numba compiles for (asked once per codegen: 0.2 ms a time)."""
    got = _magics.get(codegen)
    if got is None:
        got = _magics[codegen] = list(map(str, codegen.magic_tuple()))
    return got


def _versions() -> list[str]:
    import llvmlite
    import numba
    return [numba.__version__, llvmlite.__version__, np.__version__]
