"""The ``dslc`` command: run jobs, show their IR and plan, compile them, draw them.

    dslc run examples/loops.py               run a job file, print its outputs
    dslc plan examples/loops.py              the job as a readable execution plan
    dslc ir examples/loops.py -o job.dslir   the job's typed IR, into a file
    dslc opt job.dslir --passes a,b          run passes on an IR file, print the result
    dslc compile examples/loops.py -o out/   trace, optimize, compile; write artifacts
    dslc graph examples/loops.py -o job.svg  a picture of the job (graphviz)

Every command that prints results takes ``--json``. User errors print one line
(``file:line: error: message; hint``) and exit with 2; internal failures exit with 1
and suggest ``--debug`` for the traceback.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback

import dslc
from dslc.driver import options as driver_options
from dslc.driver import progress
from dslc.driver.cli_parser import build_parser
from dslc.ir import parse, parse_all, print_module, pyrefs, settings
from dslc.ir.core import Symbol
from dslc.ir.diagnostics import UNKNOWN_LOC, DSLError, Location, one_line
from dslc.ir.printer import elide_constants, stamped
from dslc.ir.pyrefs import check_portable
from dslc.ir.types import join

from . import cli_output as out


def cmd_run(args) -> int:
    """``dslc run``: run the job's runnables in one session, print its outputs."""
    from dslc.driver import jobfile
    from dslc.driver.session import LocalSession

    options = _session_options(args, sys.stderr)
    args.backend = args.backend or driver_options.default_backend()
    shown = progress.showing(sys.stderr) if progress.wanted(args.quiet, sys.stdout, sys.stderr) \
        else contextlib.nullcontext()
    with shown:
        if args.job.endswith(".dslir"):
            if args.cluster:
                raise DSLError("--cluster runs job files, not IR files", hint=f"run the job file of {args.job}")
            modules = _read_modules(args.job, locate=True)
            with LocalSession(backend=args.backend, source=args.job, **options) as session:
                values = session.run_modules(modules)
        else:
            job = jobfile.load(args.job)
            with _run_session(args, options) as session:
                for r in job.runnables:
                    session.run(r)
                values = {name: o.fetch() for name, o in job.outputs.items()}
    _report_times(session, args)
    if args.json:
        out.emit_json({"outputs": {k: out.jsonable(v) for k, v in values.items()}})
    else:
        for name, v in values.items():
            print(f"{out.printable(name)} = {out.text(v)}")
    return 0


def _run_session(args, options: dict):
    """The session ``dslc run`` runs a job file in: local, or with ``--cluster`` on Ray
    (``ray``: a local cluster started for this run and stopped after it, also on failure
    or Ctrl-C; ``auto`` or ``ray://HOST:PORT``: a running cluster)."""
    from dslc.driver.session import LocalSession

    if not args.cluster:
        return LocalSession(backend=args.backend, source=args.job, **options)
    from dslc.driver.distributed import RaySession
    address = "local" if args.cluster == "ray" else args.cluster
    return RaySession(address=address, backend=args.backend, source=args.job, passes=options["passes"])


def cmd_ir(args) -> int:
    """``dslc ir``: print (or write to ``-o FILE``) the verified IR of each runnable."""
    session, compiled = _compile(args, "interp", _session_options(args, sys.stdout), build=False)
    if args.output:
        for m, _ in compiled:
            check_portable(m, args.output)
    texts = [print_module(m, with_locs=not args.no_locs) for m, _ in compiled]
    _report_times(session, args)
    if args.json:
        return _json_or_file(args, {"modules": texts})
    text = "\n".join(texts)
    out.write(args.output, stamped(text, dslc.__version__) if args.output else _shown_ir(text, args))
    return 0


def _shown_ir(text: str, args) -> str:
    """IR text for a terminal: a constant of many elements elided to its start and size,
    unless ``--full-constants`` (a file, a pipe and --json get every element)."""
    if getattr(args, "full_constants", False) or not sys.stdout.isatty():
        return text
    return elide_constants(text)


def cmd_opt(args) -> int:
    """``dslc opt``: parse an IR file, run the passes, print (or write) the result."""
    from dslc.driver.session import LocalSession

    if args.file.endswith(".py"):
        raise DSLError(f"dslc opt reads IR files (.dslir), and {args.file} is Python",
                       Location(args.file, 0), f"see a job file's IR after passes with: dslc ir {args.file} "
                       f"--passes A,B (or -O), or write it first: dslc ir {args.file} -o job.dslir")
    module = _read_ir(args.file)
    session = LocalSession(source=args.file, **_session_options(args, sys.stdout))
    session.optimize(module, lambda: _read_ir(args.file))
    _report_times(session, args)
    text = print_module(module, with_locs=not args.no_locs)
    if args.json:
        return _json_or_file(args, {"module": text})
    out.write(args.output, stamped(text, dslc.__version__) if args.output else _shown_ir(text, args))
    return 0


def cmd_plan(args) -> int:
    """``dslc plan``: the job as a readable plan (``--after-passes``: once optimized)."""
    passes = args.passes or ("default" if args.after_passes else "none")
    options = {"passes": passes, "with_locs": not args.no_locs}
    _, compiled = _compile(args, "text", options)
    plans = [p for _, p in compiled]
    if args.json:
        return _json_or_file(args, {"plans": [p.as_json() for p in plans]})
    out.write(args.output, "\n".join(p.text for p in plans))
    return 0


def cmd_compile(args) -> int:
    """``dslc compile``: trace, optimize and compile for a backend; summarize; ``-o DIR`` writes
    the optimized IR (``job.dslir``) and whatever the backend's program writes."""
    options = _session_options(args, sys.stderr)
    args.backend = args.backend or driver_options.default_backend()
    session, compiled = _compile(args, args.backend, options, locate=True)
    _report_times(session, args)
    written: list[str] = []
    if args.output:
        written = out.write_artifacts(args.output, compiled)
    reports = [out.describe_program(m, p) for m, p in compiled]
    if args.json:
        out.emit_json({"backend": args.backend, "source": args.job,
                       "passes": session.passes, "modules": reports, "artifacts": written})
        return 0
    for r in reports:
        if r["listing"]:
            sys.stdout.write(r["listing"] if r["listing"].endswith("\n") else r["listing"] + "\n")
    for i, r in enumerate(reports, 1):
        where = f" (runnable {i} of {len(reports)})" if len(reports) > 1 else ""
        print(out.summary_line(args.job, args.backend, r, len(session.passes)) + where)
        for line in out.summary_lines(r["summary"]):
            print(line)
    for path in written:
        print(f"wrote {out.printable(path)}")
    return 0


def cmd_graph(args) -> int:
    """``dslc graph``: the job's structure, or one task's or net's dataflow, via graphviz."""
    fmt = out.graph_format(args.output)  # a bad file name fails before any tracing
    passes = args.passes or ("default" if args.after_passes else "none")
    session, compiled = _compile(args, "text", {"passes": passes})
    what, name, dot_text = _graph(args, compiled, session.backend)
    if args.output:
        out.render_dot(dot_text, args.output, fmt)
    if args.json:  # without -o the DOT text comes inside the JSON
        result = {"written": args.output, "format": fmt, "graph": what, "name": name}
        out.emit_json(result if args.output else {**result, "dot": dot_text})
    elif not args.output:
        sys.stdout.write(dot_text)
    elif not args.quiet:
        print(f"wrote {args.output}")
    return 0


def _graph(args, compiled, text_backend):
    """(kind, name, DOT text) of what ``--net`` selects: nothing (structure), a task, a net."""
    modules = [m for m, _ in compiled]
    if not args.net:
        return "structure", None, text_backend.dot([p for _, p in compiled])
    tasks = [(m, str(op.attrs["name"])) for m in modules for op in m.walk() if op.name == "task"]
    hits = [(m, t) for m, t in tasks if t == args.net] or \
           [(m, t) for m, t in tasks if t.rsplit("/", 1)[-1] == args.net]
    if len(hits) == 1:
        return "task", hits[0][1], text_backend.dot(hits[0][0], task=hits[0][1])
    nets = _recorded_nets(args)
    if args.net in nets:
        ops = [(o.type, list(o.inputs), list(o.outputs)) for o in nets[args.net].ops()]
        return "net", args.net, text_backend.net_dot(args.net, ops)
    if len(hits) > 1:
        raise DSLError(f"--net {args.net!r} matches several tasks: {', '.join(t for _, t in hits)}",
                       hint="give the task's full name")
    known = sorted({t for _, t in tasks} | set(nets))
    raise DSLError(f"no task or net called {args.net!r} in {args.job}",
                   hint=f"choose one of: {', '.join(known) if known else '(none)'}")


def _recorded_nets(args) -> dict:
    """The job's recorded nets by name (from its tasks' steps; none for an IR file)."""
    if args.job.endswith(".dslir") or not hasattr(args, "_job"):
        return {}
    from dslc.trace.net import Net
    from dslc.lower.records import walk
    from dslc.driver.session import Session

    nets: dict = {}
    for _, r, _ in _units(args._job.runnables):
        for task in Session.as_group(r).tasks():
            for item in walk(task.get_step()):
                if isinstance(item, Net):
                    nets.setdefault(item.Name(), item)
    return nets


def _compile(args, backend: str, options: dict, build: bool = True, locate: bool = False):
    """(session, [(module, program)]) for the job file (or .dslir) of ``args``: traced,
    optimized with the session's passes, compiled by ``backend`` (unless not ``build``:
    then the programs are None; ``locate``: see ``_read_ir``). A Job counts as its groups
    (init, each epoch, download, exit); a text plan says which one it is."""
    from dslc.driver import jobfile
    from dslc.driver.session import LocalSession

    session = LocalSession(backend=backend, source=args.job, **options)
    if args.job.endswith(".dslir"):
        modules = _read_modules(args.job, locate=locate)
        for module in modules:
            session.optimize(module)
        return session, [(m, session.backend.compile(m) if build else None) for m in modules]
    from dslc.lower import lower_group

    args._job = jobfile.load(args.job)
    lowered = []
    known: dict = {}  # blob -> type, of what the runnables before this one store
    for title, runnable, stops in _units(args._job.runnables):
        module = lower_group(session.as_group(runnable), args.job, dict(known))
        name_outputs(module, args._job.outputs)
        if stops:  # a Job's epoch group: its text says when the epochs end
            module.op.attrs["until"] = [Symbol(s) for s in stops]
        for op in module.walk():
            if op.name == "store":
                b, t = str(op.attrs["blob"]), op.operands[0].type
                known[b] = join(known[b], t) if b in known else t
        session.optimize(module)
        lowered.append((title, module, stops))
    if hasattr(session.backend, "extra_live"):  # a plan shows what later runnables read
        session.backend.extra_live = {str(op.attrs["blob"]) for _, m, _ in lowered
                                      for op in m.walk() if op.name in ("load", "flag")}
    if not build:
        return session, [(module, None) for _, module, _ in lowered]
    done = []
    for title, module, stops in lowered:
        program = session.backend.compile(module)
        if title and hasattr(program, "retitle"):
            if stops:
                title += ", until " + " or ".join(program.writer.names.blob(n) for n in stops)
            program.retitle(f"plan of {args.job}, {title}")
        done.append((module, program))
    return session, done


def name_outputs(module, outputs: dict) -> None:
    """Record in ``module`` the job file's names of the outputs its tasks produce
    (``outputs``: name -> TaskOutput), so that its IR text prints them too."""
    produced = {str(n) for op in module.walk() if op.name == "task" for n in op.attrs["outputs"]}
    named = [[name] + [Symbol(str(n)) for n in o.names] for name, o in outputs.items()
             if o.names and all(str(n) in produced for n in o.names)]
    if named:
        module.op.attrs["outputs"] = named


def _units(runnables):
    """(title, runnable, stop blobs) for each thing to compile: a Job's non-empty groups
    one by one (the epoch group with its stop conditions), anything else as it is."""
    from dslc.trace.job import Job

    for r in runnables:
        if not isinstance(r, Job):
            yield None, r, ()
            continue
        stops = [str(n) for o in r.stop_conditions for n in getattr(o, "names", [o])]
        for title, group, until in (("init group", r.init_group, ()), ("each epoch", r.epoch_group, stops),
                                    ("download group", r.download_group, ()),
                                    ("exit group", r.exit_group, ())):
            if group.tasks():
                yield title, group, until


def _session_options(args, stream) -> dict:
    """The pass options of ``args`` for the command's own session; they also become the
    driver's options (dslc/driver/options.py), which every other session of the run reads
    (``--backend``, ``--dump-dir``, ``--time-passes``, ``--profile`` where the command has them)."""
    passes = args.passes
    if passes is None and not args.passes_from_env:  # (with it, the session reads $DSLC_PIPELINE)
        passes = "default" if (args.print_ir_after_all or args.print_ir_after) else "none"
    _check_pass_options(args, passes)
    print_after = "all" if args.print_ir_after_all else set(args.print_ir_after) or None
    verify_each = True if args.verify_each else None
    driver_options.use(driver_options.DriverOptions(
        backend=getattr(args, "backend", None), passes=passes, print_after=print_after, ir_out=stream, verify_each=verify_each,
        dump_dir=getattr(args, "dump_dir", None), time_passes=args.time_passes,
        profile=getattr(args, "profile", False)))
    return {"passes": passes, "print_after": print_after, "ir_out": stream, "verify_each": verify_each}


def _check_pass_options(args, passes) -> None:
    """Refuse pass names that are unknown, or that ``--print-ir-after`` asks for but the
    pipeline does not run (it would print nothing), before any tracing."""
    from dslc.driver.session import pipeline

    where = Location(f"dslc {args.command}", 0)
    try:
        running = pipeline(passes)
    except DSLError as e:
        raise DSLError(f"{'--passes' if passes is not None else 'DSLC_PIPELINE'}: {e.message}", where, e.hint) from None
    for name in args.print_ir_after:
        try:
            pipeline([name])
        except DSLError as e:
            raise DSLError(f"--print-ir-after: {e.message}", where, e.hint) from None
        if name not in running:
            raise DSLError(f"--print-ir-after {name}: the passes run here ({', '.join(running) or 'none'}) "
                           f"do not include {name}, so nothing would be printed",
                           where, f"add {name} to --passes, or print after one of those")


def _report_times(session, args) -> None:
    """--time-passes: every pipeline this command ran (each module's, each session's), summed;
    --profile: the time of every op run, per type and per op."""
    current = driver_options.current()
    if args.time_passes and current.pass_times:
        sys.stderr.write(driver_options.timing_table(current.pass_times))
    if current.profiler is not None:
        sys.stderr.write(current.profiler.table())


def _json_or_file(args, obj) -> int:
    if getattr(args, "output", None):
        out.write(args.output, json.dumps(obj, indent=1) + "\n")
    else:
        out.emit_json(obj)
    return 0


def _read_ir(path: str):
    """The one module in the IR file ``path``."""
    return parse(_ir_text(path), path)


def _read_modules(path: str, locate: bool = False) -> list:
    """Every module in the IR file ``path``; ``locate``: ops without a ``loc`` take their
    line in the file (errors when it runs then point there)."""
    modules = parse_all(_ir_text(path), path)
    if locate:
        for module in modules:
            for op, where in module.origin.items():
                if op.loc is None or op.loc == UNKNOWN_LOC:
                    op.loc = where
    return modules


def _ir_text(path: str) -> str:
    """The text of the IR file ``path`` (a located error if it cannot be read as UTF-8)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise DSLError(f"cannot read {path!r}: {e.strerror}", hint="check the path") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DSLError(f"the IR file is not UTF-8 text (byte {data[e.start]:#04x})",
                       Location(path, line), "IR files are UTF-8: write them with dslc ir -o, "
                       "or re-save the file as UTF-8") from None
    return text


def cmd_ops(args) -> int:
    """``dslc ops``: the operator reference (docs/ir.md, which an installed dslc lacks), or
    the rows of the named ops."""
    from dslc.driver import opdocs

    text = opdocs.render_ops(args.names) if args.names else opdocs.render()
    if args.json:
        return _json_or_file(args, {"reference": text})
    out.write(args.output, text)
    return 0


def cmd_exec(args) -> int:
    """Run a Caffe2 script unmodified (dslc/compat.py): its exit status is ours."""
    from dslc import compat
    if args.list:
        from dslc.driver import surface
        sys.stdout.write(surface.render())
        return 0
    if not args.script:
        raise DSLError("dslc exec needs a script to run", hint="dslc exec SCRIPT.py [ARGS]; dslc exec --list "
                       "shows the caffe2 modules dslc provides")
    if not os.path.isfile(args.script):
        raise DSLError(f"no script {args.script!r}", hint="give the path of a Python file")
    _session_options(args, sys.stderr)
    driver_options.default_backend()  # (a bad DSLC_BACKEND: one line, before the script runs)
    try:
        return compat.run_script(args.script, args.args, force=args.shadow)
    finally:
        _report_times(None, args)


COMMANDS = {"run": cmd_run, "ir": cmd_ir, "opt": cmd_opt, "plan": cmd_plan,
            "compile": cmd_compile, "graph": cmd_graph, "ops": cmd_ops, "exec": cmd_exec}


def main(argv=None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); return the exit code.

    0: success; 2: a user error (bad job, missing file, bad arguments), reported as one
    ``file:line: error: message; hint`` line on stderr; 1: an internal failure of dslc.
    ``--debug`` adds the traceback to either kind of error. With ``--json`` the error is
    also printed to stdout as ``{"error": {...}}``.
    """
    parser = build_parser(dslc.__version__, COMMANDS)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, --version, or a usage error already printed
        return e.code if isinstance(e.code, int) else 2
    if not args.command:
        print("dslc: error: choose a command: " + ", ".join(COMMANDS) +
              " (usage: dslc COMMAND JOB.py ...); dslc --help explains them", file=sys.stderr)
        return 2
    try:
        settings.check_all()  # (a bad DSLC_* value: one line, before anything runs)
        _consent(args)
        with driver_options.using(driver_options.DriverOptions()):  # (the command's, undone after it)
            return COMMANDS[args.command](args)
    except DSLError as e:
        return _report(args, e.one_line(), 2, out.error_json(e, 2))
    except KeyboardInterrupt:
        print("dslc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 1
    except Exception as e:
        line = (f"dslc: internal error: {type(e).__name__}: {e}; this is a bug in dslc, "
                "not in the job: rerun with --debug for the traceback")
        return _report(args, one_line(line), 1, out.internal_json(e))


def _consent(args) -> None:
    """--trust / --trust-module: the IR file's Python ops may import what they name."""
    if getattr(args, "trust", False):
        pyrefs.trust()
    elif getattr(args, "trust_module", None):
        pyrefs.trust(args.trust_module)


def _silence_stdout() -> None:
    """The reader of our output went away (``dslc ir job.py | head``): point stdout at
    /dev/null so the final flush at exit does not fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _report(args, line: str, code: int, as_json: dict) -> int:
    """Print the traceback (with --debug) and the one-line message; return ``code``."""
    if args.debug:
        traceback.print_exc()
    print(line, file=sys.stderr)
    if getattr(args, "json", False):
        out.emit_json(as_json)
    return code


if __name__ == "__main__":
    sys.exit(main())
