"""Caffe2's ``predictor`` package: exporting a trained model for inference (its predict
net, its parameters and what feeds it) into one database, and loading it back."""
