"""``dslc graph``: DOT text of the job's structure and of one task's or net's dataflow, and
pictures rendered by graphviz (PNG, SVG)."""
from __future__ import annotations

import json
import re
import shutil
import struct
import textwrap

import pytest

from dslc.driver import cli
import paths

ROOT = paths.ROOT


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def clusters(dot: str) -> dict:
    """Each cluster's label -> the labels of the clusters around it (outermost first),
    and each node's label -> the same, read from the DOT text line by line."""
    stack, where = [], {}
    pending = None
    for line in dot.splitlines():
        line = line.strip()
        if line.startswith("subgraph cluster"):
            stack.append(None)
            pending = True
        elif line.startswith("label=") and pending:
            stack[-1] = re.match(r'label="((?:[^"\\]|\\.)*)"', line).group(1)
            where[stack[-1]] = [s for s in stack[:-1]]
            pending = None
        elif line == "}":
            if stack:
                stack.pop()
        else:
            m = re.match(r'(\w+) \[.*label="((?:[^"\\]|\\.)*)"', line)
            if m:
                where[m.group(2)] = list(stack)
    return where


# ----------------------------------------------------------------------------- structure


def test_structure_nests_groups_tasks_phases_and_loops(capsys, at_root, tmp_path):
    target = tmp_path / "job.dot"
    code, out, err = run(capsys, "graph", "examples/multi_instance.py", "-o", target)
    assert code == 0, err
    assert out == f"wrote {target}\n"
    dot = target.read_text(encoding="utf-8")
    assert dot.startswith("digraph job {") and "compound=true" in dot
    where = clusters(dot)
    task = "task local/task, 10 instances, outputs total1, total2, total3"
    assert where[task] == ["plan of examples/multi_instance.py", "group on node local"]
    assert where["for _ in range(15)"][-3:] == [task, "each instance", "body"]
    # a box holds the plan's lines, each left-justified (\l)
    loop_box = "CountUp(global_counter)\\lCountUp(task_counter)\\lCountUp(local_counter)\\l"
    assert where[loop_box][-1] == "for _ in range(15)"
    assert where["total1 = RetrieveCount(global_counter)\\ltotal2 = RetrieveCount(global_counter2)"
                 "\\ltotal3 = RetrieveCount(global_counter3)\\l"][-1] == "exit (once)"


def test_phases_run_in_order_and_loops_go_round(capsys, at_root):
    code, dot, _ = run(capsys, "graph", "examples/multi_instance.py")
    assert code == 0
    ids = {label: name for name, label in re.findall(r'(\w+) \[.*?label="((?:[^"\\]|\\.)*)"', dot)}
    cluster_of = {}
    for cid, label in re.findall(r'subgraph (cluster_\d+) \{\n\s*label="((?:[^"\\]|\\.)*)"', dot):
        cluster_of[label] = cid
    # the init block leads into the per-instance block, which leads into the exit block
    assert re.search(rf"-> \w+ \[ltail={cluster_of['init (once)']}, lhead={cluster_of['each instance']}\]", dot)
    assert re.search(rf"\[ltail={cluster_of['each instance']}, lhead={cluster_of['exit (once)']}\]", dot)
    # the 15-iteration loop's only box points back at itself
    box = ids["CountUp(global_counter)\\lCountUp(task_counter)\\lCountUp(local_counter)\\l"]
    assert f'{box} -> {box} [style=dashed, constraint=false, label="again"];' in dot


def test_concurrent_tasks_get_no_arrow_between_them(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "two.py").write_text(textwrap.dedent("""
        from dslc.net_builder import ops
        from dslc.task import Task, TaskGroup

        def build_job():
            with TaskGroup() as tg:
                with Task(name="a"):
                    ops.Print(ops.Const(1))
                with Task(name="b"):
                    ops.Print(ops.Const(2))
            return tg
        """), encoding="utf-8")
    code, dot, _ = run(capsys, "graph", "two.py")
    assert code == 0
    where = clusters(dot)
    assert where["task local/a"] == where["task local/b"] == ["plan of two.py", "group on node local"]
    assert "->" not in dot


# ----------------------------------------------------------------------------- dataflow


def test_task_dataflow(capsys, at_root):
    code, out, _ = run(capsys, "graph", "examples/setup.py", "--net", "task", "--json")
    assert code == 0
    info = json.loads(out)
    body = info.pop("dot")
    assert info == {"written": None, "format": "dot", "graph": "task", "name": "local/task"}
    assert 'label="dataflow of task local/task"' in body
    where = clusters(body)
    assert where["init"] == where["body"] == where["exit"] == []
    nodes = dict(re.findall(r'(\w+) \[.*?label="([^"]*)"\];', body))
    blobs = {label for name, label in nodes.items() if name.startswith("b")}
    # the blobs that cross phases: one and three (init -> body), accum (body -> exit), outputs
    assert {"one", "three", "accum", "six", "seven_1", "seven_2"} <= blobs
    assert re.search(r'o\d+ -> b\d+ \[label="two"\]', body) is None  # two stays inside the body
    assert len(re.findall(r'label="Add"', body)) == 6


def test_recorded_net_dataflow(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "nets.py").write_text(textwrap.dedent("""
        from dslc import core
        from dslc.task import Task

        def build_job():
            train = core.Net("train")
            train.Add(["w", "g"], ["w"])
            train.Mul(["w", "w"], ["loss"])
            init = core.Net("init")
            init.Const(1, blob_out="w")
            init.Const(2, blob_out="g")
            return Task(step=core.execution_step("all", [init, train]))
        """), encoding="utf-8")
    code, dot, err = run(capsys, "graph", "nets.py", "--net", "train")
    assert code == 0, err
    assert 'label="net train"' in dot
    ops = re.findall(r'(o\d+) \[shape=box.*label="(\w+)"\];', dot)
    blobs = dict((label, name) for name, label in re.findall(r'(b\d+) \[shape=ellipse.*label="(\w+)"\];', dot))
    assert [label for _, label in ops] == ["Add", "Mul"]
    (add, _), (mul, _) = ops
    assert f'{blobs["w"]} -> {add} [label="0"];' in dot and f'{blobs["g"]} -> {add} [label="1"];' in dot
    assert f"{add} -> {blobs['w']};" in dot and f"{mul} -> {blobs['loss']};" in dot


def test_unknown_net_lists_the_choices(capsys, at_root):
    code, out, err = run(capsys, "graph", "examples/setup.py", "--net", "nope")
    assert code == 2 and out == ""
    line = err.strip()
    assert "\n" not in line
    assert line.startswith("error: no task or net called 'nope' in examples/setup.py; choose one of: ")
    assert "local/task" in line


# ----------------------------------------------------------------------------- files and formats


def test_unknown_picture_format(capsys, at_root):
    code, _, err = run(capsys, "graph", "examples/loops.py", "-o", "job.jpg")
    assert code == 2
    assert err.strip() == ("error: cannot tell the picture format of 'job.jpg'; "
                           "end the file name with .svg, .png or .dot")


def test_dot_needs_no_graphviz_but_png_says_what_is_missing(capsys, at_root, tmp_path, monkeypatch):
    monkeypatch.setattr("dslc.driver.cli_output.shutil.which", lambda name: None)
    code, _, err = run(capsys, "graph", "examples/loops.py", "-o", tmp_path / "job.dot")
    assert code == 0, err
    assert (tmp_path / "job.dot").read_text(encoding="utf-8").startswith("digraph job {")
    code, out, err = run(capsys, "graph", "examples/loops.py", "-o", tmp_path / "job.png")
    assert code == 2 and out == ""
    assert err.strip() == (f"error: cannot draw {tmp_path / 'job.png'}: graphviz's `dot` program is not "
                           "installed; install graphviz (apt-get install graphviz), or write DOT with "
                           "-o FILE.dot")
    assert not (tmp_path / "job.png").exists()


needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="graphviz's dot is not installed (.ci/run installs it)")


@needs_dot
def test_png_is_a_real_picture(capsys, at_root, tmp_path):
    target = tmp_path / "loops.png"
    code, _, err = run(capsys, "graph", "examples/loops.py", "-o", target)
    assert code == 0, err
    data = target.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    # two nested loops and three branches: taller than wide, neither tiny nor absurd
    assert 150 <= width <= 4000 and 300 <= height <= 8000 and height > width
    assert 5_000 < len(data) < 5_000_000


@needs_dot
def test_svg_of_a_task_dataflow(capsys, at_root, tmp_path):
    target = tmp_path / "task.svg"
    code, _, err = run(capsys, "graph", "examples/multi_instance.py", "--net", "local/task", "-o", target)
    assert code == 0, err
    svg = target.read_text(encoding="utf-8")
    assert "<svg" in svg and "CountUp" in svg and "global_counter" in svg
