"""Caffe2's ``layer_test_util``: what tests of layers share. ``LayersTestCase`` builds a
fresh ``LayerModelHelper`` per test (features: ``float_features``, 32 float32 values),
generates its nets, and checks a net's ops against ``OpSpec``s (type, inputs, outputs,
arguments; None where a part is not checked)."""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from dslc import core, layer_model_helper, layer_model_instantiator, schema, test_util, utils, workspace
from dslc.proto import caffe2_pb2


class OpSpec(namedtuple("OpSpec", "type input output arg")):
    """What an op must be: its type, inputs, outputs (lists; None: any) and arguments (a dict; None: any)."""

    def __new__(cls, op_type, op_input, op_output, op_arg=None):
        return super().__new__(cls, op_type, op_input, op_output, op_arg)


class LayersTestCase(test_util.TestCase):
    def setUp(self):
        super().setUp()
        self.setup_example()

    def setup_example(self):
        """Run before each hypothesis example too: a clean workspace and model."""
        workspace.ResetWorkspace()
        self.reset_model()

    def reset_model(self, input_feature_schema=None, trainer_extra_schema=None):
        features = input_feature_schema or schema.Struct(("float_features", schema.Scalar((np.float32, (32,)))))
        self.model = layer_model_helper.LayerModelHelper("test_model", input_feature_schema=features,
                                                         trainer_extra_schema=trainer_extra_schema or schema.Struct())

    def new_record(self, schema_obj):
        return schema.NewRecord(self.model.net, schema_obj)

    def get_training_nets(self, add_constants=False):
        """Each layer's training ops (no gradients; the global constants' fills only when asked)."""
        train_net = core.Net("train_net")
        train_init_net = self.model.create_init_net("train_init_net") if add_constants else core.Net("train_init_net")
        for layer in self.model.layers:
            layer.add_operators(train_net, train_init_net)
        return train_init_net, train_net

    def get_eval_net(self):
        return layer_model_instantiator.generate_eval_net(self.model)

    def get_predict_net(self):
        return layer_model_instantiator.generate_predict_net(self.model)

    def run_train_net(self):
        self.model.output_schema = schema.Struct()
        init_net, train_net = layer_model_instantiator.generate_training_nets(self.model)
        workspace.RunNetOnce(init_net)
        workspace.RunNetOnce(train_net)

    def run_train_net_forward_only(self, num_iter=1):
        self.model.output_schema = schema.Struct()
        init_net, train_net = layer_model_instantiator.generate_training_nets_forward_only(self.model)
        workspace.RunNetOnce(init_net)
        if num_iter <= 0:
            raise ValueError(f"num_iter must be positive, got {num_iter}")
        workspace.CreateNet(train_net)
        workspace.RunNet(train_net.Proto().name, num_iter=num_iter)

    def assertBlobsEqual(self, spec_blobs, op_blobs):
        """Blob lists equal, position by position (None in the spec: not checked there; a
        None spec: nothing checked)."""
        if spec_blobs is None:
            return
        self.assertEqual(len(spec_blobs), len(op_blobs))
        for spec, blob in zip(spec_blobs, op_blobs):
            if spec is not None:
                self.assertEqual(spec, blob)

    def assertArgsEqual(self, spec_args, op_args):
        """The op's arguments are the spec's dict (compared as arguments, in the op's order)."""
        self.assertEqual(len(spec_args), len(op_args))
        expected = caffe2_pb2.OperatorDef()
        for arg in op_args:
            expected.arg.add().CopyFrom(utils.MakeArgument(arg.name, spec_args[arg.name]))
        self.assertEqual(expected.arg, op_args)

    def assertNetContainOps(self, net, op_specs):
        """``net``'s ops are exactly ``op_specs``, in order; returns the ops."""
        ops = net.Proto().op
        self.assertEqual(len(op_specs), len(ops))
        for op, spec in zip(ops, op_specs):
            self.assertEqual(spec.type, op.type)
            self.assertBlobsEqual(spec.input, op.input)
            self.assertBlobsEqual(spec.output, op.output)
            if spec.arg is not None:
                self.assertArgsEqual(spec.arg, op.arg)
        return ops
