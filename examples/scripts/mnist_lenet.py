"""Caffe2's MNIST tutorial as a script: a small LeNet trained on digits read from a database.

The tutorial's steps, in its idiom: the images and labels go into a ``minidb`` as
TensorProtos records through ``workspace.C.create_db`` transactions (as Caffe2's dataset
tutorial writes them: the tutorial's lmdb is not in the reference Caffe2's build); ``model.TensorProtosDBInput`` reads batches back; the uint8 images
are Cast to float, scaled and StopGradient'ed in place; brew builds conv / max-pool /
fc / relu / softmax; the training ops are written by hand (LabelCrossEntropy,
AveragedLoss, accuracy, Iter, a step LearningRate, WeightedSum updates); Print and
Summarize log the accuracy, the loss and every parameter's statistics to files in the
workspace's root folder. A test model shares the parameters (``init_params=False``) and
measures the accuracy on held-out batches.

The digits are 12 x 12 strokes drawn here with noise (no download), and the weights start
from numpy's draws (GivenTensorFill) so that a run on Caffe2 starts from the same ones.
It runs unchanged on the real Caffe2 (../shared/tools/caffe2-ref/run.sh
examples/scripts/mnist_lenet.py) and on dslc (``dslc exec examples/scripts/mnist_lenet.py``).

    python examples/scripts/mnist_lenet.py --iters 12 --root /tmp/mnist
"""
import argparse
import os
import tempfile

import numpy as np

from dslc import brew, core, model_helper, utils, workspace
from dslc.proto import caffe2_pb2

SIDE, CLASSES = 12, 10


def digits(n, seed):
    """``n`` noisy 12 x 12 uint8 images of ten stroke patterns, and their int32 labels."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, CLASSES, n).astype(np.int32)
    images = rng.randint(0, 60, (n, 1, SIDE, SIDE)).astype(np.uint8)
    for img, label in zip(images, labels):
        row, col = 1 + label % 5 * 2, 2 + label // 5 * 6  # (a bar and a dot per class)
        img[0, row, 1:SIDE - 1] = 250
        img[0, 1:SIDE - 1, col] = 200
    return images, labels


def write_db(db_type, path, images, labels):
    """Each image and label as a TensorProtos record, as Caffe2's dataset tutorial writes them."""
    db = workspace.C.create_db(db_type, path, workspace.C.Mode.write)
    transaction = db.new_transaction()
    for i in range(images.shape[0]):
        record = caffe2_pb2.TensorProtos()
        record.protos.extend([utils.NumpyArrayToCaffe2Tensor(images[i]),
                              utils.NumpyArrayToCaffe2Tensor(labels[i])])
        transaction.put("image_{:04d}".format(i), record.SerializeToString())
    # close the transaction, then the db: the records are written (as in Caffe2)
    del transaction
    del db


def add_input(model, batch_size, db, db_type):
    data_uint8, label = model.TensorProtosDBInput([], ["data_uint8", "label"], batch_size=batch_size,
                                                  db=db, db_type=db_type)
    data = model.Cast(data_uint8, "data", to=core.DataType.FLOAT)
    data = model.Scale(data, data, scale=float(1. / 256))
    data = model.StopGradient(data, data)
    return data, label


def add_lenet(model, data, weights):
    def given(name):
        return ("GivenTensorFill", {"values": weights[name]})

    conv1 = brew.conv(model, data, "conv1", dim_in=1, dim_out=6, kernel=3,
                      weight_init=given("conv1_w"), bias_init=given("conv1_b"))
    pool1 = brew.max_pool(model, conv1, "pool1", kernel=2, stride=2)
    conv2 = brew.conv(model, pool1, "conv2", dim_in=6, dim_out=8, kernel=2,
                      weight_init=given("conv2_w"), bias_init=given("conv2_b"))
    pool2 = brew.max_pool(model, conv2, "pool2", kernel=2, stride=2)
    fc3 = brew.fc(model, pool2, "fc3", dim_in=8 * 2 * 2, dim_out=32,
                  weight_init=given("fc3_w"), bias_init=given("fc3_b"))
    relu = brew.relu(model, fc3, fc3)
    pred = brew.fc(model, relu, "pred", 32, CLASSES, weight_init=given("pred_w"), bias_init=given("pred_b"))
    return brew.softmax(model, pred, "softmax")


def add_accuracy(model, softmax, label):
    return brew.accuracy(model, [softmax, label], "accuracy")


def add_training_operators(model, softmax, label, base_lr):
    xent = model.LabelCrossEntropy([softmax, label], "xent")
    loss = model.AveragedLoss(xent, "loss")
    add_accuracy(model, softmax, label)
    model.AddGradientOperators([loss])
    iteration = brew.iter(model, "iter")
    lr = model.LearningRate(iteration, "LR", base_lr=-base_lr, policy="step", stepsize=1, gamma=0.999)
    one = model.param_init_net.ConstantFill([], "ONE", shape=[1], value=1.0)
    for param in model.params:
        model.WeightedSum([param, one, model.param_to_grad[param], lr], param)


def add_bookkeeping_operators(model):
    model.Print("accuracy", [], to_file=1)
    model.Print("loss", [], to_file=1)
    for param in model.params:
        model.Summarize(param, [], to_file=1)
        model.Summarize(model.param_to_grad[param], [], to_file=1)


def initial_weights(seed):
    rng = np.random.RandomState(seed)
    shapes = {"conv1_w": (6, 1, 3, 3), "conv1_b": (6,), "conv2_w": (8, 6, 2, 2), "conv2_b": (8,),
              "fc3_w": (32, 32), "fc3_b": (32,), "pred_w": (CLASSES, 32), "pred_b": (CLASSES,)}
    out = {}
    for name, shape in shapes.items():
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        scale = np.sqrt(2.0 / fan_in) if len(shape) > 1 else 0.01
        out[name] = (rng.normal(size=shape) * scale).astype(np.float32)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description="Caffe2's MNIST tutorial on synthetic digits")
    parser.add_argument("--iters", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--test-iters", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--root", default=None, help="the workspace's root folder (its db and logs)")
    args = parser.parse_args(argv)
    root = args.root or tempfile.mkdtemp(prefix="mnist_")

    workspace.ResetWorkspace(root)
    images, labels = digits(args.batch_size * args.iters, seed=0)
    write_db("minidb", os.path.join(root, "train.minidb"), images, labels)
    images, labels = digits(args.batch_size * args.test_iters, seed=1)
    write_db("minidb", os.path.join(root, "test.minidb"), images, labels)

    arg_scope = {"order": "NCHW"}
    weights = initial_weights(seed=2)
    train_model = model_helper.ModelHelper(name="mnist_train", arg_scope=arg_scope)
    data, label = add_input(train_model, args.batch_size, os.path.join(root, "train.minidb"), "minidb")
    softmax = add_lenet(train_model, data, weights)
    add_training_operators(train_model, softmax, label, args.lr)
    add_bookkeeping_operators(train_model)

    test_model = model_helper.ModelHelper(name="mnist_test", arg_scope=arg_scope, init_params=False)
    data, label = add_input(test_model, args.batch_size, os.path.join(root, "test.minidb"), "minidb")
    softmax = add_lenet(test_model, data, weights)
    add_accuracy(test_model, softmax, label)

    workspace.RunNetOnce(train_model.param_init_net)
    workspace.CreateNet(train_model.net, overwrite=True)
    losses, accuracies = [], []
    for i in range(args.iters):
        workspace.RunNet(train_model.net)
        losses.append(float(workspace.FetchBlob("loss")))
        accuracies.append(float(workspace.FetchBlob("accuracy")))
        print("iter {:2d}: loss {:.6f}, accuracy {:.4f}".format(i + 1, losses[-1], accuracies[-1]))

    workspace.RunNetOnce(test_model.param_init_net)
    workspace.CreateNet(test_model.net, overwrite=True)
    test_accuracy = []
    for _ in range(args.test_iters):
        workspace.RunNet(test_model.net.Proto().name)
        test_accuracy.append(float(workspace.FetchBlob("accuracy")))
    print("test accuracy: {:.4f}".format(np.mean(test_accuracy)))
    with open(os.path.join(workspace.RootFolder(), "loss.log")) as f:
        print("loss.log holds {} lines".format(len(f.read().splitlines())))
    return losses, accuracies, test_accuracy


if __name__ == "__main__":
    main()
