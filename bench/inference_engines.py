"""The programs bench/inference.py runs in other processes: the deploy models' export (in the
real Caffe2's venv) and one long-lived worker per engine.

Each is Python source run by the engine's own interpreter (the bench's parent imports none of
Caffe2, torch or ONNX Runtime). A worker reads one JSON command a line on stdin and answers one
line starting with ``@@ `` on stdout (anything else a library prints there is ignored):
``{"cmd": "load", "folder", "data", "out"}`` loads the deploy model in ``folder``, runs it twice
on the images in ``data``, saves the output to ``out`` and answers ``{"seconds", "kernels"}``
(or ``{"error"}``); ``{"cmd": "time", "reps"}`` answers ``{"times", "inner"}``, seconds of each run (and of the part
of it the program's ``spent()`` counts, if it has one: XLA_SHARE).

A deploy model is a folder: ``init_net.pb`` and ``predict_net.pb`` (what Caffe2 users ship),
``meta.json`` (its input and output blobs, how it was made), and where it exists ``model.onnx``
(ONNX Runtime's input) and ``torch.pt`` (the torchvision module's weights, for PyTorch eager).
"""
from __future__ import annotations

# The worker loop every engine shares; an engine's program defines ``load(folder, meta)``,
# returning a function of the images that returns the model's output as a numpy array.
SERVE = r'''
import gc, json, os, sys, time
import numpy as np


def _say(**reply):
    sys.stdout.write("@@ " + json.dumps(reply) + "\n")
    sys.stdout.flush()


def _kernels():
    """The BLAS pools threadpoolctl sees, and what it cannot: the MKL and oneDNN linked into
    libtorch (Caffe2's and PyTorch's; torch's build configuration names them and the CPU
    path), ONNX Runtime's own MLAS."""
    try:
        from threadpoolctl import threadpool_info
        pools = [f"{i.get('internal_api')} {i.get('architecture') or i.get('threading_layer') or ''} "
                 f"{i.get('version')} x{i.get('num_threads')}" for i in threadpool_info()]
    except ImportError:
        pools = ["threadpoolctl not installed"]
    if "caffe2.python" in sys.modules or "torch" in sys.modules:
        import torch
        pools += [line.strip(" -") for line in torch.__config__.show().splitlines()
                  if "Math Kernel Library Version" in line or "MKL-DNN" in line or "CPU capability" in line]
    if "onnxruntime" in sys.modules:
        pools.append(f"onnxruntime {sys.modules['onnxruntime'].__version__} (its MLAS kernels)")
    return "; ".join(pools)


CLOCK = time.perf_counter  # (the time command's: wall, or with "clock": "cpu" this process's CPU time)
if "spent" not in globals():
    def spent():  # (a program may define it: the seconds so far of the part of a run it times apart)
        return 0.0


def _since(seen):
    """What ran outside XLA's calls (XLA_SHARE's ``outside``) since ``seen`` was read."""
    if seen is None:
        return None
    return {k: n - seen.get(k, 0) for k, n in outside().items() if n > seen.get(k, 0)}


def serve():
    run = x = None
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "load":
            run = x = None
            gc.collect()
            seen = outside() if "outside" in globals() else None
            try:
                t = time.perf_counter()
                with open(os.path.join(cmd["folder"], "meta.json")) as f:
                    meta = json.load(f)
                run = load(cmd["folder"], meta)
                x = np.load(cmd["data"])
                y = np.asarray(run(x))
                runs, began = 1, time.perf_counter()  # (numba: its switch to compiled loops, and their race)
                while runs < cmd.get("warmup", 2) or time.perf_counter() - began < cmd.get("warmup_s", 0):
                    run(x)
                    runs += 1
                np.save(cmd["out"], y.reshape(y.shape[0], -1))
                _say(seconds=time.perf_counter() - t, kernels=_kernels(), outside=_since(seen))
            except Exception as e:  # (reported by the bench, which goes on without this engine's figure)
                run = None
                _say(error=f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}")
        elif cmd["cmd"] == "time":
            global CLOCK
            CLOCK = time.process_time if cmd.get("clock") == "cpu" else time.perf_counter
            ts, inner = [], []
            for _ in range(cmd["reps"]):
                t, s = CLOCK(), spent()
                run(x)
                ts.append(CLOCK() - t)
                inner.append(spent() - s)
            _say(times=ts, inner=inner)
        else:
            return


_say(ready=True)
serve()
'''

# Caffe2 and dslc: the deploy model as its users serve it, through workspace.Predictor.
PREDICTOR = r'''
from {package} import workspace


def load(folder, meta):
    with open(os.path.join(folder, "init_net.pb"), "rb") as f:
        init = f.read()
    with open(os.path.join(folder, "predict_net.pb"), "rb") as f:
        predict = f.read()
    predictor = workspace.Predictor(init, predict)
    return lambda x: predictor.run([x])[0]
'''

# dslc xla's own share of a run: the seconds inside XLA's calls (each compiled run's call of
# its executable, inputs in and outputs out), with the race against the interpreter off
# (DSLC_XLA_TRIAL_RUNS=0: XLA's code always); what XLA alone takes for the model, when one
# XLA call runs the whole net. The rest of the run is dslc's around it (the ops the profile
# saw outside XLA's calls, the Predictor).
XLA_SHARE = r'''
from dslc.backends.xla import emitter as _xla
from dslc.driver import options
from dslc.runtime.profile import OpProfile

options.current().profile = True
options.current().profiler = _PROFILE = OpProfile()
_SPENT, _CALL = [0.0], _xla.RunCall.call


def _timed_call(self, args):
    t = CLOCK()
    try:
        return _CALL(self, args)
    finally:
        _SPENT[0] += CLOCK() - t


_xla.RunCall.call = _timed_call


def spent():
    return _SPENT[0]


def outside():
    """{op type: calls} of what ran outside XLA's calls so far."""
    return {kind: n for (kind, _), (t, n) in _PROFILE.counters.items() if kind != "xla run" and n}
'''

# ONNX Runtime on the exported (or, for the brew models, Caffe2-converted) ONNX model.
ORT = r'''
import onnxruntime as ort


def load(folder, meta):
    path = os.path.join(folder, "model.onnx")
    if not os.path.exists(path):
        raise FileNotFoundError("no ONNX model (" + meta.get("onnx_error", "not made") + ")")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda x: session.run(None, {name: x})[0]
'''

# PyTorch eager: the torchvision module itself for the exported models; for the brew models,
# the predict net's ops as torch.nn.functional calls.
TORCH = r'''
import torch
import torch.nn.functional as F
torch.set_num_threads(1)


def load(folder, meta):
    if meta["kind"] == "onnx":
        import torchvision
        model = getattr(torchvision.models, meta["torchvision"])(pretrained=False, **meta["kwargs"])
        model.load_state_dict(torch.load(os.path.join(folder, "torch.pt")))
        model.eval()
    else:
        model = _netdef_module(folder)

    def run(x):
        with torch.no_grad():
            return model(torch.from_numpy(x)).numpy()
    return run


def _netdef_module(folder):
    from caffe2.proto import caffe2_pb2
    from caffe2.python import workspace
    init, predict = caffe2_pb2.NetDef(), caffe2_pb2.NetDef()
    with open(os.path.join(folder, "init_net.pb"), "rb") as f:
        init.ParseFromString(f.read())
    with open(os.path.join(folder, "predict_net.pb"), "rb") as f:
        predict.ParseFromString(f.read())
    workspace.ResetWorkspace()
    workspace.RunNetOnce(init)
    params = {{b: torch.from_numpy(np.array(workspace.FetchBlob(b))) for b in workspace.Blobs()}}
    workspace.ResetWorkspace()
    ops = [(o.type, list(o.input), list(o.output), {{a.name: _arg(a) for a in o.arg}}) for o in predict.op]
    data, output = predict.external_input[0], predict.external_output[0]

    def model(x):
        blobs = dict(params)
        blobs[data] = x
        for t, ins, outs, a in ops:
            blobs[outs[0]] = _op(t, [blobs.get(n) for n in ins], a)
        return blobs[output]
    return model


def _arg(a):
    if a.HasField("i"):
        return a.i
    if a.HasField("f"):
        return a.f
    return list(a.ints) or list(a.floats) or (a.s.decode() if a.s else None)


def _op(t, i, a):
    if t == "Conv":
        return F.conv2d(i[0], i[1], i[2] if len(i) > 2 else None, stride=a.get("stride", 1), padding=a.get("pad", 0),
                        groups=a.get("group", 1))
    if t == "SpatialBN":
        return F.batch_norm(i[0], i[3], i[4], i[1], i[2], False, 0.0, a.get("epsilon", 1e-5))
    if t == "Relu":
        return F.relu(i[0])
    if t == "Sum":
        return i[0] + i[1]
    if t == "Concat":
        return torch.cat(i, 1)
    if t == "MaxPool":
        return F.max_pool2d(i[0], a["kernel"], a.get("stride", 1), a.get("pad", 0))
    if t == "AveragePool":
        return (F.adaptive_avg_pool2d(i[0], 1) if a.get("global_pooling") else
                F.avg_pool2d(i[0], a["kernel"], a.get("stride", 1), a.get("pad", 0), count_include_pad=False))
    if t == "FC":
        return F.linear(i[0].flatten(1), i[1], i[2])
    if t == "Reshape":
        return i[0].reshape([s if s != 0 else i[0].shape[d] for d, s in enumerate(a["shape"])])
    if t == "Transpose":
        return i[0].permute(*a["axes"])
    raise NotImplementedError("no torch op for " + t)
'''

# What both exports start with (the programs below follow it): the (model, batch) deploy
# models the bench asked for that the cache does not hold yet.
EXPORT_TODO = r'''
import json, os, sys
spec = json.loads(sys.argv[1])


def todo():
    """(name, batch, folder) of each deploy model to make; its folder made (and complete once
    its meta.json is written, last)."""
    for name in spec["models"]:
        for batch in spec["batches"]:
            folder = spec["folders"][name][str(batch)]
            if not os.path.exists(os.path.join(folder, "meta.json")):
                os.makedirs(folder, exist_ok=True)
                yield name, batch, folder
'''

# The torchvision models exported as their users did: torch.onnx.export (opset 9, the
# opset Caffe2's ONNX backend was built for; a fixed batch, as ShuffleNetV2's chunk needs),
# then caffe2.python.onnx.backend's converter to an init_net/predict_net pair. Weights are
# torchvision's random initialization under a fixed seed, BatchNorm's running statistics and
# affine parameters drawn too (so the BN the exporter folds into the convolutions is not an
# identity). Runs in the Caffe2 venv; writes one deploy-model folder per (model, batch).
# The converter splits the graph into init and predict nets with onnx.optimizer's split_init /
# split_predict passes; onnx 1.9 moved that module out to the onnxoptimizer package (without
# it the converter puts the whole forward pass into the init net as well), so it is put back.
EXPORT_ONNX = r'''
import io
import numpy as np
import onnx
import onnxoptimizer
import torch
import torchvision
from caffe2.python.onnx.backend import Caffe2Backend

onnx.optimizer = onnxoptimizer
torch.set_num_threads(1)
KWARGS = {"googlenet": dict(aux_logits=False, init_weights=False), "inception_v3": dict(aux_logits=False)}
for name, batch, folder in todo():
    torch.manual_seed(0)
    kwargs = KWARGS.get(name, {})
    model = getattr(torchvision.models, name)(pretrained=False, **kwargs)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)
    model.eval()
    x = torch.zeros(batch, 3, spec["size"], spec["size"])
    buf, ort_buf = io.BytesIO(), io.BytesIO()
    # (Caffe2's net needs the weights among the graph's inputs, as PyTorch's docs said;
    # ONNX Runtime gets the default, weights as constants it may fold)
    torch.onnx.export(model, x, buf, opset_version=9, input_names=["data"], output_names=["prob"],
                      keep_initializers_as_inputs=True)
    torch.onnx.export(model, x, ort_buf, opset_version=9, input_names=["data"], output_names=["prob"])
    init, predict = Caffe2Backend.onnx_graph_to_caffe2_net(onnx.load_from_string(buf.getvalue()), device="CPU")
    if any(o.input for o in init.op):
        raise SystemExit(f"{name}: the converted init net computes ({[o.type for o in init.op if o.input][:3]})")
    for o in predict.op:
        # (Caffe2 demands a kernel of every op whose NAME has "Pool" in it, a global
        # pooling included, which has none: the names the exporter gives its nodes make
        # Caffe2 refuse its own converter's GlobalAveragePool. Such ops lose their name.)
        if "Pool" in o.name and any(a.name == "global_pooling" and a.i for a in o.arg):
            o.name = ""
    for file, data in [("init_net.pb", init.SerializeToString()), ("predict_net.pb", predict.SerializeToString()),
                       ("model.onnx", ort_buf.getvalue())]:
        with open(os.path.join(folder, file), "wb") as f:
            f.write(data)
    torch.save(model.state_dict(), os.path.join(folder, "torch.pt"))
    with open(os.path.join(folder, "meta.json"), "w") as f:  # (written last: the folder is complete)
        json.dump(dict(kind="onnx", torchvision=name, kwargs=kwargs, opset=9, torch=torch.__version__,
                       ops=sorted({o.type for o in predict.op})), f)
    print("exported", name, batch, flush=True)
'''

# A brew model's parameters (bench/inference.py's MODELS) from one seeded generator, in the
# order its init net makes them: {blob: float32 array}. Caffe2's export below writes them into
# a deploy model's init net; bench/weights_once.py (and numba_fallback.py's engines through it)
# feed them to dslc directly.
FILL = r'''
def fill_values(m, rng):
    """Every parameter the init net makes, from rng: conv and FC weights scaled by their
    fan-in, BN's scale near 1, its mean and bias small, its variance in [0.5, 1.5]."""
    import numpy as np
    values = {}
    for op in m.param_init_net.Proto().op:
        shape = [a.ints for a in op.arg if a.name == "shape"][0]
        name = op.output[0]
        if name.endswith("_w"):
            v = rng.standard_normal(shape) * np.sqrt(2.0 / max(1, int(np.prod(shape[1:]))))
        elif name.endswith(("_riv", "_s")):
            v = rng.uniform(0.5, 1.5, shape)
        else:
            v = rng.standard_normal(shape) * 0.1
        values[name] = v.astype(np.float32)
    return values
'''

# The brew models (bench/inference.py's MODELS) built by Caffe2's brew, their parameters
# filled by FILL (the program follows it), saved as a deploy model the way predictor_exporter
# users did (an init net of GivenTensorFills), and converted to ONNX by
# caffe2.python.onnx.frontend for ONNX Runtime where the converter takes the net.
EXPORT_BREW = r'''
import numpy as np
from caffe2.python import brew, core, model_helper, workspace
from caffe2.proto import caffe2_pb2
{models}


def fill(m, rng):
    """The init net of FILL's values."""
    init = caffe2_pb2.NetDef()
    for name, v in fill_values(m, rng).items():
        init.op.extend([core.CreateOperator("GivenTensorFill", [], [name], shape=list(v.shape),
                                            values=v.ravel().tolist())])
    return init


for name, batch, folder in todo():
    workspace.ResetWorkspace()
    m = model_helper.ModelHelper(name=name, init_params=True)
    out = str(build(name, brew, m, spec["size"]))
    init = fill(m, np.random.default_rng(0))
    predict = m.net.Proto()
    predict.external_output[:] = [out]
    meta = dict(kind="brew", ops=sorted({{o.type for o in predict.op}}))
    try:
        import onnx
        from caffe2.python.onnx import frontend
        shape = [batch, 3, spec["size"], spec["size"]]
        model = frontend.caffe2_net_to_onnx_model(predict, init, {{"data": (onnx.TensorProto.FLOAT, shape)}})
        with open(os.path.join(folder, "model.onnx"), "wb") as f:
            f.write(model.SerializeToString())
    except Exception as e:  # (ONNX Runtime then has no figure for this model; the bench says why)
        meta["onnx_error"] = f"{{type(e).__name__}}: {{(str(e).strip().splitlines() or [''])[0][:200]}}"
    for file, net in [("init_net.pb", init), ("predict_net.pb", predict)]:
        with open(os.path.join(folder, file), "wb") as f:
            f.write(net.SerializeToString())
    with open(os.path.join(folder, "meta.json"), "w") as f:
        json.dump(meta, f)
    print("exported", name, batch, flush=True)
'''
