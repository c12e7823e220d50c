"""Reading the IR's text form back into a module (the inverse of ``printer``).

``parse(print_module(m))`` builds a module that prints to the same text. Ops keep
the ``loc(...)`` they were printed with (the user's job lines); the module also
remembers where each op stands in the text, so the verifier's errors on parsed
text point at the text's line.
"""
from __future__ import annotations

import json
import math
import os

import lark
import numpy as np

from .core import MAX_NESTING, Module, Operation, Region, Symbol
from .diagnostics import UNKNOWN_LOC, DSLError, Location, one_line
from .opdef import OPS
from .printer import IR_VERSION, STAMP
from .pyrefs import PyRef
from .types import ANY, NUMPY_DTYPES, HandleType, TensorType
from .verifier import verify

_ELEMENT_HINTS = {"b": "bool tensors hold true or false", "U": 'string tensors hold "quoted" strings',
                  "O": 'string tensors hold "quoted" strings', "f": "float tensors hold numbers"}
_GRAMMAR = os.path.join(os.path.dirname(__file__), "grammar.lark")
_parser = None

TOKEN_NAMES = {
    "_NL": "the end of the line", "VALUE": "a value (%name)", "NAME": "a name", "SYMBOL": 'a blob (@"name")',
    "ATTR_OPEN": "'{'", "REGION_OPEN": "'{' and a new line", "LBRACE": "'{'", "RBRACE": "'}'", "LPAR": "'('", "RPAR": "')'", "COLON": "':'", "COMMA": "','",
    "EQUAL": "'='", "INT": "an integer", "FLOAT": "a number", "STRING": "a string", "DTYPE": "a type",
    "LABEL": "a region name", "LSQB": "'['", "RSQB": "']'", "$END": "the end of the text",
    "LOC": 'a location (loc("file":line))',
}




class ParseError(DSLError):
    """Text that is not valid IR: where (line:column), what was found, what was expected."""

    def __init__(self, message, loc, col=0, hint=None):
        super().__init__(message, loc, hint)
        self.col = col

    def one_line(self) -> str:
        where = f"{self.loc.file}:{self.loc.line}:{self.col}: " if self.loc else ""
        return one_line(f"{where}{self.kind}: {self.message}" + (f"; {self.hint}" if self.hint else ""))


def _a(word: str) -> str:
    """``word`` with its article: "an i64", "a f32" is spoken "an f32" too."""
    return ("an " if word[:1] in "aeioufs" else "a ") + word


def _lark() -> lark.Lark:
    global _parser
    if _parser is None:
        with open(_GRAMMAR, encoding="utf-8") as f:
            # No propagate_positions: it doubles the parse time, and tokens carry their
            # line and column anyway (``_position`` finds a subtree's first token).
            _parser = lark.Lark(f.read(), parser="lalr", maybe_placeholders=True)
    return _parser


def parse(text: str, filename: str = "<text>", check: bool = True) -> Module:
    """The module the text describes.

    Bad text raises ParseError (``file:line:column``, the text found there, what was
    expected); with ``check`` the verifier runs too, and its errors name the text's line.
    """
    modules = parse_all(text, filename, check)
    if len(modules) > 1:
        second = min(modules[1].origin.values(), key=lambda loc: loc.line)
        raise ParseError("the text holds more than one module (a job's runnables or groups)", second, 1,
                         "dslc run, compile and plan read such a file; keep one module for dslc opt")
    return modules[0]


def _check_version(text: str, filename: str) -> None:
    """Refuse text stamped with a newer version of the IR than this dslc reads (an unstamped
    text is version 1, as files written before the stamp are)."""
    m = STAMP.match(text)
    if m and int(m.group(1)) > IR_VERSION:
        by = f" (written by dslc {m.group(2)})" if m.group(2) else ""
        raise ParseError(f"this IR file is version {m.group(1)} of the IR{by}; this dslc reads versions up to "
                         f"{IR_VERSION}", Location(filename, 1), 1,
                         "write it again with this dslc (dslc ir JOB.py -o FILE), or use the dslc that wrote it")


def parse_all(text: str, filename: str = "<text>", check: bool = True) -> list[Module]:
    """Every module the text describes, in order (``dslc ir -o`` writes one per runnable
    of a job file, and one per group of a Job)."""
    if not text.endswith("\n"):
        text += "\n"
    _check_version(text, filename)
    try:
        tree = _lark().parse(text)
    except lark.exceptions.UnexpectedInput as e:
        raise _syntax_error(e, text, filename) from None
    out = []
    for node in tree.children:
        if not isinstance(node, lark.Tree):
            continue  # the optional blank line first
        top = node.children[0].children[1]  # the op's name
        if str(top) != "module":
            raise ParseError(f"the text must hold a module, not {str(top)!r}", Location(filename, top.line),
                             top.column, "IR files start with `module {`, as `dslc ir -o` writes them")
        b = _ModuleBuilder(filename)
        module = Module(b.op(node, None))
        module.origin = b.origin
        if check:
            verify(module)
        out.append(module)
    return out


def _syntax_error(e, text: str, filename: str) -> ParseError:
    """A lark error as a ParseError: line:column, the text found there, what could come."""
    line, col = getattr(e, "line", 0), getattr(e, "column", 0)
    lines = text.splitlines()
    if isinstance(e, lark.exceptions.UnexpectedToken):
        if e.token.type == "$END":
            found = "end of the text"
            line, col = len(lines), (len(lines[-1]) + 1 if lines else 1)
        elif e.token.type == "_NL":
            found = "end of the line"
        else:
            found = repr(str(e.token))
        # ``accepts`` is exact; ``expected`` may hold tokens of merged LALR states
        expected = e.accepts or e.expected
    else:
        found = repr(lines[line - 1][col - 1:].split(" ")[0]) if 0 < line <= len(lines) else "text"
        expected = getattr(e, "allowed", None) or ()
    names = sorted({_describe(t) for t in expected})
    hint = f"expected {', '.join(names[:6])}" + (", ..." if len(names) > 6 else "") if names else \
        "compare with the IR text that dslc ir JOB.py prints"
    return ParseError(f"unexpected {found}", Location(filename, line), col, hint)


def _describe(terminal: str) -> str:
    """How an error message names a grammar terminal: its text, or what it stands for."""
    if terminal in TOKEN_NAMES:
        return TOKEN_NAMES[terminal]
    try:
        pattern = _lark().get_terminal(terminal).pattern
    except KeyError:
        return terminal.lower()
    return repr(pattern.value) if pattern.type == "str" else terminal.lower()


def _position(node) -> tuple[int, int]:
    """(line, column) of a token, or of the first token in a parse subtree; (0, 0) if none."""
    if isinstance(node, lark.Tree):
        node = next(node.scan_values(lambda v: isinstance(v, lark.Token)), None)
    return (getattr(node, "line", None) or 0, getattr(node, "column", None) or 0)


class _ModuleBuilder:
    def __init__(self, filename):
        self.filename = filename
        self.origin: dict = {}
        self.scopes: list[dict] = [{}]
        self.locs: dict[str, Location] = {}

    def fail(self, node, msg, hint):
        """Raise a ParseError at ``node`` (a token, or the first token of a subtree)."""
        line, col = _position(node)
        raise ParseError(msg, Location(self.filename, line), col, hint)

    # --- values
    def lookup(self, tok):
        for scope in reversed(self.scopes):
            if str(tok) in scope:
                return scope[str(tok)]
        self.fail(tok, f"{tok} is used before it is defined",
                  f"define {tok} earlier in this region or an enclosing one (values of another "
                  "task, and of a region that has ended, are not visible here)")

    def define(self, tok, value):
        if str(tok) in self.scopes[-1]:
            self.fail(tok, f"{tok} is defined twice", "give each value its own %name")
        name = str(tok)[1:]
        if not name.isdigit():
            value.hint = name
        self.scopes[-1][str(tok)] = value

    # --- ops
    def op(self, node, parent):
        head = node.children[0]
        results, name, sym, operands, attrs, types, loc = head.children
        opdef = OPS.get(str(name))
        if opdef is None:
            self.fail(name, f"unknown op {str(name)!r}",
                      f"did you mean {' or '.join(OPS.suggest(str(name)))}?" if OPS.suggest(str(name))
                      else "`dslc ops` prints the operator reference")
        result_toks = list(results.children) if results is not None else []
        result_types = [self.type(t) for t in types.children] if types is not None else []
        if len(result_types) != len(result_toks):
            self.fail(name, f"{name} has {len(result_toks)} results but {len(result_types)} types",
                      "write one type after ':' for each %result, in order")
        values = [self.lookup(t) for t in operands.children if t is not None] if operands is not None else []
        attr_map = dict(self.attr(a) for a in attrs.children[1:]) if attrs is not None else {}
        if sym is not None:
            if opdef.symbol is None:
                self.fail(sym, f"{name} takes no @name", "remove the @\"...\" after the op name")
            attr_map[opdef.symbol] = Symbol(self.string(sym, str(sym)[1:]))
        try:
            attr_map = opdef.full_attrs(attr_map)
        except DSLError as e:
            self.fail(name, e.message, e.hint or f"`dslc ops {name}` describes {name}")
        region_nodes = node.children[1:]
        op_loc = loc if node.data == "simple_op" else region_nodes[-1]
        if node.data == "region_op":
            region_nodes = region_nodes[:-1]
        op = Operation(opdef, values, result_types, attr_map, (), self.loc(op_loc if op_loc is not None else loc))
        self.origin[op] = Location(self.filename, name.line)
        for tok, r in zip(result_toks, op.results):
            self.define(tok, r)
        for region in self.regions(op, region_nodes):
            op.add_region(region)
        return op

    def regions(self, op, nodes):
        declared = op.opdef.regions
        pairs, label = [], None
        for n in nodes:
            if isinstance(n, lark.Token) or n is None:
                label = n
                continue
            pairs.append((label, n))
            label = None
        if declared == ("*",):
            return [self.region(r) for _, r in pairs]
        out = [None] * len(declared)
        for i, (label, r) in enumerate(pairs):
            if label is None and len(declared) == 1 and i == 0:
                idx = 0
            elif label is not None and str(label) in declared:
                idx = declared.index(str(label))
            else:
                self.fail(r, f"{op.name} has no region {str(label) if label else '(unnamed)'}",
                          f"its regions are: {', '.join(declared) or 'none'}")
            if out[idx] is not None:
                self.fail(label if label is not None else r, f"{op.name} has its {declared[idx]} region twice",
                          "give each region once")
            out[idx] = self.region(r)
        return [r if r is not None else Region() for r in out]

    def region(self, node):
        # self.scopes holds one scope per open region (and the module's): the nesting depth
        if len(self.scopes) > MAX_NESTING:
            self.fail(node, f"regions nest more than {MAX_NESTING} deep",
                      "flatten the program: no job nests loops and conditionals this deep")
        r = Region()
        self.scopes.append({})
        args, *children = node.children[1:]
        if args is not None:
            for arg in args.children:
                if arg is not None:
                    tok, t = arg.children
                    self.define(tok, r.add_arg(self.type(t)))
        for child in children:
            r.append(self.op(child, r))
        self.scopes.pop()
        return r

    def loc(self, tok):
        """The Location a ``loc("file":line)`` token stands for (ops share a few: cached)."""
        if tok is None:
            return UNKNOWN_LOC
        text = str(tok)
        got = self.locs.get(text)
        if got is None:
            file, _, line = text[len("loc("):-1].rpartition(":")
            got = self.locs[text] = Location(self.string(tok, file), int(line))
        return got

    # --- attributes and types
    def attr(self, node):
        key, value = node.children
        return str(key), self.value(value)

    def value(self, v):
        if isinstance(v, lark.Token):
            return self.scalar(v)
        kind = v.data
        if kind == "int_value":
            return int(v.children[0])
        if kind == "float_value":
            return float(v.children[0])
        if kind == "string_value":
            return self.string(v.children[0])
        if kind == "symbol_value":
            return Symbol(self.string(v.children[0], str(v.children[0])[1:]))
        if kind == "word_value":
            return self.word(v.children[0])
        if kind == "list_value":
            return [self.value(x) for x in v.children if x is not None]
        if kind == "dense_value":
            return self.dense(v)
        if kind == "pyref_value":
            return self.pyref(v)
        if kind == "type_value":
            return self.type(v.children[1])
        self.fail(v, f"cannot read attribute value {kind}",
                  "attribute values are numbers, strings, @\"blobs\", lists, dense<...> or type<...>")

    def pyref(self, v) -> PyRef:
        token, *texts = v.children[1:]
        texts = [self.string(t) for t in texts]
        if token is not None:
            if len(texts) > 2:
                self.fail(v, "a pyref with a token takes a name and a reason",
                          'write pyref<1, "name", "why"> (or pyref<"name", "module or file.py">)')
            return PyRef(int(token), texts[0], why=texts[1] if len(texts) > 1 else "")
        if not 2 <= len(texts) <= 3:
            self.fail(v, "a pyref names a function and where it is defined",
                      'write pyref<"name", "module or file.py"> (a builder adds "[args, kwargs]")')
        return PyRef(None, *texts)

    def word(self, tok):
        words = {"true": True, "false": False, "none": None}
        if str(tok) not in words:
            self.fail(tok, f"unknown word {str(tok)!r} in an attribute", "expected true, false or none")
        return words[str(tok)]

    def scalar(self, tok):
        if tok.type == "INT":
            return int(tok)
        if tok.type == "FLOAT":
            return float(tok)
        if tok.type == "STRING":
            return self.string(tok)
        return self.word(tok)

    def string(self, tok, text: str | None = None) -> str:
        """The string a STRING token (or ``text``, the quoted part of ``tok``) stands for."""
        try:
            return json.loads(str(tok) if text is None else text)
        except ValueError as e:  # a raw tab or control character, a bad escape
            self.fail(tok, f"bad string: {e.msg.removesuffix(' at')}",
                      "write control characters as escapes (\\t, \\n, \\u0001), as JSON does")

    def dense(self, node):
        _, dtype, shape, *items = node.children
        if str(dtype) not in NUMPY_DTYPES:
            self.fail(dtype, f"unknown dtype {str(dtype)!r}",
                      f"dense dtypes are {', '.join(sorted(NUMPY_DTYPES))}")
        dims = self.shape(shape) if shape is not None else ()
        if dims is None or any(d is None for d in dims):
            self.fail(dtype, "a dense value needs a fully known shape",
                      "write every dim as a number: dense<f32[2,3]: ...>")
        values = [self.element(t, str(dtype)) for t in items if t is not None]
        arr = np.array(values, dtype=NUMPY_DTYPES[str(dtype)])
        if arr.size != math.prod(dims):  # (exact: numpy's product of huge dims wraps around)
            self.fail(dtype, f"dense<{dtype}> has {arr.size} values for shape {list(dims)}",
                      "give one value per element, or one value for a scalar")
        arr = arr.reshape(dims)
        arr.setflags(write=False)
        return arr

    def element(self, tok, dtype: str):
        """One value of a dense<dtype: ...>, checked to fit the dtype (numpy would raise,
        or wrap, or truncate a fraction)."""
        v = self.scalar(tok)
        kind = np.dtype(NUMPY_DTYPES[dtype]).kind
        ok = {"b": lambda: isinstance(v, bool),
              "U": lambda: isinstance(v, str), "O": lambda: isinstance(v, str),
              "f": lambda: isinstance(v, (int, float)) and not isinstance(v, bool),
              }.get(kind)
        if ok is not None:
            if not ok():
                self.fail(tok, f"{str(tok)} is not {_a(dtype)} value", _ELEMENT_HINTS.get(kind))
            return v
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        info = np.iinfo(NUMPY_DTYPES[dtype])
        if not isinstance(v, int) or isinstance(v, bool):
            self.fail(tok, f"{str(tok)} is not {_a(dtype)} value", "integer tensors hold whole numbers")
        if not info.min <= v <= info.max:
            self.fail(tok, f"{str(tok)} is out of range for {dtype} ({info.min} to {info.max})",
                      "use a wider dtype (i64), or a value in range")
        return v

    def type(self, node):
        if node.data == "handle_type":
            return HandleType(str(node.children[0]))
        dtype, shape = node.children
        d = str(dtype)
        if d == "any" and shape is None:
            return ANY
        if d != "?" and d not in NUMPY_DTYPES:
            self.fail(dtype, f"unknown type {d!r}", "types look like i64, f32[3], f32[?,4], !counter or any")
        try:
            return TensorType(None if d == "?" else d, () if shape is None else self.shape(shape))
        except DSLError as e:  # a shape too large for one value
            self.fail(dtype, e.message, e.hint)

    def shape(self, node):
        if node.data == "unranked":
            return None
        return tuple(None if str(d.children[0]) == "?" else int(d.children[0]) for d in node.children)
