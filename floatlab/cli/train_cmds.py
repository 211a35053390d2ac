"""``floatlab train``: the mixed-precision trainer on the command line (``floatlab compare``, in
:mod:`floatlab.cli.compare_cmd`, takes the same options).

``train`` runs one policy with a progress bar and ends with a summary. A run is measured in epochs
or in steps (``--steps``) and evaluated after every epoch, every ``--eval-every`` steps and at its
end. A run whose loss turns inf or NaN with no loss scaler to
catch it stops there: the command says so in one line on stderr, writes what it was asked to
write, and exits 0 (a diverging run is a result). The trainer (:mod:`floatlab.train`) and tqdm
are imported inside the commands, so that loading the command line stays light.

>>> parser = argparse.ArgumentParser()
>>> _ = register(parser.add_subparsers())
>>> args = parser.parse_args(["train", "--data", "underflow", "--precision", "fp16", "--epochs", "0", "-q"])
>>> args.run(args, UI())  # doctest: +ELLIPSIS
fp16: forward fp16, backward fp16, no master weights, no loss scaling, ...
0
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from floatlab.cli._common import UI, View, add_color_options, add_command, add_max_bytes_option, parse_sizes
from floatlab.cli.progress import Progress, eval_line
from floatlab.cli.train_views import train_view
from floatlab.io import (
    FIGURE_SUFFIXES,
    atomic_output,
    check_archive,
    check_outputs,
    figure_name,
    write_atomic,
)
from floatlab.text import dim, parse_scale, safe

if TYPE_CHECKING:
    from floatlab.cli._common import Subparsers
    from floatlab.train import TrainConfig, Trainer
    from floatlab.train.precision.policy import Policy

__all__ = [
    "NAME",
    "Progress",
    "config_from_args",
    "eval_line",
    "register",
    "run_train",
    "train_view",
]

NAME = "train"

# the policies and models the help texts name, written out so that `--help` needs no trainer (the
# registries live in floatlab.train, whose import costs more than the rest of the command line); a
# test holds them equal to floatlab.train.precision.policy.policy_names() and floatlab.train.models.MODELS
POLICY_NAMES: tuple[str, ...] = (
    "fp32", "fp16", "bf16", "mixed-fp16", "mixed-bf16", "mixed-fp8", "fp8-tensorwise", "fp8-delayed",
    "fp8-blockwise", "mxfp8", "mxfp6", "mxfp4", "mxint8", "nvfp4", "fp64",
)  # fmt: skip
MODEL_NAMES: tuple[str, ...] = ("mlp", "attention", "transformer", "convnet")
# how the progress bar looks (tqdm's options): it goes away when the run is done
#: what ``--history`` writes (see floatlab.train.History.save)
HISTORY_SUFFIXES: tuple[str, ...] = (".json", ".npz", ".csv")


# ---- options ------------------------------------------------------------------------------------
def _on_off(text: str) -> bool:
    t = text.strip().lower()
    if t in ("on", "yes", "true", "1"):
        return True
    if t in ("off", "no", "false", "0"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r}: expected on or off")


def _add_switch(group: Any, flag: str, help: str) -> None:
    """Add the on|off option ``flag`` (on, yes, true, 1 or off, no, false, 0) to ``group``."""
    group.add_argument(flag, type=_on_off, metavar="on|off", help=help)


def _sizes(text: str) -> tuple[int, ...]:
    return parse_sizes(text, "layer sizes such as 128,128")


def _output_options(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group("output")
    group.add_argument(
        "--json",
        nargs="?",
        const=True,
        default=argparse.SUPPRESS,
        metavar="FILE",
        help="print the summary as JSON; with FILE, write the full history there as JSON instead",
    )
    add_color_options(group)
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress output (the progress bar shows on a terminal only; one line per evaluation "
        "shows on stderr otherwise)",
    )


def _shape_options(group: Any) -> None:
    """The options that shape a model (``train``, ``compare`` and ``memory`` share them)."""
    group.add_argument(
        "--hidden", type=_sizes, default=(128, 128), help="MLP hidden sizes (default: 128,128)"
    )
    group.add_argument(
        "--d-model", type=int, metavar="D", help="attention or transformer width (default: the model's own)"
    )
    group.add_argument("--layers", type=int, metavar="N", help="transformer blocks (default: 4)")
    group.add_argument("--heads", type=int, metavar="N", help="transformer attention heads (default: 4)")
    group.add_argument(
        "--context", type=int, metavar="N", help="text: characters the model reads at once (default: 64)"
    )
    group.add_argument(
        "--channels", type=_sizes, metavar="C1,C2", help="convnet channels per stage (default: 16,32)"
    )


def _run_options(p: argparse.ArgumentParser) -> None:
    run = p.add_argument_group("run")
    run.add_argument(
        "--model",
        default="mlp",
        metavar="MODEL",
        help=f"{', '.join(MODEL_NAMES)} (default: mlp); --data text needs the transformer",
    )
    run.add_argument(
        "--data",
        default="digits",
        metavar="DATA",
        help="digits (8x8 handwritten digits), underflow (a synthetic task whose gradients underflow "
        "in fp16) or text (the characters of the King James Pentateuch, shipped with floatlab; "
        "loss in bits per character) (default: digits)",
    )
    length = run.add_mutually_exclusive_group()
    length.add_argument("--epochs", type=int, default=20, help="epochs (default: 20)")
    length.add_argument(
        "--steps", type=int, metavar="N", help="train N steps (batches) instead of a number of epochs"
    )
    run.add_argument(
        "--eval-every",
        type=int,
        metavar="K",
        help="evaluate every K steps as well as after each epoch and at the end",
    )
    run.add_argument(
        "--seed", type=int, default=0, help="seed of the weights, batch order, rounding (default: 0)"
    )
    run.add_argument("--batch-size", type=int, default=64, help="batch size (default: 64)")
    run.add_argument("--optimizer", default="sgd", help="sgd or adamw (default: sgd)")
    run.add_argument("--lr", type=float, help="learning rate (default: 0.05 for sgd, 0.002 for adamw)")
    run.add_argument("--momentum", type=float, default=0.9, help="sgd momentum (default: 0.9)")
    run.add_argument("--weight-decay", type=float, default=0.0, help="weight decay (default: 0)")
    run.add_argument("--clip", type=float, help="clip gradients to this global norm (after unscaling)")
    run.add_argument("--schedule", default="constant", help="constant, cosine or linear (default: constant)")
    run.add_argument("--warmup", type=int, default=0, help="warm-up steps (default: 0)")
    _shape_options(run)
    run.add_argument("--activation", default="relu", help="MLP activation: relu or gelu (default: relu)")
    run.add_argument(
        "--backend",
        default="numpy",
        metavar="numpy|cupy",
        help="where the arrays live: numpy (default) or cupy (a CUDA GPU; fp16/bf16 GEMMs on tensor cores)",
    )
    run.add_argument(
        "--tf32", action="store_true", help="with --backend cupy: run the fp32 GEMMs on TF32 tensor cores"
    )
    run.add_argument(
        "--deterministic",
        action="store_true",
        help="sum every GEMM exactly and round once, and round exp, log and tanh correctly: the same "
        "bits on any CPU and BLAS build (about 2.5x to 5x the step time; without it the bits depend on "
        "the BLAS kernel and NumPy's vector code that the CPU selects, never on the thread count)",
    )


def _switch_options(p: argparse.ArgumentParser) -> None:
    sw = p.add_argument_group("precision switches (override the policy's)")
    sw.add_argument(
        "--forward", metavar="FMT", help="format of the forward pass (activations, weights in GEMMs)"
    )
    sw.add_argument("--backward", metavar="FMT", help="format of the backward pass (gradients)")
    _add_switch(sw, "--master-weights", "fp32 master weights")
    sw.add_argument("--loss-scaling", choices=("none", "static", "dynamic"), help="loss scaling")
    sw.add_argument(
        "--scaler", metavar="PRESET", help="dynamic scaler preset: torch, keras, tf1, apex, mindspore"
    )
    sw.add_argument(
        "--static-scale", metavar="S", help="the scale of static loss scaling: 65536, 2^16, 0.5, ..."
    )
    _add_switch(sw, "--fp32-reductions", "accumulate reductions in fp32")
    sw.add_argument(
        "--fp32-ops", metavar="LIST", help="ops kept in fp32: softmax,log,exp,sum,norm, all or none"
    )
    sw.add_argument("--rounding", metavar="MODE", help="rounding mode of every cast (default: rne)")
    sw.add_argument("--update-rounding", metavar="MODE", help="rounding of low-precision weight updates")
    _add_switch(
        sw,
        "--update-compensation",
        "Kahan-compensated updates of low-precision weights (a compensation buffer in their format)",
    )
    ls = p.add_argument_group(
        "dynamic loss scaler (torch.amp.GradScaler's names; default: the scaler preset's numbers)"
    )
    ls.add_argument("--init-scale", metavar="S", help="the first scale: 65536, 2^16, ...")
    ls.add_argument("--growth-factor", type=float, metavar="F", help="the scale's growth, >= 1 (torch: 2)")
    ls.add_argument(
        "--backoff-factor", type=float, metavar="F", help="the scale's back-off on overflow, in (0, 1] (0.5)"
    )
    ls.add_argument(
        "--growth-interval",
        type=int,
        metavar="N",
        help="clean steps before the scale grows (torch: 2000; 10 shows growth in a short run)",
    )
    fp8 = p.add_argument_group("fp8 recipes (fp8-tensorwise, fp8-delayed, fp8-blockwise) and the accumulator")
    fp8.add_argument(
        "--fp8-format",
        metavar="hybrid|e4m3",
        help="hybrid: E4M3 forward, E5M2 gradients (default); e4m3: everywhere",
    )
    fp8.add_argument(
        "--amax-history",
        type=int,
        metavar="H",
        help="delayed scaling: amax history length, 1 to 4096 (default: 1024)",
    )
    fp8.add_argument(
        "--amax-compute-algo",
        metavar="max|most_recent",
        help="delayed scaling: amax from the history's max or its latest",
    )
    fp8.add_argument(
        "--margin", type=int, metavar="M", help="delayed scaling: scale = fp8_max / amax / 2^M (default: 0)"
    )
    _add_switch(fp8, "--pow2-scale", "round per-tensor scales down to a power of two")
    fp8.add_argument(
        "--accumulate",
        metavar="FMT",
        help="accumulator of the linear layers' GEMMs: acc14 (fp8 tensor core), bf16, ...",
    )
    fp8.add_argument(
        "--promote-every", type=int, metavar="N", help="add the narrow accumulator into fp32 every N products"
    )
    mx = p.add_argument_group("microscaling recipes (mxfp8, mxfp6, mxfp4, mxint8, nvfp4)")
    mx.add_argument(
        "--elements",
        metavar="NAME",
        help="element formats: mxfp8 e4m3 (default) or hybrid (E5M2 gradients); mxfp6 hybrid, e2m3 or e3m2; "
        "mxint8 int8",
    )
    mx.add_argument(
        "--scale-mode", metavar="floor|rceil", help="MX block scales: OCP floor (default) or rceil"
    )
    _add_switch(
        mx, "--hadamard", "16x16 random Hadamard transform on the weight-gradient GEMM's inputs (nvfp4: on)"
    )
    _add_switch(mx, "--weight-tiles", "weights in square blocks, once a step (nvfp4: on)")
    mx.add_argument(
        "--gradient-rounding", metavar="rne|stochastic", help="rounding of the gradients (nvfp4: stochastic)"
    )
    mx.add_argument(
        "--keep-bf16",
        metavar="LAYERS",
        help="linear layers left in bf16: names, patterns (h0.*), first, last, or none (nvfp4: first,last)",
    )


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    from floatlab.train.precision.policy import parse_fp32_ops

    out: dict[str, Any] = {}
    for name in (
        "forward",
        "backward",
        "master_weights",
        "loss_scaling",
        "scaler",
        "static_scale",
        "fp32_reductions",
        "rounding",
        "update_rounding",
        "update_compensation",
        "init_scale",
        "growth_factor",
        "backoff_factor",
        "growth_interval",
        "fp8_format",
        "amax_history",
        "amax_compute_algo",
        "margin",
        "pow2_scale",
        "accumulate",
        "promote_every",
        "elements",
        "scale_mode",
        "hadamard",
        "weight_tiles",
        "gradient_rounding",
    ):
        v = getattr(args, name, None)
        if v is not None:
            out[name] = v
    if out.get("promote_every") is not None and out["promote_every"] < 1:
        raise ValueError(
            f"--promote-every {out['promote_every']}: expected a number of products >= 1 "
            "(leave it out: no promotion)"
        )
    for name in ("static_scale", "init_scale"):
        if isinstance(out.get(name), str):
            out[name] = float(parse_scale(out[name], "--" + name.replace("_", "-")))
    if getattr(args, "fp32_ops", None) is not None:
        out["fp32_ops"] = parse_fp32_ops(args.fp32_ops)
    keep = getattr(args, "keep_bf16", None)
    if keep is not None:
        out["keep_bf16"] = (
            () if keep.strip().lower() == "none" else tuple(k.strip() for k in keep.split(",") if k.strip())
        )
    return out


# the run options (see _run_options) that TrainConfig takes under the same names
_RUN_SETTINGS = (
    "model", "data", "epochs", "batch_size", "optimizer", "lr", "momentum", "weight_decay", "clip",
    "schedule", "warmup", "seed", "hidden", "activation", "d_model", "steps", "eval_every", "deterministic",
)  # fmt: skip
# ... and those whose absence (None) means TrainConfig's default
_MODEL_SETTINGS = ("layers", "heads", "context", "channels")


def config_from_args(args: argparse.Namespace, precision: str) -> TrainConfig:
    """The :class:`~floatlab.train.TrainConfig` the options describe, for policy ``precision``.

    >>> parser = argparse.ArgumentParser()
    >>> _ = register(parser.add_subparsers())
    >>> args = parser.parse_args(["train", "--loss-scaling", "none", "--epochs", "3"])
    >>> cfg = config_from_args(args, "mixed-fp16")
    >>> cfg.epochs, cfg.overrides, cfg.make_policy().loss_scaling
    (3, {'loss_scaling': 'none'}, 'none')
    >>> args = parser.parse_args(["train", "--model", "transformer", "--data", "text", "--layers", "2"])
    >>> cfg = config_from_args(args, "fp32"); cfg.layers, cfg.heads, cfg.context, cfg.d_model
    (2, 4, 64, None)
    """
    from floatlab.train import TrainConfig

    settings = {name: getattr(args, name) for name in _RUN_SETTINGS}
    settings.update({k: v for k in _MODEL_SETTINGS if (v := getattr(args, k, None)) is not None})
    return TrainConfig(precision=precision, overrides=_overrides(args), **settings)


def _backend(args: argparse.Namespace) -> Any:
    """The backend the options ask for; a missing GPU fails here, in one line, before any work."""
    from floatlab.backend import get_backend

    return get_backend(getattr(args, "backend", None), tf32=getattr(args, "tf32", False))


def _fit(
    cfg: TrainConfig, quiet: bool, label: str | None = None, resume: str | None = None, backend: Any = None
) -> Trainer:
    """Build (or resume) the trainer and run it to the length ``cfg`` asks, with progress unless
    ``quiet``. A resumed run keeps its checkpoint's settings but the command line's length
    (``--epochs``/``--steps``) and evaluation schedule (``--eval-every``)."""
    from floatlab.train import Trainer

    if resume:
        trainer = Trainer.resume(resume, backend=backend)
        base = trainer.config if trainer.config is not None else cfg
        trainer.config = dataclasses.replace(
            base, epochs=cfg.epochs, steps=cfg.steps, eval_every=cfg.eval_every
        )
        trainer.eval_every = cfg.eval_every
    else:
        trainer = Trainer.from_config(cfg, backend=backend)
    if label:
        trainer.history.label = label
    config = trainer.config if trainer.config is not None else cfg
    progress = None
    if not quiet:
        progress = Progress(
            sys.stderr,
            config.total_steps(trainer.n_batches),
            trainer.history.label,
            initial=trainer.step,
            seen=len(trainer.history.evals["step"]),
            text=trainer.data.kind == "text",
        )
    try:
        trainer.run(progress.step if progress is not None else None)
    finally:
        if progress is not None:
            progress.close(trainer.history)
    return trainer


def _report_stop(trainer: Trainer, label: str | None = None) -> None:
    """A run that stopped early (its loss turned inf or NaN with no scaler): one line on stderr."""
    if trainer.stopped and sys.stderr is not None:
        who = f"{label}: " if label else ""
        sys.stderr.write(f"floatlab: warning: {who}{trainer.stopped}\n")
        sys.stderr.flush()


# ---- train --------------------------------------------------------------------------------------
def run_train(args: argparse.Namespace, ui: UI) -> int:
    """Train one policy; print its summary (or JSON), and write the history / checkpoint if asked.

    See the module docstring for an example.
    """
    from floatlab.train.data.text import check_model_and_data

    cfg = config_from_args(args, args.preset or args.precision)
    policy = cfg.make_policy()  # a bad switch fails here, before any work
    if policy.scaler_knobs and policy.loss_scaling != "dynamic" and sys.stderr is not None:
        unused = ", ".join("--" + k.replace("_", "-") for k in policy.scaler_knobs)
        sys.stderr.write(f"floatlab: warning: {unused} unused: {policy.name} has no dynamic loss scaling\n")
    if args.resume is None:  # (a resumed run keeps its checkpoint's model and data)
        check_model_and_data(cfg.model, cfg.data)
    json_file = _json_file(args)
    # every output can be written, and none is the checkpoint read or another output: checked
    # before the first step, so that a long run never ends in an error or overwrites its input
    plots = _train_plots(args.plot, cfg.make_policy())
    check_outputs(
        [("--checkpoint", args.checkpoint), ("--history", args.history), ("--json", json_file), *plots],
        [("--resume", args.resume)],
        suffixes={
            "--checkpoint": (".npz",),
            "--history": HISTORY_SUFFIXES,
            "--plot": FIGURE_SUFFIXES,
            "--plot (operands)": FIGURE_SUFFIXES,
        },
    )
    if args.resume is not None:
        # a FIFO, a device or a folder is refused by name, and a zip bomb before it inflates
        check_archive(args.resume, args.max_bytes)
    trainer = _fit(cfg, args.quiet, resume=args.resume, backend=_backend(args))
    # a run that stopped early is a result: said in one line, and written like any other
    _report_stop(trainer)
    if args.checkpoint:
        with atomic_output(args.checkpoint) as tmp:
            trainer.save(tmp)
    if args.history:
        with atomic_output(args.history) as tmp:
            trainer.history.save(tmp)
    view = train_view(trainer, color=ui.color)
    if plots:
        written = _write_train_plots(trainer, plots)
        lines = [dim(f"  {what} written to {safe(path)}", ui.color) for what, path in written]
        view = View("\n".join([view.text, *lines]), {**view.data, "plots": [p for _, p in written]})
    return _show(ui, view, json_file, {**view.data, "history": trainer.history.to_dict()})


def _train_plots(plot: str | None, policy: Policy) -> list[tuple[str, str]]:
    """The figures ``--plot FILE`` asks for: the curves in FILE, and, for a run under a recipe,
    the operands' amax and scale in FILE-fp8 (an fp8 recipe) or FILE-<recipe> (``-nvfp4``, ...;
    same suffix)."""
    if plot is None:
        return []
    name = figure_name(plot)
    stem, ext = os.path.splitext(name)
    tag = "fp8" if policy.recipe is None or policy.fp8 is not None else policy.recipe.kind
    return [("--plot", name), ("--plot (operands)", f"{stem}-{tag}{ext}")]


def _write_train_plots(trainer: Trainer, plots: list[tuple[str, str]]) -> list[tuple[str, str]]:
    from floatlab.train import compare
    from floatlab.train.analysis.plots import plot_operands

    h = trainer.history
    title = f"{trainer.model.describe()}, {trainer.policy.name}, seed {trainer.seed}"
    (_, curves), (_, scales) = plots
    with atomic_output(curves) as tmp:
        compare([h], tmp, title=title)
    written = [("curves", curves)]
    if h.operands:
        with atomic_output(scales) as tmp:
            plot_operands(h, tmp, title=f"{title}: the GEMM operands")
        written.append(("operands' amax and scales", scales))
    return written


def _json_file(args: argparse.Namespace) -> str | None:
    """The FILE of ``--json FILE``; None for a plain ``--json`` (print JSON) or none."""
    json_opt = getattr(args, "json", None)
    return json_opt if isinstance(json_opt, str) else None


def _write_json(path: str, data: Any) -> None:
    from floatlab.cli._common import _jsonable

    write_atomic(path, json.dumps(_jsonable(data), indent=1, allow_nan=False) + "\n")


def _show(ui: UI, view: View, json_file: str | None, data: Any) -> int:
    """``--json FILE``: ``data`` into FILE and the text on the terminal; otherwise the view as
    the UI shows it (text, or JSON for a plain ``--json``)."""
    if json_file is not None:
        _write_json(json_file, data)
        UI(color=ui.color, json=False, stream=ui.stream).show(view)
    else:
        ui.show(view)
    return 0


def _with_curves(view: View, plot: str, color: bool) -> View:
    """``view`` with a line saying that the curves went to ``plot``, and ``plot`` in its data."""
    line = dim(f"  curves written to {safe(plot)}", color)
    return View(view.text + "\n" + line, {**view.data, "plot": plot})


# ---- registration -------------------------------------------------------------------------------
def register(subparsers: Subparsers) -> argparse.ArgumentParser:
    """Add ``train`` to ``subparsers``; return its parser.

    >>> parser = argparse.ArgumentParser()
    >>> register(parser.add_subparsers()).prog.split()[-1]
    'train'
    """
    names = ", ".join(POLICY_NAMES)
    p = add_command(
        subparsers,
        "train",
        help="train a model in a precision policy and report what the format did",
        description="Train a NumPy model (explicit forward and backward passes) with every low-precision "
        "storage point simulated: the policy's formats, master weights, loss scaling, fp32 reductions "
        f"and fp32 ops. Policies: {names}; the switches below change one technique at a time.",
        epilog="examples:\n"
        "  floatlab train --model mlp --data digits --precision mixed-fp16 --epochs 20 --seed 0\n"
        "  floatlab train --data underflow --precision fp16\n"
        "  floatlab train --precision mixed-fp16 --loss-scaling none --json run.json\n"
        "  floatlab train --precision fp16 --lr 0.005 --momentum 0 --update-rounding stochastic\n"
        "  floatlab train --model transformer --data text --steps 2000 --checkpoint lm.npz\n"
        "  floatlab train --model transformer --data text --layers 2 --steps 500 --eval-every 100 "
        "--history run.csv\n"
        "  floatlab train --model convnet --data digits --precision bf16 --epochs 5\n",
    )
    p.add_argument(
        "--precision", default="mixed-fp16", metavar="POLICY", help=f"{names} (default: mixed-fp16)"
    )
    p.add_argument(
        "--preset",
        metavar="NAME",
        help="train as a framework does (apex-O2, keras, mindspore-O3, ...: "
        "floatlab presets lists them); the switches below override its settings, and say so",
    )
    _run_options(p)
    _switch_options(p)
    files = p.add_argument_group("files")
    files.add_argument("--checkpoint", metavar="FILE.npz", help="write a checkpoint at the end")
    files.add_argument("--resume", metavar="FILE.npz", help="continue from a checkpoint (its settings win)")
    files.add_argument(
        "--history",
        metavar="FILE",
        help="save the history: .json or .npz (everything), or .csv (a tidy table, one row per step)",
    )
    files.add_argument(
        "--plot",
        metavar="FILE.png",
        help="draw the curves; under an fp8 recipe also each layer's amax and scales (FILE-fp8.png)",
    )
    add_max_bytes_option(files)
    _output_options(p)
    p.set_defaults(run=run_train)

    return p
