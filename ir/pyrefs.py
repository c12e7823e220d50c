"""References from IR attributes to Python objects (Python op functions).

A function defined at the top level of a module (or a class there) is referenced by
where it lives: ``pyref<"report", "/home/me/jobs/stats.py">`` (a job file, by its absolute path) or
``pyref<"report", "mylib.ops">`` (an importable module); a builder tuple adds its
arguments as JSON: ``pyref<"make_op", "mylib.ops", "[[2], {}]">``. Such a reference
works in any process: the function is imported again. Anything else (a lambda, a
function local to another, a callable object) is kept by a token that only finds it
in the process that made it: ``pyref<1, "my_op", "why it cannot be imported">``.

IR text is code: a reference imports a module and calls a function. Functions this
process registered (the job file it traced) resolve freely; importing one named by a
parsed file needs the user's consent first: ``trust()`` (the CLI's ``--trust``) or
``trust(["mylib.ops", "/abs/path/job.py"])`` (``--trust-module``). A ``.py`` source
must be an absolute path: the text never names a file relative to where it is run.

Consent to a module is consent to the functions (and classes) it defines, itself or in
its submodules, not to everything reachable through it: ``pyref<"system", "mylib.ops">``
is refused when ``mylib.ops`` merely imported ``os.system``, as are ``os.system`` named
through it and a wrapper another module defined. Names are read from the namespaces'
own dictionaries, so naming a property, a descriptor or a missing attribute runs no code
of the module's. ``trust()`` without sources admits whatever the text names.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import secrets
import sys
import threading
import types
from dataclasses import dataclass

from .diagnostics import DSLError


@dataclass(frozen=True, slots=True)
class PyRef:
    token: int | None  # set when the object cannot be imported again (``why``)
    name: str          # the qualified name (of the builder, for a builder tuple)
    source: str = ""   # a module name, or a path ending in .py
    args: str = ""     # a builder tuple's [args, kwargs], as JSON
    why: str = ""      # why the object cannot be imported again ("" when it can)


_objects: dict[int, tuple[str, object]] = {}  # token -> (the name it was registered under, object)
# Tokens start at a random number of this process's own: a text written by another process
# (a file on disk) names a token that this process's registry does not hold, rather than
# whatever this process happened to register under the same small number.
_token_base = secrets.randbits(40) << 20
_by_address: dict[tuple, object] = {}  # (source, name, args) -> the object registered
_imported: dict[str, object] = {}  # source -> the module imported again for it
_lock = threading.Lock()
_consent: set | None = set()  # sources the user allowed to be imported; None: every one


def trust(sources=None) -> None:
    """Allow references to import ``sources`` (module names or absolute .py paths); with
    none given, every source. Consent lasts for the process."""
    global _consent
    with _lock:
        if sources is None:
            _consent = None
        elif _consent is not None:
            _consent.update(os.path.abspath(x) if x.endswith(".py") else x for x in sources)


def untrust() -> None:
    """Withdraw every consent given by ``trust`` (tests)."""
    global _consent
    with _lock:
        _consent = set()


def _allowed(source: str) -> bool:
    if _consent is None or source in _consent:
        return True
    if source.endswith(".py"):
        return False
    parts = source.split(".")  # a module allowed allows its submodules
    return any(".".join(parts[:k]) in _consent for k in range(1, len(parts)))


class UntrustedCode(DSLError):
    """An IR reference would import code the user has not allowed."""


def register(obj, name: str | None = None) -> PyRef:
    """Keep ``obj`` alive for the process and return a reference to it."""
    fn, args = (obj[0], obj[1:]) if isinstance(obj, tuple) else (obj, None)
    qualname = name or getattr(fn, "__qualname__", None) or type(fn).__name__
    source, why = _address(fn)
    text = ""
    if not why and args is not None:
        try:
            text = json.dumps([list(args[0]), dict(args[1])], allow_nan=False)
        except (TypeError, ValueError):
            why = "its builder's arguments are not plain values (numbers, strings, lists, dicts)"
    with _lock:
        if why:
            token = _token_base + len(_objects) + 1
            _objects[token] = (qualname, obj)
            return PyRef(token, qualname, why=why)
        _by_address[(source, qualname, text)] = obj
    return PyRef(None, qualname, source, text)


def _address(fn) -> tuple[str, str]:
    """(where ``fn`` can be imported from, "") or ("", why it cannot)."""
    qualname = getattr(fn, "__qualname__", None)
    mod = sys.modules.get(getattr(fn, "__module__", None) or "")
    if qualname is None or not callable(fn):
        return "", f"a {type(fn).__name__} object is not a function defined in a module"
    if "<lambda>" in qualname:
        return "", "it is a lambda"
    if "<locals>" in qualname:
        return "", f"it is local to {qualname.split('.<locals>')[0]}()"
    if mod is None or _lookup(mod, qualname) is not fn:
        return "", f"{qualname} is not found under that name in its module"
    if mod.__name__ == "__main__" or getattr(mod, "__spec__", None) is None:
        path = getattr(mod, "__file__", None)  # a job file, run as a module of its own
        if not path:
            return "", "its module has no file"
        return os.path.abspath(path), ""  # (absolute: the text may run from anywhere)
    return mod.__name__, ""


def _lookup(mod, qualname: str):
    """What ``qualname`` names in ``mod``, read from the namespaces' own dictionaries: the
    name may come from a file, so no property, descriptor or module ``__getattr__`` runs."""
    obj = mod
    for part in qualname.split("."):
        try:
            obj = inspect.getattr_static(obj, part)
        except AttributeError:
            return None
        if isinstance(obj, staticmethod):
            obj = obj.__func__
    return obj


def resolve(ref: PyRef):
    """The object ``ref`` names: registered in this process, or imported again. Raises
    DSLError (without a location: the caller knows the op) when it cannot be found."""
    if ref.token is not None:
        name, obj = _objects.get(ref.token, (None, None))
        if obj is None or name != ref.name:
            raise DSLError(f"the Python op function {ref.name!r} cannot be found: {ref.why or 'it was '}"
                           f"{'' if ref.why else 'made by another process'}",
                           hint="define the function at the top level of the job file (or of a "
                                "module), so that its IR text can name it")
        return obj
    key = (ref.source, ref.name, ref.args)
    obj = _by_address.get(key)
    if obj is None:
        _check_consent(ref)
        mod = _import(ref.source)
        fn = _lookup(mod, ref.name)
        if fn is None:
            raise DSLError(f"the Python op function {ref.name!r} is not in {ref.source}",
                           hint="the IR names a function that the file no longer defines: "
                                "write the IR again (dslc ir -o)")
        if _consent is not None:  # (consent to some sources: to what they define, no more)
            _check_defined(ref, mod, fn)
        obj = fn
        if ref.args:
            args, kwargs = json.loads(ref.args)
            obj = (fn, args, kwargs)
        with _lock:
            obj = _by_address.setdefault(key, obj)
    return obj


def _check_consent(ref: PyRef) -> None:
    src = ref.source
    if src.endswith(".py") and not os.path.isabs(src):
        raise UntrustedCode(f"the Python op function {ref.name!r} names the file {src!r} by a relative "
                            "path: IR text may only name a job file by its absolute path",
                            hint="write the IR again with dslc ir -o (it records absolute paths)")
    if not _allowed(src):
        what = "the file" if src.endswith(".py") else "the module"
        raise UntrustedCode(f"the IR calls the Python function {ref.name!r} from {what} {src!r}: running "
                            "it would run code named by the IR file, which you have not allowed",
                            hint=f"if you trust this file, pass --trust (every function it names) or "
                                 f"--trust-module {src} (session API: dslc.ir.pyrefs.trust)")


def _check_defined(ref: PyRef, mod, fn) -> None:
    """Raise UntrustedCode unless ``fn`` is a function or class that a module the user
    trusts defines: the module imported for ``ref`` itself, or a trusted module (or
    submodule) by name. ``__globals__`` (a function's) and ``__self__`` (a built-in's)
    say where it was defined; a name it was imported under says nothing."""
    if isinstance(fn, types.FunctionType):
        home = _module_named(fn.__globals__.get("__name__"))
        ok = home is not None and vars(home) is fn.__globals__
        what = f"a function of {_name_of(home, fn.__globals__.get('__name__'))}"
    elif isinstance(fn, types.BuiltinFunctionType):
        home = fn.__self__ if isinstance(fn.__self__, types.ModuleType) else None
        ok, what = home is not None, f"a built-in function of {_name_of(home, None)}"
    elif isinstance(fn, type):
        home = _module_named(fn.__module__)
        ok, what = home is not None, f"a class of {_name_of(home, fn.__module__)}"
    else:
        home, ok, what = None, False, f"a {type(fn).__name__} object, not a function"
    if ok and (home is mod or (not ref.source.endswith(".py") and _allowed(home.__name__))):
        return
    where = "the file" if ref.source.endswith(".py") else "the module"
    raise UntrustedCode(f"the IR calls {ref.name!r} through {where} {ref.source!r}, but that is {what}, "
                        f"which {ref.source!r} did not define: trusting a module admits only its own functions",
                        hint="if you trust everything the IR file names, pass --trust")


def _module_named(name):
    return sys.modules.get(name) if isinstance(name, str) else None


def _name_of(module, fallback) -> str:
    name = getattr(module, "__name__", None) or fallback
    return repr(name) if name else "no module"


def _import(source: str):
    """The module ``source`` names (a module name, or a .py file imported once)."""
    got = _imported.get(source)
    if got is not None:
        return got
    try:
        if source.endswith(".py"):
            name = "dslc_pyref_" + str(len(_imported))
            spec = importlib.util.spec_from_file_location(name, source)
            if spec is None or not os.path.exists(source):
                raise FileNotFoundError(source)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
        else:
            mod = importlib.import_module(source)
    except Exception as e:
        raise DSLError(f"cannot import {source!r} for a Python op: {type(e).__name__}: {e}",
                       hint="run from the directory the IR was written in, or put the module "
                            "on PYTHONPATH") from None
    with _lock:
        return _imported.setdefault(source, mod)


def unportable(ref) -> str:
    """Why ``ref`` (an attribute value) would not work in another process, or ""."""
    return ref.why if isinstance(ref, PyRef) and ref.token is not None else ""


def check_portable(module, path: str) -> None:
    """Raise a DSLError at the first Python op of ``module`` whose function another
    process could not import again (the IR is being written to the file ``path``)."""
    for op in module.walk():
        for v in op.attrs.values():
            why = unportable(v)
            if why:
                raise DSLError(f"cannot write {path}: the IR text cannot name the Python op "
                               f"function {v.name!r}: {why}", op.loc,
                               "define it at the top level of the job file or of a module (a "
                               "lambda or local function exists only while the job runs)")
