"""Time spent per op while programs run (``dslc run --profile``, ``dslc exec --profile``).

A backend given an ``OpProfile`` (its ``profile`` option) times each op call it makes and adds
the seconds to the op's counter: one counter per (op type, source line), so the report names
the user's line. A compiled region (numba) counts as one entry, "numba region (N ops)".

    p = OpProfile()
    c = p.counter("MatMul", loc)     # a [seconds, calls] list the generated code adds to
    print(p.table())
"""
from __future__ import annotations


class OpProfile:
    """Seconds and calls per (op type, location)."""

    def __init__(self):
        self.counters: dict[tuple[str, str], list] = {}
        self.notes: list[str] = []  # what a backend decided while running (numba: regions kept interpreted)

    def note(self, line: str) -> None:
        self.notes.append(line)

    def counter(self, kind: str, loc) -> list:
        key = (kind, str(loc) if loc is not None else "?")
        got = self.counters.get(key)
        if got is None:
            got = self.counters[key] = [0.0, 0]
        return got

    def by_type(self) -> dict[str, list]:
        """{op type: [seconds, calls, distinct ops]}."""
        out: dict[str, list] = {}
        for (kind, _), (t, n) in self.counters.items():
            row = out.setdefault(kind, [0.0, 0, 0])
            row[0] += t
            row[1] += n
            row[2] += 1
        return out

    def table(self, top: int = 25) -> str:
        """Time per op type, then the ``top`` slowest ops with their lines; milliseconds."""
        rows = {k: v for k, v in self.counters.items() if v[1]}
        total = sum(t for t, _ in rows.values())
        if not rows:
            return "profile: no op ran\n"
        share = (lambda t: 100 * t / total) if total else (lambda t: 0.0)
        lines = [f"profile: {total * 1e3:.3f} ms in {sum(n for _, n in rows.values())} op calls",
                 "time per op type:",
                 f"  {'ms':>11}    share    calls   ops  op type"]
        for kind, (t, n, k) in sorted(self.by_type().items(), key=lambda kv: -kv[1][0]):
            if n:
                lines.append(f"  {t * 1e3:11.3f}  {share(t):6.1f}%  {n:7d}  {k:4d}  {kind}")
        shown = sorted(rows.items(), key=lambda kv: -kv[1][0])[:top]
        lines += [f"time per op ({'all ' + str(len(rows)) if len(rows) <= top else f'slowest {top} of {len(rows)}'}):",
                  f"  {'ms':>11}    share    calls  {'us/call':>9}  op type at line"]
        for (kind, where), (t, n) in shown:
            lines.append(f"  {t * 1e3:11.3f}  {share(t):6.1f}%  {n:7d}  {t * 1e6 / n:9.2f}  {kind} at {where}")
        if self.notes:
            lines += ["backend notes:"] + [f"  {line}" for line in self.notes]
        return "\n".join(lines) + "\n"
