"""What the training commands show while they run, and their number formats.

>>> pct(0.25), num(2.0)
('25.00 %', '2.0000')
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from floatlab.sweeps import SweepEvent
    from floatlab.train import History, StepStats, Trainer

__all__ = ["Progress", "SweepProgress", "eval_line", "num", "pct"]

#: tqdm's settings for the training bar
_BAR: dict[str, Any] = {"unit": "step", "leave": False, "dynamic_ncols": True}


def pct(v: float | None, digits: int = 2) -> str:
    """A share with a fixed number of decimals, so that the columns of the training tables line
    up ("-" for none). The one percent formatter of the training commands; the other commands use
    :func:`floatlab.text.percent` (three significant digits).

    >>> pct(0.5), pct(0.0123, 1), pct(None)
    ('50.00 %', '1.2 %', '-')
    """
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.{digits}f} %"


def num(v: float | None, fmt: str = ".4f") -> str:
    """A number in ``fmt``, or "-" for none.

    >>> num(1 / 3), num(None)
    ('0.3333', '-')
    """
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def eval_line(label: str, row: dict[str, Any], total: int, *, text: bool = False) -> str:
    """One evaluation as the progress output shows it (``row``: a row of the history's evaluations).

    >>> row = {"epoch": 1, "step": 32, "test_accuracy": 0.5, "test_loss": 1.25}
    >>> eval_line("fp16", row, 64)
    'fp16 step 32/64 (epoch 1): test accuracy 50.00 %, test loss 1.2500'
    >>> eval_line("fp16", {**row, "test_loss": 2 * math.log(2)}, 64, text=True)
    'fp16 step 32/64: validation 2.000 bits/char (loss 1.3863)'
    """
    from floatlab.train.history import bits_per_char

    head = f"{label} step {row['step']}/{total}"
    loss = num(row["test_loss"])
    if text:
        return f"{head}: validation {num(bits_per_char(row['test_loss']), '.3f')} bits/char (loss {loss})"
    return f"{head} (epoch {row['epoch']}): test accuracy {pct(row['test_accuracy'])}, test loss {loss}"


class Progress:
    """What a run shows while it trains, on ``stream`` (the command's stderr): on a terminal a tqdm
    bar (steps done, and the last step's loss and loss scale), and one line per evaluation (see
    :func:`eval_line`) whether a terminal or not. ``refresh`` is tqdm's ``mininterval``, the
    least time between two redraws of the bar.

    >>> import io
    >>> from floatlab.train import History
    >>> h = History("fp16")
    >>> h.log_eval(epoch=1, step=2, train_loss=1.0, test_loss=1.25, test_accuracy=0.5)
    >>> buf = io.StringIO()
    >>> p = Progress(buf, total=4, label="fp16", tty=False)
    >>> p.close(h)
    >>> buf.getvalue()
    'fp16 step 2/4 (epoch 1): test accuracy 50.00 %, test loss 1.2500\\n'
    """

    def __init__(
        self,
        stream: TextIO,
        total: int,
        label: str,
        *,
        initial: int = 0,
        seen: int = 0,
        text: bool = False,
        tty: bool | None = None,
        refresh: float = 0.1,
    ) -> None:
        self.stream = stream
        self.total = total
        self.label = label
        self.text = text
        self.seen = seen  # the evaluations shown (or there before this run: a resumed one's)
        if tty is None:
            tty = not getattr(stream, "closed", False) and bool(getattr(stream, "isatty", lambda: False)())
        self.bar: Any = None
        if tty:
            from tqdm import tqdm

            self.bar = tqdm(
                total=total, initial=initial, desc=label, file=stream, mininterval=refresh, **_BAR
            )

    def step(self, trainer: Trainer, stats: StepStats) -> None:
        """The trainer's callback: after each step."""
        self._new_evals(trainer.history)
        if self.bar is not None:
            skip = " skipped" if stats.skipped else ""
            self.bar.set_postfix_str(f"loss {stats.loss:.4f} scale {stats.scale:g}{skip}", refresh=False)
            self.bar.update(1)

    def close(self, history: History) -> None:
        """After the run: the evaluations not shown yet, and the bar taken down."""
        self._new_evals(history)
        if self.bar is not None:
            self.bar.close()

    def _new_evals(self, history: History) -> None:
        rows = history.evals
        for j in range(self.seen, len(rows["step"])):
            line = eval_line(self.label, {k: v[j] for k, v in rows.items()}, self.total, text=self.text)
            if self.bar is not None:
                self.bar.write(line, file=self.stream)
            else:
                self.stream.write(line + "\n")
                self.stream.flush()
        self.seen = len(rows["step"])


class SweepProgress:
    """What a sweep shows while it runs, on ``stream``: on a terminal a tqdm bar of the runs (done,
    and how many are running and have failed); otherwise one line per finished run.

    >>> import io
    >>> from floatlab.sweeps import Grid, SweepEvent
    >>> task = Grid({"seed": [2]}, {"data": "underflow"}).tasks[0]
    >>> buf = io.StringIO()
    >>> p = SweepProgress(buf, tty=False)
    >>> p(SweepEvent(total=3, skipped=1))
    >>> p(SweepEvent(total=3, done=1, running=2, task=task, status="ok"))
    >>> p.close()
    >>> print(buf.getvalue(), end="")
    sweep: 3 runs to do, 1 in the table already
    sweep 1/3: mixed-fp16 seed 2 ok (running 2, failed 0)
    """

    def __init__(self, stream: TextIO, *, tty: bool | None = None, refresh: float = 0.2) -> None:
        self.stream = stream
        if tty is None:
            tty = not getattr(stream, "closed", False) and bool(getattr(stream, "isatty", lambda: False)())
        self.tty = tty
        self.refresh = refresh
        self.bar: Any = None

    def __call__(self, event: SweepEvent) -> None:
        """The sweep's callback: at the start and after each run."""
        if event.task is None:
            if self.tty:
                from tqdm import tqdm

                self.bar = tqdm(total=event.total, desc="sweep", unit="run", file=self.stream,
                                mininterval=self.refresh, leave=False, dynamic_ncols=True)  # fmt: skip
            else:
                already = f", {event.skipped} in the table already" if event.skipped else ""
                self.stream.write(f"sweep: {event.total} runs to do{already}\n")
                self.stream.flush()
            return
        state = f"running {event.running}, failed {event.failed}"
        if self.bar is not None:
            self.bar.set_postfix_str(state, refresh=False)
            self.bar.update(1)
        else:
            cfg = event.task.config
            head = f"sweep {event.done}/{event.total}: {cfg.precision} seed {cfg.seed}"
            self.stream.write(f"{head} {event.status} ({state})\n")
            self.stream.flush()

    def close(self) -> None:
        """Take the bar down."""
        if self.bar is not None:
            self.bar.close()
