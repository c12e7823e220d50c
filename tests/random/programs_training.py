"""Random training programs, with plain numpy references written from Caffe2's definitions
(no dslc code in the references).

* ``stacks()`` draws a recurrent layer or a stack of them (``rnn_cell.LSTM`` / ``BasicRNN``,
  or a ``MultiRNNCell`` with residual layers): sizes, sequence lengths, drop_states,
  forget_bias, a scope or none. ``build_stack`` records it; ``stack_values`` draws every
  parameter *by Caffe2's name* (``caffe2_names``, from Caffe2's naming rule, not from the
  model) and the inputs; ``stack_output`` steps the layers in numpy.
* ``trainings()`` draws an optimizer with its options (momentum, nesterov, rowWise,
  weight_decay, smart decay, RAdam, ...), ``sparse_dedup_aggregator``, a learning-rate
  policy, a batch of ids with repeats, a 2-D table, maybe a 1-D table, maybe a dense FC.
  ``build_training`` records the model and the optimizer; ``train_reference`` runs the
  same steps in numpy: the loss's gradients by hand, each update rule as Caffe2 defines it
  (a sparse update row by row, a repeated row once per occurrence in order, or once with
  the rows' sum or mean when deduplicated).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


# ----------------------------------------------------------------------------- recurrent stacks
@dataclass(frozen=True)
class Stack:
    kind: str              # "lstm" or "rnn" (BasicRNN)
    dims: tuple            # hidden units per layer
    T: int
    N: int
    D: int
    lengths: tuple | None  # per sequence, or no seq_lengths input
    drop_states: bool
    forget_bias: float
    activation: str        # BasicRNN's: "tanh" or "relu"
    scope: str | None
    residual: tuple        # layers whose input adds to their output (built as a MultiRNNCell)
    seed: int

    @property
    def n_states(self) -> int:
        return 2 if self.kind == "lstm" else 1


@st.composite
def stacks(draw) -> Stack:
    kind = draw(st.sampled_from(["lstm", "rnn"]))
    layers = draw(st.integers(1, 3))
    residual = ()
    if layers > 1 and draw(st.booleans()):  # (residual layers add their input: one size for all)
        h = draw(st.integers(1, 3))
        dims = (h,) * layers
        residual = tuple(k for k in range(1, layers) if draw(st.booleans())) or (layers - 1,)
    else:
        dims = tuple(draw(st.integers(1, 3)) for _ in range(layers))
    T, N = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    lengths = tuple(draw(st.integers(0, T)) for _ in range(N)) if draw(st.booleans()) else None
    return Stack(kind=kind, dims=dims, T=T, N=N, D=draw(st.integers(1, 3)), lengths=lengths,
                 drop_states=draw(st.booleans()), forget_bias=draw(st.sampled_from([0.0, 0.5, 1.0])),
                 activation=draw(st.sampled_from(["tanh", "relu"])), scope=draw(st.sampled_from(["r", "enc/rnn", None])),
                 residual=residual, seed=draw(st.integers(0, 2**16)))


def render_stack(s: Stack) -> str:
    return (f"{s.kind} dims {s.dims} T {s.T} N {s.N} D {s.D} lengths {s.lengths} drop_states {s.drop_states} "
            f"forget_bias {s.forget_bias} activation {s.activation} scope {s.scope!r} residual {s.residual} "
            f"seed {s.seed}")


def caffe2_names(s: Stack) -> dict:
    """{(layer, weight): blob name} by Caffe2's rule: a single layer's weights are
    ``<scope>/i2h_w`` ...; a stack's layer 0 input projection ``<scope>/i2h_*`` (made before
    the loop), every other weight ``<scope>/layer_<k>/...`` (no scope: no prefix)."""
    top = f"{s.scope}/" if s.scope else ""
    names = {}
    for k in range(len(s.dims)):
        layer = top if len(s.dims) == 1 else f"{top}layer_{k}/"
        for w in ("i2h_w", "i2h_b", "gates_t_w", "gates_t_b"):
            names[k, w] = (top if w.startswith("i2h") and k == 0 else layer) + w
    return names


def _fan(s: Stack, k: int) -> tuple:
    """(gates, input size) of layer k."""
    gates = (4 if s.kind == "lstm" else 1) * s.dims[k]
    return gates, s.D if k == 0 else s.dims[k - 1]


def stack_values(s: Stack) -> tuple[dict, dict]:
    """(parameters {(layer, weight): array}, inputs {"x", "h<k>_<j>", "lengths"}), float32-exact."""
    rng = np.random.default_rng(s.seed)

    def draw(*shape, scale=0.6):
        return (rng.uniform(-scale, scale, shape).astype(np.float32))
    params = {}
    for k, h in enumerate(s.dims):
        gates, fan_in = _fan(s, k)
        params[k, "i2h_w"], params[k, "i2h_b"] = draw(gates, fan_in), draw(gates)
        params[k, "gates_t_w"], params[k, "gates_t_b"] = draw(gates, h), draw(gates)
    inputs = {"x": draw(s.T, s.N, s.D, scale=1.0)}
    for k, h in enumerate(s.dims):
        for j in range(s.n_states):
            inputs[f"h{k}_{j}"] = draw(1, s.N, h, scale=0.5)
    if s.lengths is not None:
        inputs["lengths"] = np.array(s.lengths, np.int32)
    return params, inputs


def build_stack(s: Stack):
    """The model and its output sequence blob; the initial states are the fed ``h<k>_<j>``."""
    from dslc import rnn_cell
    from dslc.model_helper import ModelHelper

    model = ModelHelper(name="stack")
    states = [f"h{k}_{j}" for k in range(len(s.dims)) for j in range(s.n_states)]
    lengths = "lengths" if s.lengths is not None else None
    cell_args = dict(forget_bias=s.forget_bias, memory_optimization=False, drop_states=s.drop_states)
    if s.kind == "rnn":
        cell_args["activation"] = s.activation
    if not s.residual:
        layer = rnn_cell.LSTM if s.kind == "lstm" else rnn_cell.BasicRNN
        extra = {k: v for k, v in cell_args.items() if k != "memory_optimization"}
        out = layer(model, "x", lengths, states, s.D, list(s.dims) if len(s.dims) > 1 else s.dims[0],
                    scope=s.scope, **extra)[0]
        return model, out
    cls = rnn_cell.LSTMCell if s.kind == "lstm" else rnn_cell.BasicRNNCell
    cells = [cls(input_size=_fan(s, k)[1], hidden_size=h, **cell_args) for k, h in enumerate(s.dims)]
    multi = rnn_cell.MultiRNNCell(cells, name=s.scope, residual_output_layers=list(s.residual))
    # (every layer whose output sums into the cell's output passes its gradient back)
    with_grads = [2 * s.n_states * k for k in _connected(s)]
    out, _ = multi.apply_over_sequence(model, "x", lengths, initial_states=states, outputs_with_grads=with_grads)
    return model, out


def _connected(s: Stack) -> list:
    """The layers whose outputs add up to a residual stack's output: the top one and the
    unbroken run below it of layers whose next layer is residual (Caffe2's MultiRNNCell)."""
    top = len(s.dims) - 1
    out = [top]
    while out[0] > 0 and out[0] in s.residual:
        out.insert(0, out[0] - 1)
    return out


def stack_output(s: Stack, params: dict, inputs: dict) -> np.ndarray:
    """The output sequence [T, N, H] in float64, step by step."""
    return _step_layers(s, params, inputs)[0]


def stack_kinks(s: Stack, params: dict, inputs: dict) -> float:
    """How close a relu's input comes to 0 (where it has no derivative); inf for tanh/LSTM."""
    return _step_layers(s, params, inputs)[1] if s.kind == "rnn" and s.activation == "relu" else math.inf


def _step_layers(s: Stack, params: dict, inputs: dict) -> tuple:
    """(the output sequence, the least |gate| a step computed)."""
    x = inputs["x"].astype(np.float64)
    live = np.ones((s.T, s.N), bool) if s.lengths is None else \
        np.array([[t < n for n in s.lengths] for t in range(s.T)])
    layer_in, outs, least = x, [], math.inf
    for k, h in enumerate(s.dims):
        p = {w: params[k, w].astype(np.float64) for w in ("i2h_w", "i2h_b", "gates_t_w", "gates_t_b")}
        hs = inputs[f"h{k}_0"][0].astype(np.float64)
        cs = inputs[f"h{k}_1"][0].astype(np.float64) if s.kind == "lstm" else None
        seq = []
        for t in range(s.T):
            g = layer_in[t] @ p["i2h_w"].T + p["i2h_b"] + hs @ p["gates_t_w"].T + p["gates_t_b"]
            least = min(least, float(np.min(np.abs(g))))
            on = live[t][:, None]
            if s.kind == "lstm":  # (gate blocks i, f, o, g; LSTMUnit's forget_bias on f)
                i, f = _sigmoid(g[:, :h]), _sigmoid(g[:, h:2 * h] + s.forget_bias)
                o, c_in = _sigmoid(g[:, 2 * h:3 * h]), np.tanh(g[:, 3 * h:])
                c_new = f * cs + i * c_in
                h_new = o * np.tanh(c_new)
                cs = np.where(on, c_new, 0.0 if s.drop_states else cs)
            else:
                h_new = np.tanh(g) if s.activation == "tanh" else np.maximum(g, 0.0)
            hs = np.where(on, h_new, 0.0 if s.drop_states else hs)
            seq.append(hs)
        out = np.stack(seq)
        outs.append(out)
        layer_in = out + layer_in if k > 0 and k in s.residual else out
    if not s.residual:
        return outs[-1], least
    return sum(outs[k] for k in _connected(s)), least


# ----------------------------------------------------------------------------- optimizer programs
POLICIES = {  # a policy and arguments for it (the multiplier of base_lr at iteration it, below)
    "fixed": {}, "step": {"stepsize": 2, "gamma": 0.5}, "exp": {"gamma": 0.8}, "inv": {"gamma": 0.3, "power": 0.75},
    "poly": {"max_iter": 9, "power": 2.0}, "linearWarmup": {"start_multiplier": 0.25, "num_iter": 3},
    "constantWarmup": {"multiplier": 0.2, "num_iter": 2},
}


def lr_multiplier(policy: str, args: dict, it: int) -> float:
    if policy == "fixed":
        return 1.0
    if policy == "step":
        return args["gamma"] ** (it // args["stepsize"])
    if policy == "exp":
        return args["gamma"] ** it
    if policy == "inv":
        return (1 + args["gamma"] * it) ** -args["power"]
    if policy == "poly":
        return (1 - it / args["max_iter"]) ** args["power"]
    if policy == "linearWarmup":
        n = args["num_iter"]
        return args["start_multiplier"] + (1 - args["start_multiplier"]) * it / n if it < n else 1.0
    if policy == "constantWarmup":
        return args["multiplier"] if it < args["num_iter"] else 1.0
    raise ValueError(policy)


# each optimizer's builder, base learning rate and the options it may draw
OPTIMIZERS = {
    "sgd": ("build_sgd", 0.3), "momentum": ("build_sgd", 0.2), "adagrad": ("build_adagrad", 0.3),
    "adam": ("build_adam", 0.1), "adadelta": ("build_adadelta", 0.5), "wngrad": ("build_wngrad", 0.5),
    "storm": ("build_storm", 0.05),
}


@dataclass(frozen=True)
class Training:
    optimizer: str
    options: tuple          # (name, value) pairs passed to the builder
    dedup: str | None       # sparse_dedup_aggregator
    policy: str
    rows: int               # of the 2-D table [rows, D]
    D: int
    K: int                  # FC outputs
    ids: tuple              # the batch's table rows (repeats likely)
    one_d_table: bool       # a [rows] table read by the same ids, added to every output
    dense: bool             # the FC's w [K, D] and b [K] are parameters (else fed constants)
    steps: int
    seed: int


@st.composite
def trainings(draw) -> Training:
    name = draw(st.sampled_from(sorted(OPTIMIZERS)))
    options, dense = [], draw(st.booleans())
    if name == "momentum":
        options += [("momentum", draw(st.sampled_from([0.5, 0.9]))), ("nesterov", draw(st.sampled_from([0, 1])))]
    if name == "adagrad":
        if draw(st.booleans()):
            options.append(("weight_decay", draw(st.sampled_from([0.1, 0.5]))))
        if draw(st.booleans()):
            options.append(("rowWise", True))
            dense = False  # (Caffe2's row-wise Adagrad takes sparse gradients only)
    if name == "adam":
        variant = draw(st.sampled_from(["plain", "rowWise", "use_smart_decay", "enableRAdam"]))
        if variant != "plain":
            options.append((variant, True))
            if variant != "enableRAdam":
                dense = False
        if variant == "enableRAdam" or draw(st.booleans()):  # (beta2 0.6 .. 0.9: RAdam rectifies from t = 6)
            options.append(("beta2", draw(st.sampled_from([0.6, 0.9, 0.999]))))
    rows = draw(st.integers(2, 5))
    return Training(optimizer=name, options=tuple(options), dedup=draw(st.sampled_from([None, "sum", "mean"])),
                    policy=draw(st.sampled_from(sorted(POLICIES))), rows=rows, D=draw(st.integers(1, 3)),
                    K=draw(st.integers(1, 2)), ids=tuple(draw(st.lists(st.integers(0, rows - 1), min_size=1,
                                                                          max_size=6))),
                    one_d_table=draw(st.booleans()), dense=dense,
                    steps=draw(st.integers(1, 7 if ("enableRAdam", True) in options else 3)),
                    seed=draw(st.integers(0, 2**16)))


def render_training(t: Training) -> str:
    return (f"{t.optimizer} {dict(t.options)} dedup {t.dedup} policy {t.policy} table [{t.rows}, {t.D}] ids {t.ids} "
            f"K {t.K} 1-D table {t.one_d_table} dense {t.dense} steps {t.steps} seed {t.seed}")


def training_values(t: Training) -> dict:
    """The parameters' initial values and the batch (x, target), float32-exact."""
    rng = np.random.default_rng(t.seed)
    B = len(t.ids)

    def draw(*shape):
        return rng.uniform(-1, 1, shape).astype(np.float32)
    vals = {"tbl": draw(t.rows, t.D), "w": draw(t.K, t.D), "b": draw(t.K), "x": draw(B, t.D), "target": draw(B, t.K)}
    if t.one_d_table:
        vals["t1"] = draw(t.rows)
    return vals


def params_of(t: Training) -> list:
    return ["tbl"] + (["t1"] if t.one_d_table else []) + (["w", "b"] if t.dense else [])


def build_training(t: Training):
    """The model: y = FC(Gather(tbl, ids) + x, w, b) (+ Gather(t1, ids) per row), loss =
    mean over the batch of ||y - target||^2 / 2, then the optimizer. The initial values are
    fills in the init net (so the optimizer knows every parameter's shape). Returns the model
    and {parameter: copies of its gradient's blobs (ids and rows when sparse)}."""
    from dslc import core, optimizer
    from dslc.model_helper import ModelHelper

    vals = training_values(t)
    model = ModelHelper(name="train")
    for name in ("tbl", "t1", "w", "b"):
        if name in vals:
            model.param_init_net.GivenTensorFill([], name, shape=list(vals[name].shape),
                                                 values=vals[name].reshape(-1).tolist())
    for name in params_of(t):
        model.AddParameter(core.BlobReference(name))
    h = model.net.Add([model.net.Gather(["tbl", "ids"], "emb"), "x"], "h")
    y = model.net.FC([h, "w", "b"], "y")
    if t.one_d_table:
        y = model.net.Add([y, model.net.ExpandDims(model.net.Gather(["t1", "ids"], "picked"), "col", dims=[1])],
                          "y1")
    model.net.AveragedLoss(model.net.SquaredL2Distance([y, "target"], "d"), "loss")
    grads = model.AddGradientOperators(["loss"])
    # (copies of the gradients as the backward pass leaves them: momentum SGD writes its step
    # over the gradient blob, as in Caffe2)
    seen = {}
    for name in params_of(t):
        g = grads[name]
        if isinstance(g, core.GradientSlice):
            seen[name] = (model.net.Copy(g.indices, f"{name}_ids_seen"), model.net.Copy(g.values, f"{name}_rows_seen"))
        else:
            seen[name] = model.net.Copy(g, f"{name}_grad_seen")
    build, base = OPTIMIZERS[t.optimizer]
    policy = dict(POLICIES[t.policy], policy=t.policy)
    kwargs = dict(t.options, **policy)
    if t.dedup:
        kwargs["sparse_dedup_aggregator"] = t.dedup
    if build == "build_ftrl":
        kwargs["alpha"] = base
    else:
        kwargs["base_learning_rate"] = base
    getattr(optimizer, build)(model, **kwargs)
    return model, seen


def loss_and_grads(t: Training, p: dict, vals: dict) -> tuple[float, dict]:
    """The loss and its gradients by hand (float64): dense for w and b, one row per id for
    the tables (a sparse gradient: ids and rows)."""
    ids = np.array(t.ids)
    B = len(ids)
    h = p["tbl"][ids] + vals["x"]
    y = h @ p["w"].T + p["b"]
    if t.one_d_table:
        y = y + p["t1"][ids][:, None]
    r = y - vals["target"]
    loss = float((r * r).sum() / 2 / B)
    dy = r / B
    g = {"w": dy.T @ h, "b": dy.sum(axis=0), "tbl": dy @ p["w"]}
    if t.one_d_table:
        g["t1"] = dy.sum(axis=1)
    return loss, g


def _dedup(ids, rows, how):
    if how is None:
        return ids, rows
    uniq, inverse = np.unique(ids, return_inverse=True)
    out = np.zeros((len(uniq),) + rows.shape[1:])
    np.add.at(out, inverse, rows)
    if how == "mean":
        out /= np.bincount(inverse).reshape((-1,) + (1,) * (rows.ndim - 1))
    return uniq, out


class Reference:
    """An optimizer's state and update rules, in numpy (float64), from Caffe2's definitions."""

    def __init__(self, t: Training, params: dict):
        self.t, self.o = t, dict(t.options)
        self.state = {name: {} for name in params}
        self.base = OPTIMIZERS[t.optimizer][1]

    def lr(self, it: int) -> float:
        """The LearningRate op's value at iteration ``it`` with base_lr = -base."""
        return -self.base * lr_multiplier(self.t.policy, POLICIES[self.t.policy], it)

    def step(self, it: int, name: str, p: np.ndarray, grad: np.ndarray):
        """Update ``p`` (in place) by its gradient at iteration ``it`` (1 for the first run)."""
        ids = np.array(self.t.ids)
        sparse = name in ("tbl", "t1")
        if sparse:
            ids, grad = _dedup(ids, grad, self.t.dedup)
        rule = getattr(self, "_" + self.t.optimizer)
        st_ = self.state[name]
        if sparse and self.t.optimizer in ("wngrad", "storm"):
            rule(it, p, grad, st_, ids)  # (these rules read the whole slice at once)
        elif sparse:
            for r, g in zip(ids, grad):  # (a row per id, in order)
                rule(it, p, g, st_, r)
        else:
            rule(it, p, grad, st_, None)

    @staticmethod
    def _at(p, r):
        return p if r is None else p[r]

    def _put(self, p, r, value):
        if r is None:
            p[...] = value
        else:
            p[r] = value

    def _moment(self, st_, key, p, r, init=0.0, shape=None):
        if key not in st_:
            st_[key] = np.full(p.shape if shape is None else shape, init, np.float64)
        return st_[key]

    def _sgd(self, it, p, g, st_, r):  # WeightedSum / ScatterWeightedSum: p + lr g
        self._put(p, r, self._at(p, r) + self.lr(it) * g)

    def _momentum(self, it, p, g, st_, r):  # MomentumSGDUpdate with lr = +base (it subtracts)
        m = self._moment(st_, "m", p, r)
        mu, lr = self.o["momentum"], -self.lr(it)
        old = self._at(m, r).copy()
        new = mu * old + lr * g
        self._put(m, r, new)
        step = (1 + mu) * new - mu * old if self.o["nesterov"] else new
        self._put(p, r, self._at(p, r) - step)

    def _adagrad(self, it, p, g, st_, r):
        # weight decay of every parameter but the rank-1 ones (Caffe2's rule)
        wd = self.o.get("weight_decay", 0.0) if p.ndim != 1 else 0.0
        g = g + wd * self._at(p, r)
        eps = 1e-4
        if self.o.get("rowWise"):  # (one moment per row: the mean of the row's g^2)
            m = self._moment(st_, "m", p, r, shape=p.shape[:1])
            m[r] += np.mean(g * g)
            self._put(p, r, self._at(p, r) + self.lr(it) * g / (np.sqrt(m[r]) + eps))
            return
        m = self._moment(st_, "m", p, r)
        self._put(m, r, self._at(m, r) + g * g)
        self._put(p, r, self._at(p, r) + self.lr(it) * g / (np.sqrt(self._at(m, r)) + eps))

    def _adam(self, it, p, g, st_, r):
        b1, b2, eps = 0.9, self.o.get("beta2", 0.999), 1e-8
        t = it + 1  # (Adam's step count: the iteration counter plus one)
        m1 = self._moment(st_, "m1", p, r)
        if self.o.get("use_smart_decay") and r is not None:
            self._smart_decay(it, p, g, st_, r, m1, b1, b2, eps)
            return
        row_wise = self.o.get("rowWise") and r is not None
        m2 = self._moment(st_, "m2", p, r, shape=p.shape[:1] if row_wise else None)
        self._put(m1, r, b1 * self._at(m1, r) + (1 - b1) * g)
        self._put(m2, r, b2 * self._at(m2, r) + (1 - b2) * (np.mean(g * g) if row_wise else g * g))
        mean, var = self._at(m1, r), self._at(m2, r)
        corr = math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        if self.o.get("enableRAdam") and r is not None:  # (SparseAdam's RAdam; a dense one gets Adam)
            rho_inf = 2 / (1 - b2) - 1
            rho = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
            if rho <= 5:
                self._put(p, r, self._at(p, r) + self.lr(it) * mean / (1 - b1 ** t))
                return
            corr *= math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
        self._put(p, r, self._at(p, r) + self.lr(it) * corr * mean / (np.sqrt(var) + eps))

    def _smart_decay(self, it, p, g, st_, r, m1, b1, b2, eps):
        """Row r catches up the k steps since it was last seen: m2 decays by beta2^k, the
        parameter takes the k steps of m1 decaying (the last with the new gradient); a row
        met again in the batch (k = 0) steps once by its new m1 (Caffe2's kernel)."""
        m2 = self._moment(st_, "m2", p, r)
        last = self._moment(st_, "last", p, r, shape=p.shape[:1])
        t = it + 1
        k = int(t - last[r])
        m2[r] = b2 ** k * m2[r] + (1 - b2) * g * g
        denom = np.sqrt(m2[r]) + eps
        mean = m1[r].copy()
        if k == 0:
            mean = mean + (1 - b1) * g
            p[r] = p[r] + self.lr(it) * mean / denom
        for i in range(k):
            mean = b1 * mean + ((1 - b1) * g if i == k - 1 else 0.0)
            p[r] = p[r] + self.lr(it) * mean / denom
        m1[r] = mean
        last[r] = t

    def _adadelta(self, it, p, g, st_, r):
        decay, eps = 0.95, 1e-4
        ms, delta = self._moment(st_, "ms", p, r), self._moment(st_, "delta", p, r)
        new_ms = decay * self._at(ms, r) + (1 - decay) * g * g
        u = np.sqrt(self._at(delta, r) + eps) / np.sqrt(new_ms + eps) * g
        self._put(ms, r, new_ms)
        self._put(delta, r, decay * self._at(delta, r) + (1 - decay) * u * u)
        self._put(p, r, self._at(p, r) + self.lr(it) * u)

    def _wngrad(self, it, p, g, st_, ids):
        """b' = b + |g|^2 / (b + eps), the step lr g / (b + eps) (Caffe2's sparse form divides
        |g|^2 by b alone); b starts at moment_init 100, one b per parameter."""
        b = st_.setdefault("b", 100.0)
        eps = 1e-9
        if ids is None:
            p += self.lr(it) / (b + eps) * g
            st_["b"] = b + float((g * g).sum()) / (b + eps)
            return
        for r, row in zip(ids, g):
            p[r] = p[r] + self.lr(it) / (b + eps) * row
        st_["b"] = b + float((g * g).sum()) / b

    def _storm(self, it, p, g, st_, ids):
        """s' = s + |g|^2 (s from grad_sq_init 0.01), k = lr / (beta + s')^(1/3), a =
        momentum k^2, m' = g + (1 - a)(m - g), p' = p + k m' (a row per id, in order)."""
        momentum, beta = 10.0, 0.1
        s = st_.get("s", 0.01) + float((g * g).sum())
        st_["s"] = s
        k = self.lr(it) * (beta + s) ** (-1.0 / 3.0)
        a = momentum * k * k
        m = self._moment(st_, "m", p, None)
        if ids is None:
            m[...] = g + (1 - a) * (m - g)
            p += k * m
            return
        for r, row in zip(ids, g):
            m[r] = row + (1 - a) * (m[r] - row)
            p[r] = p[r] + k * m[r]


def train_reference(t: Training) -> tuple[dict, dict]:
    """(the parameters after ``t.steps`` runs, the first run's gradients) in float64."""
    vals = training_values(t)
    p = {k: v.astype(np.float64) for k, v in vals.items() if k in ("tbl", "t1", "w", "b")}
    ref = Reference(t, params_of(t))
    first = None
    for it in range(1, t.steps + 1):
        _, grads = loss_and_grads(t, p, vals)
        if first is None:
            first = grads
        for name in params_of(t):
            ref.step(it, name, p[name], grads[name])
    return p, first


def numeric_grads(t: Training) -> dict:
    """Central finite differences of the loss at the initial values (float64)."""
    vals = training_values(t)
    p = {k: v.astype(np.float64) for k, v in vals.items() if k in ("tbl", "t1", "w", "b")}
    out, h = {}, 1e-6
    for name in params_of(t):
        g = np.zeros_like(p[name])
        for idx in np.ndindex(p[name].shape):
            saved = p[name][idx]
            p[name][idx] = saved + h
            up = loss_and_grads(t, p, vals)[0]
            p[name][idx] = saved - h
            down = loss_and_grads(t, p, vals)[0]
            p[name][idx] = saved
            g[idx] = (up - down) / (2 * h)
        out[name] = g
    return out


def dense_grad(t: Training, name: str, g) -> np.ndarray:
    """A gradient as the parameter's shape: a sparse one's rows added at their ids."""
    if not isinstance(g, np.ndarray):
        ids, rows = g
        full = np.zeros((t.rows,) + rows.shape[1:])
        np.add.at(full, ids.reshape(-1), rows.reshape((ids.size,) + rows.shape[1:]))
        return full
    return g
