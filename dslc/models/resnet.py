"""ResNet and ResNeXt builders with Caffe2's names (``caffe2.python.models.resnet``).

Each builder adds layers to a ModelHelper through ``brew`` and returns the blob(s) a
trainer or a predictor needs:

    create_resnet50(model, "data", 3, 1000, label="label")    # (softmax, loss)
    create_resnet50(model, "data", 3, 1000, is_test=True)     # softmax
    create_resnext(model, "data", 3, 1000, num_layers=101, num_groups=32, num_width_per_group=4)
    create_resnet_32x32(model, "data", 3, num_groups=3, num_labels=10)   # CIFAR-sized, 12n+2 layers

The blob names are Caffe2's (``conv1``, ``comp_<block>_conv_<i>``, ``comp_<block>_spatbn_<i>``,
``shortcut_projection_<block>``, ``last_out_L<labels>`` ...), so a Caffe2 checkpoint or
init_net of the same model loads into one built here, and the reverse.

One deliberate difference (docs/differences.md): ``create_resnext``'s ``bn_epsilon`` and
``bn_momentum`` reach every SpatialBN, not only the first (Caffe2's residual blocks used
1e-5 and 0.9 whatever was passed); and a depth with no block layout is a clear error.
"""
from __future__ import annotations

from dslc import brew
from dslc.ir.diagnostics import TraceError
from dslc.trace.tracing import user_location

# blocks per stage for each depth (bottleneck blocks, as Caffe2 builds every depth)
RESNEXT_BLOCK_CONFIG = {
    18: (2, 2, 2, 2),
    34: (3, 4, 6, 3),
    50: (3, 4, 6, 3),
    101: (3, 4, 23, 3),
    152: (3, 8, 36, 3),
    200: (3, 24, 36, 3),
}
# the first block of each stage strides by this much
RESNEXT_STRIDES = [1, 2, 2, 2]

_MSRA = ("MSRAFill", {})


class ResNetBuilder:
    """Adds residual blocks one after another, starting from ``prev_blob``.

    Blocks are numbered in the order they are added (``comp_count``); inside a block,
    each conv gets the next index (``comp_idx``), which names its SpatialBN too.
    """

    def __init__(self, model, prev_blob, no_bias, is_test, bn_epsilon=1e-5, bn_momentum=0.9):
        self.model = model
        self.prev_blob = prev_blob
        self.no_bias = 1 if no_bias else 0
        self.is_test = is_test
        self.bn_epsilon = bn_epsilon
        self.bn_momentum = bn_momentum
        self.comp_count = 0
        self.comp_idx = 0

    # -- the layers of a block: each continues from prev_blob and becomes it

    def add_conv(self, in_filters, out_filters, kernel, stride=1, group=1, pad=0):
        self.comp_idx += 1
        name = f"comp_{self.comp_count}_conv_{self.comp_idx}"
        self.prev_blob = brew.conv(self.model, self.prev_blob, name, in_filters, out_filters,
                                   weight_init=_MSRA, kernel=kernel, stride=stride, group=group,
                                   pad=pad, no_bias=self.no_bias)
        return self.prev_blob

    def add_relu(self):
        self.prev_blob = brew.relu(self.model, self.prev_blob, self.prev_blob)  # in place
        return self.prev_blob

    def add_spatial_bn(self, num_filters):
        name = f"comp_{self.comp_count}_spatbn_{self.comp_idx}"
        self.prev_blob = brew.spatial_bn(self.model, self.prev_blob, name, num_filters,
                                         epsilon=self.bn_epsilon, momentum=self.bn_momentum,
                                         is_test=self.is_test)
        return self.prev_blob

    # -- blocks

    def add_bottleneck(self, input_filters, base_filters, output_filters, stride=1, group=1,
                       spatial_batch_norm=True):
        """1x1 (reduce) -> 3x3 (grouped, strided) -> 1x1 (expand), plus the shortcut, then
        ReLU; returns ``output_filters`` (the next block's input width)."""
        self.comp_idx = 0
        shortcut = self.prev_blob
        layers = ((input_filters, base_filters, 1, 1, 1, 0),
                  (base_filters, base_filters, 3, stride, group, 1),
                  (base_filters, output_filters, 1, 1, 1, 0))
        for i, (cin, cout, kernel, s, g, pad) in enumerate(layers):
            self.add_conv(cin, cout, kernel=kernel, stride=s, group=g, pad=pad)
            if spatial_batch_norm:
                self.add_spatial_bn(cout)
            if i < 2:
                self.add_relu()
        if output_filters != input_filters:
            shortcut = self._projection(shortcut, input_filters, output_filters, stride,
                                        spatial_batch_norm, self.bn_epsilon, self.bn_momentum)
        self._join(shortcut)
        return output_filters

    def add_simple_block(self, input_filters, num_filters, down_sampling=False, spatial_batch_norm=True):
        """3x3 -> 3x3 plus the shortcut, then ReLU (ResNet-20/32/... for small images)."""
        self.comp_idx = 0
        shortcut = self.prev_blob
        stride = 2 if down_sampling else 1
        self.add_conv(input_filters, num_filters, kernel=3, stride=stride, pad=1)
        if spatial_batch_norm:
            self.add_spatial_bn(num_filters)
        self.add_relu()
        self.add_conv(num_filters, num_filters, kernel=3, pad=1)
        if spatial_batch_norm:
            self.add_spatial_bn(num_filters)
        if num_filters != input_filters:
            # (Caffe2 uses epsilon 1e-3 and the default momentum on this projection's BN)
            shortcut = self._projection(shortcut, input_filters, num_filters, stride,
                                        spatial_batch_norm, 1e-3, None)
        self._join(shortcut)

    def _projection(self, blob, cin, cout, stride, spatial_batch_norm, epsilon, momentum):
        """The 1x1 conv (and BN) that brings the shortcut to the block's width and stride
        (``momentum`` None: SpatialBN's default)."""
        name = f"shortcut_projection_{self.comp_count}"
        blob = brew.conv(self.model, blob, name, cin, cout, weight_init=_MSRA, kernel=1,
                         stride=stride, no_bias=self.no_bias)
        if not spatial_batch_norm:
            return blob
        extra = {} if momentum is None else {"momentum": momentum}
        return brew.spatial_bn(self.model, blob, f"{name}_spatbn", cout, epsilon=epsilon,
                               is_test=self.is_test, **extra)

    def _join(self, shortcut):
        """shortcut + the block's last layer, then ReLU in place; the block is done."""
        name = f"comp_{self.comp_count}_sum_{self.comp_idx}"
        self.prev_blob = brew.sum(self.model, [shortcut, self.prev_blob], name)
        self.comp_idx += 1
        self.add_relu()
        self.comp_count += 1


def create_resnet_32x32(model, data, num_input_channels, num_groups, num_labels, is_test=False):
    """The CIFAR ResNet (He et al. 2015, section 4.2) on 32x32 images: three stages of 16,
    32 and 64 filters, each of 2 * ``num_groups`` simple blocks (as Caffe2 builds it: 12n + 2
    layers), then average pool, FC and softmax; returns the softmax."""
    brew.conv(model, data, "conv1", num_input_channels, 16, kernel=3, stride=1)
    brew.spatial_bn(model, "conv1", "conv1_spatbn", 16, epsilon=1e-3, is_test=is_test)
    brew.relu(model, "conv1_spatbn", "relu1")
    builder = ResNetBuilder(model, "relu1", no_bias=0, is_test=is_test)
    width = 16
    for stage, filters in enumerate((16, 32, 64)):
        for block in range(2 * num_groups):
            builder.add_simple_block(width if block == 0 else filters, filters,
                                     down_sampling=block == 0 and stage > 0)
        width = filters
    brew.average_pool(model, builder.prev_blob, "final_avg", kernel=8, stride=1)
    brew.fc(model, "final_avg", "last_out", 64, num_labels)
    return brew.softmax(model, "last_out", "softmax")


def create_resnext(model, data, num_input_channels, num_labels, num_layers, num_groups,
                   num_width_per_group, label=None, is_test=False, no_loss=False, no_bias=1,
                   conv1_kernel=7, conv1_stride=2, final_avg_kernel=7, log=None,
                   bn_epsilon=1e-5, bn_momentum=0.9):
    """ResNeXt-``num_layers`` (``num_groups`` x ``num_width_per_group``d): a strided conv1,
    BN, ReLU and max pool, four stages of bottleneck blocks, global average pool, FC
    (``last_out_L<num_labels>``). Returns the FC's output with ``no_loss``, else
    ``(softmax, loss)`` given a ``label``, else the softmax."""
    if num_layers not in RESNEXT_BLOCK_CONFIG:
        raise TraceError(f"create_resnext: no block layout for {num_layers} layers",
                         user_location(), hint=f"pick one of {sorted(RESNEXT_BLOCK_CONFIG)}")
    widths = [64, 64, 128, 256, 512] if num_layers in (18, 34) else [64, 256, 512, 1024, 2048]

    conv1 = brew.conv(model, data, "conv1", num_input_channels, widths[0], weight_init=_MSRA,
                      kernel=conv1_kernel, stride=conv1_stride, pad=3, no_bias=no_bias)
    bn1 = brew.spatial_bn(model, conv1, "conv1_spatbn_relu", widths[0], epsilon=bn_epsilon,
                          momentum=bn_momentum, is_test=is_test)
    relu1 = brew.relu(model, bn1, bn1)
    pool1 = brew.max_pool(model, relu1, "pool1", kernel=3, stride=2, pad=1)

    builder = ResNetBuilder(model, pool1, no_bias=no_bias, is_test=is_test,
                            bn_epsilon=bn_epsilon, bn_momentum=bn_momentum)
    inner = num_groups * num_width_per_group
    width = widths[0]
    for stage, blocks in enumerate(RESNEXT_BLOCK_CONFIG[num_layers]):
        for block in range(blocks):
            width = builder.add_bottleneck(width, inner, widths[stage + 1],
                                           stride=RESNEXT_STRIDES[stage] if block == 0 else 1,
                                           group=num_groups)
        inner *= 2

    pooled = brew.average_pool(model, builder.prev_blob, "final_avg", kernel=final_avg_kernel,
                               stride=1, global_pooling=True)
    last_out = brew.fc(model, pooled, f"last_out_L{num_labels}", widths[-1], num_labels)
    if no_loss:
        return last_out
    if label is not None:
        return tuple(model.SoftmaxWithLoss([last_out, label], ["softmax", "loss"]))
    return brew.softmax(model, last_out, "softmax")


def create_resnet50(model, data, num_input_channels, num_labels, label=None, is_test=False,
                    no_loss=False, no_bias=0, conv1_kernel=7, conv1_stride=2, final_avg_kernel=7):
    """ResNet-50: ResNeXt-50 with one group of width 64 (see ``create_resnext``)."""
    return create_resnext(model, data, num_input_channels, num_labels, num_layers=50, num_groups=1,
                          num_width_per_group=64, label=label, is_test=is_test, no_loss=no_loss,
                          no_bias=no_bias, conv1_kernel=conv1_kernel, conv1_stride=conv1_stride,
                          final_avg_kernel=final_avg_kernel)


__all__ = ["RESNEXT_BLOCK_CONFIG", "RESNEXT_STRIDES", "ResNetBuilder", "create_resnet50", "create_resnet_32x32",
           "create_resnext"]
