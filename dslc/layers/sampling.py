"""Layers that keep samples of the stream or train on samples: ``LastNWindowCollector`` (the
last N examples seen), ``ReservoirSampling`` (a uniform sample of them) and ``SamplingTrain`` (a prediction layer trained on the sampled rows
of its weights, its logits corrected by the sampling probabilities)."""
from __future__ import annotations

import numpy as np

from dslc import core, schema
from dslc.layers.fc import FC
from dslc.layers.layers import LayerError, ModelLayer, get_layer_class
from dslc.trace.tracing import user_location


class LastNWindowCollector(ModelLayer):
    """A ring buffer of the last ``num_to_collect`` rows of its input, kept across runs, and how
    many rows it has seen."""

    def __init__(self, model, input_record, num_to_collect, name="last_n_window_collector", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        if num_to_collect <= 0 or not isinstance(input_record, schema.Scalar):
            raise LayerError(f"LastNWindowCollector takes a Scalar and num_to_collect > 0, got {input_record}, "
                             f"{num_to_collect}", user_location())
        self.num_to_collect = num_to_collect

        def state(name, shape, init):
            return self.create_param(param_name=name, shape=shape, initializer=init, optimizer=model.NoOptim)
        self.last_n = state("last_n", [0], ("ConstantFill", {}))
        self.next_blob = state("next", [], ("ConstantFill", {"value": 0, "dtype": core.DataType.INT32}))
        self.mutex = state("mutex", [], ("CreateMutex",))
        self.num_visited_blob = state("num_visited", [], ("ConstantFill", {"value": 0, "dtype": core.DataType.INT64}))
        self.output_schema = schema.Struct(("last_n", schema.from_blob_list(input_record, [self.last_n])),
                                           ("num_visited", schema.Scalar(blob=self.num_visited_blob)),
                                           ("mutex", schema.Scalar(blob=self.mutex)))

    def add_ops(self, net):
        net.LastNWindowCollector([self.last_n, self.next_blob, self.input_record(), self.mutex, self.num_visited_blob],
                                 [self.last_n, self.next_blob, self.num_visited_blob],
                                 num_to_collect=self.num_to_collect)


class ReservoirSampling(ModelLayer):
    """A uniform sample of at most ``num_to_collect`` of the rows of ``input_record.data`` seen
    across runs (``PackRecords`` first for a record of several blobs), and how many rows it
    has seen. With an ``object_id`` field, an object already in the sample, or seen earlier in
    the batch, is not sampled again (Caffe2's ReservoirSamplingWithID)."""

    def __init__(self, model, input_record, num_to_collect, name="reservoir_sampling", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        if num_to_collect <= 0 or "data" not in input_record:
            raise LayerError(f"ReservoirSampling takes a Struct with data (and object_id) and num_to_collect > 0, "
                             f"got {input_record}, {num_to_collect}", user_location())
        self.num_to_collect = num_to_collect

        def state(name, shape, init):
            return self.create_param(param_name=name, shape=shape, initializer=init, optimizer=model.NoOptim)
        self.reservoir = state("reservoir", [0], ("ConstantFill",))
        self.num_visited_blob = state("num_visited", [], ("ConstantFill", {"value": 0, "dtype": core.DataType.INT64}))
        self.mutex = state("mutex", None, ("CreateMutex",))  # (a mutex has no shape)
        self.extra_input_blobs, self.extra_output_blobs = [], []
        if "object_id" in input_record:
            to_pos = state("object_to_pos", None, ("CreateMap", {"key_dtype": core.DataType.INT64,
                                                                 "valued_dtype": core.DataType.INT32}))
            to_object = state("pos_to_object", [0], ("ConstantFill", {"value": 0, "dtype": core.DataType.INT64}))
            self.extra_input_blobs = [input_record.object_id(), to_pos, to_object]
            self.extra_output_blobs = [to_pos, to_object]
        self.output_schema = schema.Struct(("reservoir", schema.from_blob_list(input_record.data, [self.reservoir])),
                                           ("num_visited", schema.Scalar(blob=self.num_visited_blob)),
                                           ("mutex", schema.Scalar(blob=self.mutex)))

    def add_ops(self, net):
        net.ReservoirSampling([self.reservoir, self.num_visited_blob, self.input_record.data(), self.mutex]
                              + self.extra_input_blobs,
                              [self.reservoir, self.num_visited_blob] + self.extra_output_blobs,
                              num_to_collect=self.num_to_collect)


class SamplingTrain(ModelLayer):
    """Input Struct (``input``, ``indices``[, ``sampling_prob``]): a ``prediction_layer`` (FC)
    over ``input`` that in training reads only the rows ``indices`` of its parameters, and
    subtracts log(sampling_prob) from its output (``subtract_log_odd``)."""

    def __init__(self, model, input_record, prediction_layer, output_dims, subtract_log_odd=True,
                 name="sampling_train", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        layer_class = get_layer_class(prediction_layer)
        if not issubclass(layer_class, FC):
            raise LayerError(f"SamplingTrain trains an FC-like layer, got {prediction_layer}", user_location())
        if "indices" not in input_record or not isinstance(input_record.indices, schema.Scalar) or \
                "input" not in input_record:
            raise LayerError("SamplingTrain takes a Struct with input and indices (a Scalar)", user_location())
        self.subtract_log_odd = subtract_log_odd
        if subtract_log_odd and "sampling_prob" not in input_record:
            raise LayerError("subtract_log_odd needs a sampling_prob field", user_location())
        self._prediction_layer = layer_class(model, input_record.input, output_dims=output_dims, **kwargs)
        self._prediction_layer.train_param_blobs = [model.net.NextBlob(str(b) + "_sampled")
                                                    for b in self._prediction_layer.param_blobs]
        self.params = self._prediction_layer.params
        self.output_schema = self._prediction_layer.output_schema

    def add_ops(self, net):
        self._prediction_layer.add_ops(net)

    def add_train_ops(self, net):
        layer = self._prediction_layer
        for full, sampled in zip(layer.param_blobs, layer.train_param_blobs):
            net.Gather([full, self.input_record.indices()], sampled)
        layer.add_train_ops(net)
        if self.subtract_log_odd:
            log_q = net.Log(self.input_record.sampling_prob(), net.NextScopedBlob("log_q"))
            net.Sub([self.output_schema(), log_q], self.output_schema(), broadcast=1)


class UniformSampling(ModelLayer):
    """The input ids (distinct) followed by ``num_samples - len(input)`` more distinct ids drawn
    uniformly from [0, num_elements) outside them; ``sampling_prob`` is num_samples / num_elements
    for each."""

    def __init__(self, model, input_record, num_samples, num_elements, name="uniform_sampling", **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        if not num_elements > num_samples > 0:
            raise LayerError(f"UniformSampling needs num_elements > num_samples > 0, got {num_elements}, "
                             f"{num_samples}", user_location())
        if not isinstance(input_record, schema.Scalar):
            raise LayerError(f"UniformSampling takes a Scalar, got {input_record}", user_location())
        self.num_elements = num_elements
        self.num_samples = self.create_param(param_name="num_examples", shape=(1,),
                                             initializer=("GivenTensorInt64Fill", {"values": [num_samples]}),
                                             optimizer=model.NoOptim)
        self.sampling_prob = self.create_param(
            param_name="prob", shape=(num_samples,),
            initializer=("ConstantFill", {"value": float(num_samples) / num_elements, "dtype": core.DataType.FLOAT}),
            optimizer=model.NoOptim)
        self.output_schema = schema.Struct(
            ("samples", schema.Scalar(np.int32, self.get_next_blob_reference("samples"))),
            ("sampling_prob", schema.Scalar(np.float32, self.sampling_prob)))

    def add_ops(self, net):
        net.StopGradient(self.sampling_prob, self.sampling_prob)
        shape = net.Shape([self.input_record()], net.NextScopedBlob("shape"))
        shape = net.Sub([self.num_samples, shape], shape)
        samples = net.UniqueUniformFill([shape, self.input_record()], net.NextScopedBlob("samples_before_concat"),
                                        min=0, max=self.num_elements - 1, input_as_shape=True)
        net.Concat([self.input_record(), samples], [self.output_schema.samples(), net.NextScopedBlob("split_info")],
                   axis=0)
        net.StopGradient(self.output_schema.samples(), self.output_schema.samples())
