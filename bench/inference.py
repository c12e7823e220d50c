"""Deploy conv nets on dslc (interp, numba, xla) against the real Caffe2, PyTorch eager and
ONNX Runtime, timed side by side in one run, one thread, batch 1 and 16.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE nice python bench/inference.py \
        [--models onnx-resnet18,resnet18,...] [--batches 1,16] [--rounds 3] [--reps 3] [--warmup 8] [--warmup-s 4]

The models are deploy models (an init_net/predict_net pair) made two ways, once, into a cache
folder (``--cache``, default ``$XDG_CACHE_HOME/dslc-bench/inference``; never the repository):
- ``onnx-NAME``: torchvision's NAME (random weights, eval mode) exported as its users did,
  torch -> ONNX (opset 9) -> Caffe2 with caffe2.python.onnx.backend, in the real Caffe2's venv
  (``$CAFFE2_VENV``, default /tmp/caffe2-venv, with torchvision 0.11 and onnx 1.10 installed);
  ONNX Runtime runs the exported ONNX file, PyTorch eager the torchvision module itself.
- the brew models below (shapes of the real ones, fewer blocks where noted), built by Caffe2's
  brew with seeded parameters; ONNX Runtime runs them as caffe2.python.onnx.frontend converts
  them, PyTorch eager as torch.nn.functional calls over the predict net's ops.

Every engine is a long-lived worker process in its own Python (this process imports none of
Caffe2, torch or ONNX Runtime; bench/inference_engines.py holds their programs), pinned to one
core with one thread everywhere. Each (model, batch) is loaded by every engine (Caffe2 and dslc
through ``workspace.Predictor``) and warmed up (``--warmup``), its output checked against Caffe2's
(largest difference over the largest output; top-1 equal on every sample), then timed in ``--rounds`` interleaved rounds:
each round runs every engine (in a rotated order) ``--reps`` times and takes its median; the
ratios printed are medians over rounds of ratios within a round. Each engine's BLAS kernels
are printed as threadpoolctl reports them.

The bound of the xla backend: engine "XLA alone" is dslc xla with its race against the
interpreter off (XLA's code always), timed twice over the same runs: the seconds inside XLA's
calls ("XLA alone": what XLA itself takes for the model, the whole net being one call where the
load line names nothing "outside XLA's calls") and the whole run ("xla, race off"); the gap is
dslc's own time around XLA.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[_var] = "1"  # (the subprocesses inherit them)
# (dslc xla's workers: XLA's CPU runtime on one thread too, as bench/xla.py runs it)
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()

sys.path.insert(0, str(Path(__file__).resolve().parent))
import inference_engines as programs  # noqa: E402
from timing import one_core  # noqa: E402

# torchvision's names of the models exported through ONNX.
ONNX_MODELS = ["resnet18", "resnet50", "mobilenet_v2", "squeezenet1_1", "shufflenet_v2_x1_0", "googlenet", "vgg11",
               "alexnet", "densenet121"]
BREW_MODELS = ["resnet18", "resnet50", "mobilenetv2", "shufflenet", "squeezenet", "vgg11", "alexnet"]
DSLC = ("dslc interp", "dslc numba", "dslc xla")
PEERS = ("Caffe2", "ONNX Runtime", "PyTorch eager")
# XLA's own time for a model (the bound of what dslc xla can reach): a dslc xla engine with the
# race off, timed inside XLA's calls (inference_engines.XLA_SHARE); its whole runs are the
# figure "xla, race off" beside it, their difference dslc's own time around XLA
XLA_ALONE, XLA_WHOLE = "XLA alone", "xla, race off"

# The models, as brew programs: run as they are by dslc, with `dslc` renamed
# `caffe2.python` by Caffe2. `build(name, brew, m, size)` returns the output blob.
MODELS = r'''
def bn_relu(brew, m, x, name, c, relu=True):
    y = brew.spatial_bn(m, x, name + "_bn", c, epsilon=1e-5, is_test=True)
    return brew.relu(m, y, name + "_relu") if relu else y


def conv_bn(brew, m, x, name, cin, cout, k, stride=1, pad=None, group=1, relu=True):
    pad = k // 2 if pad is None else pad
    y = brew.conv(m, x, name, cin, cout, k, stride=stride, pad=pad, group=group, no_bias=True)
    return bn_relu(brew, m, y, name, cout, relu)


def basic(brew, m, x, name, cin, cout, stride):
    y = conv_bn(brew, m, x, name + "_a", cin, cout, 3, stride)
    y = conv_bn(brew, m, y, name + "_b", cout, cout, 3, relu=False)
    if stride != 1 or cin != cout:
        x = conv_bn(brew, m, x, name + "_proj", cin, cout, 1, stride, relu=False)
    return brew.relu(m, brew.sum(m, [y, x], name + "_sum"), name + "_out")


def bottleneck(brew, m, x, name, cin, cout, stride):
    mid = cout // 4
    y = conv_bn(brew, m, x, name + "_a", cin, mid, 1)
    y = conv_bn(brew, m, y, name + "_b", mid, mid, 3, stride)
    y = conv_bn(brew, m, y, name + "_c", mid, cout, 1, relu=False)
    if stride != 1 or cin != cout:
        x = conv_bn(brew, m, x, name + "_proj", cin, cout, 1, stride, relu=False)
    return brew.relu(m, brew.sum(m, [y, x], name + "_sum"), name + "_out")


def resnet(brew, m, x, block, widths, depths, expand):
    y = conv_bn(brew, m, x, "conv1", 3, 64, 7, 2, 3)
    y = brew.max_pool(m, y, "pool1", kernel=3, stride=2, pad=1)
    cin = 64
    for s, (w, d) in enumerate(zip(widths, depths)):
        for i in range(d):
            y = block(brew, m, y, f"s{s}b{i}", cin, w * expand, 2 if i == 0 and s > 0 else 1)
            cin = w * expand
    return head(brew, m, y, cin)


def head(brew, m, y, c, classes=1000):
    y = brew.average_pool(m, y, "gap", global_pooling=True)
    return brew.fc(m, y, "pred", c, classes)


def mobilenetv2(brew, m, x):
    y = conv_bn(brew, m, x, "stem", 3, 32, 3, 2)
    cin = 32
    for s, (t, c, n, stride) in enumerate([(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                                           (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]):
        for i in range(n):
            name, hid = f"ir{s}_{i}", cin * t
            z = conv_bn(brew, m, y, name + "_exp", cin, hid, 1) if t != 1 else y
            z = conv_bn(brew, m, z, name + "_dw", hid, hid, 3, stride if i == 0 else 1, group=hid)
            z = conv_bn(brew, m, z, name + "_lin", hid, c, 1, relu=False)
            y = brew.sum(m, [z, y], name + "_sum") if (i > 0 or stride == 1) and cin == c else z
            cin = c
    y = conv_bn(brew, m, y, "last", cin, 1280, 1)
    return head(brew, m, y, 1280)


def shuffle(m, x, name, groups, c, hw):
    y, _ = m.net.Reshape([x], [name + "_r", name + "_rs"], shape=[0, groups, c // groups, hw, hw])
    y = m.net.Transpose([y], [name + "_t"], axes=[0, 2, 1, 3, 4])
    y, _ = m.net.Reshape([y], [name + "_u", name + "_us"], shape=[0, c, hw, hw])
    return y


def shufflenet(brew, m, x, size, groups=3):
    y = conv_bn(brew, m, x, "stem", 3, 24, 3, 2)
    y = brew.max_pool(m, y, "pool1", kernel=3, stride=2, pad=1)
    cin, hw = 24, size // 4
    for s, (c, n) in enumerate([(240, 4), (480, 8), (960, 4)]):
        for i in range(n):
            name, first = f"u{s}_{i}", i == 0
            out = c - cin if first else c
            mid = out // 4
            z = conv_bn(brew, m, y, name + "_g1", cin, mid, 1, group=1 if s == 0 and first else groups)
            z = shuffle(m, z, name + "_sh", groups, mid, hw)
            z = conv_bn(brew, m, z, name + "_dw", mid, mid, 3, 2 if first else 1, group=mid, relu=False)
            if first:
                hw = (hw - 1) // 2 + 1
            z = conv_bn(brew, m, z, name + "_g2", mid, out, 1, group=groups, relu=False)
            if first:
                p = brew.average_pool(m, y, name + "_ap", kernel=3, stride=2, pad=1)
                y = brew.relu(m, brew.concat(m, [z, p], name + "_cat"), name + "_out")
            else:
                y = brew.relu(m, brew.sum(m, [z, y], name + "_sum"), name + "_out")
            cin = c
    return head(brew, m, y, cin)


def fire(brew, m, x, name, cin, sq, ex):
    s = brew.relu(m, brew.conv(m, x, name + "_sq", cin, sq, 1), name + "_sqr")
    a = brew.relu(m, brew.conv(m, s, name + "_e1", sq, ex, 1), name + "_e1r")
    b = brew.relu(m, brew.conv(m, s, name + "_e3", sq, ex, 3, pad=1), name + "_e3r")
    return brew.concat(m, [a, b], name + "_cat")


def squeezenet(brew, m, x):
    y = brew.relu(m, brew.conv(m, x, "conv1", 3, 64, 3, stride=2), "relu1")
    y = brew.max_pool(m, y, "pool1", kernel=3, stride=2)
    cin = 64
    for i, fire_args in enumerate([(16, 64), (16, 64), "pool", (32, 128), (32, 128), "pool",
                                   (48, 192), (48, 192), (64, 256), (64, 256)]):
        if fire_args == "pool":
            y = brew.max_pool(m, y, f"pool{i}", kernel=3, stride=2)
            continue
        y = fire(brew, m, y, f"fire{i}", cin, *fire_args)
        cin = 2 * fire_args[1]
    y = brew.relu(m, brew.conv(m, y, "conv10", cin, 1000, 1), "relu10")
    return brew.average_pool(m, y, "gap", global_pooling=True)


def plain(brew, m, x, layers, size, fc):
    cin = 3
    for i, (c, k, stride, pool) in enumerate(layers):
        x = brew.relu(m, brew.conv(m, x, f"conv{i}", cin, c, k, stride=stride, pad=k // 2), f"relu{i}")
        size = (size + 2 * (k // 2) - k) // stride + 1
        if pool:
            x = brew.max_pool(m, x, f"pool{i}", kernel=pool, stride=2)
            size = (size - pool) // 2 + 1
        cin = c
    x = brew.relu(m, brew.fc(m, x, "fc1", cin * size * size, fc), "fc1r")
    x = brew.relu(m, brew.fc(m, x, "fc2", fc, fc), "fc2r")
    return brew.fc(m, x, "pred", fc, 1000)


def build(name, brew, m, size):
    x = "data"
    if name == "resnet18":
        return resnet(brew, m, x, basic, [64, 128, 256, 512], [2, 2, 2, 2], 1)
    if name == "resnet50":
        return resnet(brew, m, x, bottleneck, [64, 128, 256, 512], [3, 4, 6, 3], 4)
    if name == "mobilenetv2":
        return mobilenetv2(brew, m, x)
    if name == "shufflenet":
        return shufflenet(brew, m, x, size)
    if name == "squeezenet":
        return squeezenet(brew, m, x)
    if name == "vgg11":
        return plain(brew, m, x, [(64, 3, 1, 2), (128, 3, 1, 2), (256, 3, 1, 0), (256, 3, 1, 2), (512, 3, 1, 0),
                                  (512, 3, 1, 2), (512, 3, 1, 0), (512, 3, 1, 2)], size, 1024)
    if name == "alexnet":
        return plain(brew, m, x, [(64, 11, 4, 3), (192, 5, 1, 3), (384, 3, 1, 0), (256, 3, 1, 0), (256, 3, 1, 3)],
                     size, 1024)
    raise SystemExit("unknown model " + name)
'''



def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(["onnx-" + m for m in ONNX_MODELS] + BREW_MODELS),
                    help="onnx-NAME (torchvision's NAME through ONNX) or a brew model: " + ", ".join(BREW_MODELS))
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3, help="timed runs per engine in a round (their median)")
    ap.add_argument("--warmup", type=int, default=8,
                    help="runs of each (model, batch) on every engine before the timed rounds, and at least "
                         "--warmup-s seconds of them: numba (hot mode, the default) switches its convolutions to "
                         "compiled loops once they have run 1 s interpreted together (0.2 s once numba is loaded), "
                         "then races them against the interpreter over 3 runs each")
    ap.add_argument("--warmup-s", type=float, default=4.0)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="wall time, or each engine's CPU time (steadier where other jobs load the machine)")
    ap.add_argument("--engines", default=",".join(PEERS + DSLC + (XLA_ALONE,)),
                    help="a subset of: " + ", ".join(PEERS + DSLC + (XLA_ALONE,)))
    ap.add_argument("--mkl-as-is", action="store_true",
                    help="leave MKL_DEBUG_CPU_TYPE unset for Caffe2 and PyTorch (on AMD CPUs MKL 2020 then "
                         "takes its generic path, not AVX2)")
    ap.add_argument("--cache", default=os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                                    "dslc-bench", "inference"))
    args = ap.parse_args(argv)
    models = args.models.split(",")
    batches = [int(b) for b in args.batches.split(",")]
    unknown = [m for m in models if m not in BREW_MODELS and m.removeprefix("onnx-") not in ONNX_MODELS]
    if unknown:
        ap.error(f"unknown model {unknown[0]!r}: use onnx-NAME with NAME one of {ONNX_MODELS}, or one of {BREW_MODELS}")
    one_core()
    folders = model_folders(models, batches, args.size, args.cache)
    c2 = Path(os.environ.get("CAFFE2_VENV", "/tmp/caffe2-venv")) / "bin" / "python"
    if not export(models, batches, args.size, folders, c2):
        return 1
    wanted = args.engines.split(",")
    print(f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}; "
          f"OPENBLAS_L2_SIZE={os.environ.get('OPENBLAS_L2_SIZE', '(unset)')}; MKL_DEBUG_CPU_TYPE for Caffe2 and "
          f"PyTorch: {os.environ.get('MKL_DEBUG_CPU_TYPE', '(unset)' if args.mkl_as_is else '5')}; one core, one thread; "
          f"images {args.size}x{args.size}; {args.rounds} rounds of {args.reps} runs; clock: {args.clock}", flush=True)
    results = {}
    with tempfile.TemporaryDirectory() as top:
        workers = [Worker(name, python, env, program, top) for name, python, env, program in engines(c2, args.mkl_as_is)
                   if name in wanted]
        for batch in batches:  # (every model at one batch size, then the next: a stopped run has whole rows)
            for model in models:
                results[(model, batch)] = measure(workers, model, batch, folders[model][batch], args, top)
        for w in workers:
            w.close()
    names = [w.name for w in workers]
    report(models, batches, names + [XLA_WHOLE] if XLA_ALONE in names else names, results)
    return 0


def model_folders(models, batches, size, cache) -> dict:
    """{model: {batch: the deploy model's folder}}; a brew model's folders are keyed by its
    builders' source too, so an edit of MODELS makes them afresh."""
    import hashlib
    brew_key = hashlib.sha256((MODELS + programs.FILL + programs.EXPORT_BREW).encode()).hexdigest()[:10]
    out = {}
    for m in models:
        sub = f"{m}" if m.startswith("onnx-") else f"brew-{m}-{brew_key}"
        out[m] = {b: os.path.join(cache, sub, f"b{b}_s{size}") for b in batches}
    return out


def export(models, batches, size, folders, c2) -> bool:
    """Make the deploy models not yet in the cache, in Caffe2's venv; False if one cannot be made."""
    missing = [m for m in models if any(not os.path.exists(os.path.join(folders[m][b], "meta.json")) for b in batches)]
    if not missing:
        return True
    if not c2.exists():
        print(f"the deploy models {missing} are not in the cache and there is no Caffe2 to make them ({c2}): "
              "set CAFFE2_VENV to the caffe2-ref venv (with torchvision 0.11 and onnx 1.10 installed)")
        return False
    for kind, program, names in [
            ("onnx", programs.EXPORT_TODO + programs.EXPORT_ONNX,
             [m.removeprefix("onnx-") for m in missing if m.startswith("onnx-")]),
            ("brew", programs.EXPORT_TODO + programs.FILL + programs.EXPORT_BREW.format(models=MODELS),
             [m for m in missing if not m.startswith("onnx-")])]:
        if not names:
            continue
        spec = dict(models=names, batches=batches, size=size,
                    folders={n: {str(b): folders[n if kind == "brew" else "onnx-" + n][b] for b in batches}
                             for n in names})
        print(f"making the {kind} deploy models {names} with Caffe2 ({c2}); once, into the cache", flush=True)
        with tempfile.TemporaryFile("w+") as err:  # (the exporter's warnings: shown only if it fails)
            proc = subprocess.run([str(c2), "-c", program, json.dumps(spec)], stderr=err, text=True)
            if proc.returncode:
                err.seek(0)
                print(f"  failed: {(err.read().strip().splitlines() or ['?'])[-1]}")
                return False
    return True


def engines(c2, mkl_as_is=False):
    """(name, python, environment, program) of every engine this machine has. Caffe2 and
    PyTorch run libtorch's MKL 2020, which on an AMD CPU takes a generic path unless
    MKL_DEBUG_CPU_TYPE=5 names AVX2 (a 3x3 convolution on Caffe2 1.5-1.6x faster with it on
    an AMD EPYC): set for them, unless ``mkl_as_is`` or already set."""
    import importlib.util
    dslc = programs.PREDICTOR.format(package="dslc")
    jax = importlib.util.find_spec("jax")
    ours = [(n, sys.executable, {"DSLC_BACKEND": n.split()[1]}, dslc + programs.SERVE) for n in DSLC
            if n != "dslc xla" or jax]
    if jax:
        ours.append((XLA_ALONE, sys.executable, {"DSLC_BACKEND": "xla", "DSLC_XLA_TRIAL_RUNS": "0"},
                     dslc + programs.XLA_SHARE + programs.SERVE))
    mkl = {} if mkl_as_is or "MKL_DEBUG_CPU_TYPE" in os.environ else {"MKL_DEBUG_CPU_TYPE": "5"}
    out = []
    if c2.exists():
        out.append(("Caffe2", str(c2), mkl, programs.PREDICTOR.format(package="caffe2.python") + programs.SERVE))
    for name, module, program in [("ONNX Runtime", "onnxruntime", programs.ORT), ("PyTorch eager", "torch",
                                                                                   programs.TORCH.format())]:
        python = sys.executable if importlib.util.find_spec(module) else str(c2) if c2.exists() else None
        if python and subprocess.run([python, "-c", "import " + module], capture_output=True).returncode == 0:
            out.append((name, python, mkl if module == "torch" else {}, program + programs.SERVE))
    return out + ours


class Worker:
    """One engine's long-lived process (the protocol is in bench/inference_engines.py)."""

    def __init__(self, name, python, env, program, top):
        self.name, self.kernels, self.folder = name, None, os.path.join(top, name.replace(" ", "_"))
        os.mkdir(self.folder)
        self._err = open(os.path.join(self.folder, "stderr.txt"), "w+")
        self._proc = subprocess.Popen([python, "-c", program], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._err, text=True, env=dict(os.environ, **env))
        self.ask(None)

    def ask(self, cmd):
        """The worker's answer to ``cmd`` (None: its greeting); {"error"} if it died."""
        if self._proc.poll() is None and cmd is not None:
            self._proc.stdin.write(json.dumps(cmd) + "\n")
            self._proc.stdin.flush()
        for line in self._proc.stdout:
            if line.startswith("@@ "):
                return json.loads(line[3:])
        self._err.seek(0)
        return dict(error="the worker stopped: " + ((self._err.read().strip().splitlines() or ["?"])[-1])[:300])

    def close(self):
        if self._proc.poll() is None:
            self._proc.stdin.write(json.dumps(dict(cmd="quit")) + "\n")
            self._proc.stdin.close()
            self._proc.wait()
        self._err.close()


def measure(workers, model, batch, folder, args, top) -> dict:
    """Load (model, batch) in every worker, then time it in interleaved rounds:
    {engine: {"rounds": [median seconds per round], "out": output file} or {"error"}}."""
    import numpy as np
    data = os.path.join(top, f"data_{batch}_{args.size}.npy")
    if not os.path.exists(data):
        rng = np.random.default_rng(batch)
        np.save(data, rng.standard_normal((batch, 3, args.size, args.size)).astype(np.float32))
    out, live = {}, []
    for w in workers:
        target = os.path.join(w.folder, f"{model}_{batch}.npy")
        answer = w.ask(dict(cmd="load", folder=folder, data=data, out=target, warmup=args.warmup,
                                        warmup_s=args.warmup_s))
        if "error" in answer:
            print(f"  {model} b{batch}: {w.name}: {answer['error']}", flush=True)
            out[w.name] = answer
            continue
        if w.kernels is None:
            w.kernels = answer["kernels"]
            print(f"  {w.name}'s kernels: {w.kernels}", flush=True)
        if answer.get("outside"):
            print(f"  {model} b{batch}: {w.name}: outside XLA's calls: {answer['outside']}", flush=True)
        out[w.name] = dict(rounds=[], out=target, load=answer["seconds"])
        if w.name == XLA_ALONE:
            out[XLA_WHOLE] = dict(rounds=[])
        live.append(w)
    for n, r in out.items():
        if "out" in r and "out" in out.get("Caffe2", {}):
            r["agree"] = agreement(r["out"], out["Caffe2"]["out"])
    for r in range(args.rounds):
        for w in live[r % len(live):] + live[:r % len(live)] if live else []:
            answer = w.ask(dict(cmd="time", reps=args.reps, clock=args.clock))
            if "error" in answer:
                out[w.name] = answer
            elif "rounds" in out[w.name]:
                out[w.name]["rounds"].append(statistics.median(answer["inner" if w.name == XLA_ALONE else "times"]))
                if w.name == XLA_ALONE:
                    out[XLA_WHOLE]["rounds"].append(statistics.median(answer["times"]))
    done = {n: r for n, r in out.items() if r.get("rounds")}
    print(f"{model} b{batch}: " + ", ".join(f"{n} {statistics.median(r['rounds']) * 1e3:.1f} ms"
                                             for n, r in done.items()), flush=True)
    best = [f"{label}/{p} {ratio(out, engines, p):.2f}" for label, engines in [("best", ("dslc interp", "dslc numba")),
                                                                              ("alone", (XLA_ALONE,))]
            for p in PEERS if ratio(out, engines, p) is not None]
    agree = [f"{n} {r['agree'][0]:.1e} top-1 {r['agree'][1]}/{r['agree'][2]}" for n, r in out.items() if "agree" in r]
    print(f"  {', '.join(best)}; against Caffe2's output: {', '.join(agree)}", flush=True)
    return out


def ratio(results, engines, peer) -> float | None:
    """Median over rounds of (the fastest of ``engines`` in the round) / ``peer`` in the round."""
    ts = [results[e]["rounds"] for e in engines if results.get(e, {}).get("rounds")]
    ref = results.get(peer, {}).get("rounds")
    if not ts or not ref:
        return None
    return statistics.median(min(t[r] for t in ts) / ref[r] for r in range(min(len(ref), *map(len, ts))))


def agreement(mine, ref):
    """(largest difference from Caffe2's output over its largest, samples whose top-1 equals Caffe2's, samples)."""
    import numpy as np
    a, b = np.load(mine).astype(np.float64), np.load(ref).astype(np.float64)
    if a.shape != b.shape:
        return float("inf"), 0, len(b)
    return float(abs(a - b).max() / abs(b).max()), int((a.argmax(1) == b.argmax(1)).sum()), len(b)


def report(models, batches, names, results):
    fmt = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    print("\nmilliseconds per inference (median over rounds of each round's median):")
    print(f"{'model':26s} {'batch':>5s} " + " ".join(f"{n:>13s}" for n in names))
    for m in models:
        for b in batches:
            cells = [results[(m, b)].get(n, {}).get("rounds") for n in names]
            print(f"{m:26s} {b:5d} " + " ".join(f"{statistics.median(c) * 1e3:13.1f}" if c else f"{'-':>13s}"
                                                 for c in cells))
    best = ("dslc interp", "dslc numba")
    print("\nratios, median over rounds of ratios within a round (dslc best = the faster of interp and numba"
          f" in each round; alone = {XLA_ALONE}: the seconds inside XLA's calls of a dslc xla run with the race off;"
          f" race off = that run whole):")
    cols = [(f"best/{p}", best, p) for p in PEERS] + [(f"xla/{p}", ("dslc xla",), p) for p in PEERS] + \
        [(f"alone/{p}", (XLA_ALONE,), p) for p in PEERS] + [("xla/alone", ("dslc xla",), XLA_ALONE),
                                                             ("race off/alone", (XLA_WHOLE,), XLA_ALONE)]
    cols = [c for c in cols if c[2] in names and all(e in names for e in c[1])]
    print(f"{'model':26s} {'batch':>5s} " + " ".join(f"{c[0]:>19s}" for c in cols))
    for m in models:
        for b in batches:
            print(f"{m:26s} {b:5d} " + " ".join(f"{fmt(ratio(results[(m, b)], c[1], c[2])):>19s}" for c in cols))
    print("\nagreement with Caffe2's output (largest difference over the largest output; top-1 equal):")
    for n in names:
        if n == "Caffe2":
            continue
        rows = [(m, b, results[(m, b)].get(n, {}).get("agree")) for m in models for b in batches]
        rows = [r for r in rows if r[2]]
        if rows:
            worst = max(rows, key=lambda r: r[2][0])
            top1 = sum(r[2][1] for r in rows), sum(r[2][2] for r in rows)
            print(f"  {n}: worst {worst[2][0]:.2e} ({worst[0]} b{worst[1]}); top-1 equal on {top1[0]} of {top1[1]}")


if __name__ == "__main__":
    sys.exit(main())
