"""Record the gradients of a PyTorch model into gradient histograms (torch is optional).

"Would fp16 lose my gradients, and what loss scale saves them?" Attach a
:class:`GradientRecorder` to a model, train as usual, and ask the histograms::

    rec = GradientRecorder(model)
    for batch in data:
        loss = model(batch).loss
        loss.backward()
        rec.record()            # after backward (and after scaler.unscale_(opt) under AMP)
        opt.step(); opt.zero_grad()
    print(render(rec, "fp16"))  # floatlab.text.render

or let hooks record each gradient as soon as it is accumulated (``with rec.attached(): ...``).
Every parameter gets its own :class:`~floatlab.gradhist.GradHistogram` and ``rec.total`` holds
them all. With hooks the recorder also sees the activation gradients, the gradients of the loss
with respect to the output of each leaf module, where fp16 underflow usually starts (they flow
through backward and are gone when it returns, so :meth:`~GradientRecorder.record` cannot see
them): ``rec.activation_grads["0.grad_output"]`` and ``rec.activation_total``, reported apart
from the parameter gradients. This module never imports torch itself: it only calls methods of
the model it is given and of its tensors, so ``import floatlab`` stays light and floatlab runs
without torch installed.

>>> rec = GradientRecorder(model=None)
>>> rec.steps, rec.total.total
(0, 0)
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from floatlab.exact import pow2
from floatlab.formats import FloatFormat, get_format
from floatlab.gradhist import GradHistogram, ScaleAdvice, Verdict
from floatlab.text import render

__all__ = ["CombinedAdvice", "GradientRecorder", "output_tensors"]


@dataclass(frozen=True)
class CombinedAdvice:
    """One loss scale for the parameter and the activation gradients together:
    :meth:`GradientRecorder.combined_advice`.

    A loss scale multiplies every gradient of backward, of both kinds, so it must keep both in
    range. ``log2_scale`` is the largest power of two under which neither kind exceeds
    ``format.max / 2^headroom`` (so neither overflows): the smaller of the two kinds' largest
    allowed scales (``ScaleAdvice.max_log2_scale``; a kind with no finite nonzero value
    allows any scale). ``parameters`` and ``activations`` are what that scale still does to
    each kind (flushed to zero, subnormal); ``advice`` holds each kind's own advice, which
    can be larger than the combined scale (the activation gradients' alone often is: it
    rescues their small values and overflows the larger parameter gradients).

    >>> import numpy as np
    >>> from floatlab.gradhist import histogram
    >>> params = histogram(np.array([2.0**-4, 2.0**-30], np.float32))
    >>> acts = histogram(np.array([2.0**-20, 2.0**-45], np.float32))
    >>> c = CombinedAdvice.of(params, acts, "fp16")
    >>> c.log2_scale, c.advice["activations"].log2_scale    # 2^-4 * 2^17 = 2^13 <= 65504 / 4
    (17, 31)
    >>> c.parameters.flushed, c.activations.flushed           # 2^-45 * 2^17 is below fp16's 2^-25
    (0, 1)
    >>> print(c)  # doctest: +NORMALIZE_WHITESPACE
    scale 2^17, the largest under which neither the parameter nor the activation gradients exceed
    fp16's max / 2^2: parameter gradients 0% flushed, 0% subnormal, activation gradients 50%
    flushed, 0% subnormal; the activation gradients' own advice, 2^31, would push the parameter
    gradients past that limit.
    """

    format: str
    rounding: str
    headroom: int
    log2_scale: int
    parameters: Verdict
    activations: Verdict
    advice: dict[str, ScaleAdvice]

    @property
    def scale(self) -> float:
        """The scale, 2^log2_scale."""
        return math.ldexp(1.0, self.log2_scale)

    @classmethod
    def of(
        cls,
        parameters: GradHistogram,
        activations: GradHistogram,
        fmt: FloatFormat | str = "fp16",
        *,
        headroom: int = 2,
        rounding: str = "rne",
    ) -> CombinedAdvice:
        """The combined advice for the histograms of the two kinds (see the class).

        >>> CombinedAdvice.of(GradHistogram(), GradHistogram(), "fp16").log2_scale
        0
        """
        f = get_format(fmt)
        kinds = {"parameters": parameters, "activations": activations}
        advice = {k: h.recommend_scale(f, headroom=headroom, rounding=rounding) for k, h in kinds.items()}
        # a kind without finite nonzero values puts no bound on the scale
        bounds = [advice[k].max_log2_scale for k, h in kinds.items() if h.finite]
        k = min(bounds) if bounds else 0
        mode = advice["parameters"].rounding  # (the deterministic mode the advice judged with)
        at = {name: h.verdict(f, pow2(k), mode) for name, h in kinds.items()}
        return cls(f.name, mode, headroom, k, at["parameters"], at["activations"], advice)

    def __str__(self) -> str:
        return render(self)


def _fold(histograms: dict[str, GradHistogram], total: GradHistogram, name: str, grad: Any) -> None:
    """Add the histogram of ``grad`` to ``histograms[name]`` (a new entry for a new name) and to
    ``total``."""
    h = GradHistogram(grad)
    if name in histograms:
        histograms[name] += h
    else:
        histograms[name] = h
    total += h


class GradientRecorder:
    """Per-parameter and total histograms of a torch model's gradients, and with hooks the
    histograms of its activation gradients.

    ``model`` is a ``torch.nn.Module`` (anything with ``named_parameters()``). Gradients are
    read as they are (detached, copied to the host when on a device), in their own dtype:
    float32 gradients of a float32 model, bfloat16 ones of a bf16 model.

    ``layers`` (one histogram per parameter name) and ``total`` hold the parameter gradients;
    ``activation_grads`` (one per leaf module, keyed ``"<module name>.grad_output"``) and
    ``activation_total`` the gradients of the leaf modules' outputs, recorded by :meth:`attach`
    only (``activation_grads=False`` leaves them out). ``steps`` counts :meth:`record` calls, or
    under hooks the backward passes (see :meth:`attach`).

    >>> rec = GradientRecorder(model=None)
    >>> rec.layers, rec.activation_grads, rec.activation_total.total
    ({}, {}, 0)
    """

    def __init__(self, model: Any, *, activation_grads: bool = True) -> None:
        self.model = model
        self.layers: dict[str, GradHistogram] = {}
        self.total = GradHistogram()
        self.activation_grads: dict[str, GradHistogram] = {}
        self.activation_total = GradHistogram()
        self.steps = 0
        self.record_activation_grads = activation_grads
        self._handles: list[Any] = []
        self._in_backward = False

    def record(self) -> GradientRecorder:
        """Fold the current ``.grad`` of every parameter into the histograms (one step).

        Call it after ``backward()``; under automatic mixed precision after
        ``scaler.unscale_(optimizer)``, so that the histograms see the true gradients.
        Parameters without a gradient are skipped.

        >>> GradientRecorder(model=None).record()
        Traceback (most recent call last):
        ...
        ValueError: model=None: expected a torch.nn.Module to record from
        """
        if self.model is None:
            raise ValueError("model=None: expected a torch.nn.Module to record from")
        for name, p in self.model.named_parameters():
            if p.grad is not None:
                _fold(self.layers, self.total, name, p.grad)
        self.steps += 1
        return self

    def _mark_backward(self) -> None:
        """Count one step at the first hook of a backward pass; the end of the pass re-arms it."""
        if self._in_backward:
            return
        self._in_backward = True
        self.steps += 1
        # torch's autograd engine runs the queued callback once, after the whole graph is done,
        # so however many hooks fire in between, one backward pass counts as one step
        engine = sys.modules["torch"].autograd.Variable._execution_engine
        engine.queue_callback(self._end_backward)

    def _end_backward(self) -> None:
        self._in_backward = False

    def _watch_output(self, name: str, output: Any) -> None:
        """A forward hook: ask for the gradient of each floating-point output tensor."""
        for t in output_tensors(output):
            if t.requires_grad and t.is_floating_point():

                def hook(grad: Any, name: str = name) -> None:
                    if not self._handles:
                        return  # detached between this forward pass and its backward
                    self._mark_backward()
                    _fold(self.activation_grads, self.activation_total, name, grad)

                t.register_hook(hook)

    def attach(self) -> GradientRecorder:
        """Record each gradient by a hook, as soon as backward has accumulated it.

        Uses ``Tensor.register_post_accumulate_grad_hook`` (torch >= 2.1). With gradient
        accumulation over micro-batches each backward records the running sum: prefer
        :meth:`record` once per optimizer step there. :meth:`detach` removes the hooks.

        Activation gradients: a forward hook on every leaf module (one without children) asks
        for the gradient of its output (``Tensor.register_hook``), recorded as
        ``"<module name>.grad_output"``: the ``grad_output`` that
        ``Module.register_full_backward_hook`` would see. Full backward hooks themselves are not
        used: they make torch refuse a model whose next layer works in place
        (``ReLU(inplace=True)``: "Output 0 of BackwardHookFunction is a view and is being
        modified inplace"). Only forward passes run while attached are watched.

        A step, under hooks, is one backward pass (``loss.backward()``, ``torch.autograd.grad``)
        in which at least one hook fired: the first hook of the pass counts it, and a callback
        that torch's autograd engine runs at the end of the pass re-arms the count. So each
        micro-batch of an accumulated step counts as a step of its own, and a forward pass
        without backward counts nothing. Do not also call :meth:`record` for the same backward,
        or it counts twice.

        >>> GradientRecorder(model=None).attach()
        Traceback (most recent call last):
        ...
        ValueError: model=None: expected a torch.nn.Module to attach to
        """
        if self.model is None:
            raise ValueError("model=None: expected a torch.nn.Module to attach to")
        if self._handles:
            return self
        self._in_backward = False  # (a backward pass that raised never ran its closing callback)
        for name, p in self.model.named_parameters():
            if p.requires_grad:

                def hook(param: Any, name: str = name) -> None:
                    self._mark_backward()
                    _fold(self.layers, self.total, name, param.grad)

                self._handles.append(p.register_post_accumulate_grad_hook(hook))
        if self.record_activation_grads:
            for name, module in self.model.named_modules():
                if next(iter(module.children()), None) is None:
                    key = f"{name}.grad_output" if name else "grad_output"

                    def forward_hook(module: Any, args: Any, output: Any, key: str = key) -> None:
                        self._watch_output(key, output)

                    self._handles.append(module.register_forward_hook(forward_hook))
        return self

    def detach(self) -> None:
        """Remove the hooks :meth:`attach` installed (nothing to do when there are none).

        >>> GradientRecorder(model=None).detach()
        """
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    @contextmanager
    def attached(self) -> Iterator[GradientRecorder]:
        """``with rec.attached(): ...`` records by hooks inside the block only.

        >>> with GradientRecorder(model=None).attached():
        ...     pass
        Traceback (most recent call last):
        ...
        ValueError: model=None: expected a torch.nn.Module to attach to
        """
        self.attach()
        try:
            yield self
        finally:
            self.detach()

    def reset(self) -> None:
        """Forget everything recorded so far (the hooks stay).

        >>> rec = GradientRecorder(model=None)
        >>> rec.steps = 4
        >>> rec.reset()
        >>> rec.steps
        0
        """
        self.layers.clear()
        self.total = GradHistogram()
        self.activation_grads.clear()
        self.activation_total = GradHistogram()
        self.steps = 0
        self._in_backward = False

    def combined_advice(
        self, fmt: FloatFormat | str = "fp16", *, headroom: int = 2, rounding: str = "rne"
    ) -> CombinedAdvice:
        """One loss scale for the parameter gradients (:attr:`total`) and the activation
        gradients (:attr:`activation_total`) together: the largest power of two under which
        neither kind exceeds ``fmt.max / 2^headroom``, and what it still loses of each (see
        :class:`CombinedAdvice`). Without activation gradients (recorded by hooks only) it is
        bounded by the parameter gradients alone.

        >>> GradientRecorder(model=None).combined_advice("fp16").log2_scale
        0
        """
        return CombinedAdvice.of(self.total, self.activation_total, fmt, headroom=headroom, rounding=rounding)


def output_tensors(output: Any) -> Iterator[Any]:
    """The torch tensors of a module's output: the output itself, or the tensors inside its
    (nested) tuples, lists and dicts, in order; anything else is skipped.

    >>> list(output_tensors((1, ["text"], {"n": None})))
    []
    >>> import pytest; torch = pytest.importorskip("torch")
    >>> out = (torch.ones(2), {"h": torch.zeros(3)}, 7)
    >>> [t.shape[0] for t in output_tensors(out)]
    [2, 3]
    """
    if isinstance(output, (tuple, list)):
        for item in output:
            yield from output_tensors(item)
    elif isinstance(output, dict):
        for item in output.values():
            yield from output_tensors(item)
    elif type(output).__module__.split(".")[0] == "torch" and hasattr(output, "register_hook"):
        yield output
