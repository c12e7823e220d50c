"""examples/train_mlp.py on generated data: it learns, and a stopped run resumes bit-identically."""

import numpy as np

from dslc import workspace
from dslc.checkpoint import CheckpointManager, JobRunner
from dslc.session import LocalSession
import paths

EXAMPLE = paths.EXAMPLES / "train_mlp.py"
PARAMS = ["fc1_w", "fc1_b", "fc2_w", "fc2_b"]


def example():
    return paths.load(EXAMPLE, "train_mlp_example")


def train(mod, data, epochs, directory, resume=None):
    """Run the job (epochs in all) with checkpoints in ``directory``; the parameters after it."""
    directory.mkdir(exist_ok=True)
    job, result = mod.build_job(*data, epochs=epochs)
    job.compile(LocalSession)
    ws = workspace.Workspace()
    session = LocalSession(ws)
    last = JobRunner(job, CheckpointManager(str(directory), "trainer", "minidb"),
                     resume_from_epoch=resume).train(session)
    session.run(result)
    return last, {k: ws.fetch_blob(k) for k in PARAMS}, [o.fetch() for o in result.outputs()]


def test_stop_and_resume_is_bit_identical(tmp_path):
    mod = example()
    data = mod.generated_data(n=128)
    last, full, (epochs, learned) = train(mod, data, 4, tmp_path / "full")
    assert last == 4 and int(epochs) == 4
    # a run stopped after epoch 2 (its job stops there), then the 4-epoch job resumed from it
    stopped, _, _ = train(mod, data, 2, tmp_path / "cut")
    assert stopped == 2
    resumed, params, (epochs, _) = train(mod, data, 4, tmp_path / "cut", resume=2)
    assert resumed == 4 and int(epochs) == 4
    for k in PARAMS:
        np.testing.assert_array_equal(params[k], full[k])
    assert sorted(p.name for p in (tmp_path / "cut").iterdir()) == [f"trainer.{e}" for e in range(5)]


def test_it_learns_on_generated_data(capsys):
    mod = example()
    job, result = mod.build_job(*mod.generated_data(), epochs=3)
    job.compile(LocalSession)
    session = LocalSession(log=None)
    assert JobRunner(job).train(session) == 3
    session.run(result)
    epochs, learned = (o.fetch() for o in result.outputs())
    assert int(epochs) == 3 and bool(learned)  # train accuracy >= 0.9 (chance: 0.1)
