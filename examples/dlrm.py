"""A DLRM-shaped recommendation model in Caffe2's style, trained on random data.

The structure of Facebook's DLRM: dense features through a bottom MLP; one embedding
table per sparse feature, each bag of ids pooled by SparseLengthsSum; the pairwise dot
products of the bottom output and the pooled embeddings (BatchMatMul, the strictly
lower triangle kept with BatchGather); those with the bottom output through a top MLP
to one output per sample. The tables' gradients are sparse (the rows the bags read), so
SGD and Adagrad update only those rows.

    python examples/dlrm.py --arch-embedding-size 20-30-40 --arch-mlp-bot 8-8-4 \\
        --arch-mlp-top 8-4-1 --mini-batch-size 16 --num-batches 24 --loss-function bce --optimizer adagrad

Flags are DLRM's names (a subset); the last bottom layer is the embedding dimension.
Each batch prints its loss; the run ends with the mean loss of its first and last quarter.

`dslc run examples/dlrm.py` runs build_job(): 24 SGD steps on one batch as a Task (the
train net in a loop), and says whether the loss fell.

Expected output (dslc run examples/dlrm.py):
    steps = 24
    loss_fell = True
"""
import argparse

import numpy as np

from dslc import brew, optimizer, workspace
from dslc.model_helper import ModelHelper


def sizes(text):
    return [int(x) for x in text.split("-")]


def build(ln_emb, ln_bot, ln_top, loss="mse", opt="sgd", lr=0.01, seed=0):
    """The model: its nets and parameters (init values drawn from ``seed`` with numpy, as
    GivenTensorFill constants, so that a reference can start from the same ones)."""
    rng = np.random.RandomState(seed)
    model = ModelHelper(name="dlrm")
    d = ln_bot[-1]
    init = {}

    def fc(x, name, n_in, n_out):
        # (DLRM's initialization: normal weights scaled by sqrt(2 / (n_in + n_out)), biases by sqrt(1 / n_out))
        w = rng.normal(0.0, np.sqrt(2.0 / (n_in + n_out)), (n_out, n_in)).astype(np.float32)
        b = rng.normal(0.0, np.sqrt(1.0 / n_out), n_out).astype(np.float32)
        init[name + "_w"], init[name + "_b"] = w, b
        return brew.fc(model, x, name, n_in, n_out, weight_init=("GivenTensorFill", {"values": w}),
                       bias_init=("GivenTensorFill", {"values": b}))

    x = "dense_x"
    for i in range(len(ln_bot) - 1):
        x = brew.relu(model, fc(x, f"bot_fc{i}", ln_bot[i], ln_bot[i + 1]), f"bot_relu{i}")
    pooled = []
    for k, n in enumerate(ln_emb):
        table = rng.uniform(-np.sqrt(1.0 / n), np.sqrt(1.0 / n), (n, d)).astype(np.float32)
        init[f"emb_{k}"] = table
        t = model.param_init_net.GivenTensorFill([], f"emb_{k}", shape=[n, d], values=table)
        model.AddParameter(t)
        pooled.append(model.net.SparseLengthsSum([t, f"sparse_idx_{k}", f"sparse_len_{k}"], f"pooled_{k}"))
    # the interaction: F = 1 + tables feature vectors per sample, their pairwise dots
    f = 1 + len(ln_emb)
    cat, _ = model.net.Concat([x] + pooled, ["cat", "cat_split"], axis=1)
    r, _ = model.net.Reshape([cat], ["feats", "feats_old_shape"], shape=[-1, f, d])
    z = model.net.BatchMatMul([r, r], "dots", trans_b=1)
    zflat = model.net.Reshape([z], ["dots_flat", "dots_old_shape"], shape=[-1, f * f])[0]
    tril = np.array([i * f + j for i in range(f) for j in range(i)], dtype=np.int32)
    model.param_init_net.GivenTensorIntFill([], "tril_idx", shape=[len(tril)], values=tril)
    zl = model.net.BatchGather([zflat, "tril_idx"], "dots_tril")
    top, _ = model.net.Concat([x, zl], ["top_in", "top_in_split"], axis=1)
    ln_top = [d + len(tril)] + list(ln_top[1:]) if ln_top[0] != d + len(tril) else list(ln_top)
    for i in range(len(ln_top) - 1):
        top = fc(top, f"top_fc{i}", ln_top[i], ln_top[i + 1])
        if i < len(ln_top) - 2:
            top = brew.relu(model, top, f"top_relu{i}")
    if loss == "mse":
        p = model.net.Sigmoid(top, "prob")
        dist = model.net.SquaredL2Distance([p, "label"], "dist")
    else:  # bce, from the logits
        model.net.Sigmoid(top, "prob")
        dist = model.net.SigmoidCrossEntropyWithLogits([top, "label"], "xent")
    loss_blob = model.net.AveragedLoss(dist, "loss")
    model.AddGradientOperators([loss_blob])
    if opt == "sgd":
        optimizer.build_sgd(model, base_learning_rate=lr)
    else:
        optimizer.build_adagrad(model, base_learning_rate=lr, epsilon=1e-8)
    return model, init, ln_top


def batches(ln_emb, dense_dim, batch, count, seed=1, bag=(1, 4)):
    """``count`` random batches: dense features, one bag of ids per table and sample, labels."""
    rng = np.random.RandomState(seed)
    for _ in range(count):
        feeds = {"dense_x": rng.rand(batch, dense_dim).astype(np.float32),
                 "label": rng.randint(0, 2, (batch, 1)).astype(np.float32)}
        for k, n in enumerate(ln_emb):
            lengths = rng.randint(bag[0], bag[1] + 1, batch).astype(np.int32)
            feeds[f"sparse_len_{k}"] = lengths
            feeds[f"sparse_idx_{k}"] = rng.randint(0, n, int(lengths.sum())).astype(np.int64)
        yield feeds


def train(model, data):
    """Run the init net once, then one step per batch; the losses."""
    workspace.RunNetOnce(model.param_init_net)
    losses = []
    for k, feeds in enumerate(data):
        for name, value in feeds.items():
            workspace.FeedBlob(name, value)
        if k == 0:
            workspace.CreateNet(model.net)
        workspace.RunNet(model.net.Proto().name)
        losses.append(float(workspace.FetchBlob("loss")))
    return losses


def build_job(steps=24):
    """A Task: the init net, then ``steps`` training steps on one fixed batch; its outputs."""
    from dslc.net_builder import ops
    from dslc.task import Task, final_output
    ln_emb, ln_bot, ln_top = sizes("20-30-40"), sizes("8-8-4"), sizes("8-4-1")
    model, _, _ = build(ln_emb, ln_bot, ln_top, "bce", "sgd", lr=0.5)
    feeds = next(batches(ln_emb, ln_bot[0], 16, 1))
    with Task():
        for name, value in feeds.items():
            ops.Const(value, blob_out=name)
        ops.net(model.param_init_net)
        ops.net(model.net)
        ops.net(name="first")  # (a net of its own: ops after ops.net(net) would go into that net)
        first = ops.Copy("loss", "first_loss")
        with ops.loop(steps - 1):
            ops.net(model.net)
        ops.net(name="compare")
        fell = ops.LT(["loss", first], "loss_fell")
        return {"steps": final_output(ops.Const(np.int64(steps))), "loss_fell": final_output(fell)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch-embedding-size", type=sizes, default=sizes("20-30-40"))
    ap.add_argument("--arch-mlp-bot", type=sizes, default=sizes("8-8-4"))
    ap.add_argument("--arch-mlp-top", type=sizes, default=sizes("8-4-1"))
    ap.add_argument("--mini-batch-size", type=int, default=16)
    ap.add_argument("--num-batches", type=int, default=24)
    ap.add_argument("--loss-function", choices=["mse", "bce"], default="mse")
    ap.add_argument("--optimizer", choices=["sgd", "adagrad"], default="sgd")
    ap.add_argument("--learning-rate", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    model, _, _ = build(args.arch_embedding_size, args.arch_mlp_bot, args.arch_mlp_top, args.loss_function,
                        args.optimizer, args.learning_rate, args.seed)
    data = batches(args.arch_embedding_size, args.arch_mlp_bot[0], args.mini_batch_size, args.num_batches,
                   args.seed + 1)
    losses = train(model, data)
    for k, loss in enumerate(losses):
        print(f"batch {k + 1}/{len(losses)}: loss {loss:.8g}")
    q = max(1, len(losses) // 4)
    print(f"mean loss: first {q} batches {np.mean(losses[:q]):.6f}, last {q} {np.mean(losses[-q:]):.6f}")
    return losses


if __name__ == "__main__":
    main()
