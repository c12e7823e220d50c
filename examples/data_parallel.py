"""Data-parallel training on two nodes: one MLP, each node a shard with half of every batch.

Each Node ``trainer_s`` builds the same model with ``data_parallel_model.Parallelize_CPU``
and ``rendezvous=dict(shard_id=s, num_shards=2)``: its init net takes shard 0's initial
values (a Broadcast across the shards), and every step's gradients are added across the
shards (one Allreduce) before each node applies the same SGD update, so the two copies
of the model stay equal and train as one model on the whole batch. Shard s keeps its
replica under ``cpu_s/`` so that the job means the same in one process as on a cluster:

    dslc run examples/data_parallel.py                    # both shards in this process
    dslc run examples/data_parallel.py --cluster ray      # each shard a process of a local Ray cluster
    dslc run examples/data_parallel.py --cluster auto     # ... of the cluster this machine is in

The data are generated clusters (256 noisy copies of 10 random 64-pixel images); the
job runs EPOCHS epochs of STEPS full-batch steps and prints, per shard, whether its last
loss (the mean over its half of the batch: about log(10) = 2.3 at the start) is below 0.1.
Each shard alone would see half the data; together they train on all of it.

Expected output (dslc run examples/data_parallel.py):
    learned_0 = True
    learned_1 = True
"""
import numpy as np

from dslc import brew, core, data_parallel_model
from dslc.checkpoint import Job, epoch_limiter
from dslc.model_helper import ModelHelper
from dslc.net_builder import ops
from dslc.task import Node, Task, WorkspaceType, final_output

SHARDS, EPOCHS, STEPS, HIDDEN, LR = 2, 3, 20, 64, 0.5


def generated_data(n=256, classes=10, seed=0):
    rng = np.random.default_rng(seed)
    protos = rng.uniform(0, 1, (classes, 64))
    label = rng.integers(0, classes, n)
    x = np.clip(protos[label] + rng.normal(0, 0.3, (n, 64)), 0, 1)
    return x.astype(np.float32), label.astype(np.int32)


def build_shard(s, x, label):
    """Shard ``s``'s model: its rows of the batch as constants of the train net, the MLP, and a
    plain SGD update made per replica (every name under the replica's scope)."""
    rows = slice(s * len(x) // SHARDS, (s + 1) * len(x) // SHARDS)
    model = ModelHelper(name=f"mlp_{s}")

    def inputs(m):  # (in the train net: what the init net makes is synced from shard 0)
        m.net.GivenTensorFill([], "data", values=x[rows].ravel().tolist(), shape=list(x[rows].shape))
        m.net.GivenTensorIntFill([], "label", values=label[rows].tolist(), shape=[len(label[rows])])

    def forward(m, loss_scale):
        h = brew.relu(m, brew.fc(m, "data", "fc1", dim_in=64, dim_out=HIDDEN), "r1")
        logits = brew.fc(m, h, "fc2", dim_in=HIDDEN, dim_out=10)
        _, loss = m.net.SoftmaxWithLoss([logits, "label"], ["softmax", "loss"])
        return [m.net.Scale(loss, "scaled_loss", scale=loss_scale)]

    def sgd(m):
        lr = m.param_init_net.ConstantFill([], "lr", shape=[1], value=-LR)
        one = m.param_init_net.ConstantFill([], "one", shape=[1], value=1.0)
        for p in m.GetParams(core.ScopedName("")):
            m.net.WeightedSum([p, one, m.param_to_grad[p], lr], p)

    data_parallel_model.Parallelize_CPU(model, inputs, forward, param_update_builder_fun=sgd, devices=[s],
                                        rendezvous=dict(shard_id=s, num_shards=SHARDS))
    return model


def build_job():
    x, label = generated_data()
    models = [build_shard(s, x, label) for s in range(SHARDS)]
    outputs = {}
    with Job() as job:
        with job.init_group:
            for s, m in enumerate(models):
                with Node(f"trainer_{s}"), Task(workspace_type=WorkspaceType.GLOBAL):
                    ops.net(m.param_init_net)
        for s, m in enumerate(models):
            with Node(f"trainer_{s}"), Task(workspace_type=WorkspaceType.GLOBAL):
                with ops.loop(STEPS):
                    ops.net(m.net)
                outputs[f"learned_{s}"] = final_output(
                    ops.LT([f"cpu_{s}/loss", ops.Const(np.float32(0.1))], [f"learned_{s}"]))
        epoch_limiter(job, EPOCHS)
    return job, outputs
