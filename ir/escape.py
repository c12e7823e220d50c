"""Text from the input, made safe for where it is shown or written.

Names and file names in a job or an IR file are the user's (or an attacker's) text.
``printable`` is for the terminal: control characters, format characters (bidi
overrides) and line separators become Python escapes, so a name cannot move the
cursor, set the window title or start a line of its own. ``source_text`` is for
generated Python source (a comment or a docstring): ASCII only, backslashes and
quotes escaped, so it cannot end the comment or the string it sits in. ``brief`` and
``cut`` bound what an error quotes: an input's value may be megabytes long (a shape
argument of a million dims), and an error is one line a person reads.
"""
from __future__ import annotations


def printable(text: str) -> str:
    """``text`` with every character the terminal would act on written as an escape."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def printable_lines(text: str) -> str:
    """``printable`` line by line: the text's own line breaks stay."""
    return "\n".join(printable(line) for line in str(text).split("\n"))


def source_text(text: str) -> str:
    """``text`` as ASCII for a comment or a docstring of generated source."""
    # (ascii() escapes a double quote only when it quotes with them, which it does only
    # for text without any: so each " left is bare, and one escape each makes them safe)
    return ascii(str(text))[1:-1].replace('"', '\\"')


QUOTE_LIMIT = 160   # characters of one value an error quotes
LINE_LIMIT = 2000   # characters of one error line


def cut(text: str, limit: int = LINE_LIMIT) -> str:
    """``text``, or its start and end with the middle left out when it is longer than ``limit``."""
    text = str(text)
    if len(text) <= limit:
        return text
    keep = max(limit // 2 - 20, 1)
    return f"{text[:keep]}...[{len(text) - 2 * keep} characters left out]...{text[-keep:]}"


def brief(value, limit: int = QUOTE_LIMIT) -> str:
    """``str(value)`` for an error message, at most about ``limit`` characters: a long list
    or tuple shows its first items and its length (without building its whole text)."""
    if isinstance(value, (list, tuple)) and len(value) > 8:
        head = ", ".join(brief(v, limit) for v in value[:6])
        return cut(f"[{head}, ... ({len(value)} items)]", limit)
    return cut(str(value), limit)
