"""Hostile files, everywhere floatlab reads or writes one: truncated, corrupt and foreign .npy, .npz
and .pt files, wrong shapes, object arrays, files that are not arrays at all, paths that do not exist
or cannot be written. Each gives one clear ValueError naming the file (one line and exit status 2 on
the command line) or the correct answer; nothing is unpickled and nothing the header merely claims
is allocated."""

from __future__ import annotations

import contextlib
import io
import json
import os
import zipfile
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from floatlab.cli import main
from floatlab.cli.histogram_cmd import load_histograms
from floatlab.io import read_npy, read_npz
from floatlab.train import History
from floatlab.train import checkpoint as ck

GOOD = np.array([1.0, 2.0**-30, -3.5, 0.0, 7e4, 1e-9], np.float32)


def _save(path: Path, arr: Any, **kw: Any) -> Path:
    with open(path, "wb") as fh:  # (np.save on a name would add ".npy")
        np.save(fh, arr, **kw)
    return path


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    f: dict[str, Path] = {}
    f["ok"] = _save(tmp_path / "ok.npy", GOOD)
    raw = f["ok"].read_bytes()
    for name, data in {
        "trunc": raw[:-3],
        "trunc_header": raw[:20],
        "zero_bytes": b"",
        "garbage": b"not an array at all\n" * 20,
        "huge_header": raw.replace(b"'shape': (6,)", b"'shape': (100000000000,)"),
        "negative_shape": raw.replace(b"'shape': (6,)", b"'shape': (-6,)"),
        "object_descr": raw.replace(b"'descr': '<f4'", b"'descr': 'O'   "),
        "broken_header": raw.replace(b"'shape'", b"'shap\xff"),
    }.items():
        f[name] = tmp_path / f"{name}.npy"
        f[name].write_bytes(data)
    f["object"] = _save(tmp_path / "object.npy", np.array([1, None], dtype=object), allow_pickle=True)
    f["strings"] = _save(tmp_path / "strings.npy", np.array(["1.0", "2"]))
    f["complex"] = _save(tmp_path / "complex.npy", np.array([1 + 2j]))
    f["struct"] = _save(tmp_path / "struct.npy", np.zeros(2, dtype=[("a", "<f4")]))
    with open(tmp_path / "ok.npz", "wb") as fh:
        np.savez(fh, a=GOOD, b=np.arange(3.0))
    f["npz"] = tmp_path / "ok.npz"
    npz = f["npz"].read_bytes()
    f["npz_trunc"] = tmp_path / "trunc.npz"
    f["npz_trunc"].write_bytes(npz[: len(npz) // 2])
    f["npz_garbage"] = tmp_path / "garbage.npz"
    f["npz_garbage"].write_bytes(b"PK\x03\x04" + b"garbage" * 30)
    flipped = bytearray(npz)
    flipped[len(npz) // 3] ^= 0xFF
    f["npz_flipped"] = tmp_path / "flipped.npz"
    f["npz_flipped"].write_bytes(bytes(flipped))
    f["npz_huge"] = tmp_path / "huge_inside.npz"
    with zipfile.ZipFile(f["npz_huge"], "w") as zf:
        zf.writestr("a.npy", raw.replace(b"'shape': (6,)", b"'shape': (100000000000,)"))
    f["npz_not_npy"] = tmp_path / "not_npy_inside.npz"
    with zipfile.ZipFile(f["npz_not_npy"], "w") as zf:
        zf.writestr("a.npy", b"not npy")
    with open(tmp_path / "objects.npz", "wb") as fh:
        np.savez(fh, a=np.array([1, None], dtype=object))
    f["npz_object"] = tmp_path / "objects.npz"
    f["npy_named_npz"] = tmp_path / "npy_named.npz"
    f["npy_named_npz"].write_bytes(raw)
    f["npz_named_npy"] = tmp_path / "npz_named.npy"
    f["npz_named_npy"].write_bytes(npz)
    f["dir"] = tmp_path / "a_dir.npy"
    f["dir"].mkdir()
    f["missing"] = tmp_path / "missing.npy"
    return f


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


def _error_line(argv: list[str]) -> str:
    status, _, err = run(argv)
    assert status == 2, (argv, err)
    assert err.count("\n") == 1, err
    assert err.startswith("floatlab: error: "), err
    assert "Traceback" not in err
    return err


BAD_NPY = {
    "trunc": "greater than file size",
    "trunc_header": "EOF",
    "zero_bytes": "lacks the .npy magic",
    "garbage": "lacks the .npy magic",
    "huge_header": "greater than file size",
    "negative_shape": "cannot read",
    "object_descr": "cannot read",
    "broken_header": "cannot read",
    "object": "cannot read",
    "npz": "zip archive",
    "npz_named_npy": "zip archive",
    "dir": "is a directory",
    "missing": "no such file",
}


@pytest.mark.parametrize(("name", "message"), list(BAD_NPY.items()))
def test_read_npy_refuses_clearly(files: dict[str, Path], name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as e:
        read_npy(str(files[name]))
    assert str(files[name]) in str(e.value)


@pytest.mark.parametrize("command", ["round", "underflow", "accumulate", "histogram"])
@pytest.mark.parametrize("name", [*BAD_NPY, "strings", "complex", "struct"])
def test_every_array_command_refuses_bad_npy_files(files: dict[str, Path], command: str, name: str) -> None:
    if command == "histogram" and name in ("npz",):
        return  # a .npz is what histogram reads: tested below
    err = _error_line([command, str(files[name])])
    assert os.path.basename(files[name]) in err


BAD_NPZ = {
    "npz_trunc": "cannot read",
    "npz_garbage": "cannot read",
    "npz_flipped": "cannot read",
    "npz_huge": "claims shape",
    "npz_not_npy": "not a .npy array",
    "npz_object": "cannot read",
    "npy_named_npz": "single .npy array",
    "missing": "no such file",
}


@pytest.mark.parametrize(("name", "message"), list(BAD_NPZ.items()))
def test_read_npz_refuses_clearly(files: dict[str, Path], name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as e:
        read_npz(str(files[name]))
    assert str(files[name]) in str(e.value)
    if name != "missing":
        assert _error_line(["histogram", str(files[name])])


def test_good_files_give_correct_answers(files: dict[str, Path], tmp_path: Path) -> None:
    np.testing.assert_array_equal(read_npy(str(files["ok"])), GOOD)
    assert isinstance(read_npy(str(files["ok"]), mmap=True), np.memmap)
    z = read_npz(str(files["npz"]))
    np.testing.assert_array_equal(z["a"], GOOD)
    h = load_histograms([str(files["npz"])])
    assert sorted(h) == ["a", "b"]
    assert h["a"].total == 6
    # odd but valid layouts give the same answer as the plain array
    for name, arr in {
        "big_endian": GOOD.astype(">f4"),
        "fortran": np.asfortranarray(np.tile(GOOD, (3, 1))),
        "zero_d": np.float32(0.1),
        "empty": np.zeros((0, 4), np.float32),
    }.items():
        path = _save(tmp_path / f"{name}.npy", arr)
        status, _out, err = run(
            ["round", str(path), "-f", "bf16", "-o", str(tmp_path / f"{name}_out.npy"), "--json"]
        )
        assert status == 0
        assert not err
        back = np.load(tmp_path / f"{name}_out.npy")
        assert back.shape == np.shape(arr)
        expected = (
            np.asarray(arr, dtype=np.float32).astype(__import__("ml_dtypes").bfloat16).astype(np.float32)
        )
        np.testing.assert_array_equal(back.astype(np.float32), expected)


@pytest.mark.parametrize("target", ["/nonexistent/dir/o.npy", "DIR", "/proc/version"])
def test_unwritable_outputs(files: dict[str, Path], target: str) -> None:
    out = str(files["dir"]) if target == "DIR" else target
    if target == "/proc/version" and not os.path.exists(target):
        pytest.skip("no /proc on this system")
    _error_line(["round", str(files["ok"]), "-o", out])
    _error_line(["histogram", str(files["ok"]), "--plot", out])


def test_torch_files(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.ones(3), "i": torch.arange(3)}, tmp_path / "ok.pt")
    torch.save({"i": torch.arange(3)}, tmp_path / "ints.pt")
    pt = (tmp_path / "ok.pt").read_bytes()
    (tmp_path / "trunc.pt").write_bytes(pt[: len(pt) // 2])
    (tmp_path / "junk.pt").write_bytes(b"junk" * 50)
    assert load_histograms([str(tmp_path / "ok.pt")])["w"].total == 3
    assert "no floating-point tensors" in _error_line(["histogram", str(tmp_path / "ints.pt")])
    for name in ("trunc.pt", "junk.pt"):
        assert "cannot read" in _error_line(["histogram", str(tmp_path / name)])
        # and a torch file handed to a .npy reader
        _error_line(["round", str(tmp_path / name)])
    assert "zip archive" in _error_line(["round", str(tmp_path / "ok.pt")])


def test_checkpoint_and_history_files(files: dict[str, Path], tmp_path: Path) -> None:
    for name in ("npz_trunc", "npz_garbage", "npz_flipped", "npy_named_npz", "ok", "dir", "missing"):
        with pytest.raises(ValueError, match=r"checkpoint|floatlab checkpoint"):
            ck.load_checkpoint(files[name])
        assert _error_line(["train", "--resume", str(files[name]), "-q"])
    h = History("x")
    h.save(tmp_path / "h.json")
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "wrong.json").write_text('{"label": 1}')
    for name in ("bad.json", "wrong.json"):
        with pytest.raises(ValueError, match="damaged or not a floatlab history"):
            History.load(tmp_path / name)
    with pytest.raises(ValueError, match="damaged or not a floatlab history"):
        History.load(files["npz_trunc"])
    with pytest.raises(ValueError, match="no such file"):
        History.load(tmp_path / "missing.json")
    assert History.load(tmp_path / "h.json").label == "x"
    # writing where it cannot be written: one line, exit 2
    base = ["train", "--epochs", "1", "--data", "underflow", "--hidden", "4", "-q"]
    _error_line([*base, "--checkpoint", "/nonexistent/dir/ck.npz"])
    _error_line([*base, "--history", "/nonexistent/dir/h.json"])
    _error_line([*base, "--checkpoint", str(tmp_path / "ck.txt")])


# ---- integer files: each integer rounded once -------------------------------------------------------
def _round_int(n: int, precision: int, mode: str) -> int:
    """``n`` rounded to ``precision`` significant bits in exact integer arithmetic (no exponent limit)."""
    mag = abs(n)
    shift = max(mag.bit_length() - precision, 0)
    kept, rest = divmod(mag, 1 << shift)
    half = (1 << shift) >> 1
    up = {
        "rne": rest > half or (shift > 0 and rest == half and kept % 2 == 1),
        "rtz": False,
        "rup": rest > 0 and n > 0,
        "rdown": rest > 0 and n < 0,
    }[mode]
    return (kept + up) << shift if n >= 0 else -((kept + up) << shift)


WIDE = [2**54 + 2**30 + 1, 2**63 - 1, -(2**63), -(2**60) - 2**36 - 1, 2**53 + 1, 12345, -7, 0]


@pytest.mark.parametrize("fmt", ["fp32", "bf16", "tf32", "fp64"])
@pytest.mark.parametrize("mode", ["rne", "rtz", "rup", "rdown"])
def test_round_rounds_each_integer_of_a_file_once(tmp_path: Path, fmt: str, mode: str) -> None:
    path = _save(tmp_path / "ints.npy", np.array(WIDE, np.int64))
    out = tmp_path / "out.npy"
    status, stdout, err = run(["round", str(path), "-f", fmt, "-r", mode, "-o", str(out), "--json"])
    assert status == 0, err
    precision = {"fp32": 24, "bf16": 8, "tf32": 11, "fp64": 53}[fmt]
    expected = [_round_int(n, precision, mode) for n in WIDE]
    assert [int(v) for v in np.load(out)] == expected
    assert json.loads(stdout)["inexact"] == sum(e != n for e, n in zip(expected, WIDE, strict=True))


def test_the_integer_just_above_a_midpoint_rounds_up(tmp_path: Path) -> None:
    # 2^54 + 2^30 + 1 is just above the midpoint of fp32's neighbours 2^54 and 2^54 + 2^31; float64
    # rounds it to 2^54 + 2^30, the midpoint itself, which then rounds to even: 2^54
    path = _save(tmp_path / "ints.npy", np.array([2**54 + 2**30 + 1, 3], np.int64))
    out = tmp_path / "out.npy"
    assert run(["round", str(path), "-f", "fp32", "-o", str(out)])[0] == 0
    assert [int(v) for v in np.load(out)] == [2**54 + 2**31, 3]
    status, stdout, err = run(["accumulate", str(path), "-f", "fp32", "--json"])
    assert status == 0, err
    for result in json.loads(stdout)["results"]:
        assert result["exact"] == str(2**54 + 2**31 + 3)  # the exact sum of the terms as stored


def test_the_largest_relative_error_of_integers_is_exact(tmp_path: Path) -> None:
    # float64 cannot hold 2^60 + 1: its error from fp64's 2^60 is 1 / (2^60 + 1), not 0
    path = _save(tmp_path / "ints.npy", np.array([2**60 + 1], np.int64))
    status, stdout, _ = run(["round", str(path), "-f", "fp64", "--json"])
    assert status == 0
    data = json.loads(stdout)
    assert data["max_relative_error"] == float(Fraction(1, 2**60 + 1))
    assert data["dtype"] == "int64"


def test_stochastic_rounding_of_wide_integers(tmp_path: Path) -> None:
    from floatlab.rounding import random_bits_at, round_rational

    for fmt, precision in (("fp32", 24), ("bf16", 8)):  # one by one, and through round to odd
        # a quarter of the gap (and a little) above 2^62: up with probability 1/4
        ints = np.array([2**62 + 2 ** (62 - precision - 1) + 5] * 50 + [2**54 + 1] * 50, np.int64)
        path = _save(tmp_path / "ints.npy", ints)
        out = tmp_path / f"{fmt}.npy"
        assert run(["round", str(path), "-f", fmt, "-r", "stochastic", "--seed", "4", "-o", str(out)])[0] == 0
        got = [int(v) for v in np.load(out)]
        key = tuple(int(k) for k in np.random.default_rng(4).integers(0, 2**32, size=2, dtype=np.uint64))
        for i, (n, g) in enumerate(zip(ints.tolist(), got, strict=True)):
            down, up = _round_int(n, precision, "rtz"), _round_int(n, precision, "rup")
            assert g in (down, up)
            # the random bits of element i, as the rounding door draws them
            rand = random_bits_at((key[0], key[1]), i, 32)
            code, _ = round_rational(n, fmt, "stochastic", rand=rand)
            assert g == (up if code != round_rational(n, fmt, "rtz")[0] else down)
        assert len(set(got[:50])) == 2  # both neighbours drawn


def test_integers_beyond_the_exact_limit_are_refused_before_the_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from floatlab.rounding import integers

    monkeypatch.setattr(integers, "MAX_EXACT_INTEGERS", 2)
    path = _save(tmp_path / "ints.npy", np.array([2**60 + 1, 2**60 + 3, 2**60 + 5, 1], np.int64))
    err = _error_line(["round", str(path), "-f", "fp64"])
    assert "3 integers need more than float64's 53 bits" in err
    assert "at most 2" in err
    # into fp32 they go through round to odd: no limit
    assert run(["round", str(path), "-f", "fp32"])[0] == 0


def test_the_accumulation_simulator_stores_integers_with_one_rounding() -> None:
    from floatlab.simulate import accumulate

    r = accumulate(np.array([2**54 + 2**30 + 1, 3]), "fp32", accumulator="fp32")
    assert r.exact == 2**54 + 2**31 + 3
    assert r.sum == float(2**54 + 2**31)  # fp32 swallows the 3


# ---- torch files: every stored value counted once, within the cap ---------------------------------
def _deep_pt(path: Path, depth: int) -> Path:
    """A torch file whose pickle nests ``depth`` lists (torch.save itself recurses too deep)."""
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    torch.save([1], buf)
    pickle = b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."  # EMPTY_LIST x depth, APPEND x depth-1
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src, zipfile.ZipFile(path, "w") as out:
        for info in src.infolist():
            out.writestr(info.filename, pickle if info.filename.endswith("data.pkl") else src.read(info))
    return path


def test_a_tensor_under_many_names_is_counted_once(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    t = torch.linspace(-3, 3, 1000)
    torch.save([t] * 5000, tmp_path / "refs.pt")
    torch.save({"embed.weight": t, "head.weight": t, "bias": torch.ones(3)}, tmp_path / "tied.pt")
    hists = load_histograms([str(tmp_path / "refs.pt")])
    assert list(hists) == ["0 (and 4,999 more names)"]
    assert hists["0 (and 4,999 more names)"].total == 1000 == t.numel()
    values = t.numpy()
    expected_zeros = int(np.count_nonzero(values == 0))
    assert hists["0 (and 4,999 more names)"].zeros == expected_zeros
    status, out, err = run(["histogram", str(tmp_path / "tied.pt"), "--json"])
    assert status == 0, err
    data = json.loads(out)
    assert data["total"]["total"] == 1003
    assert sorted(data["arrays"]) == ["bias", "embed.weight (and 1 more name)"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda torch: {"a": torch.zeros(1).expand(10**6)}, "'a' (1,000,000 values) refers to some stored"),
        (lambda torch: {"a": torch.zeros(4, 4).as_strided((4, 4), (1, 1))}, "refers to some stored"),
        (lambda torch: (lambda t: {"a": t, "b": t[2:5]})(torch.ones(8)), "'a' and 'b' share stored"),
        (lambda torch: (lambda t: {"a": t, "t": t.T})(torch.ones(3, 3)), "'a' and 't' share stored"),
        (lambda torch: {"s": torch.eye(3).to_sparse()}, "tensor 's' is sparse_coo, not dense"),
    ],
)
def test_views_that_share_stored_values_are_refused(tmp_path: Path, make: Any, message: str) -> None:
    torch = pytest.importorskip("torch")
    path = tmp_path / "views.pt"
    torch.save(make(torch), path)
    assert message in _error_line(["histogram", str(path)])


def test_disjoint_views_of_one_storage_are_each_counted(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    t = torch.arange(12, dtype=torch.float32)
    torch.save({"lo": t[:5], "hi": t[5:]}, tmp_path / "halves.pt")
    hists = load_histograms([str(tmp_path / "halves.pt")])
    assert {k: h.total for k, h in hists.items()} == {"lo": 5, "hi": 7}
    assert sum(h.zeros for h in hists.values()) == 1  # the one 0.0 of arange


def test_max_bytes_applies_to_torch_files(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.ones(300_000)}, tmp_path / "zip.pt")  # 1,200,000 bytes of values
    torch.save({"w": torch.ones(300_000)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    for name in ("zip.pt", "legacy.pt"):
        err = _error_line(["histogram", str(tmp_path / name), "--max-bytes", "1000000"])
        assert "over the cap of 1,000,000 bytes" in err
        status, out, _ = run(["histogram", str(tmp_path / name), "--max-bytes", "2000000", "--json"])
        assert status == 0
        assert json.loads(out)["total"]["total"] == 300_000


def test_deeply_nested_torch_files_are_refused_in_one_line(tmp_path: Path) -> None:
    from floatlab.io import MAX_TORCH_DEPTH

    err = _error_line(["histogram", str(_deep_pt(tmp_path / "deep.pt", 100_000))])
    assert f"nests containers more than {MAX_TORCH_DEPTH} deep" in err
    # as deep as the limit, with no tensor inside: read, and said to hold none
    err = _error_line(["histogram", str(_deep_pt(tmp_path / "ok.pt", MAX_TORCH_DEPTH))])
    assert "holds no floating-point tensors" in err
