"""The memory ledger: the bytes a training step keeps, counted in the formats a real system stores.

floatlab holds every value in a float32 array, whatever its format; the ledger counts what the
real system would store instead: each tensor of the step at the width of its format. Its lines:

* **weights**: the weights the model computes with, and the **master weights** (fp32 copies the
  optimizer updates) when the policy has them; BatchNorm's parameters stay fp32 under
  ``batchnorm_fp32``.
* **gradients** (and fp32 **master gradients**), in the format the framework keeps them.
* **optimizer state**: SGD's momentum (one buffer per parameter, none without momentum),
  AdamW's two moments, each in the format of the weight the optimizer updates (torch's
  optimizers make their buffers like the parameter: fp32 beside fp32 master weights, fp16 where
  the optimizer updates an fp16 model, as under Apex O3, which leaves the optimizer alone).
* **running statistics**: BatchNorm's running mean and variance.
* **activations**, **loss** and **indices**: what the forward pass keeps for the backward pass at
  a batch size: every array of the model's cache (the logits too), and the loss's saved
  probabilities; integer arrays (token ids, labels, max-pooling positions) at their dtype's size.
  A float array is counted in the format its op stores it in: the forward format for what
  :meth:`~floatlab.train.precision.Precision.act` and the GEMMs store, fp32 for the
  intermediates of ops kept in fp32 (such as a LayerNorm's normalised values under the "norm"
  fp32 op). Views of one buffer count once. BatchNorm's are what the framework's BatchNorm
  keeps (a preset's ``batchnorm``, :data:`~floatlab.train.precision.presets.BATCHNORM_KINDS`):
  under PyTorch (autocast, Apex, fastai) its 16-bit input and fp32 per-channel mean and 1/std,
  though its parameters are fp32; where it computes in fp32 (Keras 3, MindSpore O2, floatlab's
  own policies), its fp32 normalised values and 1/std.

Every line is arithmetic on the model's shapes (:func:`param_shapes`, :func:`buffer_shapes` and
the shapes its forward pass gives its cache), in Python integers: no weight is allocated and no
forward pass runs, so a model of billions of weights at a batch of 10^20 is counted at once and
exactly. The tests hold the counts to a real model's parameters and a real forward pass's cache,
and the formats of torch-amp, apex-O2 and apex-O3 to torch itself (the dtypes of the tensors a
torch twin saves for the backward pass, its ``.grad`` and its ``optimizer.state``). The counts
of activations are floatlab's models' (a convolution keeps its im2col rows where torch keeps
its input, a layer its pre-activation where torch's ReLU keeps its output): the formats are the
framework's, the element counts floatlab's.

Where master weights live is a framework's choice, the *layout* (:data:`LAYOUTS`), which the
policy carries as data (its ``memory_layout``: a framework preset's is its framework's):

* ``"apex-o2"`` (Apex O2, fastai, and floatlab's named policies): the model's **weights** are in
  the forward format, its **gradients** come out in the backward format, and fp32 **master
  weights** and **master gradients** sit beside them (Apex gives the optimizer fp32 copies of the
  fp16 parameters, and ``post_backward_with_master_weights`` in ``apex/amp/_process_optimizer.py``
  gives each an fp32 ``.grad`` and copies the unscaled gradients there).
* ``"autocast"`` (PyTorch AMP, Apex O1, Keras, the TF1 recipe, MindSpore): the model keeps fp32
  **weights**, each op casts the weights it reads to the forward format (the **weight casts**:
  autocast caches them in its region and the backward pass holds them), and the **gradients**
  reach the fp32 weights in fp32 (a ``.grad`` has its weight's dtype): no fp16 gradients kept.

Bytes per element: a format of at most 8 bits is packed (fp8: 1 byte, fp6: 3/4, fp4: 1/2); a
wider one takes the next power of two of bits (fp16, bf16: 2; tf32, fp32: 4; fp64: 8).

>>> from floatlab.train.models import MLP
>>> led = ledger(MLP(4, (3,), 2), "mixed-fp16", batch_size=5, optimizer="adamw")
>>> led.total, led.fp32_bytes, [(e.what, e.format, e.bytes) for e in led.entries][:2]
(660, 688, [('weights', 'fp16', 46), ('master weights', 'fp32', 92)])
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from floatlab.formats import FloatFormat
from floatlab.train._checks import shown, want_int, want_real
from floatlab.train.models.base import Model, model_class
from floatlab.train.precision.policy import MEMORY_LAYOUTS, Policy, get_policy

if TYPE_CHECKING:
    from floatlab.train.config import TrainConfig
    from floatlab.train.history import History
    from floatlab.train.trainer import Trainer

__all__ = [
    "LAYOUTS",
    "OPTIMIZER_BUFFERS",
    "Entry",
    "Ledger",
    "batchnorm_kind",
    "buffer_shapes",
    "layout_of",
    "ledger",
    "ledger_for",
    "mib_text",
    "param_shapes",
    "storage_bits",
]

#: where the weights and gradients of a mixed-precision step live (see the module's text; a
#: policy's ``memory_layout`` is one of these)
LAYOUTS: dict[str, str] = MEMORY_LAYOUTS
#: the state buffers an optimizer keeps per parameter (SGD without momentum keeps none)
OPTIMIZER_BUFFERS: dict[str, int] = {"sgd": 1, "adamw": 2}
# the order of the ledger's lines
_WHAT = (
    "weights",
    "weight casts",
    "master weights",
    "gradients",
    "master gradients",
    "optimizer state",
    "running statistics",
    "activations",
    "loss",
    "indices",
)


def storage_bits(fmt: FloatFormat | str) -> int:
    """The bits one value of ``fmt`` takes in memory: packed for formats of at most 8 bits, the
    next power of two for wider ones (tf32's 19 bits live in 32).

    >>> [storage_bits(f) for f in ("fp16", "bf16", "tf32", "fp32", "float8_e4m3fn", "float4_e2m1fn")]
    [16, 16, 32, 32, 8, 4]
    """
    from floatlab.formats import get_format

    bits = get_format(fmt).bits
    return bits if bits <= 8 else 1 << (bits - 1).bit_length()


def mib_text(n_bytes: int) -> str:
    """A byte count in MiB with three significant digits (no exponent), as the ledger's readers
    show totals.

    >>> mib_text(57_480_192), mib_text(53_248), mib_text(3 << 30)
    ('54.8 MiB', '0.0508 MiB', '3,072 MiB')
    """
    q = Fraction(n_bytes, 2**20)  # exact: a float would misprint the low digits of 10^22 bytes
    if q <= 0:
        return "0 MiB"
    # the decimal exponent of q, floor(log10 q), exactly
    power = len(str(math.floor(q))) - 1
    if q < 1:
        power = -1
        while q * 10**-power < 1:
            power -= 1
    digits = max(0, 2 - power)
    scaled = round(q * 10**digits)  # (half to even, on the exact value)
    whole, frac = divmod(scaled, 10**digits)
    return f"{whole:,}" + (f".{frac:0{digits}d}" if digits else "") + " MiB"


class Entry(NamedTuple):
    """One line of a :class:`Ledger`: ``what`` (``"weights"``, ``"gradients"``, ...), the
    ``format`` it is stored in (a format's name, or an integer dtype's), its ``elements`` and
    ``bytes``.

    >>> Entry("weights", "fp16", 10, 20).bytes
    20
    """

    what: str
    format: str
    elements: int
    bytes: int


@dataclass(frozen=True)
class Ledger:
    """The bytes of one training step, line by line (:class:`Entry`), and the same model's total
    in fp32 (``fp32_bytes``: same optimizer, same batch size).

    >>> from floatlab.train.models import MLP
    >>> led = ledger(MLP(4, (3,), 2), "fp32", batch_size=5, optimizer="sgd", momentum=0.0)
    >>> led.bytes_of("weights"), led.bytes_of("gradients"), led.ratio
    (92, 92, 1.0)
    """

    model: str
    policy: str
    layout: str
    batch_size: int
    optimizer: str
    entries: tuple[Entry, ...]
    fp32_bytes: int

    @property
    def total(self) -> int:
        """All the bytes of the step."""
        return sum(e.bytes for e in self.entries)

    @property
    def ratio(self) -> float:
        """:attr:`total` over the same model's total in fp32."""
        return self.total / self.fp32_bytes

    def bytes_of(self, what: str) -> int:
        """The bytes of the lines called ``what`` (all their formats); 0 when there are none."""
        return sum(e.bytes for e in self.entries if e.what == what)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data.

        >>> from floatlab.train.models import MLP
        >>> sorted(ledger(MLP(4, (3,), 2), "bf16", batch_size=2).to_dict())[:4]
        ['batch_size', 'entries', 'fp32_bytes', 'layout']
        """
        return {
            "model": self.model,
            "policy": self.policy,
            "layout": self.layout,
            "batch_size": self.batch_size,
            "optimizer": self.optimizer,
            "entries": [e._asdict() for e in self.entries],
            "total_bytes": self.total,
            "fp32_bytes": self.fp32_bytes,
            "ratio": self.ratio,
        }


def layout_of(policy: Policy | str) -> str:
    """The layout (:data:`LAYOUTS`) of ``policy``'s framework, its ``memory_layout``:
    ``"autocast"`` for the presets whose framework keeps fp32 weights and casts them at use,
    ``"apex-o2"`` otherwise. A name is looked up (:func:`~floatlab.train.precision.policy.get_policy`); a
    changed policy's name (``"mindspore-O2*"``) gives the layout of the one it was changed from.

    >>> layout_of("torch-amp"), layout_of("apex-O2"), layout_of("mixed-bf16"), layout_of("mindspore-O2*")
    ('autocast', 'apex-o2', 'apex-o2', 'autocast')
    """
    if isinstance(policy, str):
        policy = policy.strip().rstrip("*")
    return get_policy(policy).memory_layout


def batchnorm_kind(policy: Policy | str) -> str:
    """What BatchNorm keeps for the backward pass under ``policy``
    (:data:`~floatlab.train.precision.presets.BATCHNORM_KINDS`): a preset's ``batchnorm``
    (``"input"`` for PyTorch's: autocast, Apex, fastai), looked up by the policy's name (a changed
    preset, ``"torch-amp*"``, is its preset's); ``"fp32"`` for floatlab's own policies, whose
    BatchNorm computes in fp32 under ``batchnorm_fp32`` and in the forward format without it.

    >>> [batchnorm_kind(p) for p in ("torch-amp", "apex-O2*", "keras", "mixed-fp16")]
    ['input', 'input', 'fp32', 'fp32']
    """
    from floatlab.train.precision.presets import PRESETS

    name = PRESETS.find((policy if isinstance(policy, str) else policy.name).strip().rstrip("*"))
    return "fp32" if name is None else PRESETS[name].batchnorm


# ---- the ledger -----------------------------------------------------------------------------------
def ledger(
    model: Model,
    policy: Policy | str,
    *,
    batch_size: int,
    optimizer: str = "sgd",
    momentum: float = 0.9,
    layout: str | None = None,
) -> Ledger:
    """The memory of one training step of ``model`` under ``policy`` (a :class:`Policy`, or a
    policy's or a preset's name) at ``batch_size``, with ``optimizer`` (``"sgd"``, with ``momentum``
    0 keeping no state, or ``"adamw"``); ``layout`` (:data:`LAYOUTS`) defaults to the policy's
    ``memory_layout``, its framework's.

    >>> from floatlab.train.models.transformer import TransformerLM
    >>> led = ledger(TransformerLM(16, 27, layers=1, d_model=16, heads=2), "mixed-bf16", batch_size=4)
    >>> led.bytes_of("master weights") == 2 * led.bytes_of("weights") and led.ratio < 1
    True
    """
    if not isinstance(model, Model):
        raise ValueError(f"model {shown(model)}: expected a Model (floatlab.train.get_model makes one)")
    pol = get_policy(policy)
    n = want_int("batch_size", batch_size, 1)
    opt = optimizer.strip().lower() if isinstance(optimizer, str) else ""
    if opt not in OPTIMIZER_BUFFERS:
        raise ValueError(f"optimizer {shown(optimizer)}: expected one of {', '.join(OPTIMIZER_BUFFERS)}")
    if not math.isfinite(want_real("momentum", momentum)):
        raise ValueError(f"momentum={shown(momentum)}: expected a finite number")
    lay = pol.memory_layout if layout is None else layout
    if lay not in LAYOUTS:
        raise ValueError(f"layout {shown(layout)}: expected one of {', '.join(LAYOUTS)}")
    buffers = 0 if opt == "sgd" and momentum == 0 else OPTIMIZER_BUFFERS[opt]
    entries = _entries(model, pol, lay, buffers, n)
    fp32 = _entries(model, get_policy("fp32"), "apex-o2", buffers, n)
    words = f"{opt} momentum {momentum:g}" if opt == "sgd" else opt
    return Ledger(model.describe(), pol.name, lay, n, words, entries, sum(e.bytes for e in fp32))


def ledger_for(run: TrainConfig | Trainer | History) -> Ledger:
    """The ledger of a run: a :class:`~floatlab.train.config.TrainConfig` (its model is built on
    its data set's shapes), a :class:`~floatlab.train.trainer.Trainer`, or a finished run's
    :class:`~floatlab.train.history.History` (from what it records: model, policy, optimizer,
    batch size).

    >>> from floatlab.train.config import TrainConfig
    >>> cfg = TrainConfig(model="mlp", data="underflow", precision="bf16", hidden=(8,), batch_size=16)
    >>> led = ledger_for(cfg)
    >>> led.policy, led.model, led.batch_size, round(led.ratio, 3)
    ('bf16', 'mlp 64-8-10', 16, 0.505)
    """
    from floatlab.train.config import TrainConfig
    from floatlab.train.history import History
    from floatlab.train.models.base import get_model
    from floatlab.train.trainer import Trainer

    if isinstance(run, TrainConfig):
        policy = run.make_policy()  # (a bad policy fails before the data set is read)
        n_in, n_out = _data_shape(run.data, run.model, run.context, run.data_seed)
        model = get_model(run.model, n_in, n_out, **run.model_options())
        return ledger(
            model, policy, batch_size=run.batch_size, optimizer=run.optimizer, momentum=run.momentum
        )
    if isinstance(run, Trainer):
        hyper = run.opt.hyper()
        return ledger(
            run.model,
            run.policy,
            batch_size=run.batch_size,
            optimizer=hyper["name"],
            momentum=hyper.get("momentum", 0.0),
        )
    if isinstance(run, History):
        meta = run.meta
        missing = [k for k in ("model", "policy", "optimizer", "batch_size") if k not in meta]
        if missing:
            raise ValueError(f"history {run.label!r} does not record its {', '.join(missing)}")
        hyper = meta["optimizer"]
        return ledger(
            _model_from_config(meta["model"]),
            Policy.from_dict(dict(meta["policy"])),
            batch_size=meta["batch_size"],
            optimizer=hyper["name"],
            momentum=hyper.get("momentum", 0.0),
        )
    raise ValueError(f"run {shown(run)}: expected a TrainConfig, a Trainer or a History")


# ---- the pieces -----------------------------------------------------------------------------------
def _entries(model: Model, policy: Policy, layout: str, buffers: int, batch_size: int) -> tuple[Entry, ...]:
    counts: dict[tuple[str, str], int] = {}
    bits: dict[str, int] = {}

    def add(what: str, fmt: FloatFormat, n: int) -> None:
        counts[what, fmt.name] = counts.get((what, fmt.name), 0) + n
        bits[fmt.name] = storage_bits(fmt)

    wide, bn32 = policy.wide, policy.batchnorm_fp32
    for k, shape in param_shapes(model).items():
        n, norm = math.prod(shape), k in model.norm_params
        stored = policy.param_format(norm)  # what the optimizer updates
        compute = wide if norm and bn32 else policy.forward  # what the forward pass reads (P.weights)
        if layout == "autocast":
            add("weights", stored, n)
            if compute != stored:
                add("weight casts", compute, n)
            add("gradients", stored, n)  # a weight's gradient has the weight's dtype
        else:
            add("weights", compute, n)
            add("gradients", wide if norm and bn32 else policy.backward, n)
            if compute != stored:
                add("master weights", stored, n)
                add("master gradients", stored, n)
        if buffers:  # made like the weight the optimizer updates (torch's zeros_like, clone)
            add("optimizer state", stored, buffers * n)
    for shape in buffer_shapes(model).values():
        add("running statistics", policy.param_format(True), math.prod(shape))
    for (what, name, width), n in _saved_counts(model, policy, batch_size).items():
        counts[what, name] = counts.get((what, name), 0) + n
        bits[name] = width
    order = {w: i for i, w in enumerate(_WHAT)}
    keys = sorted(counts, key=lambda wf: (order[wf[0]], -bits[wf[1]]))
    # (integer arithmetic: a count of 10^21 elements is exact, as a float's product would not be)
    return tuple(Entry(w, f, counts[w, f], -(-counts[w, f] * bits[f] // 8)) for w, f in keys)


_UNKNOWN_MODEL = "the memory ledger counts the shapes of mlp, attention, transformer and convnet"


def param_shapes(model: Model) -> dict[str, tuple[int, ...]]:
    """The shape of each parameter of ``model``, by name, in the order of its ``init``, from its
    configuration alone (:meth:`~floatlab.train.models.Model.param_shapes`): nothing is
    allocated, so a model of billions of weights costs nothing.

    >>> from floatlab.train.models import MLP
    >>> param_shapes(MLP(4, (3,), 2))
    {'W0': (4, 3), 'b0': (3,), 'W1': (3, 2), 'b1': (2,)}
    """
    try:
        return model.param_shapes()
    except NotImplementedError:
        raise ValueError(
            f"model {model.describe()!r}: {_UNKNOWN_MODEL} (a model of your own: give it param_shapes())"
        ) from None


def buffer_shapes(model: Model) -> dict[str, tuple[int, ...]]:
    """The shape of each buffer (state that is not trained: BatchNorm's running mean and
    variance) of ``model``, as its ``init_buffers`` makes them, from its configuration alone.

    >>> from floatlab.train.models.convnet import ConvNet
    >>> buffer_shapes(ConvNet(channels=(4,)))
    {'bn0_mean': (4,), 'bn0_var': (4,)}
    """
    param_shapes(model)  # (an unknown model is refused here too)
    return model.buffer_shapes()


def _saved_counts(model: Model, policy: Policy, batch_size: int) -> dict[tuple[str, str, int], int]:
    """The elements a training forward pass of ``model`` keeps for the backward pass at
    ``batch_size``, by (what, format, bits): every array of the model's cache (the logits too) and
    the loss's, counted from the shapes the model's code gives them. A view counts with the buffer
    it looks into (q, k and v of a fused projection; the flattened features of the last pooling).

    The format of each is the one its op stores it in: the forward format for what
    :meth:`~floatlab.train.precision.Precision.act`, the GEMMs, softmax's output, ReLU, GELU and
    max pooling keep (fp32, the holding format, when the forward format is fp32); the holding
    format for the intermediates of an op the policy keeps in fp32 (LayerNorm's normalised values
    and statistics under "norm", BatchNorm's under ``batchnorm_fp32``, the loss's probabilities
    under its loss op); integer arrays (labels, token ids, max-pooling positions) at their dtype.

    >>> from floatlab.train.models import MLP
    >>> _saved_counts(MLP(4, (3,), 2), get_policy("mixed-fp16"), 5)
    {('activations', 'fp16', 16): 60, ('loss', 'fp32', 32): 10, ('indices', 'int64', 64): 5}
    """
    from floatlab.train.models.attention import AttentionNet
    from floatlab.train.models.convnet import ConvNet
    from floatlab.train.models.mlp import MLP
    from floatlab.train.models.transformer import TransformerLM

    held = policy.wide
    fwd = held if policy.forward == held else policy.forward  # what a store in the forward format keeps

    def kept_by(op: str) -> FloatFormat:  # an op's intermediates: fp32 when the policy keeps it there
        return held if op in policy.fp32_ops else fwd

    n = batch_size
    out: dict[tuple[str, str, int], int] = {}

    def add(what: str, fmt: FloatFormat | str, count: int) -> None:
        if isinstance(fmt, str):  # an integer dtype
            key = (what, fmt, 8 * np.dtype(fmt).itemsize)
        else:
            key = (what, fmt.name, storage_bits(fmt))
        out[key] = out.get(key, 0) + count

    norm = kept_by("norm")
    if isinstance(model, MLP):
        s = model.sizes
        # each layer's input (the data, then the ReLU or GELU outputs) and its output (the last: the logits)
        add("activations", fwd, n * (sum(s[:-1]) + sum(s[1:])))
        classes, labels = s[-1], n
    elif isinstance(model, AttentionNet):
        t, d, c = model.tokens, model.d_model, model.n_out
        # the tokens' features, LN1's output, the fused q, k and v, the attention weights, the joined
        # heads, the pooled features and the logits; two LayerNorms' normalised values and statistics
        add("activations", fwd, n * (model.n_in + t * d + 3 * t * d + t * t + t * d + d + c))
        add("activations", norm, 2 * n * t * (d + 1))
        classes, labels = c, n
    elif isinstance(model, TransformerLM):
        tokens, d, V = n * model.context, model.d_model, model.vocab
        # per block: LN1's output, q k v, the attention weights (heads x t per token), the joined
        # heads, LN2's output, the MLP's pre-activation and GELU output (4 d each); then the final
        # LayerNorm's output and the logits; LayerNorms' normalised values and statistics apart
        block = d + 3 * d + model.heads * model.context + d + d + 4 * d + 4 * d
        add("activations", fwd, tokens * (model.layers * block + d + V))
        add("activations", norm, tokens * (model.layers * 2 * (d + 1) + d + 1))
        add("indices", "int64", tokens)  # the token ids
        classes, labels = V, tokens
    elif isinstance(model, ConvNet):
        reads_input = batchnorm_kind(policy) == "input"
        bn = held if policy.batchnorm_fp32 else norm
        side, c_in = model.side, 1
        for c in model.channels:
            pooled = n * (side // 2) ** 2 * c
            add("activations", fwd, n * side * side * 9 * c_in + pooled)  # im2col's rows, the pooled output
            if reads_input:  # torch's BatchNorm: its input as it came, mean and 1/std as its parameters
                add("activations", fwd, n * side * side * c)
                add("activations", policy.param_format(True), 2 * c)
            else:
                add("activations", bn, n * side * side * c + c)  # BatchNorm's normalised values, 1/std
            add("indices", "uint8", pooled)  # where each maximum was
            side, c_in = side // 2, c
        add("activations", fwd, n * model.n_out)  # the logits
        classes, labels = model.n_out, n
    else:
        raise ValueError(f"model {model.describe()!r}: {_UNKNOWN_MODEL}")
    add("loss", kept_by(policy.loss_op), labels * classes)  # the probabilities
    add("indices", "int64", labels)
    return {k: v for k, v in out.items() if v}


def _model_from_config(config: Mapping[str, Any]) -> Model:
    """The model a :meth:`~floatlab.train.models.Model.config` describes (every model's config
    holds its constructor's arguments and its name)."""
    if not isinstance(config, Mapping) or "name" not in config:
        raise ValueError(f"model config {shown(config)}: expected a dict with the model's name")
    cls = model_class(str(config["name"]))
    kwargs = {k: v for k, v in config.items() if k != "name"}
    try:
        return cls(**kwargs)
    except TypeError as e:
        raise ValueError(f"model config {shown(dict(config))}: {e}") from None


@functools.lru_cache(maxsize=8)
def _data_shape(data: str, model: str, context: int, seed: int) -> tuple[int, int]:
    """(features, classes) of data set ``data`` as ``model`` reads it (the text's: its context and
    its vocabulary): the data set is loaded once and only its shapes kept."""
    from floatlab.train.data.datasets import get_data
    from floatlab.train.data.text import check_model_and_data

    check_model_and_data(model, data)
    d = get_data(data, seed=seed, context=context)
    return d.n_features, d.n_classes
