"""A ResNet trainer in Caffe2's idiom, on synthetic images small enough to train anywhere.

What Caffe2's ResNet-50 trainer does, cut to its parts: ``data_parallel_model.Parallelize``
builds the model on each CPU device from three functions (input, forward pass through
``models.resnet.create_resnext``, optimizer); ``optimizer.add_weight_decay`` and
``build_sgd`` (Nesterov momentum, a step learning-rate policy) add the updates; the
parameter init net runs once, the training net is created once and run each step.

The images and labels are numpy's draws, fed each step, and the weights start from numpy's
draws too (fed over what the init net made), so a run on the real Caffe2 starts from the
same weights and sees the same batches:

    dslc exec examples/scripts/resnet_trainer.py --steps 5
    ../shared/tools/caffe2-ref/run.sh examples/scripts/resnet_trainer.py --steps 5   # Caffe2

Each step prints its loss and accuracy; ``main(argv)`` returns the losses.
"""
import argparse

import numpy as np

from dslc import brew, data_parallel_model, model_helper, optimizer, workspace
from dslc.models import resnet


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch_size", type=int, default=4, help="images per device and step")
    p.add_argument("--image_size", type=int, default=8)
    p.add_argument("--num_channels", type=int, default=3)
    p.add_argument("--num_labels", type=int, default=5)
    p.add_argument("--num_layers", type=int, default=18)
    p.add_argument("--resnext_num_groups", type=int, default=2)
    p.add_argument("--resnext_width_per_group", type=int, default=4)
    p.add_argument("--num_devices", type=int, default=1)
    p.add_argument("--base_learning_rate", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight_decay", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=7)
    return p.parse_args(argv)


def batch(args, step, device):
    """The images and labels device ``device`` trains on at ``step``."""
    rng = np.random.RandomState(args.seed * 1000 + step * 10 + device)
    shape = (args.batch_size, args.num_channels, args.image_size, args.image_size)
    return rng.randn(*shape).astype(np.float32), rng.randint(0, args.num_labels, args.batch_size).astype(np.int32)


def initial_weights(args, blobs):
    """{blob: array}: the starting value of each of ``blobs`` ({name: shape}, a device's
    parameters and BN statistics, by name without the device prefix), drawn in name order."""
    rng = np.random.RandomState(args.seed)
    out = {}
    for name in sorted(blobs):
        shape = blobs[name]
        if name.endswith("_riv"):  # (running variance: positive)
            out[name] = np.ones(shape, np.float32)
        elif name.endswith("_rm"):
            out[name] = np.zeros(shape, np.float32)
        elif name.endswith("_s"):  # (BN scale near one)
            out[name] = (1 + 0.1 * rng.randn(*shape)).astype(np.float32)
        elif name.endswith("_w"):  # (He's scale for the fan-in)
            fan_in = int(np.prod(shape[1:]))
            out[name] = (rng.randn(*shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        else:
            out[name] = (0.1 * rng.randn(*shape)).astype(np.float32)
    return out


def build(args):
    """The training model, replicated over ``args.num_devices`` CPU devices."""
    model = model_helper.ModelHelper(name="resnet", arg_scope={"order": "NCHW"})

    def add_input(model):
        pass  # (the batches are fed: see ``batch``)

    def create_resnext_model_ops(model, loss_scale):
        softmax, loss = resnet.create_resnext(
            model, "data", num_input_channels=args.num_channels, num_labels=args.num_labels,
            num_layers=args.num_layers, num_groups=args.resnext_num_groups,
            num_width_per_group=args.resnext_width_per_group, label="label", no_bias=True,
            conv1_kernel=3, conv1_stride=1, final_avg_kernel=args.image_size // 8 or 1)
        loss = model.net.Scale(loss, "scaled_loss", scale=loss_scale)
        brew.accuracy(model, [softmax, "label"], "accuracy")
        return [loss]

    def add_optimizer(model):
        optimizer.add_weight_decay(model, args.weight_decay)
        return optimizer.build_sgd(model, args.base_learning_rate, momentum=args.momentum,
                                   nesterov=1 if args.momentum else 0, policy="step", stepsize=100, gamma=0.1)

    data_parallel_model.Parallelize(model, input_builder_fun=add_input,
                                    forward_pass_builder_fun=create_resnext_model_ops,
                                    optimizer_builder_fun=add_optimizer,
                                    devices=list(range(args.num_devices)), cpu_device=True)
    return model


def main(argv=None):
    args = parse(argv)
    workspace.ResetWorkspace()
    model = build(args)
    workspace.RunNetOnce(model.param_init_net)
    prefix = "cpu_{}/"
    first = prefix.format(0)
    shapes = {b[len(first):]: workspace.FetchBlob(b).shape for b in workspace.Blobs()
              if b.startswith(first) and (b.endswith(("_w", "_b", "_s", "_rm", "_riv")))}
    start = initial_weights(args, shapes)
    for d in range(args.num_devices):
        for name, value in start.items():
            workspace.FeedBlob(prefix.format(d) + name, value)
    for d in range(args.num_devices):  # (the first batch, so that the net is created with its inputs)
        data, label = batch(args, 0, d)
        workspace.FeedBlob(prefix.format(d) + "data", data)
        workspace.FeedBlob(prefix.format(d) + "label", label)
    workspace.CreateNet(model.net)
    losses = []
    for step in range(args.steps):
        for d in range(args.num_devices):
            data, label = batch(args, step, d)
            workspace.FeedBlob(prefix.format(d) + "data", data)
            workspace.FeedBlob(prefix.format(d) + "label", label)
        workspace.RunNet(model.net.Proto().name)
        loss = float(sum(workspace.FetchBlob(prefix.format(d) + "scaled_loss") for d in range(args.num_devices)))
        accuracy = float(np.mean([workspace.FetchBlob(prefix.format(d) + "accuracy")
                                  for d in range(args.num_devices)]))
        print("step {} loss {:.8f} accuracy {:.4f}".format(step, loss, accuracy))
        losses.append(loss)
    return losses


if __name__ == "__main__":
    main()
