"""The ShuffleNet V2 builder with Caffe2's names (``caffe2.python.models.shufflenet``).

    create_shufflenet(model, "data", 3, 1000, label="label")   # (softmax, loss)
    create_shufflenet(model, "data", 3, 1000, no_loss=True)    # the last FC's output

A stem (3x3 conv, stride 2; 3x3 max pool, stride 2), three stages of units (3, 7, 3 repeats
after one down-sampling unit each), a 1x1 conv, a 7x7 average pool and the classifier FC
(``last_out_L<labels>``). A unit runs two branches, concatenates them and mixes their channels
with ``ChannelShuffle``: the down-sampling unit feeds the whole input to both branches (a
strided depthwise conv on each), the basic unit splits the channels in two and transforms
one half only. Widths by ``width``: OUTPUT_CHANNELS.

The blob names are Caffe2's, its quirks included (the down-sampling unit's left depthwise
conv is ``<prefix>left_dwconv``, no underscore), so the parameters of one built by Caffe2
load here and back.
"""
from __future__ import annotations

from dslc import brew
from dslc.ir.diagnostics import TraceError
from dslc.trace.tracing import user_location

__all__ = ["OUTPUT_CHANNELS", "STAGE_REPEATS", "ShuffleNetV2Builder", "create_shufflenet"]

# stem, stage 2, 3, 4 and last-conv channels per width multiplier (table 5 of the paper)
OUTPUT_CHANNELS = {
    "0.5x": [24, 48, 96, 192, 1024],
    "1.0x": [24, 116, 232, 464, 1024],
    "1.5x": [24, 176, 352, 704, 1024],
    "2.0x": [24, 244, 488, 976, 2048],
}
STAGE_REPEATS = [3, 7, 3]
_MSRA = ("MSRAFill", {})


class ShuffleNetV2Builder:
    """Adds ShuffleNet V2 units to ``model`` from ``data``; ``create()`` builds the whole net
    and leaves the classifier's output in ``last_out``.

    ``detection=True`` puts an extra 3x3 depthwise conv + BN in front of each transformed
    branch (a wider receptive field, as Caffe2's detection variant does).
    """

    def __init__(self, model, data, num_input_channels, num_labels, num_groups=2, width="1.0x",
                 is_test=False, detection=False, bn_epsilon=1e-5):
        if width not in OUTPUT_CHANNELS:
            raise TraceError(f"ShuffleNetV2Builder: no channel layout for width {width!r}", user_location(),
                             hint=f"pick one of {sorted(OUTPUT_CHANNELS)}")
        self.model = model
        self.prev_blob = data
        self.num_input_channels = num_input_channels
        self.num_labels = num_labels
        self.num_groups = num_groups
        self.output_channels = OUTPUT_CHANNELS[width]
        self.stage_repeats = list(STAGE_REPEATS)
        self.is_test = is_test
        self.detection = detection
        self.bn_epsilon = bn_epsilon

    def create(self):
        channels = self.output_channels[0]
        self.prev_blob = brew.conv(self.model, self.prev_blob, "stage1_conv", self.num_input_channels, channels,
                                   weight_init=_MSRA, kernel=3, stride=2)
        self.prev_blob = brew.max_pool(self.model, self.prev_blob, "stage1_pool", kernel=3, stride=2)
        for stage, (width, repeats) in enumerate(zip(self.output_channels[1:4], self.stage_repeats), start=2):
            self.add_spatial_ds_unit(f"stage{stage}_stride2", channels, width)
            channels = width
            for i in range(1, repeats + 1):
                self.add_basic_unit(f"stage{stage}_stride1_repeat{i}", channels)
        self.last_conv = brew.conv(self.model, self.prev_blob, "conv5", channels, self.output_channels[4], kernel=1)
        self.avg_pool = self.model.AveragePool(self.last_conv, "avg_pool", kernel=7)
        self.last_out = brew.fc(self.model, self.avg_pool, f"last_out_L{self.num_labels}", self.output_channels[4],
                                self.num_labels)

    def add_spatial_ds_unit(self, prefix, in_channels, out_channels, stride=2):
        """Halves the resolution: both branches see the whole input, each gives out_channels / 2."""
        half = out_channels // 2
        left = right = self.prev_blob
        if self.detection:
            left = self.add_detection_unit(left, prefix + "_left_detection", in_channels, in_channels)
        left = self.add_dwconv3x3_bn(left, prefix + "left_dwconv", in_channels, stride)
        left = self.add_conv1x1_bn(left, prefix + "_left_conv1", in_channels, half)
        if self.detection:
            right = self.add_detection_unit(right, prefix + "_right_detection", in_channels, in_channels)
        right = self._transform(right, prefix + "_right", in_channels, half, stride)
        self._mix(prefix, right, left)

    def add_basic_unit(self, prefix, in_channels, stride=1):
        """Keeps the resolution: one half of the channels passes through, the other is transformed."""
        half = in_channels // 2
        left, right = prefix + "_left", prefix + "_right"
        self.model.net.Split(self.prev_blob, [left, right])
        if self.detection:
            right = self.add_detection_unit(right, prefix + "_right_detection", half, half)
        right = self._transform(right, prefix + "_right", half, half, stride)
        self._mix(prefix, right, left)

    def _transform(self, blob, prefix, in_channels, out_channels, stride):
        # 1x1 conv-BN-ReLU, 3x3 depthwise conv-BN (strided in a down-sampling unit), 1x1 conv-BN-ReLU
        blob = self.add_conv1x1_bn(blob, prefix + "_conv1", in_channels, out_channels)
        blob = self.add_dwconv3x3_bn(blob, prefix + "_dwconv", out_channels, stride)
        return self.add_conv1x1_bn(blob, prefix + "_conv2", out_channels, out_channels)

    def _mix(self, prefix, right, left):
        joined = brew.concat(self.model, [right, left], prefix + "_concat")
        self.prev_blob = self.model.net.ChannelShuffle(joined, prefix + "_ch_shuffle", group=self.num_groups,
                                                       kernel=1)

    def add_detection_unit(self, prev_blob, prefix, in_channels, out_channels, kernel=3, pad=1):
        blob = brew.conv(self.model, prev_blob, prefix + "_conv", in_channels, out_channels, kernel=kernel,
                         weight_init=_MSRA, group=in_channels, pad=pad)
        return brew.spatial_bn(self.model, blob, prefix + "_bn", out_channels, epsilon=self.bn_epsilon,
                               is_test=self.is_test)

    def add_conv1x1_bn(self, prev_blob, blob, in_channels, out_channels):
        conv = brew.conv(self.model, prev_blob, blob, in_channels, out_channels, kernel=1, weight_init=_MSRA)
        bn = brew.spatial_bn(self.model, conv, conv + "_bn", out_channels, epsilon=self.bn_epsilon,
                             is_test=self.is_test)
        return brew.relu(self.model, bn, bn)

    def add_dwconv3x3_bn(self, prev_blob, blob, channels, stride):
        conv = brew.conv(self.model, prev_blob, blob, channels, channels, kernel=3, weight_init=_MSRA,
                         stride=stride, group=channels, pad=1)
        return brew.spatial_bn(self.model, conv, conv + "_bn", channels, epsilon=self.bn_epsilon,
                               is_test=self.is_test)


def create_shufflenet(model, data, num_input_channels, num_labels, label=None, is_test=False, no_loss=False):
    """ShuffleNet V2 1.0x on ``data``: the classifier's output with ``no_loss``, else
    (softmax, loss) given a ``label``; with neither, nothing (the net is built, as in Caffe2)."""
    builder = ShuffleNetV2Builder(model, data, num_input_channels, num_labels, is_test=is_test)
    builder.create()
    if no_loss:
        return builder.last_out
    if label is not None:
        return model.SoftmaxWithLoss([builder.last_out, label], ["softmax", "loss"])
    return None
