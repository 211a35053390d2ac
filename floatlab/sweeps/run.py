"""Running a sweep's tasks: one after another, in a local process pool, or on a Dask cluster.

Each task trains one configuration (:func:`execute`) and returns its rows of the table; the
runner writes the whole table after each run that finishes, in the grid's order (so that the
table does not depend on which worker finished first), and skips the runs whose key is in the
table already. Every run limits BLAS and numba to ``threads`` threads (1 by default) wherever it
runs, so that serial, pool and cluster give the same numbers bit for bit and the workers do not
fight over cores. A run that raises is recorded as failed with its reason; the others go on. So is
a run whose worker process dies under it (killed by the out-of-memory killer, say): the pool is
started again for the runs left.

Each data set the runs train on is read once per sweep, here, and sent with the tasks: a worker
never imports the data set's reader (scikit-learn, for the digits, costs a fresh process over a
second of CPU). The local pool's ``workers`` are this process (a thread) and ``workers - 1`` child
processes taking the next task from one queue; the fork server that starts the children imports
the trainer and sets numba up once (:mod:`floatlab.sweeps._preload`) while this process already
runs tasks, so no core waits for the pool to start.

>>> from floatlab.sweeps.grid import Grid
>>> g = Grid({"precision": ["fp32"], "seed": [0]}, {"data": "underflow", "hidden": (4,), "steps": 2})
>>> rows = execute(g.tasks[0])
>>> [(r["status"], r["step"]) for r in rows]
[('ok', 2)]
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import queue
import threading
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import wait as wait_all
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from floatlab._signature import passing_on, spelled_out
from floatlab.sweeps.curves import CurvesFile, curves_path, read_curves_file, whole
from floatlab.sweeps.grid import Grid, Task
from floatlab.sweeps.order import TaskQueue
from floatlab.sweeps.table import read_runs, records, run_rows, write_table

if TYPE_CHECKING:
    from typing_extensions import Unpack


__all__ = ["EXECUTORS", "RunOptions", "SweepEvent", "execute", "run_grid"]

#: where the runs go
EXECUTORS: tuple[str, ...] = ("serial", "process", "dask")


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    """BLAS and numba limited to ``n`` threads inside the block (numba's setting is per thread)."""
    import numba
    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped,unused-ignore]

    before = numba.get_num_threads()
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))  # type: ignore[attr-defined,unused-ignore]
    try:
        with threadpool_limits(limits=n):
            yield
    finally:
        numba.set_num_threads(before)


def execute(task: Task, threads: int = 1, data: Any = None) -> list[dict[str, Any]]:
    """Train ``task``'s configuration with ``threads`` threads on ``data`` (its data set, as
    :func:`floatlab.train.data.get_data` gives it; None: read it here); its rows of the table. An
    exception is a failed run (its rows say why), never an exception here; training faults
    (warnings) are counted in the history, not raised.

    >>> bad = Grid({"seed": [0]}, {"data": "underflow", "hidden": (4,), "steps": 2, "backend": "nope"})
    >>> execute(bad.tasks[0])[0]["status"]
    'failed'
    """
    return _execute(task, threads, data)[0]


#: what a run sends back besides its rows: nothing, its steps' arrays, or its whole history
SENDS = ("rows", "curves", "history")
#: a run's rows and what else it sends (None for a failed run)
Outcome = tuple[list[dict[str, Any]], Any]


def _execute(task: Task, threads: int = 1, data: Any = None, send: str = "rows") -> Outcome:
    """:func:`execute`, and what ``send`` asks for: ``"curves"``, the steps' arrays
    (:func:`~floatlab.sweeps.curves.step_arrays`), ``"history"``, the history as plain data
    (:meth:`~floatlab.train.history.History.to_dict`: histograms and operand records included)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a training fault is in the history already
        return _train(task, threads, data, send)


def _train(task: Task, threads: int, data: Any, send: str = "rows") -> Outcome:
    """:func:`_execute` under the caller's warning filters (the filters are global: a thread that
    changed them while another thread did too could leave them changed)."""
    from floatlab.sweeps.curves import step_arrays
    from floatlab.train.data.text import check_model_and_data
    from floatlab.train.trainer import Trainer

    try:
        with _threads(threads):
            if data is not None:  # (from_config checks the pair only when it reads the data itself)
                check_model_and_data(task.config.model, task.config.data)
            trainer = Trainer.from_config(task.config, data, backend=task.backend)
            history = trainer.run()
        rows = run_rows(task, history, stopped=str(trainer.stopped or ""))
        extra = step_arrays(history) if send == "curves" else history.to_dict() if send == "history" else None
        return rows, extra
    except Exception as e:  # a failed run is a result; the sweep goes on
        return run_rows(task, error=" ".join(f"{type(e).__name__}: {e}".split())), None


@dataclass
class SweepEvent:
    """Where a sweep stands, as the progress callback sees it: the runs to do, done, running and
    failed (of those done), and the run that just finished (None at the start).

    >>> SweepEvent(total=4).done
    0
    """

    total: int
    done: int = 0
    running: int = 0
    failed: int = 0
    skipped: int = 0
    task: Task | None = None
    status: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class _Table:
    """The rows so far, kept in the grid's order and written after every run; with ``curves``, each
    run's steps too, written beside the table first (so that a run in the table has its curves)."""

    def __init__(self, grid: Grid, path: str | None, retry_failed: bool, curves: bool) -> None:
        self.path = path
        self.order = {t.run_id: t.index for t in grid.tasks}
        self.rows: list[dict[str, Any]] = []
        self.curves = CurvesFile(None if path is None else curves_path(path)) if curves else None
        if path is not None and os.path.exists(path):
            df = read_runs(path)
            _check_columns(path, [str(c) for c in df.columns], list(run_rows(grid.tasks[0], error="-")[0]))
            old = records(df)
            if retry_failed:
                old = [r for r in old if r["status"] != "failed"]
            if self.curves is not None and self.curves.path is not None:
                # a run whose curves are missing or cut short has not finished: it runs again
                have, cut = (
                    read_curves_file(self.curves.path) if os.path.exists(self.curves.path) else ({}, set())
                )
                steps = {r["run_id"]: r["steps_run"] for r in old}
                kept = {k for k, n in steps.items() if k not in cut and whole(have.get(k), n)}
                old = [r for r in old if r["run_id"] in kept]
                for k in kept:
                    self.curves.add(k, have.get(k))
            self.rows = old
        self.have = {r["run_id"] for r in self.rows}

    def add(self, rows: list[dict[str, Any]], steps: Any = None) -> None:
        self.rows.extend(rows)
        self.have.update(r["run_id"] for r in rows)
        big = len(self.order)
        # the grid's order, then runs from elsewhere in the order they came; evaluations in order
        self.rows.sort(
            key=lambda r: (self.order.get(r["run_id"], big), r["eval"] if r["eval"] is not None else -1)
        )
        if self.curves is not None:
            for key in dict.fromkeys(r["run_id"] for r in rows):
                self.curves.add(key, steps)
            self.curves.write(list(dict.fromkeys(r["run_id"] for r in self.rows)))
        if self.path is not None:
            write_table(self.rows, self.path)


def _check_columns(path: str, have: list[str], want: list[str]) -> None:
    """Refuse a table whose columns are not the ones this sweep writes: its rows and the new ones
    could not share one table.

    >>> _check_columns("t.csv", ["run_id", "status"], ["run_id", "status", "eval"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: sweep table 't.csv' has other columns than this sweep writes (missing: eval): expected ...
    """
    missing = [c for c in want if c not in have]
    extra = [c for c in have if c not in want]
    if missing or extra:
        what = "; ".join(
            f"{label}: {', '.join(cols[:8])}{', ...' if len(cols) > 8 else ''}"
            for label, cols in (("missing", missing), ("extra", extra))
            if cols
        )
        raise ValueError(
            f"sweep table {path!r} has other columns than this sweep writes ({what}): expected a table "
            "of this sweep, or another file"
        )


#: a data set larger than this (bytes) is read by each run itself rather than sent with its task
_SEND_DATA_BELOW = 1 << 26


def _data_key(task: Task) -> tuple[str, int, int]:
    c = task.config
    return (c.data, c.data_seed, c.context)


def _shared_data(tasks: list[Task]) -> dict[tuple[str, int, int], Any]:
    """Each data set of ``tasks``, read once (by :func:`floatlab.train.data.get_data`, as the
    trainer would); None where reading fails (each run then fails with the reason) or the set is
    large (each run reads it)."""
    from floatlab.train.data.datasets import get_data

    out: dict[tuple[str, int, int], Any] = {}
    for t in tasks:
        key = _data_key(t)
        if key in out:
            continue
        try:
            d = get_data(key[0], seed=key[1], context=key[2])
        except Exception:  # the run meets it again, and records it as failed
            d = None
        if d is not None and sum(a.nbytes for a in (d.x_train, d.y_train, d.x_test, d.y_test)) > (
            _SEND_DATA_BELOW
        ):
            d = None
        out[key] = d
    return out


def _start_method() -> Any:
    """How the pool starts its workers: never a plain fork (a forked child would inherit the
    parent's compiler and BLAS threads mid-state), but a fork server that has imported the trainer
    and set numba up once where the platform has one (each worker then starts in a fraction of a
    second), else spawn."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():  # pragma: no cover - Windows
        return multiprocessing.get_context("spawn")
    from multiprocessing import forkserver

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["floatlab.sweeps._preload"])
    forkserver.ensure_running()  # it prepares itself while the caller goes on (a no-op once running)
    return ctx


#: why a run whose worker process died is failed
_DIED = "its worker process died (killed, as by the out-of-memory killer, or crashed)"


def _run_pool(
    todo: list[Task],
    workers: int,
    run: Callable[[Task], Outcome],
    args: Callable[[Task], tuple[Any, ...]],
    finished: Callable[[Task, Outcome], None],
    context: Any,
) -> None:
    """Run ``todo`` on ``workers``: a thread here (``run``) and ``workers - 1`` child processes
    (:func:`_execute` with ``args``, started by ``context``), each taking the next task from one
    queue as it gets free (the longest first, as the first run of each configuration tells:
    :class:`~floatlab.sweeps.order.TaskQueue`); the results reach ``finished`` here, in this
    thread, as they come. At most one task is handed to the pool per child, so a free worker never
    waits behind a busy one.
    Warnings are ignored meanwhile, in this thread too (see :func:`_train`).

    A child that dies (SIGKILL from the out-of-memory killer, a crash) breaks the pool: every run
    in it then ends with BrokenProcessPool, and which of them killed its worker is unknown. A new
    pool takes over; when one run was in the pool, it is failed with the reason; when several were,
    each runs again alone in the pool (the others' results are the same: runs are seeded), and one
    that kills its worker alone is failed."""
    tasks = TaskQueue(todo)  # the longest runs first, as the first of each configuration tells
    results: queue.Queue[tuple[Task, Any]] = queue.Queue()
    stop = threading.Event()

    def take() -> Task | None:
        return None if stop.is_set() else tasks.take()

    def here() -> None:
        while (task := take()) is not None:
            try:
                rows = run(task)
            except BaseException as e:  # (not a failed run: run records those) raised over there
                results.put((task, e))
                return
            tasks.done(task)
            results.put((task, rows))

    def new_pool() -> ProcessPoolExecutor:
        return ProcessPoolExecutor(workers - 1, mp_context=context)

    pool = new_pool()
    in_pool: dict[Future[Outcome], Task] = {}
    suspects: deque[Task] = deque()  # runs of a pool that broke with several in it: each runs alone

    def feed() -> None:
        nonlocal pool
        while not stop.is_set():
            alone = bool(suspects)
            if alone:
                if in_pool:
                    return
                task: Task | None = suspects.popleft()
            elif len(in_pool) < workers - 1:
                task = take()
            else:
                return
            if task is None:
                return
            try:
                f = pool.submit(_execute, task, *args(task))
            except BrokenProcessPool:  # a child died idle, or just now (its runs will report it)
                if alone:
                    suspects.appendleft(task)
                else:
                    tasks.put_back(task)
                if in_pool:
                    return
                pool.shutdown(wait=True)
                pool = new_pool()
                continue
            in_pool[f] = task
            f.add_done_callback(functools.partial(report, task))

    def report(task: Task, f: Future[Outcome]) -> None:
        tasks.done(task)
        results.put((task, f))  # (bound to its task: a broken pool's runs leave in_pool first)

    helper = threading.Thread(target=here, name="floatlab-sweep-run", daemon=True)
    with warnings.catch_warnings():
        # the thread's runs ignore warnings as execute's do, but the filters are global: they are
        # set once, here, for the whole pool, never by the thread
        warnings.simplefilter("ignore")
        try:
            helper.start()  # first: handing the pool its first task waits for the fork server to start
            feed()
            left = len(todo)
            while left:
                task, got = results.get()
                if isinstance(got, BaseException):
                    raise got
                if not isinstance(got, Future):
                    finished(task, got)
                    left -= 1
                    continue
                if got not in in_pool:
                    continue  # a broken pool's run, dealt with below when the first of them came
                if not isinstance(got.exception(), BrokenProcessPool):
                    del in_pool[got]
                    finished(task, _result(task, got))
                    left -= 1
                    feed()
                    continue
                wait_all(in_pool)  # a broken pool ends every run in it
                died = [t for f, t in in_pool.items() if isinstance(f.exception(), BrokenProcessPool)]
                for f, t in list(in_pool.items()):
                    if not isinstance(f.exception(), BrokenProcessPool):
                        finished(t, _result(t, f))
                        left -= 1
                in_pool.clear()
                if len(died) == 1:
                    reason = f"{_DIED}: {type(got.exception()).__name__}"
                    finished(died[0], (run_rows(died[0], error=reason), None))
                    left -= 1
                else:
                    suspects.extend(died)
                pool.shutdown(wait=True)
                pool = new_pool()
                feed()
        finally:  # interrupted: the runs not started are dropped, the running ones end
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            if helper.is_alive():
                helper.join()


def _result(task: Task, future: Future[Outcome]) -> Outcome:
    """What a run done in the pool sent; a run whose task or result could not travel between the
    processes is failed with the reason (_execute itself never raises)."""
    e = future.exception()
    if e is None:
        return future.result()
    return run_rows(task, error=" ".join(f"{type(e).__name__}: {e}".split())), None


def _dask_client(scheduler: str | None, workers: int, processes: bool, timeout: float) -> Any:
    try:
        from distributed import Client, LocalCluster
    except ImportError as e:
        raise ValueError("a Dask sweep needs dask[distributed]: pip install 'floatlab[scale]'") from e
    if scheduler is None:
        cluster = LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=workers, threads_per_worker=1, processes=processes, dashboard_address=None
        )
        return Client(cluster, timeout=timeout)  # type: ignore[no-untyped-call]
    try:
        return Client(scheduler, timeout=timeout)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError) as e:
        raise ValueError(
            f"Dask scheduler {scheduler!r} unreachable within {timeout:g} s: expected a running "
            f"scheduler's address such as tcp://host:8786 ({type(e).__name__})"
        ) from None


def _checked(
    executor: str, scheduler: str | None, threads: int, workers: int | None, timeout: float, progress: Any
) -> str:
    """The executor the options ask for; a bad option is one ValueError naming it."""
    from floatlab.text.progress import progress_wanted

    if executor not in EXECUTORS:
        raise ValueError(f"sweep executor {executor!r}: expected one of {', '.join(EXECUTORS)}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads={threads!r}: expected at least 1 thread per run")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers={workers!r}: expected a number of workers >= 1 (None: every core)")
    if isinstance(timeout, bool) or not (isinstance(timeout, (int, float)) and 0 < timeout < math.inf):
        raise ValueError(f"timeout={timeout!r}: expected a positive number of seconds")
    progress_wanted(progress)  # (refuses anything but True, False and None)
    return "dask" if scheduler is not None else executor


class _Watch:
    """The sweep's progress: the callback's :class:`SweepEvent` and the bar
    (:func:`floatlab.text.progress.progress_bar`: runs done of the total, running and failed)."""

    def __init__(
        self, total: int, skipped: int, callback: Callable[[SweepEvent], None] | None, progress: bool | None
    ) -> None:
        from floatlab.text.progress import NoBar, progress_bar

        self.event = SweepEvent(total=total, skipped=skipped)
        self.callback = callback
        self.bar = progress_bar(total, "sweep", progress=progress, unit="run") if total else NoBar()

    def start(self) -> None:
        if self.callback is not None:
            self.callback(self.event)

    def done(self, task: Task, status: str, running: int) -> None:
        event = self.event
        event.done += 1
        event.running = running
        event.task, event.status = task, status
        event.failed += status == "failed"
        self.bar.update(1)
        self.bar.set_postfix_str(f"running {running}, failed {event.failed}")
        if self.callback is not None:
            self.callback(event)

    def close(self) -> None:
        self.bar.close()


def _dispatch(
    todo: list[Task],
    executor: str,
    n: int,
    *,
    threads: int,
    send: str,
    scheduler: str | None,
    processes: bool,
    timeout: float,
    context: Any,
    data: dict[tuple[str, int, int], Any],
    finished: Callable[[Task, Outcome, int], None],
) -> None:
    """Run ``todo`` on ``executor`` with ``n`` workers; ``finished(task, outcome, running)`` here,
    as each run ends (``running``: the runs still going or due)."""
    left = len(todo)

    def end(task: Task, outcome: Outcome) -> None:
        nonlocal left
        left -= 1
        finished(task, outcome, min(n, left))

    if executor == "serial" or (executor == "process" and n == 1):
        for task in todo:
            end(task, _execute(task, threads, data[_data_key(task)], send))
        return
    if executor == "process":
        _run_pool(
            todo,
            n,
            lambda t: _train(t, threads, data[_data_key(t)], send),
            lambda t: (threads, data[_data_key(t)], send),
            end,
            context,
        )
        return
    client = _dask_client(scheduler, n, processes, timeout)
    try:
        from distributed import KilledWorker, as_completed

        # each data set goes to every worker once, not with every task (to one worker only, it
        # would draw every task there: the scheduler runs a task where its data is)
        sent = {
            k: None if d is None else client.scatter(d, broadcast=True, hash=False) for k, d in data.items()
        }
        futures = {client.submit(_execute, t, threads, sent[_data_key(t)], send, pure=False): t for t in todo}
        for f in as_completed(list(futures)):  # type: ignore[no-untyped-call]
            try:
                outcome = f.result()
            except KilledWorker as e:  # the run killed every worker it was given (out of memory, say)
                outcome = run_rows(futures[f], error=f"{_DIED}: {type(e).__name__}"), None
            end(futures[f], outcome)
    finally:
        cluster = client.cluster if scheduler is None else None
        client.close()
        if cluster is not None:
            cluster.close()


def _run_grid(
    grid: Grid,
    out: str | None = None,
    *,
    executor: str = "process",
    workers: int | None = None,
    scheduler: str | None = None,
    processes: bool = True,
    threads: int = 1,
    retry_failed: bool = False,
    timeout: float = 30.0,
    callback: Callable[[SweepEvent], None] | None = None,
    progress: bool | None = None,
    curves: bool = True,
) -> tuple[list[dict[str, Any]], CurvesFile | None]:
    """:func:`run_grid`, and the runs' curves (None without ``curves``)."""
    executor = _checked(executor, scheduler, threads, workers, timeout, progress)
    if not isinstance(curves, bool):
        raise ValueError(f"curves={curves!r}: expected True (keep each run's steps) or False")
    table = _Table(grid, out, retry_failed, curves)
    todo = [t for t in grid.tasks if t.run_id not in table.have]
    n = max(1, min(workers or os.cpu_count() or 1, max(len(todo), 1)))
    # the pool's fork server starts now and prepares itself while the data sets are read
    context = _start_method() if executor == "process" and n > 1 else None
    data = _shared_data(todo)
    watch = _Watch(len(todo), len(grid.tasks) - len(todo), callback, progress)

    def finished(task: Task, outcome: Outcome, running: int) -> None:
        rows, steps = outcome
        table.add(rows, steps)
        watch.done(task, rows[0]["status"], running)

    try:
        watch.start()
        if not todo:
            if out is not None and not os.path.exists(out):
                table.add([])
            elif table.curves is not None and table.curves.path and not os.path.exists(table.curves.path):
                table.curves.write(list(dict.fromkeys(r["run_id"] for r in table.rows)))
        else:
            _dispatch(
                todo, executor, n, threads=threads, send="curves" if curves else "rows", scheduler=scheduler,
                processes=processes, timeout=timeout, context=context, data=data, finished=finished,
            )  # fmt: skip
    finally:
        watch.close()
    return table.rows, table.curves


class RunOptions(TypedDict, total=False):
    """The keyword-only options of :func:`run_grid`, typed once: a function that runs a grid takes
    them as ``**options: Unpack[RunOptions]`` and hands them to :func:`run_grid`, whose defaults
    they have (:func:`run_options_signature` spells them out for help() and the API reference).

    >>> sorted(RunOptions(executor="serial", threads=2))
    ['executor', 'threads']
    """

    executor: str
    workers: int | None
    scheduler: str | None
    processes: bool
    threads: int
    retry_failed: bool
    timeout: float
    callback: Callable[[SweepEvent], None] | None
    progress: bool | None
    curves: bool


#: a function's ``**options: Unpack[RunOptions]``, shown as keyword-only parameters, defaults included
run_options_signature = spelled_out(_run_grid)


@run_options_signature
def run_grid(grid: Grid, out: str | None = None, **options: Unpack[RunOptions]) -> list[dict[str, Any]]:
    """Run ``grid``'s tasks not yet in the table ``out`` on ``executor`` ("serial", "process": a
    local pool of ``workers`` processes, this one and ``workers - 1`` children (default: every
    core), "dask": a ``LocalCluster`` of ``workers`` workers, processes or threads, or the cluster
    at ``scheduler``); write the table after each run; return its rows. Failed runs in the table are
    run again with ``retry_failed``. ``timeout``: seconds to reach a Dask scheduler (a positive
    number). An existing table whose columns are not this sweep's is refused, before any run.

    ``callback(event)`` sees a :class:`SweepEvent` at the start and after each run; ``progress``
    draws a bar over the runs (None: in a notebook or a terminal; see
    :func:`floatlab.text.progress.progress_bar`). With ``curves`` (the default) each run's per-step
    history is kept, and with ``out`` written beside the table (``<stem>.curves.parquet`` or
    ``.csv``, see :mod:`floatlab.sweeps.curves`) before it; a run in the table whose curves are
    missing or cut short runs again.

    >>> g = Grid({"seed": [0, 1]}, {"data": "underflow", "hidden": (4,), "steps": 2})
    >>> rows = run_grid(g, executor="serial")
    >>> [(r["seed"], r["status"]) for r in rows]
    [(0, 'ok'), (1, 'ok')]
    """
    return passing_on(_run_grid, grid, out, **options)[0]
