"""The ``dslc`` command: run jobs, print their IR.

    dslc run examples/loops.py             run a job file, print its outputs
    dslc run examples/loops.py --json      the same, as JSON
    dslc ir examples/loops.py              the job's typed IR, with source locations
    dslc ir examples/loops.py -o job.dslir the same, into a file
    dslc run job.dslir                     run an IR file
    dslc opt job.dslir --passes a,b        run passes on an IR file, print the result

User errors print one line (``file:line: error: message; hint``) and exit with 2;
internal failures exit with 1 and suggest ``--debug`` for the traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

import numpy as np

import dslc
from dslc.ir.diagnostics import DSLError

EPILOG = """examples:
  dslc run examples/loops.py
  dslc run examples/loops.py --json
  dslc ir examples/setup.py

A job file defines build_job(); see the README for what it may return."""


def _parser() -> argparse.ArgumentParser:
    from dslc import backends

    p = argparse.ArgumentParser(prog="dslc", description="Compile and run Caffe2-style jobs.",
                                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"dslc {dslc.__version__}",
                   help="print dslc's version and exit")
    p.add_argument("--debug", action="store_true",
                   help="on errors, also show the full Python traceback (for bug reports)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run a job file and print its outputs",
                         description="Trace JOB.py, compile it and run it; print the fetched outputs.",
                         epilog="example:\n  dslc run examples/loops.py --backend interp --json",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("job", metavar="JOB.py", help="the job file (defines build_job()), or an IR file (.dslir)")
    run.add_argument("--backend", default="interp", choices=backends.names(),
                     help="where to run it (default: interp)")
    run.add_argument("--json", action="store_true", help="print the outputs as one JSON object")
    _pass_options(run, default="default")
    run.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                     help="on errors, also show the full Python traceback")

    ir = sub.add_parser("ir", help="print the typed IR of a job file",
                        description="Trace JOB.py and print its IR, one module per runnable.",
                        epilog="example:\n  dslc ir examples/loops.py --no-locs",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ir.add_argument("job", metavar="JOB.py", help="the job file (defines build_job())")
    ir.add_argument("--no-locs", action="store_true", help="leave out source locations")
    ir.add_argument("-o", "--output", metavar="FILE", help="write the IR to FILE instead of stdout")
    _pass_options(ir, default=None)
    ir.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                    help="on errors, also show the full Python traceback")

    opt = sub.add_parser("opt", help="run passes on an IR file and print the result",
                         description="Parse FILE.dslir, run the passes, print the IR (like mlir-opt).",
                         epilog="example:\n  dslc opt job.dslir --passes promote-blobs,dce --print-ir-after-all",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    opt.add_argument("file", metavar="FILE.dslir", help="IR text, as `dslc ir -o` writes it")
    opt.add_argument("--no-locs", action="store_true", help="leave out source locations")
    opt.add_argument("-o", "--output", metavar="FILE", help="write the IR to FILE instead of stdout")
    _pass_options(opt, default="default")
    opt.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                     help="on errors, also show the full Python traceback")
    return p


def _pass_options(p, default) -> None:
    from dslc.ir.passes import DEFAULT_PIPELINE, PASSES

    what = "none" if default is None else default
    p.add_argument("--passes", metavar="A,B,...", default=default,
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


def _session_options(args, out) -> dict:
    passes = args.passes
    if passes is None:
        passes = "default" if (args.print_ir_after_all or args.print_ir_after) else "none"
    print_after = "all" if args.print_ir_after_all else set(args.print_ir_after) or None
    return {"passes": passes, "print_after": print_after, "ir_out": out,
            "verify_each": True if args.verify_each else None}


def _report_times(session, args) -> None:
    if args.time_passes and session.pass_manager is not None:
        sys.stderr.write(session.pass_manager.timing_table())


def cmd_run(args) -> int:
    """``dslc run``: run the job's runnables in one session, print its outputs."""
    from dslc import jobfile
    from dslc.session import LocalSession

    options = _session_options(args, sys.stderr)
    if args.job.endswith(".dslir"):
        module = _read_ir(args.job)
        with LocalSession(backend=args.backend, source=args.job, **options) as session:
            values = session.run_module(module)
    else:
        job = jobfile.load(args.job)
        with LocalSession(backend=args.backend, source=args.job, **options) as session:
            for r in job.runnables:
                session.run(r)
            values = {name: out.fetch() for name, out in job.outputs.items()}
    _report_times(session, args)
    if args.json:
        print(json.dumps({"outputs": {k: _jsonable(v) for k, v in values.items()}}))
    else:
        for name, v in values.items():
            print(f"{name} = {_text(v)}")
    return 0


def cmd_ir(args) -> int:
    """``dslc ir``: print (or write to ``-o FILE``) the verified IR of each runnable."""
    from dslc import jobfile
    from dslc.ir import print_module
    from dslc.session import LocalSession

    job = jobfile.load(args.job)
    session = LocalSession(source=args.job, **_session_options(args, sys.stdout))
    texts = [print_module(session.compile(session.as_group(r)).module, with_locs=not args.no_locs)
             for r in job.runnables]
    _report_times(session, args)
    _write(args, "\n".join(texts))
    return 0


def cmd_opt(args) -> int:
    """``dslc opt``: parse an IR file, run the passes, print (or write) the result."""
    from dslc.ir import print_module
    from dslc.session import LocalSession

    module = _read_ir(args.file)
    session = LocalSession(source=args.file, **_session_options(args, sys.stdout))
    session.optimize(module)
    _report_times(session, args)
    _write(args, print_module(module, with_locs=not args.no_locs))
    return 0


def _read_ir(path: str):
    from dslc.ir import parse

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise DSLError(f"cannot read {path!r}: {e.strerror}", hint="check the path") from None
    return parse(text, path)


def _write(args, text: str) -> None:
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise DSLError(f"cannot write {args.output!r}: {e.strerror}",
                           hint="check that its directory exists and is writable") from None
    else:
        sys.stdout.write(text)


def _text(v) -> str:
    if isinstance(v, np.ndarray) and v.ndim == 0:
        return str(v[()])
    if isinstance(v, list):
        return "[" + ", ".join(_text(x) for x in v) + "]"
    return np.array2string(v, separator=", ") if isinstance(v, np.ndarray) else str(v)


def _jsonable(v):
    if isinstance(v, np.ndarray):
        return v.tolist() if v.dtype != object else [str(x) for x in v.reshape(-1)]
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    return v if isinstance(v, (int, float, str, bool, type(None))) else str(v)


COMMANDS = {"run": cmd_run, "ir": cmd_ir, "opt": cmd_opt}


def main(argv=None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); return the exit code.

    0: success; 2: a user error (bad job, missing file, bad arguments), reported as one
    ``file:line: error: message; hint`` line on stderr; 1: an internal failure of dslc.
    ``--debug`` adds the traceback to either kind of error.
    """
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, or a usage error argparse already printed
        return e.code if isinstance(e.code, int) else 2
    if not args.command:
        parser.print_usage(sys.stderr)
        print("dslc: error: choose a command (run or ir); dslc --help explains them", file=sys.stderr)
        return 2
    try:
        return COMMANDS[args.command](args)
    except DSLError as e:
        return _report(args, e.one_line(), 2)
    except KeyboardInterrupt:
        print("dslc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 1
    except Exception as e:
        return _report(args, f"dslc: internal error: {type(e).__name__}: {e}; this is a bug in dslc, "
                             "not in the job: rerun with --debug for the traceback", 1)


def _silence_stdout() -> None:
    """The reader of our output went away (``dslc ir job.py | head``): point stdout at
    /dev/null so the final flush at exit does not fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _report(args, line: str, code: int) -> int:
    """Print the traceback (with --debug) and the one-line message; return ``code``."""
    if args.debug:
        traceback.print_exc()
    print(line, file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
