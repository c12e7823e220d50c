"""The protobuf messages blobs, DBs and nets are stored as: Caffe2's, built from a schema
written as data (messages.py builds, caffe2.py declares). The runtime imports them from
here; ``dslc.proto`` (Caffe2's ``caffe2.proto``) gives them Caffe2's module names."""
