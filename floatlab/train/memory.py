"""The memory ledger: the bytes a training step keeps, counted in the formats a real system stores.

floatlab holds every value in a float32 array, whatever its format; the ledger counts what the
real system would store instead: each tensor of the step at the width of its format. Its lines:

* **weights**: the weights the model computes with, and the **master weights** (fp32 copies the
  optimizer updates) when the policy has them; BatchNorm's parameters stay fp32 under
  ``batchnorm_fp32``.
* **gradients** (and fp32 **master gradients**), in the format the framework keeps them.
* **optimizer state**: SGD's momentum (one buffer per parameter, none without momentum),
  AdamW's two moments; fp32, the default of every framework.
* **running statistics**: BatchNorm's running mean and variance.
* **activations**, **loss** and **indices**: what the forward pass keeps for the backward pass at
  a batch size, counted by running the model once: every array of its cache (the logits too), and
  the loss's saved probabilities; integer arrays (token ids, labels, max-pooling positions) at
  their dtype's size. A float array is counted in the forward format when every one of its values
  is a value of that format (what :meth:`~floatlab.train.precision.Precision.act` and the GEMMs
  store), else in fp32 (the intermediates of ops kept in fp32, such as a LayerNorm's normalised
  values under the "norm" fp32 op). Views of one buffer count once.

Where master weights live is a framework's choice, the *layout* (:data:`LAYOUTS`):

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

>>> from floatlab.train.model import MLP
>>> led = ledger(MLP(4, (3,), 2), "mixed-fp16", batch_size=5, optimizer="adamw")
>>> led.total, led.fp32_bytes, [(e.what, e.format, e.bytes) for e in led.entries][:2]
(660, 688, [('weights', 'fp16', 46), ('master weights', 'fp32', 92)])
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from floatlab.formats import FloatFormat
from floatlab.train._checks import shown, want_int, want_real
from floatlab.train.model import Model, model_class
from floatlab.train.policy import Policy, get_policy
from floatlab.train.precision import Array, Precision

if TYPE_CHECKING:
    from floatlab.train.config import TrainConfig
    from floatlab.train.history import History
    from floatlab.train.trainer import Trainer

__all__ = [
    "LAYOUTS",
    "OPTIMIZER_BUFFERS",
    "Entry",
    "Ledger",
    "layout_of",
    "ledger",
    "ledger_for",
    "mib_text",
    "storage_bits",
]

#: where the weights and gradients of a mixed-precision step live (see the module's text)
LAYOUTS: dict[str, str] = {
    "apex-o2": "Apex O2: low-precision model weights and gradients, fp32 master copies of both",
    "autocast": "autocast: fp32 weights and gradients, low-precision casts of the weights for the step",
}
#: the presets whose framework keeps fp32 weights and casts them at use (the others, and the
#: named policies, follow Apex O2): torch autocast, Apex O1's patched functions, Keras's
#: AutoCastVariable, the TF1 recipe's float32 variable getter, MindSpore's fp32 parameters
_AUTOCAST_PRESETS = frozenset(
    {
        "torch-amp",
        "keras",
        "tf2-keras",
        "tf1-static-128",
        "apex-o1",
        "mindspore-o1",
        "mindspore-o2",
        "mindspore-o3",
        "mindspore-fixed-128",
        "mindspore-fixed-128-nodrop",
    }
)
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
    x = n_bytes / 2**20
    digits = max(0, 2 - math.floor(math.log10(x))) if x > 0 else 0
    return f"{x:,.{digits}f} MiB"


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

    >>> from floatlab.train.model import MLP
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

        >>> from floatlab.train.model import MLP
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
    """The layout (:data:`LAYOUTS`) of ``policy``'s framework: ``"autocast"`` for the presets
    whose framework keeps fp32 weights and casts them at use, ``"apex-o2"`` otherwise.

    >>> from floatlab.train.presets import resolve_policy
    >>> layout_of(resolve_policy("torch-amp")), layout_of(resolve_policy("apex-O2")), layout_of("mixed-bf16")
    ('autocast', 'apex-o2', 'apex-o2')
    """
    name = policy.name if isinstance(policy, Policy) else str(policy)
    return "autocast" if name.rstrip("*").strip().lower() in _AUTOCAST_PRESETS else "apex-o2"


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
    """The memory of one training step of ``model`` under ``policy`` (a policy or a preset's name)
    at ``batch_size``, with ``optimizer`` (``"sgd"``, with ``momentum`` 0 keeping no state, or
    ``"adamw"``); ``layout`` (:data:`LAYOUTS`) defaults to the policy's framework's
    (:func:`layout_of`).

    >>> from floatlab.train.transformer import TransformerLM
    >>> led = ledger(TransformerLM(16, 27, layers=1, d_model=16, heads=2), "mixed-bf16", batch_size=4)
    >>> led.bytes_of("master weights") == 2 * led.bytes_of("weights") and led.ratio < 1
    True
    """
    from floatlab.train.presets import resolve_policy

    if not isinstance(model, Model):
        raise ValueError(f"model {shown(model)}: expected a Model (floatlab.train.get_model makes one)")
    pol = resolve_policy(policy)
    n = want_int("batch_size", batch_size, 1)
    opt = optimizer.strip().lower() if isinstance(optimizer, str) else ""
    if opt not in OPTIMIZER_BUFFERS:
        raise ValueError(f"optimizer {shown(optimizer)}: expected one of {', '.join(OPTIMIZER_BUFFERS)}")
    if not math.isfinite(want_real("momentum", momentum)):
        raise ValueError(f"momentum={shown(momentum)}: expected a finite number")
    lay = layout_of(pol) if layout is None else layout
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
    ('bf16', 'mlp 64-8-10', 16, 0.593)
    """
    from floatlab.train.config import TrainConfig
    from floatlab.train.history import History
    from floatlab.train.model import get_model
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
    total = 0
    for k, v in model.init(np.random.default_rng(0)).items():
        n, norm = int(v.size), k in model.norm_params
        total += n
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
    if buffers:
        add("optimizer state", wide, buffers * total)
    for v in model.init_buffers().values():
        add("running statistics", policy.param_format(True), int(v.size))
    for (what, name, width), n in _saved_counts(model, policy, batch_size).items():
        counts[what, name] = counts.get((what, name), 0) + n
        bits[name] = width
    order = {w: i for i, w in enumerate(_WHAT)}
    keys = sorted(counts, key=lambda wf: (order[wf[0]], -bits[wf[1]]))
    return tuple(Entry(w, f, counts[w, f], math.ceil(counts[w, f] * bits[f] / 8)) for w, f in keys)


def _saved_counts(model: Model, policy: Policy, batch_size: int) -> dict[tuple[str, str, int], int]:
    """The elements the forward pass keeps at ``batch_size``, by (what, format, bits). Every array
    of these models has the batch as its leading axis, so the count is affine in the batch size:
    it is measured at batches of 1 and 2 and extended (the tests check it against a direct count)."""
    one = _saved_at(model, policy, 1)
    if batch_size == 1:
        return one
    two = _saved_at(model, policy, 2)
    return {k: one.get(k, 0) + (batch_size - 1) * (two.get(k, 0) - one.get(k, 0)) for k in {*one, *two}}


def _saved_at(model: Model, policy: Policy, n: int) -> dict[tuple[str, str, int], int]:
    """Run one training forward pass (and the loss) on a batch of ``n`` and count what it keeps."""
    from floatlab.train.model import cross_entropy_forward

    rng = np.random.default_rng(0)
    P = Precision(policy, rng=np.random.default_rng(1), layers=model.linear_sites)
    norm = model.norm_params
    params = {
        k: P.cast(np.asarray(v, P.dtype), policy.param_format(k in norm)) for k, v in model.init(rng).items()
    }
    w = P.weights(params, model.norm_params)
    buffers = {k: np.asarray(v, P.dtype) for k, v in model.init_buffers().items()}
    x, y = _example_batch(model, n, rng)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        logits, cache = model.forward(w, x.astype(P.dtype) if x.dtype.kind == "f" else x, P, buffers=buffers)
        _, loss_cache = cross_entropy_forward(logits, y, P)
    seen = {id(_root(a)) for a in (*params.values(), *w.values())}  # weights are counted as weights
    out: dict[tuple[str, str, int], int] = {}
    for what, tree in (("activations", [cache, logits]), ("loss", loss_cache)):
        for (kind, name, width), count in _count_arrays(tree, P, seen).items():
            key = ("indices" if kind == "int" else what, name, width)
            out[key] = out.get(key, 0) + count
    return out


def _example_batch(model: Model, n: int, rng: np.random.Generator) -> tuple[Array, Array]:
    """A batch of ``n`` the model reads: token ids and next-token labels for a language model
    (``vocab`` and ``context``), else rows of ``n_in`` features in [0, 1) and one label each."""
    vocab, context = getattr(model, "vocab", None), getattr(model, "context", None)
    if vocab is not None and context is not None:
        return rng.integers(0, vocab, (n, context)), rng.integers(0, vocab, (n, context))
    n_in, n_out = getattr(model, "n_in", None), getattr(model, "n_out", None)
    if n_in is None or n_out is None:
        raise ValueError(
            f"model {model.describe()!r}: expected n_in and n_out (or context and vocab) to size a batch"
        )
    return rng.random((n, n_in), dtype=np.float32), rng.integers(0, n_out, n)


def _arrays(tree: Any) -> Iterator[Array]:
    """The arrays in a cache: nested dicts, lists and tuples (other values are not stored tensors)."""
    if isinstance(tree, np.ndarray):
        yield tree
    elif isinstance(tree, Mapping):
        for v in tree.values():
            yield from _arrays(v)
    elif isinstance(tree, (list, tuple)):
        for v in tree:
            yield from _arrays(v)


def _root(a: Array) -> Array:
    """The array that owns ``a``'s memory (``a`` itself unless it is a view)."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _count_arrays(tree: Any, P: Precision, seen: set[int]) -> dict[tuple[str, str, int], int]:
    """Elements by (kind, format, bits) of the arrays in ``tree`` whose memory is not in ``seen``
    (which grows): views of one buffer count once, at most the buffer's size."""
    groups: dict[int, tuple[Array, dict[int, Array]]] = {}
    for a in _arrays(tree):
        r = _root(a)
        if id(r) in seen:
            continue
        groups.setdefault(id(r), (r, {}))[1][id(a)] = a
    out: dict[tuple[str, str, int], int] = {}
    for key, (root, members) in groups.items():
        seen.add(key)
        views = list(members.values())
        nbytes = min(root.nbytes, sum(v.nbytes for v in views))
        itemsize = views[0].itemsize
        if views[0].dtype.kind in "iub":
            k = ("int", views[0].dtype.name, 8 * itemsize)
        else:
            fmt = max((_stored_format(v, P) for v in views), key=storage_bits)
            k = ("float", fmt.name, storage_bits(fmt))
        out[k] = out.get(k, 0) + nbytes // itemsize
    return out


def _stored_format(a: Array, P: Precision) -> FloatFormat:
    """The forward format when every value of ``a`` is one of its values (what the forward pass
    stored there), else the holding format (an fp32 op's intermediate)."""
    if P.is_wide(P.fwd):
        return P.wide
    return P.fwd if np.array_equal(P.cast(a, P.fwd), a, equal_nan=True) else P.wide


def _model_from_config(config: Mapping[str, Any]) -> Model:
    """The model a :meth:`~floatlab.train.model.Model.config` describes (every model's config
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
    from floatlab.train.data import get_data
    from floatlab.train.text import check_model_and_data

    check_model_and_data(model, data)
    d = get_data(data, seed=seed, context=context)
    return d.n_features, d.n_classes
