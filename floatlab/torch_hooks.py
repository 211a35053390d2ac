"""Record the parameter gradients of a PyTorch model into gradient histograms (torch is optional).

"Would fp16 lose my gradients, and what loss scale saves them?" Attach a
:class:`GradientRecorder` to a model, train as usual, and ask the histograms::

    rec = GradientRecorder(model)
    for batch in data:
        loss = model(batch).loss
        loss.backward()
        rec.record()            # after backward (and after scaler.unscale_(opt) under AMP)
        opt.step(); opt.zero_grad()
    print(rec.report("fp16"))

or let hooks record each gradient as soon as it is accumulated (``with rec.attached(): ...``).
Every parameter gets its own :class:`~floatlab.gradhist.GradHistogram` and ``rec.total`` holds
them all. This module never imports torch itself: it only calls methods of the model it is given,
so ``import floatlab`` stays light and floatlab runs without torch installed.

>>> rec = GradientRecorder(model=None)
>>> rec.steps, rec.total.total
(0, 0)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from floatlab.formats import FloatFormat, get_format
from floatlab.gradhist import GradHistogram
from floatlab.text import percent

__all__ = ["GradientRecorder"]


class GradientRecorder:
    """Per-parameter and total histograms of a torch model's gradients.

    ``model`` is a ``torch.nn.Module`` (anything with ``named_parameters()``). Gradients are
    read as they are (detached, copied to the host when on a device), in their own dtype:
    float32 gradients of a float32 model, bfloat16 ones of a bf16 model.

    >>> GradientRecorder(model=None).layers
    {}
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.layers: dict[str, GradHistogram] = {}
        self.total = GradHistogram()
        self.steps = 0
        self._handles: list[Any] = []

    def _add(self, name: str, grad: Any) -> None:
        h = GradHistogram(grad)
        if name in self.layers:
            self.layers[name] += h
        else:
            self.layers[name] = h
        self.total += h

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
                self._add(name, p.grad)
        self.steps += 1
        return self

    def attach(self) -> GradientRecorder:
        """Record each gradient by a hook, as soon as backward has accumulated it.

        Uses ``Tensor.register_post_accumulate_grad_hook`` (torch >= 2.1). With gradient
        accumulation over micro-batches each backward records the running sum: prefer
        :meth:`record` once per optimizer step there. :meth:`detach` removes the hooks.

        >>> GradientRecorder(model=None).attach()
        Traceback (most recent call last):
        ...
        ValueError: model=None: expected a torch.nn.Module to attach to
        """
        if self.model is None:
            raise ValueError("model=None: expected a torch.nn.Module to attach to")
        if self._handles:
            return self
        for name, p in self.model.named_parameters():
            if p.requires_grad:

                def hook(param: Any, name: str = name) -> None:
                    self._add(name, param.grad)

                self._handles.append(p.register_post_accumulate_grad_hook(hook))
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
        self.steps = 0

    def report(self, fmt: FloatFormat | str = "fp16", *, headroom: int = 2, rounding: str = "rne") -> str:
        """A table: per parameter, the share of gradient values that ``fmt`` flushes to zero,
        makes subnormal or overflows unscaled, then the advice for all gradients together.

        >>> print(GradientRecorder(model=None).report("fp16").splitlines()[0])
        gradients of 0 parameters over 0 steps, in fp16 unscaled:
        """
        f = get_format(fmt)
        lines = [f"gradients of {len(self.layers)} parameters over {self.steps} steps, in {f.name} unscaled:"]
        if self.layers:
            width = max(len(n) for n in self.layers)
            lines.append(
                f"  {'parameter':<{width}}  {'values':>12}  {'flushed':>8}  {'subnormal':>9}  {'overflow':>8}"
            )
            for name, h in self.layers.items():
                v = h.verdict(f, 1, rounding)
                t = v.total
                lines.append(
                    f"  {name:<{width}}  {t:>12,}  {percent(v.flushed, t):>8}  {percent(v.subnormal, t):>9}  "
                    f"{percent(v.overflow, t):>8}"
                )
        advice = self.total.recommend_scale(f, headroom=headroom, rounding=rounding)
        lines.append(f"all gradients: {advice.before}")
        lines.append(f"advice: scale 2^{advice.log2_scale}. {advice.reason}")
        return "\n".join(lines)
