"""Caffe2's ``modeling.net_modifier``: ``NetModifier``, an object that adds ops to a net
already generated (gradient clipping, monitoring ...). Subclasses define ``modify_net``."""
from __future__ import annotations

import abc


class NetModifier(metaclass=abc.ABCMeta):
    """``modifier(net, init_net, grad_map)`` calls ``modify_net`` with the same arguments."""

    @abc.abstractmethod
    def modify_net(self, net, init_net=None, grad_map=None, blob_to_device=None, modify_output_record=False):
        """Record this modifier's ops into ``net`` (and ``init_net``)."""

    def __call__(self, net, init_net=None, grad_map=None, blob_to_device=None, modify_output_record=False):
        self.modify_net(net, init_net=init_net, grad_map=grad_map, blob_to_device=blob_to_device,
                        modify_output_record=modify_output_record)
