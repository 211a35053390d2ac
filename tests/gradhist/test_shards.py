"""Histograms of dumps on disk, shard by shard: equal bin for bin to the histogram of the same values in
memory (and their exponent counts to numpy's frexp), in memory bounded by the chunk; a bad shard is named
before any counting, and no file is touched."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from floatlab.cli import main
from floatlab.gradhist import GradHistogram, histogram, histogram_files, read_shard, read_shards, shard_plan


def _values(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * np.exp2(rng.integers(-40, 10, n))
    x[::97] = 0.0
    x[5::211] = np.inf
    x[7::307] = np.nan
    return x


@pytest.fixture
def dump(tmp_path: Path) -> tuple[Path, list[np.ndarray]]:
    parts = [_values(n, i).astype(np.float32) for i, n in enumerate([1000, 0, 2500, 777, 4096])]
    for i, p in enumerate(parts):
        np.save(tmp_path / f"g{i:02d}.npy", p)
    return tmp_path, parts


@pytest.mark.parametrize("chunk", [1, 100, 1000, 1 << 20])
def test_a_folder_of_npy_shards_is_the_in_memory_histogram(
    dump: tuple[Path, list[np.ndarray]], chunk: int
) -> None:
    folder, parts = dump
    whole = np.concatenate(parts)
    h = histogram_files(folder, chunk=chunk)
    assert h == GradHistogram(whole)
    # and an oracle outside the class: numpy's frexp exponents of the finite nonzero values
    finite = whole[np.isfinite(whole) & (whole != 0)].astype(np.float64)
    e = np.frexp(finite)[1] - 1
    exps, counts = h.exponent_counts()
    assert dict(zip(exps.tolist(), counts.tolist(), strict=True)) == {
        int(k): int(v) for k, v in zip(*np.unique(e, return_counts=True), strict=True)
    }
    assert (h.zeros, h.nan, h.posinf + h.neginf) == (
        int((whole == 0).sum()), int(np.isnan(whole).sum()), int(np.isinf(whole).sum()),
    )  # fmt: skip


def test_globs_lists_npz_zarr_and_mixed_dtypes(tmp_path: Path) -> None:
    zarr = pytest.importorskip("zarr")
    a = _values(3000, 1).astype(np.float16)
    b = _values(2000, 2)  # float64
    c = _values(1500, 3).astype(np.float32).reshape(30, 50)
    np.save(tmp_path / "a.npy", a)
    np.savez_compressed(tmp_path / "bc.npz", b=b, c=c)
    z = zarr.open_array(str(tmp_path / "z.zarr"), mode="w", shape=c.shape, chunks=(7, 50), dtype=c.dtype)
    z[:] = c
    expected = histogram(a, b, c)
    assert histogram_files([tmp_path / "a.npy", tmp_path / "bc.npz"], chunk=333) == expected
    assert histogram_files(str(tmp_path / "*.np?"), chunk=1 << 20) == expected
    assert histogram_files(tmp_path / "z.zarr", chunk=120) == GradHistogram(c)
    assert histogram_files(tmp_path, chunk=500) == histogram(a, b, c, c)  # the folder: all three shards
    assert GradHistogram.from_files(tmp_path, chunk=500, dask=True) == histogram(a, b, c, c)


def _peak(folder: Path, chunk: int) -> tuple[GradHistogram, int]:
    tracemalloc.start()
    try:
        h = histogram_files(folder, chunk=chunk)
        return h, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_stays_bounded_by_the_chunk(tmp_path: Path) -> None:
    x = np.random.default_rng(0).standard_normal(4_000_000).astype(np.float32)
    small, large = tmp_path / "small", tmp_path / "large"  # 4 MB and 16 MB on disk
    for folder, n in ((small, 1_000_000), (large, 4_000_000)):
        folder.mkdir()
        for i, part in enumerate(np.array_split(x[:n], 4)):
            np.save(folder / f"g{i}.npy", part)
    chunk = 1 << 16  # 256 kB of float32
    histogram_files(small, chunk=chunk)  # compile and warm up outside the measurement
    h_small, peak_small = _peak(small, chunk)
    h_large, peak_large = _peak(large, chunk)
    assert h_small == GradHistogram(x[:1_000_000])
    assert h_large == GradHistogram(x)
    # four times the data, the same memory: two chunk buffers and the counting loops' fixed tables
    assert peak_large - peak_small < 1_000_000
    assert peak_large < 16_000_000


def test_a_bad_shard_is_named_before_counting_and_nothing_is_touched(tmp_path: Path) -> None:
    good = tmp_path / "good.npy"
    np.save(good, np.ones(1000, np.float32))
    np.save(tmp_path / "ints.npy", np.arange(10))
    np.save(tmp_path / "short.npy", np.ones(1000, np.float32))
    with open(tmp_path / "short.npy", "r+b") as fh:
        fh.truncate(500)
    (tmp_path / "text.npy").write_text("not an array")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(ValueError, match=r"shard '.*ints.npy' holds int64 values: expected a float array"):
        histogram_files([good, tmp_path / "ints.npy"])
    with pytest.raises(
        ValueError, match=r"shard '.*short.npy' is truncated: 372 bytes of data, expected 4000"
    ):
        shard_plan([good, tmp_path / "short.npy"])
    with pytest.raises(ValueError, match=r"shard '.*text.npy' is not a .npy array"):
        histogram_files([tmp_path / "text.npy"])
    with pytest.raises(ValueError, match=r"pattern '.*nothing-\*.npy' matches no file"):
        histogram_files(str(tmp_path / "nothing-*.npy"))
    with pytest.raises(ValueError, match=r"chunk=0: expected a number of values >= 1"):
        histogram_files(good, chunk=0)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_the_command_line_counts_shards_as_one_dump(
    dump: tuple[Path, list[np.ndarray]], capsys: pytest.CaptureFixture[str]
) -> None:
    folder, parts = dump
    assert main(["histogram", str(folder), "--shards", "--chunk", "500", "--json"]) == 0
    whole = np.concatenate(parts)
    out = capsys.readouterr().out
    assert f'"total": {whole.size}' in out
    assert main(["histogram", os.path.join(folder, "g0*.npy"), "--shards", "--dask", "--chunk", "0"]) == 2
    assert "--chunk 0: expected a number of values >= 1" in capsys.readouterr().err


def _mapped_windows(folder: Path) -> int:
    with open("/proc/self/maps", encoding="utf-8") as fh:
        return sum(str(folder) in line for line in fh)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads Linux's list of mappings")
def test_npy_shards_are_mapped_a_window_at_a_time_and_unmapped(tmp_path: Path) -> None:
    x = _values(40_000, 5).astype(np.float32)
    for i, part in enumerate(np.array_split(x, 4)):
        np.save(tmp_path / f"g{i}.npy", part)
    h, most = GradHistogram(), 0
    for values in read_shards(shard_plan(tmp_path), chunk=1000):  # 40 windows, none page-aligned
        h.update(values)
        most = max(most, _mapped_windows(tmp_path))
    del values
    assert h == GradHistogram(x)
    assert 1 <= most <= 2  # this window and the next one, mapped ahead
    assert _mapped_windows(tmp_path) == 0  # every window unmapped with its array
    one_by_one = GradHistogram()  # the same, one shard at a time
    for shard in shard_plan(tmp_path):
        for values in read_shard(shard, chunk=7):
            one_by_one.update(values)
    assert one_by_one == GradHistogram(x)


def test_byte_swapped_and_fortran_order_shards(tmp_path: Path) -> None:
    a = _values(3000, 6).astype(">f4")
    c = np.asfortranarray(_values(1200, 7).astype(np.float32).reshape(40, 30))
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "c.npy", c)
    assert histogram_files(tmp_path, chunk=256) == histogram(a.astype(np.float32), c)


def test_a_shard_cut_short_after_its_header_was_checked_is_named(tmp_path: Path) -> None:
    p = tmp_path / "g.npy"
    np.save(p, np.ones(10_000, np.float32))
    plan = shard_plan(p)
    with open(p, "r+b") as fh:  # (another process cuts the file while the count is planned)
        fh.truncate(20_000)
    with pytest.raises(ValueError, match=r"shard '.*g.npy' is truncated"):
        histogram(*read_shard(plan[0], chunk=1000))
    with pytest.raises(ValueError, match=r"shard '.*g.npy' is truncated"):
        for _ in read_shards(plan, chunk=1000):
            pass
