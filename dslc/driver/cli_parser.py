"""The ``dslc`` argument parser: every command, every option, one line of help each.

Usage errors print one line (``dslc run: error: ...; see 'dslc run --help'``) and
exit with 2, like every other user error.
"""
from __future__ import annotations

import argparse
import difflib
import re
import textwrap

EPILOG = """examples:
  dslc run examples/loops.py              run a job, print its outputs
  dslc run examples/loops.py --json       the same, as JSON
  dslc plan examples/loops.py             the job as a readable plan
  dslc compile examples/loops.py -o out   optimize, compile, write artifacts
  dslc graph examples/loops.py -o job.svg draw the job (needs graphviz)

A job file defines build_job(); see the README for what it may return.
Each command explains its options: dslc COMMAND --help."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        m = re.match(r"argument (\S+): invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if m:  # a mistyped command or choice: the closest one
            choices = re.findall(r"'([^']*)'", m.group(3))
            close = difflib.get_close_matches(m.group(2), choices, 1)
            if m.group(1) == "--backend" and m.group(2) == "text":
                message += "; the text backend writes plans, it does not run them: dslc plan JOB.py shows the plan"
            elif close:
                message += f"; did you mean {close[0]!r}?"
        self.exit(2, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but an option the command does not know is reported by that command
        (``dslc run: error: unrecognized argument --bakend; did you mean --backend?``), not by
        ``dslc``, whose help would not list it."""
        args, extra = self.parse_known_args(args, namespace)
        if extra:
            sub = self._subparsers_of(args)
            target = sub or self
            options = [o for a in target._actions for o in a.option_strings]
            first = next((e for e in extra if e.startswith("-")), extra[0])
            close = difflib.get_close_matches(first.split("=", 1)[0], options, 1) if first.startswith("-") else []
            hint = f"; did you mean {close[0]}?" if close else ""
            target.error(f"unrecognized argument{'s' if len(extra) > 1 else ''}: {' '.join(extra)}{hint}")
        return args

    def _subparsers_of(self, args):
        command = getattr(args, "command", None)
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and command in action.choices:
                return action.choices[command]
        return None


def build_parser(version: str, commands) -> argparse.ArgumentParser:
    from dslc import backends

    p = _Parser(prog="dslc", description="Compile, run, explain and draw Caffe2-style jobs.",
                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"dslc {version}",
                   help="print dslc's version and exit")
    p.add_argument("--debug", action="store_true",
                   help="on errors, also show the full Python traceback (for bug reports)")
    p.add_argument("--quiet", action="store_true", help="no progress line, even on a terminal")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    names = backends.names()

    run = _command(sub, "run", "run a job file and print its outputs",
                   "Trace JOB.py, compile it and run it; print the fetched outputs. On a terminal, "
                   "long top-level loops show their progress on stderr.",
                   ["dslc run examples/loops.py --backend interp --json"])
    run.add_argument("job", metavar="JOB.py", help="the job file (defines build_job()), or an IR file (.dslir)")
    run.add_argument("--backend", choices=backends.runnable_names(),
                     help="where to run it (default: $DSLC_BACKEND if set, else interp)")
    run.add_argument("--json", action="store_true", help="print the outputs as one JSON object")
    run.add_argument("--cluster", metavar="ray|auto|ray://HOST:PORT",
                     help="run each Node of the job in its own process of a Ray cluster: 'ray' starts a "
                          "local one for this run, 'auto' or an address joins a running one "
                          "(needs pip install 'dslc[ray]'; docs/distributed.md)")
    _pass_options(run, default=ENV)
    _driver_options(run)
    _trust_options(run)
    _common(run, quiet=True)

    ir = _command(sub, "ir", "print the typed IR of a job file",
                  "Trace JOB.py and print its IR, one module per runnable.",
                  ["dslc ir examples/loops.py --no-locs", "dslc ir examples/loops.py -O -o job.dslir"])
    ir.add_argument("job", metavar="JOB.py", help="the job file (defines build_job()), or an IR file (.dslir)")
    ir.add_argument("--no-locs", action="store_true", help="leave out source locations")
    ir.add_argument("-o", "--output", metavar="FILE", help="write the IR to FILE instead of stdout")
    ir.add_argument("--json", action="store_true", help="print {\"modules\": [IR text, ...]}")
    ir.add_argument("--full-constants", action="store_true",
                    help="print every element of large constants on a terminal too (files and pipes get them all)")
    _pass_options(ir, default=None)
    _common(ir)

    opt = _command(sub, "opt", "run passes on an IR file and print the result",
                   "Parse FILE.dslir, run the passes, print the IR (like mlir-opt).",
                   ["dslc opt job.dslir --passes promote-blobs,dce --print-ir-after-all"])
    opt.add_argument("file", metavar="FILE.dslir", help="IR text, as `dslc ir -o` writes it")
    opt.add_argument("--no-locs", action="store_true", help="leave out source locations")
    opt.add_argument("-o", "--output", metavar="FILE", help="write the IR to FILE instead of stdout")
    opt.add_argument("--json", action="store_true", help="print {\"module\": IR text}")
    opt.add_argument("--full-constants", action="store_true",
                     help="print every element of large constants on a terminal too (files and pipes get them all)")
    _pass_options(opt, default=ENV)
    _common(opt)

    plan = _command(sub, "plan", "print the job as a readable execution plan",
                    "Trace JOB.py and write its plan: groups, tasks with phases and instances, loops, "
                    "conditionals, stops, and nets as pseudo-Python lines. Without --after-passes the "
                    "plan is the job as written; with it, the job as the optimizer leaves it.",
                    ["dslc plan examples/loops.py", "dslc plan examples/loops.py --after-passes --no-locs"])
    plan.add_argument("job", metavar="JOB.py", help="the job file (defines build_job()), or an IR file (.dslir)")
    plan.add_argument("--after-passes", action="store_true",
                      help="show the plan after the default pass pipeline")
    plan.add_argument("--passes", metavar="A,B,...", help="show the plan after these passes instead")
    plan.add_argument("--no-locs", action="store_true", help="leave out the '# line N' comments")
    plan.add_argument("-o", "--output", metavar="FILE", help="write the plan to FILE instead of stdout")
    plan.add_argument("--json", action="store_true",
                      help="print {\"plans\": [{source, tasks, text, lines}, ...]}")
    _common(plan)

    comp = _command(sub, "compile", "trace, optimize and compile a job for a backend",
                    "Trace JOB.py, run the pass pipeline, compile each module with the backend and "
                    "print a short summary (the text backend also prints its plan). With -o DIR, write "
                    "the optimized IR (DIR/job.dslir) and the backend's own artifacts.",
                    ["dslc compile examples/loops.py --backend text",
                     "dslc compile examples/loops.py --backend interp -o build/ --json"])
    comp.add_argument("job", metavar="JOB.py", help="the job file (defines build_job()), or an IR file (.dslir)")
    comp.add_argument("--backend", choices=names,
                      help="the backend to compile for (default: $DSLC_BACKEND if set, else interp)")
    comp.add_argument("-o", "--output", metavar="DIR", help="write job.dslir and the backend's artifacts to DIR")
    comp.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    _pass_options(comp, default=ENV)
    _driver_options(comp)
    _trust_options(comp)
    _common(comp)

    graph = _command(sub, "graph", "draw the job's structure or one task's or net's dataflow",
                     "Write a graphviz picture of JOB.py: its groups, tasks, phases and steps, or with "
                     "--net NAME the dataflow of one task or recorded net. The -o file's extension picks "
                     "the format: .dot needs nothing; .svg and .png need graphviz's `dot` program "
                     "(Debian/Ubuntu: apt-get install graphviz). Without -o, DOT goes to stdout.",
                     ["dslc graph examples/loops.py -o job.svg",
                      "dslc graph examples/multi_instance.py --net local/task -o task.png"])
    graph.add_argument("job", metavar="JOB.py", help="the job file (defines build_job()), or an IR file (.dslir)")
    graph.add_argument("-o", "--output", metavar="FILE", help="FILE.svg, FILE.png or FILE.dot (default: DOT on stdout)")
    graph.add_argument("--net", metavar="NAME", help="draw this task's (or recorded net's) dataflow instead")
    graph.add_argument("--after-passes", action="store_true", help="draw the job after the default pass pipeline")
    graph.add_argument("--passes", metavar="A,B,...", help="draw the job after these passes instead")
    graph.add_argument("--json", action="store_true", help="print {\"written\": FILE, \"format\": ...}")
    _common(graph, quiet=True)

    ex = _command(sub, "exec", "run a Caffe2 script as it is, on dslc",
                  "Run SCRIPT.py with its own arguments, its caffe2 imports (caffe2.python.X, "
                  "caffe2.proto.caffe2_pb2) resolved to dslc for this process only. dslc's options "
                  "come before SCRIPT.py; everything after it is the script's own. They apply to every "
                  "net the script runs (workspace.RunNet, sessions). A real Caffe2 "
                  "installed next to dslc is not shadowed unless --shadow says so.",
                  ["dslc exec train.py --epochs 3", "dslc exec --backend numba --time-passes train.py --epochs 3",
                   "dslc exec --profile train.py", "dslc exec --shadow tutorial.py", "dslc exec --list"])
    ex.add_argument("--backend", choices=backends.runnable_names(),
                    help="where the script's nets run (default: $DSLC_BACKEND if set, else interp)")
    _pass_options(ex, default=ENV)
    _driver_options(ex)
    ex.add_argument("--shadow", action="store_true",
                    help="take over the caffe2 imports even though a real Caffe2 is installed")
    ex.add_argument("--list", action="store_true",
                    help="print the caffe2 modules dslc provides, with their names, and exit")
    ex.add_argument("script", metavar="SCRIPT.py", nargs="?", help="the Caffe2 script")
    ex.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    _common(ex)

    ops = _command(sub, "ops", "print the operator reference (all ops of the IR)",
                   "Print the operator reference generated from the op table: every op's operands, "
                   "results, attributes, traits, effects and meaning (the same text as docs/ir.md). "
                   "With names, print only those ops.",
                   ["dslc ops Div Cast", "dslc ops -o ops.md"])
    ops.add_argument("names", metavar="OP", nargs="*", help="only these ops (default: all)")
    ops.add_argument("-o", "--output", metavar="FILE", help="write the reference to FILE instead of stdout")
    ops.add_argument("--json", action="store_true", help="print {\"reference\": markdown text}")
    _common(ops)
    return p


def _command(sub, name: str, help: str, description: str, examples: list[str]):
    epilog = ("example:\n" if len(examples) == 1 else "examples:\n") + "".join(f"  {e}\n" for e in examples)
    return sub.add_parser(name, help=help, description=textwrap.fill(description, 78, break_on_hyphens=False), epilog=epilog,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def _driver_options(p) -> None:
    p.add_argument("--dump-dir", metavar="DIR",
                   help="write the IR (NNN-NAME.dslir) and plan (NNN-NAME.plan) of every module compiled into DIR")
    p.add_argument("--profile", action="store_true",
                   help="print the time spent per op type and per op (with its line) when done")


def _trust_options(p) -> None:
    p.add_argument("--trust", action="store_true",
                   help="an IR file is code: let its Python ops import and call the functions it names "
                        "(without this, or --trust-module, such a file is refused)")
    p.add_argument("--trust-module", metavar="MODULE", action="append", default=[],
                   help="let an IR file's Python ops call the functions this module (and its submodules) "
                        "or this absolute .py path defines, not what it imports; repeat for several")


def _common(p, quiet: bool = False) -> None:
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="on errors, also show the full Python traceback")
    if quiet:
        p.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS,
                       help="no progress line or chatter on stderr")


ENV = "$DSLC_PIPELINE"  # --passes default of run, opt and compile: the variable, else the default pipeline


def _pass_options(p, default) -> None:
    from dslc.ir.passes import DEFAULT_PIPELINE, PASSES

    what = "none" if default is None else "$DSLC_PIPELINE if set, else default" if default == ENV else default
    p.set_defaults(passes_from_env=default == ENV)
    p.add_argument("--passes", metavar="A,B,...", default=None if default == ENV else default,
                   help=f"passes to run, comma-separated: 'default' ({','.join(DEFAULT_PIPELINE)}), "
                        f"'none', or names from: {', '.join(sorted(PASSES))} (default: {what})")
    p.add_argument("-O", dest="passes", action="store_const", const="default",
                   help="run the default pipeline (same as --passes default)")
    p.add_argument("--print-ir-after-all", action="store_true",
                   help="print the IR after every pass (runs the default pipeline if --passes is not given)")
    p.add_argument("--print-ir-after", metavar="PASS", action="append", default=[],
                   help="print the IR after this pass (repeatable)")
    p.add_argument("--time-passes", action="store_true", help="print a table of the time each pass took")
    p.add_argument("--verify-each", action="store_true",
                   help="verify the IR after every pass (debug mode; also set by DSLC_DEBUG=1)")
