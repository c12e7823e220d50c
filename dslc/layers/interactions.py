"""``PairwiseSimilarity``: the dot products (or cosine similarities) of every pair of
embeddings of an example, flattened (optionally only the pairs ``indices_to_gather``) — the
dot-product interaction of recommendation models."""
from __future__ import annotations

from dslc import schema
from dslc.layers.layers import LayerError, ModelLayer
from dslc.trace.tracing import user_location


class PairwiseSimilarity(ModelLayer):
    """Input: ``all_embeddings`` [B, N, D], or ``x_embeddings`` [B, N, D] and ``y_embeddings``
    [B, M, D]; optional ``indices_to_gather``. Output: [B, output_dim]."""

    def __init__(self, model, input_record, output_dim, pairwise_similarity_func="dot", name="pairwise_similarity",
                 **kwargs):
        super().__init__(model, name, input_record, **kwargs)
        if not isinstance(input_record, schema.Struct):
            raise LayerError(f"PairwiseSimilarity takes a Struct, got {input_record}", user_location())
        both = "x_embeddings" in input_record and "y_embeddings" in input_record
        if ("all_embeddings" in input_record) == both:
            raise LayerError("PairwiseSimilarity takes either all_embeddings or x_embeddings and y_embeddings",
                             user_location())
        self.pairwise_similarity_func = pairwise_similarity_func
        x = input_record["all_embeddings"] if not both else input_record["x_embeddings"]
        y = input_record["all_embeddings"] if not both else input_record["y_embeddings"]
        for what, value in (("x", x), ("y", y)):
            if not isinstance(value, schema.Scalar):
                raise LayerError(f"PairwiseSimilarity's {what} embeddings are a Scalar, got {value}", user_location())
        self.indices_to_gather = None
        if "indices_to_gather" in input_record:
            self.indices_to_gather = input_record["indices_to_gather"]
            if not isinstance(self.indices_to_gather, schema.Scalar):
                raise LayerError(f"indices_to_gather is a Scalar, got {self.indices_to_gather}", user_location())
        self.x_embeddings, self.y_embeddings = x, y
        dtype = x.field_types()[0].base
        self.output_schema = schema.Scalar((dtype, (output_dim,)), self.get_next_blob_reference("output"))

    def add_ops(self, net):
        x, y = self.x_embeddings(), self.y_embeddings()
        if self.pairwise_similarity_func == "cosine_similarity":
            x, y = net.Normalize(x, axis=1), net.Normalize(y, axis=1)
        elif self.pairwise_similarity_func != "dot":
            raise NotImplementedError(f"pairwise_similarity_func={self.pairwise_similarity_func} is not valid")
        products = net.BatchMatMul([x, y], [self.get_next_blob_reference(x + "_matmul")], trans_b=1)
        if self.indices_to_gather:
            flat = net.Flatten(products, products + "_flatten")
            net.BatchGather([flat, self.indices_to_gather()], self.output_schema())
        else:
            net.Flatten(products, self.output_schema())
