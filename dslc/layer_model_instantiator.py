"""Caffe2's ``layer_model_instantiator``: the nets a ``LayerModelHelper`` gives.

- ``generate_training_nets(model)``: (init net, train net): every layer not tagged
  EXCLUDE_FROM_TRAIN with its training ops, then the regularizers' loss terms, the gradients
  of the loss, the optimizers' updates and the regularizers' after-update steps;
- ``generate_training_nets_forward_only(model)``: the same without gradients and updates;
- ``generate_eval_net(model)``: the eval ops of layers not tagged EXCLUDE_FROM_EVAL;
- ``generate_predict_net(model)``: the prediction ops of layers not tagged
  EXCLUDE_FROM_PREDICTION (losses are), its input record the features alone.

``include_tags``: only the layers carrying one of these tags. Each net's output record
keeps the output fields the net defines.
"""
from __future__ import annotations

from dslc import core, schema
from dslc.autodiff.gradients import add_gradient_ops
from dslc.layers.layers import InstantiationContext
from dslc.layers.tags import Tags


def _filter_layers(layers, include_tags):
    if include_tags is None:
        return layers
    include_tags = set(include_tags)
    return [layer for layer in layers if not include_tags.isdisjoint(layer.tags)]


def shrink_output_schema(net, out_schema):
    """``out_schema`` without the fields whose blobs ``net`` does not define (a record of
    one field as it is)."""
    if len(out_schema.field_names()) <= 1:
        return out_schema
    keep = [net.BlobIsDefined(blob) for blob in out_schema.field_blobs()]

    def kept(values):
        return [v for ok, v in zip(keep, values) if ok]
    return schema.from_column_list(kept(out_schema.field_names()), kept(out_schema.field_types()),
                                   kept(out_schema.field_blobs()), kept(out_schema.field_metadata()))


def generate_predict_net(model, include_tags=None):
    predict_net = core.Net("predict_net")
    for layer in _filter_layers(model.layers, include_tags):
        if Tags.EXCLUDE_FROM_PREDICTION not in layer.tags:
            layer.add_operators(predict_net, context=InstantiationContext.PREDICTION)
    predict_net.set_input_record(model.input_feature_schema.clone())
    predict_net.set_output_record(shrink_output_schema(predict_net, model.output_schema.clone()))
    return predict_net


def generate_eval_net(model, include_tags=None):
    eval_net = core.Net("eval_net")
    for layer in _filter_layers(model.layers, include_tags):
        if Tags.EXCLUDE_FROM_EVAL not in layer.tags:
            layer.add_operators(eval_net, context=InstantiationContext.EVAL)
    eval_net.set_input_record(model.input_feature_schema + model.trainer_extra_schema)
    eval_net.set_output_record(shrink_output_schema(eval_net, model.output_schema + model.metrics_schema))
    return eval_net


def _generate_training_net_only(model, include_tags=None):
    train_net = core.Net("train_net")
    train_init_net = model.create_init_net("train_init_net")
    for layer in _filter_layers(model.layers, include_tags):
        if Tags.EXCLUDE_FROM_TRAIN not in layer.tags:
            layer.add_operators(train_net, train_init_net)
    train_net.set_input_record(model.input_feature_schema + model.trainer_extra_schema)
    train_net.set_output_record(shrink_output_schema(train_net, model.output_schema + model.metrics_schema))
    return train_init_net, train_net


def generate_training_nets_forward_only(model, include_tags=None):
    return _generate_training_net_only(model, include_tags)


def generate_training_nets(model, include_tags=None):
    train_init_net, train_net = _generate_training_net_only(model, include_tags)
    model.apply_regularizers_on_loss(train_net, train_init_net)
    if not model.has_loss():
        return train_init_net, train_net
    # (not strict: a loss no parameter feeds, as a UniformSampling layer's, adds no gradient
    # and no error, as in Caffe2)
    grad_map = add_gradient_ops(train_net, model.loss.field_blobs(), strict=False)
    model.apply_post_grad_net_modifiers(train_net, train_init_net, grad_map, modify_output_record=True)
    model.apply_optimizers(train_net, train_init_net, grad_map)
    model.apply_regularizers_after_optimizer(train_net, train_init_net, grad_map)
    model.apply_final_net_modifiers(train_net, train_init_net, grad_map, modify_output_record=True)
    return train_init_net, train_net
