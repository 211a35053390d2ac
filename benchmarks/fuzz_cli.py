"""Fuzz the ``floatlab`` command line: generated argument lists through ``floatlab.cli.main``.

Each case is a random argument list: a subcommand (or garbage), then arguments drawn from pools of
numbers (decimals, fractions, hex floats, huge and tiny exponents, long digit strings), codes
(hex and binary of every width, decimals, malformed ones), format names and aliases (and typos),
rounding modes, option values (negative, zero, huge, non-numeric), and files in a scratch folder:
valid, truncated, empty, corrupt and hostile ``.npy``/``.npz``/``.pt`` files, a directory, paths
that do not exist or cannot be written, a FIFO, devices (``/dev/zero``, ``/dev/null``), links
(dangling, to a folder), and outputs that name an input or another output. Every case runs
in-process with warnings turned into errors and must end with

* exit status 0, with nothing on stderr but ``floatlab: warning:`` lines (training faults), or
* exit status 2, with exactly one other line on stderr, the last, starting ``floatlab: error:``;

never an exception out of ``main``, never exit status 1 (an internal error: a bug), never a
traceback, never a raw control character (ESC) from a file or array name in the output (unless
``--color`` asked for colours), never a case that hangs (each is stopped after ``CASE_SECONDS``).
The scratch folder also holds a zip bomb (a .npz of 64 MiB of zeros in 64 KiB, read with and
without a small ``--max-bytes``) and files and array names with terminal escapes and newlines.

Then a fixed set of file-system cases runs in child processes (:func:`fs_cases`): a full disk
(a small ``ulimit -f``) under every command that writes a file, the input given as its own output,
and a FIFO as input; each must exit 2 with one error line, leave no partial output and leave the
input exactly as it was.

``python benchmarks/fuzz_cli.py`` runs 100,000 cases and writes
``benchmarks/results/fuzz.md``; the test suite runs 2,000 (``tests/suites/test_fuzz_cli.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

Rng = np.random.Generator

FORMATS = [
    "fp64", "fp32", "tf32", "fp16", "bf16", "half", "float16", "bfloat16", "binary16", "e4m3", "e5m2",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float6_e2m3fn", "float6_e3m2fn",
    "float4_e2m1fn", "e2m1", "FP16", " fp16 ", "fp16,bf16", "fp16,,bf16", "fp8", "fp80", "fp128", "", ",",
    "f16", "e4m3fn", "e3m4", "bfloat", "float32", "single", "double", "binary64",
]  # fmt: skip
MODES = [
    "rne", "rna", "rtz", "rup", "rdown", "rodd", "stochastic", "nearest", "floor", "ceil", "trunc", "sr",
    "RNE", "round", "", "rn", "rz", "ru", "rd", "odd", "stoch", "toward-zero", "x",
]  # fmt: skip
SPECIAL_NUMBERS = [
    "0", "-0", "+0", "1", "-1", "0.1", "-0.1", "1/3", "-2/7", "1/0", "0/0", "inf", "-inf", "+inf", "nan",
    "-nan", "NaN", "Infinity", "infinity", "65504", "65520", "65519.999", "6.1e-5", "5.96e-8", "2.98e-8",
    "1e-7", "448", "57344", "3.4028235e38", "3.4028236e38", "1e308", "1.8e308", "4.9e-324", "2.4e-324",
    "1e-400", "1e400", "1e100000", "-1e-100000", "1e100001", "1e-100001", "0x1p-24", "0x1.ffcp15",
    "0x1.8p3", "-0x.1p-3", "0x1p1024", "0x1p-1075", "0x", "0x.p1", "1e", "e5", ".", "-", "+", "--1",
    "1..2", "1_000", "1 000", " 1 ", "\t2\n", "١٢", "１", "²", "1e+", "0.000", "00001", "1e-0", "snan",
    "qnan", "1j", "1+1j", "True", "None", "0b101", "0o7", "1/-3", "-1/3", "1 / 3", "1/3/5", "3/", "/3",
    "\x00", "\udcff", "💥",
]  # fmt: skip
CASE_SECONDS = 120  # a case that runs longer is taken for a hang
ESC_NAME = "esc\x1b[2J\nfloatlab: error: forged"
WORDS = ["--json", "--color", "--no-color", "-h", "--help", "--version", "--", "-", "-x", "--nope", "=", "-f"]
PLOT_EXTS = [".png", ".svg", ".pdf", ".xyz", ""]


def _number(rng: Rng) -> str:
    r = rng.random()
    if r < 0.3:
        return str(rng.choice(SPECIAL_NUMBERS))
    if r < 0.5:
        with np.errstate(over="ignore", under="ignore"):
            x = float(rng.standard_normal() * 10.0 ** rng.integers(-330, 330))
        return repr(x) if rng.random() < 0.7 else float(x).hex()
    if r < 0.6:
        return f"{rng.integers(-(10**9), 10**9)}/{rng.integers(-5, 10**6)}"
    if r < 0.7:
        mant = "".join(rng.choice(list("0123456789"), size=int(rng.integers(1, 40))))
        return f"{'-' if rng.random() < 0.5 else ''}{mant}e{rng.integers(-2000, 2000)}"
    if r < 0.75:
        n = int(rng.choice([4000, 4300, 5000, 20_000, 100_001]))
        return "0." + "0" * n + "1" if rng.random() < 0.5 else "9" * n
    if r < 0.85:
        return str(int(rng.integers(-(2**62), 2**62)) >> int(rng.integers(0, 62)))
    return _garbage(rng)


def _garbage(rng: Rng) -> str:
    alphabet = [
        *list("0123456789abcdefxXpPeE+-./_ ,:^*!?'\"\\%$#@~`()[]{}<>;|&"),
        "é",
        "∞",
        "\x00",
        "\t",
        "\n",
    ]
    return "".join(rng.choice(alphabet, size=int(rng.integers(0, 12))))


def _code(rng: Rng) -> str:
    r = rng.random()
    if r < 0.45:
        width = int(rng.choice([1, 2, 3, 4, 5, 8, 16, 17, 40]))
        return "0x" + "".join(rng.choice(list("0123456789abcdefABCDEF"), size=width))
    if r < 0.6:
        width = int(rng.choice([4, 6, 8, 16, 19, 32, 64, 65]))
        return "0b" + "".join(rng.choice(["0", "1", "_"] if rng.random() < 0.2 else ["0", "1"], size=width))
    if r < 0.8:
        return str(int(rng.integers(0, 2**63)) >> int(rng.integers(0, 63)))
    if r < 0.85:
        return "9" * int(rng.choice([5000, 30]))
    return str(
        rng.choice(["0x", "0b", "-0x1", "0x-1", "0xg", "0b2", "", " ", "0x_", "0x3c00_", "-1", "1.5", "٣"])
    )


def _fmt(rng: Rng) -> str:
    return str(rng.choice(FORMATS)) if rng.random() < 0.93 else _garbage(rng)


def _mode(rng: Rng) -> str:
    return str(rng.choice(MODES)) if rng.random() < 0.95 else _garbage(rng)


def _int_text(rng: Rng) -> str:
    return str(
        rng.choice(["0", "1", "-1", "7", "42", "-5", "2147483648", "9" * 30, "1e3", "x", "", "0x10", "3.5"])
    )


@dataclass
class Files:
    """The scratch folder of files the fuzzer hands to the commands that read or write files."""

    root: Path
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)


def make_files(root: Path) -> Files:
    """Write valid, damaged and hostile array files into ``root``."""
    f = Files(root)
    good = np.array([1.0, 2.0**-30, -3.5, 0.0, 7e4, 1e-9], np.float32)

    def save(name: str, arr: np.ndarray, **kw: bool) -> Path:
        p = root / name
        with open(p, "wb") as fh:
            np.save(fh, arr, **kw)
        return p

    ok = save("ok.npy", good)
    save("f64.npy", np.linspace(-3, 3, 50))
    with np.errstate(over="ignore"):
        save("f16.npy", good.astype(np.float16))  # 7e4 overflows to inf: part of the test
    save("bigendian.npy", good.astype(">f4"))
    save("fortran.npy", np.asfortranarray(np.arange(12.0).reshape(3, 4)))
    save("ints.npy", np.arange(-5, 5))
    save("bools.npy", np.array([True, False]))
    save("zero_d.npy", np.array(1.5))
    save("empty.npy", np.zeros((0,), np.float32))
    save("empty2d.npy", np.zeros((3, 0)))
    save("nan.npy", np.array([np.nan, np.inf, -np.inf, 0.0, -0.0]))
    save(
        "payloads.npy", np.array([0x7F800001, 0xFFC12345, 0x7FFFFFFF, 0x00000001], np.uint32).view(np.float32)
    )
    save("complex.npy", np.array([1 + 2j]))
    save("strings.npy", np.array(["a", "1.0"]))
    save("object.npy", np.array([1, None], dtype=object), allow_pickle=True)
    save("struct.npy", np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]))
    save("datetime.npy", np.array(["2020-01-01"], dtype="datetime64[D]"))
    raw = ok.read_bytes()
    (root / "trunc.npy").write_bytes(raw[:-3])
    (root / "trunc_header.npy").write_bytes(raw[:20])
    (root / "zero_bytes.npy").write_bytes(b"")
    (root / "garbage.npy").write_bytes(b"not an array at all\n" * 20)
    # a header that claims a huge shape the file does not hold
    huge = raw.replace(b"'shape': (6,)", b"'shape': (100000000000,)")
    (root / "huge_header.npy").write_bytes(huge)
    (root / "bad_header.npy").write_bytes(raw.replace(b"'shape': (6,)", b"'shape': (-6,)"))
    (root / "evil_header.npy").write_bytes(raw.replace(b"'descr': '<f4'", b"'descr': 'O'   "))
    with open(root / "ok.npz", "wb") as fh:
        np.savez(fh, a=good, b=np.arange(3.0))
    npz = (root / "ok.npz").read_bytes()
    (root / "trunc.npz").write_bytes(npz[: len(npz) // 2])
    (root / "garbage.npz").write_bytes(b"PK\x03\x04" + b"garbage" * 30)
    (root / "npy_named.npz").write_bytes(raw)
    (root / "npz_named.npy").write_bytes(npz)
    with open(root / "objects.npz", "wb") as fh:
        np.savez(fh, a=np.array([1, None], dtype=object))
    with zipfile.ZipFile(root / "not_npy_inside.npz", "w") as zf:
        zf.writestr("a.npy", b"not npy")
    with zipfile.ZipFile(root / "huge_inside.npz", "w") as zf:
        zf.writestr("a.npy", huge)
    with open(root / "empty.npz", "wb") as fh:
        np.savez(fh)
    bad_crc = bytearray(npz)
    bad_crc[len(npz) // 3] ^= 0xFF
    (root / "flipped.npz").write_bytes(bytes(bad_crc))
    (root / "garbage.pt").write_bytes(b"junk" * 50)
    # a zip bomb: 64 MiB of zeros in about 64 KiB (under the default cap; refused with a smaller one)
    with zipfile.ZipFile(root / "bomb.npz", "w", zipfile.ZIP_DEFLATED) as bz, bz.open("g.npy", "w") as member:
        header = np.lib.format.header_data_from_array_1_0(np.zeros(0))
        header["shape"] = (8 << 20,)
        np.lib.format.write_array_header_1_0(member, header)
        for _ in range(64):
            member.write(bytes(1 << 20))
    # names that carry terminal escapes and newlines: an array name and a file name
    with open(root / "escapes.npz", "wb") as fh:
        savez: Any = np.savez  # (numpy's stubs take a name such as this one for an option)
        savez(fh, **{ESC_NAME: good})
    save("esc\x1b[31m\nname.npy", good)
    try:
        import torch

        torch.save({"w": torch.ones(3), "i": torch.arange(3), "nested": [torch.zeros(2)]}, root / "ok.pt")
        torch.save({"i": torch.arange(3)}, root / "ints.pt")
        pt = (root / "ok.pt").read_bytes()
        (root / "trunc.pt").write_bytes(pt[: len(pt) // 2])
    except ImportError:
        pass
    (root / "a_dir.npy").mkdir()
    (root / "text.json").write_text("{not json")
    # the file system: a FIFO (a reader would block on it), links, a dangling link, devices
    if hasattr(os, "mkfifo"):
        os.mkfifo(root / "fifo.npy")
    (root / "link.npy").symlink_to(ok)
    (root / "dangling.npy").symlink_to(root / "nowhere.npy")
    (root / "dir_link.npy").symlink_to(root / "a_dir.npy")
    f.inputs = [
        *sorted(str(p) for p in root.iterdir()),
        str(root / "missing.npy"),
        str(root / "missing.npz"),
        "/nonexistent/dir/x.npy",
        "/dev/zero",
        "/dev/null",
        "",
    ]
    out = root / "out"
    out.mkdir()
    (out / "sub").mkdir()
    f.outputs = [
        str(out / "o.npy"),
        str(out / "o.npz"),
        str(out / "o.json"),
        str(out / "o.txt"),
        str(out / "o"),
        "/nonexistent/dir/o.npy",
        "/nonexistent/dir/o.npz",
        str(root / "a_dir.npy"),
        str(ok),
        "/proc/version",
        str(root / "fifo.npy"),
        str(root / "dangling.npy"),
        str(root / "dir_link.npy"),
        "/dev/null",
        str(out / "sub" / ".." / "o.npz"),  # the same file as another output, by another name
    ]
    return f


def _pick(rng: Rng, items: list[str]) -> str:
    return str(items[int(rng.integers(0, len(items)))])


def _options(rng: Rng, table: Mapping[str, Callable[[], str | None]], k: int) -> list[str]:
    out: list[str] = []
    names = list(table)
    for _ in range(k):
        name = names[int(rng.integers(0, len(names)))]
        value = table[name]()
        out += [name] if value is None else [name, value]
    return out


def generate(rng: Rng, files: Files) -> list[str]:
    """One random argument list."""

    def inp() -> str:
        return _pick(rng, files.inputs)

    def outp() -> str:
        return _pick(rng, files.outputs)

    def plot() -> str:
        return str(files.root / "out" / f"p{_pick(rng, PLOT_EXTS)}")

    def seed() -> str:
        return _int_text(rng) if rng.random() < 0.3 else str(int(rng.integers(0, 2**40)))

    common: dict[str, Callable[[], str | None]] = {
        "--json": lambda: None,
        "--color": lambda: None,
        "--no-color": lambda: None,
    }
    rounding: dict[str, Callable[[], str | None]] = {
        **common,
        "-f": lambda: _fmt(rng),
        "-r": lambda: _mode(rng),
        "--seed": seed,
        "--saturate": lambda: None,
        "--no-subnormals": lambda: None,
    }
    k = int(rng.integers(0, 4))
    r = rng.random()
    argv: list[str]
    if r < 0.16:
        argv = ["decode", *[_code(rng) for _ in range(int(rng.integers(0, 4)))]]
        argv += _options(rng, {**common, "-f": lambda: _fmt(rng)}, k)
    elif r < 0.32:
        argv = ["encode", _number(rng), *_options(rng, rounding, k)]
    elif r < 0.38:
        argv = ["formats", *([_fmt(rng)] if rng.random() < 0.8 else []), *_options(rng, common, k)]
    elif r < 0.5:
        argv = ["add", _number(rng), _number(rng), *_options(rng, rounding, k)]
    elif r < 0.64:
        value = inp() if rng.random() < 0.5 else _number(rng)
        opts = {**rounding, "-o": outp, "--force": lambda: None}
        argv = ["round", value, *_options(rng, opts, k)]
    elif r < 0.74:
        opts = {
            **rounding,
            "--scale": lambda: _number(rng) if rng.random() < 0.7 else f"2^{rng.integers(-1100, 1100)}",
        }
        argv = ["underflow", inp(), *_options(rng, opts, k)]
    elif r < 0.82:
        source = (
            inp()
            if rng.random() < 0.4
            else _pick(rng, ["1", "10", "3000", "0", "-3", "1_000", "x", "10000001"])
        )
        opts = {
            **common,
            "-f": lambda: _fmt(rng),
            "-r": lambda: _mode(rng),
            "--seed": seed,
            "--value": lambda: _number(rng),
            "--method": lambda: _pick(rng, ["sequential", "pairwise", "kahan", "x"]),
            "--accumulator": lambda: _fmt(rng),
            "--wide": lambda: _fmt(rng),
        }
        argv = ["accumulate", source, *_options(rng, opts, k)]
    elif r < 0.94:
        opts = {
            **common,
            "-f": lambda: _fmt(rng),
            "-r": lambda: _mode(rng),
            "--scale": lambda: _number(rng),
            "--recommend": lambda: None,
            "--width": lambda: _int_text(rng),
            "--plot": plot if rng.random() < 0.1 else lambda: "",
            "--max-bytes": lambda: _pick(rng, ["1MiB", "16MiB", "1GiB", "0", "x", "100"]),
        }
        argv = ["histogram", *[inp() for _ in range(int(rng.integers(0, 3)))], *_options(rng, opts, k)]
    elif r < 0.965:
        argv = _train(rng, inp, outp)
    elif r < 0.975:
        argv = [
            "compare",
            *[_pick(rng, ["fp32", "fp16", "bf16", "mixed-fp16", "mixed-fp8", "x"]) for _ in range(2)],
        ]
        argv += ["--epochs", _pick(rng, ["0", "1", "-1"]), "--data", "underflow", "--hidden", "4", "-q"]
        if rng.random() < 0.3:
            argv += ["--plot", plot()]
    elif r < 0.98:
        argv = ["lessons", "--list", *_options(rng, common, k)]
    elif r < 0.983:
        argv = ["demo", *_options(rng, common, 1)]
    else:
        argv = [_garbage(rng) for _ in range(int(rng.integers(0, 4)))]
    if rng.random() < 0.05:  # a stray word somewhere
        argv.insert(int(rng.integers(0, len(argv) + 1)), _pick(rng, WORDS))
    return argv


def _train(rng: Rng, inp: Callable[[], str], outp: Callable[[], str]) -> list[str]:
    argv = ["train", "--data", "underflow", "--hidden", _pick(rng, ["4", "8,4", "0", "-2", "x", ""]), "-q"]
    argv += ["--epochs", _pick(rng, ["0", "1", "1", "-1", "x"])]
    argv += [
        "--precision",
        _pick(rng, ["fp32", "fp16", "bf16", "mixed-fp16", "mixed-bf16", "mixed-fp8", "fp9"]),
    ]
    extra = {
        "--batch-size": lambda: _pick(rng, ["0", "1", "64", "100000", "-1"]),
        "--lr": lambda: _pick(rng, ["0", "1e-3", "nan", "inf", "-1", "1e30", "1e39"]),
        "--optimizer": lambda: _pick(rng, ["sgd", "adamw", "adam", "x"]),
        "--clip": lambda: _pick(rng, ["1", "0", "nan", "-1"]),
        "--momentum": lambda: _pick(rng, ["0", "0.9", "1", "2", "nan"]),
        "--schedule": lambda: _pick(rng, ["constant", "cosine", "linear", "x"]),
        "--warmup": lambda: _pick(rng, ["0", "3", "-1", "999999"]),
        "--forward": lambda: _fmt(rng),
        "--backward": lambda: _fmt(rng),
        "--loss-scaling": lambda: _pick(rng, ["none", "static", "dynamic", "x"]),
        "--static-scale": lambda: _pick(rng, ["1", "0", "nan", "1e300", "-4", "1e39"]),
        "--rounding": lambda: _mode(rng),
        "--master-weights": lambda: _pick(rng, ["on", "off", "x"]),
        "--checkpoint": outp,
        "--resume": inp,
        "--history": outp,
        "--model": lambda: _pick(rng, ["mlp", "attention", "x"]),
        "--d-model": lambda: _pick(rng, ["4", "0", "-1"]),
        "--max-bytes": lambda: _pick(rng, ["1MiB", "1GiB", "0"]),
    }
    return argv + _options(rng, extra, int(rng.integers(0, 4)))


@dataclass
class Outcome:
    """What one case did."""

    argv: list[str]
    status: int | None
    stderr: str
    problem: str | None
    seconds: float


class _Hang(BaseException):
    """Raised by the alarm when a case runs past CASE_SECONDS."""


def _alarm(signum: int, frame: object) -> None:
    raise _Hang


def run_case(argv: list[str]) -> Outcome:
    """Run ``floatlab.cli.main(argv)`` in-process; say what, if anything, went wrong."""
    from floatlab.cli import main

    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    status: int | None = None
    problem: str | None = None
    alarm = hasattr(signal, "SIGALRM")
    previous = signal.signal(signal.SIGALRM, _alarm) if alarm else None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a stray numpy warning is noise on the terminal: a finding
        try:
            if alarm:
                signal.alarm(CASE_SECONDS)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                status = main(argv)
        except _Hang:
            problem = f"hang: still running after {CASE_SECONDS} s"
        except BaseException as e:  # anything escaping main is a crash
            problem = f"exception out of main: {type(e).__name__}: {e}"
        finally:
            if alarm:
                signal.alarm(0)
                signal.signal(signal.SIGALRM, previous)
    seconds = time.perf_counter() - t0
    text = err.getvalue()
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    # a training fault is reported as a warning line; anything else on stderr is an error line
    errors = [ln for ln in lines if not ln.startswith("floatlab: warning: ")]
    if problem is None:
        if "Traceback" in text or "Traceback" in out.getvalue():
            problem = "traceback printed"
        elif "\x1b" in text or ("\x1b" in out.getvalue() and "--color" not in argv):
            problem = f"a raw ESC reached the terminal: {(out.getvalue() + text)[:200]!r}"
        elif any(ln.startswith("floatlab: error") for ln in out.getvalue().splitlines()):
            problem = "a forged error line on stdout"
        elif status == 2:
            if len(errors) != 1 or not lines[-1].startswith("floatlab: error: ") or not text.endswith("\n"):
                problem = f"exit 2 without exactly one error line: {text[:200]!r}"
        elif status == 0:
            if errors:
                problem = f"exit 0 with stderr output: {text[:200]!r}"
        else:
            problem = f"exit status {status}: {text[:300]!r}"
    return Outcome(argv, status, text, problem, seconds)


@dataclass
class Summary:
    cases: int = 0
    statuses: Counter[int | None] = field(default_factory=Counter)
    commands: Counter[str] = field(default_factory=Counter)
    problems: list[Outcome] = field(default_factory=list)
    slowest: list[tuple[float, list[str]]] = field(default_factory=list)
    seconds: float = 0.0
    fs: list[tuple[str, str | None]] = field(default_factory=list)


def fuzz(n: int, seed: int = 0, root: Path | None = None, progress: bool = False, fs: bool = True) -> Summary:
    """Run ``n`` generated cases with the generator seeded by ``seed``, then (with ``fs``) the
    file-system cases of :func:`fs_cases`."""
    rng = np.random.default_rng(seed)
    s = Summary()
    with contextlib.ExitStack() as stack:
        if root is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="floatlab-fuzz-")))
        files = make_files(root)
        cwd = os.getcwd()
        os.chdir(root / "out")  # relative paths a case writes land in the scratch folder
        stack.callback(os.chdir, cwd)
        t0 = time.perf_counter()
        for i in range(n):
            argv = generate(rng, files)
            o = run_case(argv)
            s.cases += 1
            s.statuses[o.status] += 1
            s.commands[argv[0] if argv and argv[0] in _COMMANDS else "(other)"] += 1
            if o.problem is not None:
                s.problems.append(o)
            s.slowest = sorted([*s.slowest, (o.seconds, argv)], key=lambda t: -t[0])[:5]
            if progress and (i + 1) % 5000 == 0:
                print(
                    f"  {i + 1:,} cases, {time.perf_counter() - t0:,.0f} s, problems {len(s.problems)}",
                    flush=True,
                )
        if fs:
            for case in fs_cases(root / "fs"):
                problem = run_fs_case(case)
                s.fs.append((case.name, problem))
                if problem is not None:
                    s.problems.append(Outcome(case.argv, None, "", problem, 0.0))
        s.seconds = time.perf_counter() - t0
    return s


# ---- the file system, in child processes ------------------------------------------------------
@dataclass
class FsCase:
    """A command run in a child (``ulimit -f`` applies to it alone) and what must hold after it."""

    name: str
    argv: list[str]
    outputs: list[str]  # must not exist afterwards (or be as before, when they existed)
    ulimit_kib: int | None = None


def fs_cases(root: Path) -> list[FsCase]:
    """Commands that write under a 2 KiB file-size limit (a full disk), the input as its own output,
    and a FIFO as input."""
    root.mkdir(parents=True, exist_ok=True)
    big = root / "big.npy"
    np.save(big, np.linspace(0.0, 1.0, 4096))
    victim = root / "victim.npy"
    np.save(victim, np.linspace(0.0, 1.0, 2500))
    fifo = root / "fifo_in.npy"
    if not fifo.exists():
        os.mkfifo(fifo)
    o = str(root / "o")
    train = ["train", "--data", "underflow", "--hidden", "4", "--epochs", "1", "-q"]
    return [
        FsCase("round -o, disk full", ["round", str(big), "-f", "bf16", "-o", f"{o}.npy"], [f"{o}.npy"], 2),
        FsCase(
            "round onto its input, disk full",
            ["round", str(victim), "-f", "bf16", "-o", str(victim), "--force"],
            [str(victim)],
            2,
        ),
        FsCase("train --json FILE, disk full", [*train, "--json", f"{o}-run.json"], [f"{o}-run.json"], 2),
        FsCase("histogram --plot, disk full", ["histogram", str(big), "--plot", f"{o}.png"], [f"{o}.png"], 2),
        FsCase("train --history, disk full", [*train, "--history", f"{o}.json"], [f"{o}.json"], 2),
        FsCase("train --checkpoint, disk full", [*train, "--checkpoint", f"{o}.npz"], [f"{o}.npz"], 2),
        FsCase(
            "round onto its input without --force", ["round", str(victim), "-o", str(victim)], [str(victim)]
        ),
        FsCase("round from a FIFO", ["round", str(fifo), "-f", "bf16"], []),
        FsCase("histogram of a FIFO", ["histogram", str(fifo)], []),
    ]


def run_fs_case(case: FsCase) -> str | None:
    """Run one case in a child; the problem, or None."""
    before = {p: Path(p).read_bytes() for p in case.outputs if Path(p).is_file()}
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    limit = f"ulimit -f {case.ulimit_kib}; " if case.ulimit_kib else ""
    cmd = limit + " ".join(_quote(a) for a in [sys.executable, "-m", "floatlab", *case.argv])
    try:
        r = subprocess.run(
            ["bash", "-c", cmd], capture_output=True, text=True, timeout=CASE_SECONDS, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        return f"hang: still running after {CASE_SECONDS} s"
    lines = r.stderr.splitlines()
    if r.returncode != 2:
        return f"exit {r.returncode} (expected 2): {r.stderr[:200]!r}"
    if len(lines) != 1 or not lines[0].startswith("floatlab: error: "):
        return f"stderr is not one error line: {r.stderr[:200]!r}"
    for p in case.outputs:
        if p in before:
            if not Path(p).is_file() or Path(p).read_bytes() != before[p]:
                return f"{p} changed though the command failed"
        elif Path(p).exists():
            return f"{p} left behind though the command failed"
    leftovers = [q.name for q in Path(case.outputs[0]).parent.glob(".*.tmp*")] if case.outputs else []
    if leftovers:
        return f"temporary files left behind: {leftovers}"
    return None


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


_COMMANDS = {
    "decode", "encode", "formats", "add", "round", "underflow", "accumulate", "histogram", "train",
    "compare", "lessons", "demo",
}  # fmt: skip


def _cases(s: Summary) -> Iterator[str]:
    for o in s.problems[:20]:
        yield f"- `{o.argv!r}`: {o.problem}"


def markdown(s: Summary, seed: int) -> str:
    from _common import Table

    t = Table(["command", "cases"])
    for name, count in sorted(s.commands.items(), key=lambda kv: -kv[1]):
        t.add(name, f"{count:,}")
    st = Table(["exit status", "cases"])
    for status, count in sorted(s.statuses.items(), key=lambda kv: str(kv[0])):
        st.add(str(status), f"{count:,}")
    lines = [
        f"Cases: {s.cases:,} generated argument lists (seed {seed}), run in-process through "
        "`floatlab.cli.main` with warnings as errors.",
        f"Problems (an exception out of main, exit status 1, a traceback, an exit-2 error that is not "
        f"one line, stderr output other than warning lines on success, a raw ESC or a forged error "
        f"line in the output, a hang, or a failed file-system case): **{len(s.problems)}**. "
        f"Time: {s.seconds:,.0f} s ({s.cases / s.seconds:,.0f} cases per second).",
        st.markdown(),
        t.markdown(),
        "Slowest cases:\n\n" + "\n".join(f"- {sec:.2f} s: `{argv!r}`"[:300] for sec, argv in s.slowest),
    ]
    if s.fs:
        lines.append(
            "File-system cases (child processes: a 2 KiB `ulimit -f` for a full disk, the input as "
            "its own output, a FIFO as input):\n\n"
            + "\n".join(f"- {name}: {'ok' if p is None else p}" for name, p in s.fs)
        )
    if s.problems:
        lines.append("Problems found:\n\n" + "\n".join(_cases(s)))
    return "\n\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fuzz the floatlab command line.")
    parser.add_argument("-n", "--cases", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the markdown here (default: results/fuzz.md)")
    args = parser.parse_args(argv)
    s = fuzz(args.cases, args.seed, progress=True)
    text = markdown(s, args.seed)
    if args.out is None:
        from _common import write_results

        path = write_results("fuzz", "Fuzzing the command line", [text], ["torch", "matplotlib"])
    else:
        path = Path(args.out)
        path.write_text(text + "\n", encoding="utf-8")
    print(text)
    print(f"written to {path}")
    return 0 if not s.problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
