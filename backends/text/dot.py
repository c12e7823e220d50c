"""Pictures of a job as graphviz DOT text (``dslc graph``).

* ``structure(modules)``: the plan's own shape. Every block of the text plan (group,
  task, phase, loop, conditional, concurrent steps) is a cluster labelled with its
  header; each run of plain lines is one box holding those lines. Arrows follow run
  order inside a block; blocks whose parts run at the same time (a group's tasks,
  concurrent steps, reporters) get no arrows between their parts; a loop gets a
  dashed arrow back to its start.
* ``dataflow(module, task)``: one task's ops as boxes, blobs as yellow ellipses, and an
  arrow per value from where it is made to where it is used, labelled with its name;
  loops and conditionals are clusters.
* ``net(name, ops)``: a recorded net's ops and blobs (inputs -> op -> outputs);
  ``net_minimal(title, ops)`` its ops alone, ``plan_nets(nets)`` a plan's nets side by side
  (what Caffe2's ``net_drawer`` draws).
"""
from __future__ import annotations

from dslc.ir import OpResult
from dslc.ir.escape import printable

from .render import PlanWriter, literal

HEAD = ('  graph [compound=true, fontname="Helvetica", fontsize=11, labeljust=l];\n'
        '  node [fontname="Helvetica", fontsize=10];\n'
        '  edge [fontname="Helvetica", fontsize=9];\n')
CONCURRENT_HEADS = ("group on node", "concurrently", "with reporters")
LOOP_HEADS = ("for ", "while ")


def quote(text: str) -> str:
    return '"' + _escaped(text) + '"'


def _escaped(text: str) -> str:
    # DOT strings end at a bare quote; control characters from names are shown, not obeyed
    return printable(text).replace("\\", "\\\\").replace('"', '\\"')


def left(lines) -> str:
    """A multi-line label, every line left-justified (``\\l`` ends each)."""
    body = "".join(_escaped(ln) + "\\l" for ln in lines)
    return '"' + body + '"'


# ----------------------------------------------------------------------------- structure


class _Tree:
    """A block of the text plan: its header and children (blocks or runs of lines)."""

    def __init__(self, head: str):
        self.head, self.children = head, []


def _tree(lines) -> _Tree:
    """The plan's lines as nested blocks: a line ending in ':' heads the deeper lines below it."""
    root = _Tree("")
    stack = [(-1, root)]
    for i, ln in enumerate(lines):
        while stack[-1][0] >= ln.depth:
            stack.pop()
        parent = stack[-1][1]
        deeper = i + 1 < len(lines) and lines[i + 1].depth > ln.depth
        if ln.text.endswith(":") and deeper:
            node = _Tree(ln.text[:-1])
            parent.children.append(node)
            stack.append((ln.depth, node))
        elif parent.children and isinstance(parent.children[-1], list):
            parent.children[-1].append(ln.text)
        else:
            parent.children.append([ln.text])
    return root


class _Dot:
    def __init__(self):
        self.out: list[str] = []
        self.n = 0

    def fresh(self, kind: str) -> str:
        self.n += 1
        return f"{kind}{self.n}"

    def emit(self, depth: int, text: str) -> None:
        self.out.append("  " * depth + text + "\n")

    def item(self, child, depth: int):
        """Write a block or a run of lines; return (first node, last node, cluster or None)."""
        if isinstance(child, list):
            node = self.fresh("n")
            self.emit(depth, f'{node} [shape=box, style="rounded,filled", fillcolor="#f4f4f4", '
                             f'label={left(child)}];')
            return node, node, None
        cluster = self.fresh("cluster_")
        self.emit(depth, f"subgraph {cluster} {{")
        self.emit(depth + 1, f"label={quote(child.head)};")
        color = "#fff8e0" if child.head.startswith(LOOP_HEADS) else "#ffffff"
        self.emit(depth + 1, f'style="rounded,filled"; fillcolor="{color}"; color="#888888";')
        parts = [self.item(c, depth + 1) for c in child.children]
        if not child.head.startswith(CONCURRENT_HEADS):
            for a, b in zip(parts, parts[1:]):
                self.edge(depth + 1, a, b)
        if child.head.startswith(LOOP_HEADS) and parts:
            self.edge(depth + 1, parts[-1], parts[0], 'style=dashed, constraint=false, label="again"')
        self.emit(depth, "}")
        return parts[0][0], parts[-1][1], cluster

    def edge(self, depth, a, b, extra: str = "") -> None:
        attrs = []
        if a[2]:
            attrs.append(f"ltail={a[2]}")
        if b[2] and b[2] != a[2]:
            attrs.append(f"lhead={b[2]}")
        if extra:
            attrs.append(extra)
        self.emit(depth, f"{a[1]} -> {b[0]}" + (f" [{', '.join(attrs)}]" if attrs else "") + ";")


def structure(writers) -> str:
    """The structure of written plans (``PlanWriter``s), one cluster each."""
    d = _Dot()
    for plan in writers:
        for child in _tree(plan.lines).children:
            d.item(child, 1)
    return "digraph job {\n" + HEAD + "".join(d.out) + "}\n"


# ----------------------------------------------------------------------------- one task's dataflow


class _Flow(_Dot):
    """Dataflow of one task: a node per op (or blob, or loop variable), an edge per value use."""

    def __init__(self, writer: PlanWriter):
        super().__init__()
        self.names = writer.names
        self.writer = writer
        self.src: dict = {}        # value -> node that makes it
        self.blobs: dict = {}      # blob -> node
        self.edges: list[str] = []

    def value_src(self, v, depth):
        v = self.names.canon(v)
        got = self.src.get(v)
        if got is None and isinstance(v, OpResult) and v.owner.name == "Const":
            got = self.fresh("c")
            self.emit(depth, f"{got} [shape=plaintext, label={quote(literal(v.owner.attrs['value']))}];")
        return got

    def use(self, v, node, depth, extra="") -> None:
        got = self.value_src(v, depth)
        if got is None:
            return
        c = self.names.canon(v)
        label = "" if isinstance(c, OpResult) and c.owner.name == "Const" else self.names.of(c)
        attrs = [f"label={quote(label)}"] if label else []
        if extra:
            attrs.append(extra)
        self.edges.append(f"{got} -> {node}" + (f" [{', '.join(attrs)}]" if attrs else "") + ";")

    def blob(self, name) -> str:
        got = self.blobs.get(str(name))
        if got is None:
            got = self.blobs[str(name)] = self.fresh("b")
        return got

    def region(self, r, depth) -> None:
        for a in r.args:
            if self.names.canon(a) is a and self.names.needed(a):
                node = self.fresh("a")
                self.emit(depth, f"{node} [shape=ellipse, label={quote(self.names.of(a))}];")
                self.src[a] = node
        for op in r.ops:
            self.op(op, depth)

    def op(self, op, depth) -> None:
        n = self.names
        if op.name in ("Const", "must"):
            return
        if op.name in ("load", "flag"):
            self.src[op.result] = self.blob(op.attrs["blob"])
            return
        if op.name == "store":
            if n.vis.shown_use(op, 0):
                self.use(op.operands[0], self.blob(op.attrs["blob"]), depth)
            return
        if op.name == "yield":
            return self.op_yield(op, depth)
        if op.regions:
            return self.op_block(op, depth)
        node = self.fresh("o")
        label = "break if" if op.name == "break_if" else op.name
        shape = "diamond" if op.name == "break_if" else "box"
        self.emit(depth, f'{node} [shape={shape}, style="rounded,filled", fillcolor="#e8f0ff", '
                         f"label={quote(label)}];")
        for i, v in enumerate(op.operands):
            if n.vis.shown_use(op, i):
                self.use(v, node, depth)
        for r in op.results:
            self.src[r] = node

    def op_block(self, op, depth) -> None:
        cluster = self.fresh("cluster_")
        self.emit(depth, f"subgraph {cluster} {{")
        self.emit(depth + 1, f"label={quote(_block_label(op))};")
        self.emit(depth + 1, 'style="rounded"; color="#888888";')
        if op.operands and op.name in ("for", "if"):
            head = self.fresh("o")
            self.emit(depth + 1, f"{head} [shape=diamond, label={quote('count' if op.name == 'for' else 'cond')}];")
            self.use(op.operands[0], head, depth + 1)
        for r in op.regions:
            self.region(r, depth + 1)
        first = 1 if op.name == "for" else 0
        if op.name in ("for", "loop"):
            body = op.regions[0]
            for k, arg in enumerate(body.args[first:]):
                if arg in self.src:
                    self.use(op.operands[first + k], self.src[arg], depth + 1, "style=dashed")
                    if op.name == "for" and k < len(op.results):
                        self.src[op.results[k]] = self.src[arg]
        self.emit(depth, "}")
        for r in op.results:
            if r not in self.src and self.names.needed(r):
                node = self.fresh("r")
                self.emit(depth, f"{node} [shape=ellipse, style=dashed, label={quote(self.names.of(r))}];")
                self.src[r] = node
        for r in op.regions:  # what the branches (or a fused body) yield becomes the results
            if op.name in ("if", "fused", "concurrent") and r.ops and r.ops[-1].name == "yield":
                for res, v in zip(op.results, r.ops[-1].operands):
                    if res in self.src:
                        self.use(v, self.src[res], depth)

    def op_yield(self, op, depth) -> None:
        parent = op.parent.parent
        if parent.name in ("for", "loop"):
            first = 1 if parent.name == "for" else 0
            for k, v in enumerate(op.operands):
                arg = op.parent.args[first + k]
                if arg in self.src and self.names.canon(v) is not arg:
                    self.use(v, self.src[arg], depth, 'style=dashed, constraint=false, label="next"')


def _block_label(op) -> str:
    a = op.attrs
    if op.name == "task":
        n = int(a["instances"] or 1)
        return f"task {a['name']}" + (f", {n} instances" if n > 1 else "")
    return {"for": "for", "loop": "while True", "if": "if", "fused": "fused",
            "concurrent": "at the same time", "parallel": "concurrently",
            "scope": "in a fresh workspace", "reporting": "with reporters"}.get(op.name, op.name)


def dataflow(module, task: str, source=None) -> str:
    writer = PlanWriter(module, source)
    flow = _Flow(writer)
    for op in module.walk():
        if op.name == "task" and str(op.attrs["name"]) == task:
            flow.emit(1, f"label={quote('dataflow of task ' + task)}; labelloc=t;")
            for label, r in zip(("init", "instance init", "body", "instance exit", "exit"), op.regions):
                if r.ops:
                    cluster = flow.fresh("cluster_")
                    flow.emit(1, f"subgraph {cluster} {{")
                    flow.emit(2, f"label={quote(label)}; style=rounded; color=\"#888888\";")
                    flow.region(r, 2)
                    flow.emit(1, "}")
            break
    blobs = [f"  {node} [shape=ellipse, style=filled, fillcolor=\"#fff3b0\", "
             f"label={quote(writer.names.blob(b))}];\n" for b, node in flow.blobs.items()]
    return ("digraph dataflow {\n" + HEAD + "".join(flow.out) + "".join(blobs) +
            "".join("  " + e + "\n" for e in flow.edges) + "}\n")


# ----------------------------------------------------------------------------- a recorded net


def net(name: str, ops) -> str:
    """``ops``: (type, inputs, outputs) triples, in the order the net records them."""
    d = _Dot()
    blobs: dict[str, str] = {}
    bases: dict[str, set] = {}
    for _, ins, outs in ops:
        for b in list(ins) + list(outs):
            bases.setdefault(_base(b), set()).add(b)
    lines = []

    def blob(b):
        if b not in blobs:
            blobs[b] = d.fresh("b")
            label = _base(b) if len(bases[_base(b)]) == 1 else b
            lines.append(f'  {blobs[b]} [shape=ellipse, style=filled, fillcolor="#fff3b0", label={quote(label)}];\n')
        return blobs[b]

    for typ, ins, outs in ops:
        node = d.fresh("o")
        lines.append(f'  {node} [shape=box, style="rounded,filled", fillcolor="#e8f0ff", label={quote(typ)}];\n')
        for i, b in enumerate(ins):
            lines.append(f"  {blob(b)} -> {node}" + (f' [label="{i}"]' if len(ins) > 1 else "") + ";\n")
        for b in outs:
            lines.append(f"  {node} -> {blob(b)};\n")
    return (f"digraph net {{\n{HEAD}  label={quote('net ' + name)}; labelloc=t;\n"
            + "".join(lines) + "}\n")


def net_minimal(title: str, ops, rankdir: str = "LR") -> str:
    """The ops of a recorded net only (``ops``: (type, inputs, outputs) triples), an arrow from
    an op to each later op that reads what it wrote; ``title`` labels the graph."""
    lines, writer = [], {}
    for k, (typ, ins, outs) in enumerate(ops):
        lines.append(f"  o{k} [shape=box, label={quote(typ)}];\n")
        for b in dict.fromkeys(ins):
            if b in writer:
                lines.append(f"  o{writer[b]} -> o{k};\n")
        for b in outs:
            writer[b] = k
    return (f"digraph net {{\n  rankdir={rankdir};\n  label={quote(title)};\n"
            + "".join(lines) + "}\n")


def plan_nets(nets, rankdir: str = "TB") -> str:
    """A plan's nets (``nets``: (name, ops) pairs, ops as in ``net``), each a cluster of its
    ops and blobs."""
    parts = []
    for k, (net_name, ops) in enumerate(nets):
        blobs: dict = {}
        lines = [f"    label={quote(net_name)};\n"]
        for j, (typ, ins, outs) in enumerate(ops):
            lines.append(f"    n{k}o{j} [shape=box, label={quote(typ)}];\n")
            for b, out in [(b, False) for b in ins] + [(b, True) for b in outs]:
                if b not in blobs:
                    blobs[b] = f"n{k}b{len(blobs)}"
                    lines.append(f"    {blobs[b]} [shape=ellipse, label={quote(b)}];\n")
                lines.append(f"    n{k}o{j} -> {blobs[b]};\n" if out else f"    {blobs[b]} -> n{k}o{j};\n")
        parts.append(f"  subgraph cluster_{k} {{\n" + "".join(lines) + "  }\n")
    return f"digraph plan {{\n  rankdir={rankdir};\n" + "".join(parts) + "}\n"


def _base(blob: str) -> str:
    base = blob.rsplit("/", 1)[-1] or blob
    return base[:-2] if base.endswith(":0") else base
