"""The environment variables that tune dslc, each read and checked in one place.

A value a variable does not take is the user's mistake: a ``SettingError`` that names
the variable, the value and what it accepts (one line, exit 2 on the command line).
Values are read when they are first needed, never at import, so a bad one never makes
``import dslc`` fail; the CLI checks them all before it starts (``check_all``).

    DSLC_MAX_TENSOR_BYTES=256MiB  -> byte_size(...) == 268435456
    DSLC_NUMBA_MIN_WORK=lots      -> SettingError: DSLC_NUMBA_MIN_WORK='lots' is not ...
"""
from __future__ import annotations

import os
import re

from .diagnostics import DSLError


class SettingError(DSLError):
    """An environment variable holds a value dslc cannot use."""


def _quoted(text: str) -> str:
    """The value as the error quotes it: at most 200 characters (the error line escapes it)."""
    return repr(text if len(text) <= 200 else text[:197] + "...")


def raw(name: str) -> str | None:
    """The variable's text with surrounding spaces removed; None when unset or empty."""
    text = os.environ.get(name, "").strip()
    return text or None


def count(name: str, default: int, lo: int = 0) -> int:
    """A whole number >= ``lo`` (``default`` when unset)."""
    text = raw(name)
    if text is None:
        return default
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = None
    if value is None or value < lo:
        raise SettingError(f"{name}={_quoted(text)} is not a whole number of at least {lo}",
                           hint=f"set it to an integer such as {default} (its default), or unset it")
    return value


def switch(name: str) -> bool:
    """On (``1``, ``true``, ``yes``, ``on``) or off (``0``, ``false``, ``no``, ``off``; unset)."""
    text = raw(name)
    if text is None:
        return False
    low = text.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise SettingError(f"{name}={_quoted(text)} is neither on nor off",
                       hint="set it to 1 (on) or 0 (off), or unset it")


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
          "g": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tib": 1 << 40,
          "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]*)")


def choice(name: str, options: tuple, default: str) -> str:
    """One of ``options`` (case ignored; ``default`` when unset)."""
    text = raw(name)
    if text is None:
        return default
    if text.lower() in options:
        return text.lower()
    raise SettingError(f"{name}={_quoted(text)} is not one of {', '.join(options)}",
                       hint=f"set it to {' or '.join(options)}, or unset it (default: {default})")


def byte_size(name: str, least: int = 1) -> int | None:
    """A number of bytes (at least ``least``), plain or with a unit (``268435456``,
    ``256MiB``, ``256M``, ``1.5GiB``, ``2GB``); None when unset."""
    text = raw(name)
    if text is None:
        return None
    m = _SIZE.fullmatch(text.lower().replace("_", ""))
    value = int(float(m.group(1)) * _UNITS[m.group(2)]) if m and m.group(2) in _UNITS else 0
    if value < least:
        at_least = f"of at least {least >> 20} MiB" if least >= 1 << 20 else "in bytes"
        raise SettingError(f"{name}={_quoted(text)} is not a size {at_least}",
                           hint="give a number of bytes, alone or with a unit: 268435456, 256MiB, "
                                "256M, 1.5GiB, 2GB (or unset it for the machine's memory)")
    return value


def directory(name: str) -> str | None:
    """A directory dslc may make (when missing) and keep files in, as an absolute path;
    None when unset. Whether an existing one may be trusted is its user's business (the
    numba kernel cache checks its owner and mode)."""
    text = raw(name)
    if text is None:
        return None
    path = os.path.abspath(os.path.expanduser(text))
    if os.path.isdir(path):
        return path
    probe = path
    while not os.path.lexists(probe):  # the nearest part that exists must be a directory
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        why = "it is not a directory" if probe == path else f"{probe!r} is not a directory"
    elif not os.access(probe, os.W_OK | os.X_OK):
        why = f"it does not exist and {probe!r} is not writable by this user"
    else:
        return path
    raise SettingError(f"{name}={_quoted(text)} cannot be used: {why}",
                       hint="point it at a directory you can write (it is made if missing), or unset it")


# Every variable a bad value of which is an error, and how it is read; ``check_all``
# reads them all (the CLI, before anything else runs).
VARIABLES = {
    "DSLC_MAX_TENSOR_BYTES": lambda n: byte_size(n, least=1 << 20),
    "DSLC_CACHE_DIR": directory,
    "DSLC_NUMBA_MIN_WORK": lambda n: count(n, 5000),
    "DSLC_NUMBA_NN_MIN_WORK": lambda n: count(n, 100_000),
    "DSLC_NUMBA_MAX_OPS": lambda n: count(n, 32, lo=1),
    "DSLC_NUMBA_PARALLEL": switch,
    "DSLC_NUMBA_COMPILE": lambda n: choice(n, ("hot", "now"), "hot"),
    "DSLC_NUMBA_HOT_MS": lambda n: count(n, 1000),
    "DSLC_NUMBA_TRIAL_RUNS": lambda n: count(n, 3),
    "DSLC_NUMBA_WORKER_GRACE": lambda n: count(n, 120),
    "DSLC_XLA_MIN_WORK": lambda n: count(n, 10_000),
    "DSLC_XLA_TRIAL_RUNS": lambda n: count(n, 3),
}


def check_all() -> None:
    """Raise the SettingError of the first variable in VARIABLES holding a bad value."""
    for name, read in VARIABLES.items():
        read(name)
