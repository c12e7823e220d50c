"""Caffe2's LMDB example as a script: random images and labels written to an lmdb database
with the ``lmdb`` package, read back in batches by ``model.TensorProtosDBInput``.

As Caffe2's ``examples/lmdb_create_example.py`` does: each record is a TensorProtos of a
float image [3, W, H] and an int32 label (a tensor without dims), keyed by its number;
the same sum of image * label is taken while writing and again over the batches read,
and the two must agree.

    dslc exec examples/scripts/lmdb_dataset.py --output_file /tmp/images.lmdb
"""
import argparse
import tempfile

import lmdb
import numpy as np

from dslc import model_helper, workspace
from dslc.proto import caffe2_pb2

RECORDS, BATCH, WIDTH, HEIGHT = 64, 16, 8, 4


def create_db(output_file, seed=0):
    rng = np.random.RandomState(seed)
    env = lmdb.open(output_file, map_size=1 << 30)
    checksum = 0
    with env.begin(write=True) as txn:
        for j in range(RECORDS):
            label = j % 10
            img_data = rng.rand(3, WIDTH, HEIGHT)
            tensor_protos = caffe2_pb2.TensorProtos()
            img_tensor = tensor_protos.protos.add()
            img_tensor.dims.extend(img_data.shape)
            img_tensor.data_type = 1  # FLOAT
            img_tensor.float_data.extend(img_data.reshape(-1))
            label_tensor = tensor_protos.protos.add()
            label_tensor.data_type = 2  # INT32
            label_tensor.int32_data.append(label)
            # (keys sort as text: "10" comes before "2", so the batches read another order)
            txn.put("{}".format(j).encode("ascii"), tensor_protos.SerializeToString())
            checksum += np.sum(img_data.astype(np.float32)) * label
    env.close()
    return checksum


def read_db(db_file):
    model = model_helper.ModelHelper(name="lmdbtest")
    model.TensorProtosDBInput([], ["data", "label"], batch_size=BATCH, db=db_file, db_type="lmdb")
    workspace.RunNetOnce(model.param_init_net)
    workspace.CreateNet(model.net)
    checksum, shapes = 0, set()
    for _ in range(RECORDS // BATCH):
        workspace.RunNet(model.net.Proto().name)
        images, labels = workspace.FetchBlob("data"), workspace.FetchBlob("label")
        shapes.add((images.shape, images.dtype.name, labels.shape, labels.dtype.name))
        for j in range(BATCH):
            checksum += np.sum(images[j, :]) * labels[j]
    return checksum, shapes


def main(argv=None):
    parser = argparse.ArgumentParser(description="Caffe2's LMDB example")
    parser.add_argument("--output_file", default=None, help="the lmdb directory to write")
    args = parser.parse_args(argv)
    path = args.output_file or tempfile.mkdtemp(prefix="images_") + "/db"
    written = create_db(path)
    print("Checksum/write: {:.4f}".format(written))
    read, shapes = read_db(path)
    print("Checksum/read: {:.4f}".format(read))
    assert abs(written - read) < 0.1, "Read/write checksums dont match"
    return written, read, shapes


if __name__ == "__main__":
    main()
