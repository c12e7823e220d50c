"""Caffe2's ``models`` package: model builders over brew (``models.resnet``: ResNet and ResNeXt).

    from dslc import brew, model_helper
    from dslc.models import resnet
    model = model_helper.ModelHelper("resnet50")
    softmax, loss = resnet.create_resnet50(model, "data", num_input_channels=3,
                                           num_labels=1000, label="label")

A builder only calls ``brew`` helpers and the model's ops: what it builds is an ordinary
ModelHelper net that every pass and backend takes as it takes a hand-written one.
"""
