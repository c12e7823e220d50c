"""Importing this package declares every operator in ``dslc.ir.OPS``."""
from . import collect, collective, control_nets, data, dataflow, db, dbinput, effects, records, shape, structure, tensor  # noqa: F401
from . import nn, losses, optim, nn_grads  # noqa: F401  (training ops and their gradients)
from . import activations, adaptive, conv, conv_fused, normalization, norms, products, quantized, recurrent, reductions, segments, utility  # noqa: F401
from . import index  # noqa: F401  (Caffe2's key -> id indexes)
from . import pointwise, spatial  # noqa: F401  (selections, padding and space/batch moves, instance norm)
from . import boxes, resample  # noqa: F401  (Detectron's detection ops: boxes, proposals, NMS, RoIAlign, resizing)
from . import features  # noqa: F401  (sparse features: SparseToDenseMask, IndexHash, Mod)
from . import metrics  # noqa: F401  (per-class accuracy, accumulated histograms)
from . import tt  # noqa: F401  (tensor-train FC and embedding: TT, TTSparseLengthsSum)
from . import yellowfin  # noqa: F401  (YellowFin's self-tuning momentum SGD)
