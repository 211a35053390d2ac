"""The compiled array rounding (encode_array, round_array, decode_codes) against independent oracles.

Oracles: numpy's float16 cast and ml_dtypes' casts for round-to-nearest-even, exact rational
arithmetic over enumerated neighbours for the directed modes, and the scalar reference
round_scalar (the specification) for every mode, format, input dtype and option.
"""

from __future__ import annotations

import bisect
import functools
import math
import struct
import zlib
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from oracles import ML_DTYPES

import floatlab as fl
from floatlab.formats import (
    BF16,
    FORMATS,
    FP16,
    FP32,
    FP64,
    FloatFormat,
    get_format,
)
from floatlab.rounding import (
    ROUNDING_MODES,
    Flags,
    RoundingOptions,
    RoundingStats,
    code_dtype,
    decode_codes,
    encode_array,
    encode_array_with_flags,
    random_bits_at,
    round_array,
    round_array_with_flags,
    round_rational,
    round_scalar,
)
from floatlab.rounding import cpu as rounding_cpu
from floatlab.rounding.plan import make_plan

DTYPES: dict[str, tuple[Any, FloatFormat]] = {
    "float64": (np.float64, FP64),
    "float32": (np.float32, FP32),
    "float16": (np.float16, FP16),
    "bfloat16": (ml_dtypes.bfloat16, BF16),
}
UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
USER_FORMATS = [
    FloatFormat(6, 9),  # e6m9: a wider-range half
    FloatFormat(3, 4, "fnuz"),  # e3m4fnuz
    FloatFormat(5, 6, "fn"),  # e5m6fn: one NaN, no inf
    FloatFormat(5, 10, "fn"),  # holds every float16: round_array passes float16 through
    FloatFormat(3, 3, "fn", has_nan=False),  # e3m3fn without NaN
    FloatFormat(2, 1),  # e2m1: the smallest IEEE format
    FloatFormat(11, 30),  # 42-bit codes in uint64
    FloatFormat(15, 40),  # a range beyond float64's
    # IEEE P3109 (by name): extended (inf at the top code), unsigned (negatives to the NaN),
    # precision 1 (ties to the even code)
    get_format("p3109_k8p3se"),
    get_format("p3109_k8p1ue"),
    get_format("p3109_k6p3uf"),
    get_format("p3109_k3p2sf"),
]
ALL_FORMATS = [*FORMATS.values(), *USER_FORMATS]


@pytest.fixture(scope="module", autouse=True)
def _warm_up() -> None:
    """Compile every loop once (numba compiles on first use; the cache keeps it across runs)."""
    for dt, _ in DTYPES.values():
        x = np.ones(4, dt)
        for fmt in ("float8_e4m3fn", "fp16", "tf32", "fp64"):
            encode_array(x, fmt)
        encode_array_with_flags(x, "fp16")
        encode_array(x, "fp64", "stochastic", rng=0)
        round_array(x, "float8_e4m3fn")
        round_array_with_flags(x, "float8_e4m3fn")
    for fmt in ("float8_e4m3fn", "fp16", "tf32", "fp64"):
        decode_codes(np.zeros(2, np.uint8), get_format(fmt))


# ---- helpers -----------------------------------------------------------------------------------
def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(UINT[x.dtype.itemsize * 8])


def _nan_codes(codes: np.ndarray, fmt: FloatFormat) -> np.ndarray:
    """Elementwise fmt.is_nan_code, vectorised from the format's fields."""
    c = codes.astype(np.uint64)
    mag = c & np.uint64(fmt.sign_mask - 1)
    if fmt.encoding == "ieee":
        top = (mag & np.uint64(fmt.exponent_mask)) == fmt.exponent_mask
        nan = top & ((mag & np.uint64(fmt.mantissa_mask)) != 0)
    elif fmt.encoding == "fnuz":
        nan = c == fmt.sign_mask
    elif not fmt.has_nan:
        nan = np.zeros(c.shape, bool)
    else:
        nan = mag == fmt.sign_mask - 1
    return np.asarray(nan, dtype=bool)


@functools.lru_cache(maxsize=1 << 16)
def _pyfloat(b: int, src: FloatFormat) -> float:
    """The Python float with exactly the value of src's bit pattern b (a NaN keeps its payload bits)."""
    neg = bool(b >> (src.bits - 1))
    mag = b & (src.sign_mask - 1)
    if mag >> src.mantissa_bits == (1 << src.exponent_bits) - 1:
        frac = mag & src.mantissa_mask
        if frac == 0:
            return -math.inf if neg else math.inf
        f64 = (neg << 63) | (0x7FF << 52) | (frac << (52 - src.mantissa_bits))
        return float(struct.unpack("<d", struct.pack("<Q", f64))[0])
    v = float(src.code_magnitude(mag))
    return -v if neg else v


def _reference(
    bits: np.ndarray, src: FloatFormat, fmt: FloatFormat, mode: str, key: tuple[int, int], **opts: Any
) -> tuple[list[int], list[Flags]]:
    """round_scalar on every element, with the random bits stochastic rounding uses at index i."""
    k = opts.get("random_bits", 32)
    codes, flags = [], []
    for i, b in enumerate(bits.tolist()):
        rand = random_bits_at(key, i, k) if mode == "stochastic" else 0
        c, f = round_scalar(_pyfloat(b, src), fmt, mode, rand=rand, input_format=src, **opts)
        codes.append(c)
        flags.append(f)
    return codes, flags


def _stats(flags: list[Flags]) -> RoundingStats:
    def n(flag: Flags) -> int:
        return sum(1 for f in flags if f & flag)

    return RoundingStats(
        len(flags), n(Flags.INEXACT), n(Flags.UNDERFLOW), n(Flags.OVERFLOW), n(Flags.INVALID)
    )


@functools.lru_cache(maxsize=1 << 16)
def _back(code: int, fmt: FloatFormat, src: FloatFormat) -> int | None:
    """src bit pattern of fmt's code rounded (nearest even) into src; None for a NaN."""
    if fmt.is_nan_code(code):
        return None
    neg = bool(code & fmt.sign_mask)
    if fmt.has_inf and code & (fmt.sign_mask - 1) == fmt.inf_code:
        return (src.sign_mask if neg else 0) | src.inf_code
    v = fmt.code_magnitude(code)
    return round_rational(-v if neg else v, src, negative_zero=neg)[0]


def _key(seed: int) -> tuple[int, int]:
    """The key encode_array draws from np.random.default_rng(seed), as documented."""
    k = np.random.default_rng(seed).integers(0, 2**32, size=2, dtype=np.uint64)
    return int(k[0]), int(k[1])


def _inputs(src: FloatFormat, fmt: FloatFormat, rng: np.random.Generator) -> np.ndarray:
    """Bit patterns of src around fmt's landmarks: ties, near-ties, boundaries, specials, random."""
    mags: list[Fraction] = []
    m = fmt.mantissa_bits
    landmarks = {1, 2, 3, max((1 << m) - 1, 1), 1 << m, (1 << m) + 1, fmt.max_code - 1, fmt.max_code}
    landmarks |= {int(c) for c in rng.integers(1, fmt.max_code, 6)}
    quarters: list[Fraction] = []
    for c in sorted(landmarks):
        v = fmt.code_magnitude(c)
        w = fmt.code_magnitude(c + 1) if c < fmt.max_code else 2 * v - fmt.code_magnitude(c - 1)
        mags += [v, (v + w) / 2]
        quarters += [v + (w - v) / 4, v + 3 * (w - v) / 4]
    tiny = fmt.smallest_subnormal_exact
    mags += [tiny / 2, tiny / 4, 3 * tiny / 4, tiny / 2**30, 2 * fmt.max_exact, fmt.max_exact * 2**40]
    out: set[int] = set()
    top = src.sign_mask - 1
    # the src neighbours of landmarks and ties make near-ties on both sides
    for v, near in [*((v, (-1, 0, 1)) for v in mags), *((v, (0,)) for v in quarters)]:
        for sign in (1, -1):
            c = round_rational(sign * v, src)[0]
            for d in near:
                if 0 <= (c & top) + d <= top:
                    out.add(c + d)
    qnan = src.exponent_mask | (1 << (src.mantissa_bits - 1))
    specials = [0, src.exponent_mask, qnan, qnan | 5, src.exponent_mask | 1, src.exponent_mask | (1 << 3)]
    specials += [src.max_code, 1, 1 << src.mantissa_bits, src.mantissa_mask]
    out |= {s | sign for s in specials for sign in (0, src.sign_mask)}
    # random patterns with exponents around fmt's range, and a few from anywhere
    lo = max(fmt.emin - m - 3 + src.bias, 0)
    hi = min(fmt.emax + 3 + src.bias, (1 << src.exponent_bits) - 1)
    for _ in range(30):
        e = int(rng.integers(lo, hi + 1))
        frac = int(rng.integers(0, 1 << min(src.mantissa_bits, 62))) << max(src.mantissa_bits - 62, 0)
        out.add((int(rng.integers(0, 2)) << (src.bits - 1)) | (e << src.mantissa_bits) | frac)
    out |= {int(b) for b in rng.integers(0, 2**src.bits, 10, dtype=np.uint64)}
    return np.array(sorted(out), dtype=UINT[src.bits])


# ---- round to nearest even against numpy and ml_dtypes ------------------------------------------
def _float32_probe(rng: np.random.Generator, fmt_dtype: Any, n: int) -> np.ndarray:
    """float32 bit patterns: uniform over all 2^32 (every exponent, subnormals, overflow,
    NaN), plus exact ties between neighbours of the target and their float32 neighbours."""
    random = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    width = np.dtype(fmt_dtype).itemsize * 8
    codes = rng.integers(0, 2**width, n // 4, dtype=np.uint64).astype(UINT[width])
    with np.errstate(all="ignore"):
        v = codes.view(fmt_dtype).astype(np.float64)
        w = (codes + 1).view(fmt_dtype).astype(np.float64)
        mid = ((v + w) / 2)[np.isfinite(v) & np.isfinite(w) & (np.sign(v) == np.sign(w))]
    ties = mid.astype(np.float32).view(np.uint32)  # exact: a midpoint needs one more bit
    return np.concatenate([random, ties, ties + 1, ties - 1])


@pytest.mark.parametrize("name", ["fp16", *ML_DTYPES])
def test_rne_matches_numpy_and_ml_dtypes_on_float32(name: str) -> None:
    fmt = get_format(name)
    peer = np.float16 if name == "fp16" else ML_DTYPES[name]
    bits = _float32_probe(np.random.default_rng(1), peer, 2_000_000)
    x = bits.view(np.float32)
    if not fmt.has_nan:
        # ml_dtypes turns a NaN into a zero of the opposite sign; floatlab keeps the sign
        x = x[~np.isnan(x)]
    with np.errstate(all="ignore"):
        want = _bits(x.astype(peer))
    got = encode_array(x, fmt)
    nan = _nan_codes(want, fmt)
    np.testing.assert_array_equal(_nan_codes(got, fmt), nan)
    np.testing.assert_array_equal(got[~nan], want[~nan])


def test_rne_matches_numpy_float64_to_float16() -> None:
    rng = np.random.default_rng(2)
    n = 1_000_000
    # exponents concentrated on float16's range (and beyond it on both sides)
    e = rng.integers(1023 - 30, 1023 + 20, n, dtype=np.uint64)
    b = (rng.integers(0, 2, n, dtype=np.uint64) << np.uint64(63)) | (e << np.uint64(52))
    b |= rng.integers(0, 2**52, n, dtype=np.uint64)
    codes = rng.integers(0, 0x7C00, n // 4, dtype=np.uint64).astype(np.uint16)
    v = codes.view(np.float16).astype(np.float64)
    mid = (v + (codes + 1).view(np.float16).astype(np.float64)) / 2  # exact in float64
    x = np.concatenate([b.view(np.float64), mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf)])
    with np.errstate(all="ignore"):
        want = _bits(x.astype(np.float16))
    np.testing.assert_array_equal(encode_array(x, "fp16"), want)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(
            _bits(round_array(x.astype(np.float32), "fp16")),
            _bits(x.astype(np.float32).astype(np.float16).astype(np.float32)),
        )


def test_float64_input_is_rounded_once_where_ml_dtypes_rounds_twice() -> None:
    x = 1 + 3 * 2**-8 - 2**-52  # just below the midpoint of bf16's 1.0078125 and 1.015625
    # the peer converts float64 -> float32 first: x becomes the midpoint, which then ties to even
    assert float(np.float64(x).astype(ml_dtypes.bfloat16)) == 1.015625
    exact = Fraction(x)
    assert abs(exact - Fraction(1.0078125)) < abs(exact - Fraction(1.015625))
    assert round_array(np.float64(x), "bf16").item() == 1.0078125
    assert encode_array(x, "bf16").item() == 0x3F81


# ---- every mode, format, dtype and option against the scalar reference -------------------------
def _cases() -> Iterator[Any]:
    for dname in DTYPES:
        for fmt in ALL_FORMATS:
            yield pytest.param(dname, fmt, id=f"{dname}-{fmt.name}")


@pytest.mark.parametrize(("dname", "fmt"), list(_cases()))
def test_kernels_equal_the_scalar_reference(dname: str, fmt: FloatFormat) -> None:
    dtype, src = DTYPES[dname]
    rng = np.random.default_rng(zlib.crc32(f"{dname}-{fmt.name}".encode()))
    bits = _inputs(src, fmt, rng)
    x = bits.view(dtype)
    back = src.contains(fmt) or fmt.contains(src)
    for mode in ROUNDING_MODES:
        for saturate, subnormals in ((False, True), (True, False)):
            opts: dict[str, Any] = {"saturate": saturate, "subnormals": subnormals}
            seed = 7
            want, flags = _reference(bits, src, fmt, mode, _key(seed), **opts)
            ctx = f"{mode} saturate={saturate} subnormals={subnormals}"
            got = encode_array(x, fmt, mode, rng=seed, **opts)
            assert got.dtype == code_dtype(fmt)
            np.testing.assert_array_equal(got, np.array(want, got.dtype), err_msg=ctx)
            got, stats = encode_array_with_flags(x, fmt, mode, rng=seed, **opts)
            np.testing.assert_array_equal(got, np.array(want, got.dtype), err_msg=ctx)
            assert stats == _stats(flags), ctx
            if not back:
                continue
            expected = [_back(c, fmt, src) for c in want]
            y_plain = round_array(x, fmt, mode, rng=seed, **opts)
            y_counted, stats = round_array_with_flags(x, fmt, mode, rng=seed, **opts)
            assert stats == _stats(flags), ctx
            for y in (y_plain, y_counted):
                assert y.dtype == x.dtype
                _assert_back(_bits(y), bits, expected, src, ctx)


def _assert_back(
    got: np.ndarray, inputs: np.ndarray, expected: list[int | None], src: FloatFormat, ctx: str
) -> None:
    for g, b, e in zip(got.tolist(), inputs.tolist(), expected, strict=True):
        if e is None:  # a NaN of src's format, quiet, with the sign of the input
            assert src.is_nan_code(g), (ctx, hex(b), hex(g))
            assert g & (1 << (src.mantissa_bits - 1)), (ctx, hex(b), hex(g))
            assert (g ^ b) & src.sign_mask == 0, (ctx, hex(b), hex(g))
        else:
            assert g == e, (ctx, hex(b), hex(g), hex(e))


def test_nan_payload_into_a_format_wider_than_float64() -> None:
    # 61 fraction bits: the float64 payload moves left (the reference used to shift by a negative count)
    fmt = FloatFormat(2, 61)
    bits = np.array(
        [0x7FF8000000000000, 0xFFF0000000000001, 0x7FF4000000000123, 0x3FF0000000000001], np.uint64
    )
    want = [round_scalar(_pyfloat(int(b), FP64), fmt)[0] for b in bits]
    assert want[1] == fmt.sign_mask | fmt.exponent_mask | (1 << 60) | (1 << 9)
    np.testing.assert_array_equal(encode_array(bits.view(np.float64), fmt), np.array(want, np.uint64))


@pytest.mark.parametrize("random_bits", [1, 3, 8, 23, 32])
@pytest.mark.parametrize(
    ("dname", "name"),
    [
        ("float64", "fp16"),
        ("float32", "float8_e5m2"),
        ("bfloat16", "float4_e2m1fn"),
        ("float16", "float8_e4m3fnuz"),
    ],
)
def test_stochastic_random_bits_equal_the_reference(random_bits: int, dname: str, name: str) -> None:
    dtype, src = DTYPES[dname]
    fmt = get_format(name)
    bits = _inputs(src, fmt, np.random.default_rng(random_bits))
    rng = np.random.default_rng(99)
    key = tuple(int(k) for k in np.random.default_rng(99).integers(0, 2**32, size=2, dtype=np.uint64))
    want, flags = _reference(bits, src, fmt, "stochastic", (key[0], key[1]), random_bits=random_bits)
    got, stats = encode_array_with_flags(
        bits.view(dtype), fmt, "stochastic", rng=rng, random_bits=random_bits
    )
    np.testing.assert_array_equal(got, np.array(want, got.dtype))
    assert stats == _stats(flags)


def test_stochastic_index_is_the_flat_c_order_index_past_2_to_32() -> None:
    # the counter's high word enters the hash: check an index beyond 2^32 through the kernel's
    # own random words by rounding a value exactly between two neighbours (P(up) = 1/2)
    x = np.full((3, 5), 1 + 2**-11, np.float64)  # halfway between fp16 1 and 1 + 2^-10
    key = _key(5)
    got = encode_array(x, "fp16", "stochastic", rng=5)
    want = [0x3C00 + (random_bits_at(key, i, 32) >= 2**31) for i in range(15)]
    np.testing.assert_array_equal(got.reshape(-1), want)
    assert random_bits_at(key, 2**32 + 3, 32) != random_bits_at(key, 3, 32)


# ---- stochastic rounding: statistics, neighbours, reproducibility --------------------------------
def _fp16_neighbours(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The float16 values just below and above x (numpy's nearest cast, stepped with nextafter)."""
    with np.errstate(all="ignore"):
        y = x.astype(np.float16)
        lo = np.where(y.astype(np.float64) > x, np.nextafter(y, np.float16(-np.inf)), y)
        hi = np.where(y.astype(np.float64) < x, np.nextafter(y, np.float16(np.inf)), y)
    return lo.astype(np.float64), hi.astype(np.float64)


def test_stochastic_is_unbiased_and_returns_a_neighbour() -> None:
    rng = np.random.default_rng(3)
    n = 1_000_000
    # one value, 0.3 of the way between two float16 neighbours
    lo, hi = 1.0, 1.0 + 2**-10
    v = lo + 0.3 * (hi - lo)
    y = round_array(np.full(n, v), "fp16", "stochastic", rng=rng)
    assert set(np.unique(y).tolist()) == {lo, hi}
    se = (hi - lo) * math.sqrt(0.3 * 0.7 / n)
    assert abs(y.mean() - v) < 5 * se
    # many values across the range, subnormals included: the mean error is zero
    x = rng.standard_normal(n) * np.exp2(rng.integers(-26, 14, n))
    x = x[np.abs(x) < 65504]
    y = round_array(x, "fp16", "stochastic", rng=rng)
    lo_n, hi_n = _fp16_neighbours(x)
    assert np.all((y == lo_n) | (y == hi_n))
    gap = hi_n - lo_n
    t = np.divide(x - lo_n, gap, out=np.zeros(x.size), where=gap > 0)
    z = np.sum(y - x) / math.sqrt(np.sum(gap**2 * t * (1 - t)))
    assert abs(z) < 5


def test_stochastic_probability_uses_the_top_random_bits() -> None:
    # a quarter of the way up: with 1 random bit floor(0.25 * 2) = 0, so never up; with 2 bits,
    # up with probability exactly 1/4
    x = np.full(200_000, 1 + 2**-12)  # fp16 neighbours 1 and 1 + 2^-10
    never = encode_array(x, "fp16", "stochastic", rng=1, random_bits=1)
    assert np.all(never == 0x3C00)
    some = encode_array(x, "fp16", "stochastic", rng=1, random_bits=2)
    frac = np.mean(some == 0x3C01)
    assert abs(frac - 0.25) < 5 * math.sqrt(0.25 * 0.75 / x.size)


def test_stochastic_is_reproducible_from_the_seed() -> None:
    x = np.random.default_rng(4).standard_normal((100, 30)).astype(np.float32)
    a = encode_array(x, "bf16", "stochastic", rng=123)
    np.testing.assert_array_equal(a, encode_array(x, "bf16", "stochastic", rng=np.random.default_rng(123)))
    assert not np.array_equal(a, encode_array(x, "bf16", "stochastic", rng=124))
    g = np.random.default_rng(5)
    assert not np.array_equal(
        encode_array(x, "bf16", "stochastic", rng=g), encode_array(x, "bf16", "stochastic", rng=g)
    )


# ---- directed modes against exact rational arithmetic ------------------------------------------
def _pick(mode: str, x: Fraction, lo: tuple[Fraction, int], hi: tuple[Fraction, int]) -> tuple[Fraction, int]:
    """The neighbour that ``mode`` chooses; each neighbour is (value, code parity)."""
    if lo[0] == x:
        return lo
    if mode == "rup":
        return hi
    if mode == "rdown":
        return lo
    if mode == "rtz":
        return lo if x > 0 else hi
    if mode == "rodd":
        return lo if lo[1] else hi
    dlo, dhi = x - lo[0], hi[0] - x
    if dlo != dhi:
        return lo if dlo < dhi else hi
    if mode == "rne":
        return hi if lo[1] else lo
    return hi if x > 0 else lo  # rna: away from zero


def _table(fmt: FloatFormat) -> tuple[list[Fraction], list[int]]:
    """Every finite value of fmt with its code's last bit, sorted (zero once, as +0)."""
    vals: dict[Fraction, int] = {}
    for c in range(fmt.code_mask + 1):
        if fmt.is_nan_code(c) or (fmt.has_inf and c & (fmt.sign_mask - 1) == fmt.inf_code):
            continue
        v = fmt.code_magnitude(c) * (-1 if c & fmt.sign_mask else 1)
        vals.setdefault(v, c & 1)
    keys = sorted(vals)
    return keys, [vals[k] for k in keys]


@pytest.mark.parametrize(
    "name", ["fp16", "bf16", "float8_e4m3fn", "float8_e5m2", "float6_e2m3fn", "float4_e2m1fn", "e3m4fnuz"]
)
def test_nearest_and_directed_modes_pick_the_right_exact_neighbour(name: str) -> None:
    fmt = FloatFormat(3, 4, "fnuz") if name == "e3m4fnuz" else get_format(name)
    keys, parity = _table(fmt)
    rng = np.random.default_rng(6)
    n = 3000
    top = float(fmt.max_exact)
    x = rng.uniform(-top, top, n) * np.exp2(-rng.integers(0, 2 * fmt.dynamic_range_log2, n).astype(float) / 2)
    ties = [float((keys[i] + keys[i + 1]) / 2) for i in rng.integers(0, len(keys) - 1, 300)]
    x = np.concatenate([x, ties, [0.0, -0.0, top, -top]])
    for mode in ("rne", "rna", "rtz", "rup", "rdown", "rodd"):
        got = encode_array(x, fmt, mode).tolist()
        for xi, c in zip(x.tolist(), got, strict=True):
            q = Fraction(xi)
            j = bisect.bisect_left(keys, q)
            hi = (keys[j], parity[j])
            lo = hi if keys[j] == q else (keys[j - 1], parity[j - 1])
            want = _pick(mode, q, lo, hi)[0]
            value = fmt.code_magnitude(c) * (-1 if c & fmt.sign_mask else 1)
            assert value == want, (mode, xi, hex(c))
            if value == 0 and fmt.has_negative_zero:  # a zero result keeps the sign of the input
                assert bool(c & fmt.sign_mask) == (math.copysign(1.0, xi) < 0), (mode, xi, hex(c))


def test_directed_modes_float64_to_fp32_against_exact_neighbours() -> None:
    rng = np.random.default_rng(8)
    n = 20_000
    x = rng.standard_normal(n) * np.exp2(rng.integers(-160, 130, n))
    with np.errstate(all="ignore"):
        y = x[:4000].astype(np.float32)
        x[:4000] = (y.astype(np.float64) + np.nextafter(y, np.float32(np.inf)).astype(np.float64)) / 2  # ties
        y = x.astype(np.float32)
        lo = np.where(y.astype(np.float64) > x, np.nextafter(y, np.float32(-np.inf)), y)
        hi = np.where(y.astype(np.float64) < x, np.nextafter(y, np.float32(np.inf)), y)
    keep = np.isfinite(lo) & np.isfinite(hi)
    x, lo, hi = x[keep], lo[keep], hi[keep]
    for mode in ("rne", "rna", "rtz", "rup", "rdown", "rodd"):
        got = round_array(x, "fp32", mode).astype(np.float32)
        for xi, g, a, b in zip(
            x.tolist(), _bits(got).tolist(), _bits(lo).tolist(), _bits(hi).tolist(), strict=True
        ):
            la, lb = float(np.uint32(a).view(np.float32)), float(np.uint32(b).view(np.float32))
            want = _pick(mode, Fraction(xi), (Fraction(la), a & 1), (Fraction(lb), b & 1))[0]
            assert Fraction(float(np.uint32(g).view(np.float32))) == want, (mode, xi)


# ---- shapes, dtypes and errors -------------------------------------------------------------------
def test_shapes_layouts_and_byte_orders() -> None:
    rng = np.random.default_rng(9)
    base = rng.standard_normal((6, 8)).astype(np.float32)
    want = encode_array(np.ascontiguousarray(base), "fp16")
    assert want.shape == (6, 8)
    np.testing.assert_array_equal(encode_array(np.asfortranarray(base), "fp16"), want)
    np.testing.assert_array_equal(encode_array(base.astype(">f4"), "fp16"), want)
    np.testing.assert_array_equal(encode_array(base[:, ::2], "fp16"), want[:, ::2])
    np.testing.assert_array_equal(round_array(base.T, "bf16"), round_array(base, "bf16").T)
    big = round_array(base.astype(">f4"), "bf16")
    assert big.dtype == np.float32
    np.testing.assert_array_equal(big, round_array(base, "bf16"))
    zero_d = encode_array(np.float32(1.5), "fp16")
    assert zero_d.shape == ()
    assert zero_d.item() == 0x3E00
    assert round_array(2.5, "fp16").shape == ()
    assert encode_array(np.zeros((0, 3)), "fp8").shape == (0, 3)
    assert round_array_with_flags(np.zeros((2, 0), np.float16), "fp8")[1] == RoundingStats(0, 0, 0, 0, 0)
    np.testing.assert_array_equal(encode_array([1, 2, 65520], "fp16"), [0x3C00, 0x4000, 0x7C00])
    np.testing.assert_array_equal(encode_array(np.array([True, False]), "fp16"), [0x3C00, 0])
    assert round_array([1, 3], "fp8").dtype == np.float64
    x16 = np.array([1.0, 2**-20, np.inf], np.float16)  # a subnormal float16 is a normal fp32
    np.testing.assert_array_equal(round_array(x16, "fp32"), x16)
    np.testing.assert_array_equal(round_array(x16, "fp32", subnormals=False), [1.0, 0.0, np.inf])


@pytest.mark.parametrize(
    "x",
    [
        np.array([1 + 1j]),
        np.array(["1.0"]),
        np.array([1.0], dtype=object),
        np.array([1.0], np.longdouble),
        np.zeros(2, ml_dtypes.float8_e4m3fn),
    ],
)
def test_unsupported_dtypes_raise(x: np.ndarray) -> None:
    with pytest.raises(ValueError, match="expected float64, float32, float16 or bfloat16"):
        encode_array(x, "fp16")


def test_bad_arguments_raise_value_errors() -> None:
    x = np.ones(3)
    with pytest.raises(ValueError, match="needs rng"):
        encode_array(x, "fp16", "stochastic")
    with pytest.raises(ValueError, match="rng="):
        encode_array(x, "fp16", "stochastic", rng="seed")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="random_bits=0"):
        round_array(x, "fp16", "stochastic", rng=1, random_bits=0)
    with pytest.raises(ValueError, match="random_bits=33"):
        encode_array(x, "fp16", random_bits=33)
    with pytest.raises(ValueError, match="unknown rounding mode"):
        encode_array(x, "fp16", "nearest_odd")
    with pytest.raises(ValueError, match="unknown format"):
        round_array(x, "fp17")
    with pytest.raises(
        ValueError, match=r"bf16 has values that float16 cannot hold.*encode_array.*decode_array"
    ):
        round_array(x.astype(np.float16), "bf16")
    with pytest.raises(ValueError, match="fp16 has values that bfloat16 cannot hold"):
        round_array(x.astype(ml_dtypes.bfloat16), "fp16")


# ---- decode_codes --------------------------------------------------------------------------------
def _quiet_nan(v: np.ndarray) -> np.ndarray:
    quiet = (_bits(v) >> np.uint64(51)) & np.uint64(1) == 1
    return np.asarray(np.isnan(v) & quiet, dtype=bool)


def test_decode_every_16_bit_code() -> None:
    codes = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    got = decode_codes(codes, FP16)
    want = codes.view(np.float16).astype(np.float64)
    nan = np.isnan(want)
    np.testing.assert_array_equal(_bits(got[~nan]), _bits(want[~nan]))
    assert np.all(_quiet_nan(got[nan]))
    assert np.array_equal(np.signbit(got[nan]), np.signbit(want[nan]))
    got = decode_codes(codes, BF16)
    with np.errstate(invalid="ignore"):  # the signalling NaNs
        want = (codes.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    nan = np.isnan(want)
    np.testing.assert_array_equal(_bits(got[~nan]), _bits(want[~nan]))
    assert np.all(_quiet_nan(got[nan]))
    # an IEEE NaN keeps its payload's top bits
    assert _bits(decode_codes(np.array([0x7C01], np.uint16), FP16))[0] == 0x7FF8040000000000


@pytest.mark.parametrize("name", list(ML_DTYPES)[1:])
def test_decode_small_formats_against_ml_dtypes(name: str) -> None:
    fmt = get_format(name)
    codes = np.arange(2**fmt.bits, dtype=np.uint8)
    got = decode_codes(codes, fmt)
    with np.errstate(all="ignore"):
        want = codes.view(ML_DTYPES[name]).astype(np.float64)
    np.testing.assert_array_equal(got, want)  # NaN == NaN here
    assert np.array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize(
    "fmt",
    [
        FP32,
        FP64,
        get_format("tf32"),
        FloatFormat(11, 30),
        FloatFormat(15, 40),
        FloatFormat(12, 3, "fn"),
        FloatFormat(2, 61),
    ],
    ids=lambda f: f.name,
)
def test_decode_wide_formats_against_exact_values(fmt: FloatFormat) -> None:
    rng = np.random.default_rng(10)
    codes = rng.integers(0, 2**fmt.bits, 3000, dtype=np.uint64)
    codes[:8] = [
        0,
        fmt.sign_mask,
        1,
        fmt.max_code,
        fmt.max_code | fmt.sign_mask,
        1 << fmt.mantissa_bits,
        fmt.code_mask,
        fmt.code_mask - 1,
    ]
    c = codes.astype(code_dtype(fmt))
    got = decode_codes(c, fmt)
    for ci, g in zip(c.tolist(), got.tolist(), strict=True):
        if fmt.is_nan_code(ci):
            assert math.isnan(g)
            continue
        neg = bool(ci & fmt.sign_mask)
        if fmt.has_inf and ci & (fmt.sign_mask - 1) == fmt.inf_code:
            assert g == (-math.inf if neg else math.inf)
            continue
        v = fmt.code_magnitude(ci)
        try:
            want = float(v)  # correctly rounded, as decode_codes promises for wider formats
        except OverflowError:
            want = math.inf
        assert g == (-want if neg else want), hex(ci)
        assert math.copysign(1.0, g) == (-1.0 if neg else 1.0)


def test_decode_ignores_bits_above_the_format() -> None:
    fmt = get_format("float6_e2m3fn")
    codes = np.arange(256, dtype=np.uint8)
    np.testing.assert_array_equal(decode_codes(codes, fmt), decode_codes(codes & 0x3F, fmt))
    wide = np.array([0x3C00, 0x13C00, -1], np.int64)  # integer codes are cast to the format's dtype
    np.testing.assert_array_equal(decode_codes(wide, FP16), [1.0, 1.0, np.nan])


def test_decode_rejects_non_integer_codes() -> None:
    with pytest.raises(ValueError, match="expected unsigned integer codes"):
        decode_codes(np.array([1.0]), FP16)


# ---- the hardware float32 -> fp16 path -----------------------------------------------------------
def _fp32_patterns() -> np.ndarray:
    """Every combination of sign, exponent and top 11 fraction bits, with low-bit tails that
    sit below, on and above each halfway point, plus random patterns (about 13 million)."""
    high = np.arange(1 << 20, dtype=np.uint32) << np.uint32(12)
    tails = np.array([0, 1, 0x7FF, 0x800, 0x801, 0xFFF], np.uint32)
    rand = np.random.default_rng(7).integers(0, 2**32, size=1 << 21, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([(high[:, None] | tails[None, :]).reshape(-1), rand])


def _generic_rne(bits: np.ndarray, target: FloatFormat, back: bool) -> np.ndarray:
    """What the generic loops give for float32 bits ``bits`` -> ``target``, nearest even: codes,
    or with ``back`` the float32 bits of the rounded values."""
    plan = make_plan(fl.FP32, target, RoundingOptions(), back=back, flags=False)
    return rounding_cpu.execute(bits, plan, shortcuts=False)[0]


@pytest.mark.skipif(not rounding_cpu.half_hardware(), reason="this CPU has no float32 -> fp16 instruction")
@pytest.mark.parametrize("back", [False, True], ids=["encode", "round"])
def test_hardware_half_path_equals_the_generic_loops(back: bool) -> None:
    bits = _fp32_patterns()
    fast = rounding_cpu.run_half(bits, back)
    assert np.array_equal(fast, _generic_rne(bits, fl.FP16, back))
    # and the oracle: numpy's own cast (NaNs compared by class, numpy keeps other payload bits)
    x = bits.view(np.float32)
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16)
    got = fast.view(np.float32) if back else fast.view(np.float16)
    ok = np.isnan(x)
    assert np.array_equal(np.isnan(got), ok)
    want = ref.astype(np.float32) if back else ref
    assert np.array_equal(
        got[~ok].view(np.uint32 if back else np.uint16), want[~ok].view(np.uint32 if back else np.uint16)
    )


@pytest.mark.parametrize("back", [False, True], ids=["encode", "round"])
def test_integer_bf16_path_equals_the_generic_loops(back: bool) -> None:
    nans = np.arange(0x7F800001, 0x80000000, 97, dtype=np.uint32)  # NaN payloads, both signs
    bits = np.concatenate([_fp32_patterns(), nans, nans | np.uint32(0x80000000)])
    fast = rounding_cpu.run_bf16(bits, back)
    assert np.array_equal(fast, _generic_rne(bits, fl.BF16, back))
    # and the oracle: ml_dtypes' cast (NaNs compared by class)
    x = bits.view(np.float32)
    with np.errstate(invalid="ignore"):  # (ml_dtypes warns about the signalling NaNs it quiets)
        ref = x.astype(ML_DTYPES["bf16"]).view(np.uint16)
    codes = fast if not back else (fast >> np.uint32(16)).astype(np.uint16)
    ok = np.isnan(x)
    assert np.array_equal(codes[~ok], ref[~ok])
    assert np.all((codes[ok] & 0x7FFF) > 0x7F80)
    if back:
        assert not np.any(fast & np.uint32(0xFFFF))  # the low half of a bfloat16 value is zero


def test_round_array_to_bf16_takes_the_integer_path(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    real = rounding_cpu.run_bf16

    def spy(bits: np.ndarray, back: bool) -> np.ndarray:
        calls.append(back)
        return real(bits, back)

    monkeypatch.setattr(rounding_cpu, "run_bf16", spy)
    x = np.array([1 + 2.0**-8, -3e38, 2.0**-133, 3.4e38], np.float32)
    want = x.astype(ML_DTYPES["bf16"])
    assert fl.round_array(x, "bf16").tolist() == want.astype(np.float32).tolist()
    assert calls == [True]
    # saturation takes the generic loop
    assert want.view(np.uint16)[3] == 0x7F80  # 3.4e38 overflows to inf; saturated, it is the largest
    assert fl.encode_array(x, "bf16", saturate=True).tolist() == [*want.view(np.uint16)[:3].tolist(), 0x7F7F]
    assert calls == [True]


def test_hardware_half_path_ignores_flush_to_zero() -> None:
    """A library that switches the CPU to flush-to-zero (torch.set_flush_denormal) must not
    change floatlab's fp16 subnormals."""
    torch = pytest.importorskip("torch")
    x = np.array([2.0**-24, 3 * 2.0**-25, -(2.0**-20), 2.0**-15 * 1.5], np.float32)
    want = fl.round_array(x.astype(np.float64), "fp16").astype(np.float32)  # the generic float64 loops
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals")
    try:
        got = fl.round_array(x, "fp16")
    finally:
        torch.set_flush_denormal(False)
    assert got.tolist() == want.tolist()
    assert all(v != 0 for v in got.tolist())


# ---- inputs that were rounded twice, formats at the edge of the kernels' lanes --------------------
def test_integers_float64_cannot_hold_are_refused_not_rounded_twice() -> None:
    big = np.array([2**60 + 2**36 + 1])
    # the exact answer (one rounding) is 0x5D800001: numpy's own int64 -> float32 cast agrees
    assert int(fl.encode(str(2**60 + 2**36 + 1), "fp32")) == 0x5D800001
    assert int(big.astype(np.float32).view(np.uint32)[0]) == 0x5D800001
    for fn in (fl.encode_array, fl.round_array, fl.encode_array_with_flags):
        with pytest.raises(ValueError, match=r"holds the integer 1152921573326323713, which float64 cannot"):
            fn(big, "fp32")
    for ok in (np.array([2**53, -(2**63)], np.int64), np.array([2**63, 2**64 - 2**11], np.uint64)):
        np.testing.assert_array_equal(fl.round_array(ok, "fp64"), ok.astype(np.float64))
    with pytest.raises(ValueError, match="holds the integer 18446744073709551615"):
        fl.encode_array(np.array([2**64 - 1], np.uint64), "fp32")
    with pytest.raises(ValueError, match=r"x has dtype (float128|longdouble)"):
        fl.encode_array(np.array([1.0], np.longdouble), "fp16")


@pytest.mark.parametrize(
    "fmt", [FloatFormat(11, 52, "fnuz"), FloatFormat(15, 48, "fnuz"), FloatFormat(15, 48)]
)
def test_formats_at_the_64_bit_edge_equal_the_scalar_reference(fmt: FloatFormat) -> None:
    x = np.array([1.0, -0.0, np.nan, -np.inf, 1e308, -5e-324, 0.1, 2.0**-1022, 3.0**300])
    want = [round_scalar(float(v), fmt)[0] for v in x]
    assert encode_array(x, fmt).tolist() == want
    codes, stats = encode_array_with_flags(x, fmt)
    assert codes.tolist() == want
    assert stats.total == x.size


def test_flags_true_names_the_twin_and_leaves_the_generator_alone() -> None:
    g = np.random.default_rng(3)
    before = g.bit_generator.state
    for fn, twin in ((encode_array, "encode_array_with_flags"), (round_array, "round_array_with_flags")):
        with pytest.raises(TypeError, match=rf"is now {twin}\(\.\.\.\)"):
            fn(np.ones(2), "fp16", "stochastic", rng=g, flags=True)  # type: ignore[arg-type]
    assert g.bit_generator.state == before  # a refused call drew no key


@pytest.mark.parametrize("fmt", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("mode", ["rne", "rtz", "rup", "rdown"])
def test_fma_rounds_the_exact_result_once(fmt: str, mode: str) -> None:
    # the oracle: x * y + z in exact rationals, rounded once by the scalar reference
    rng = np.random.default_rng(zlib.crc32(f"{fmt} {mode}".encode()))
    n = 400
    x = (rng.standard_normal(n) * 2.0 ** rng.integers(-30, 30, n)).astype(np.float32)
    y = (rng.standard_normal(n) * 2.0 ** rng.integers(-30, 30, n)).astype(np.float32)
    z = (-(x.astype(np.float64) * y) * (1 + rng.standard_normal(n) * 2.0**-20)).astype(np.float32)
    z[::4] = rng.standard_normal(n // 4).astype(np.float32)  # and unrelated addends
    got = fl.rounding.fma(x, y, z, fmt, mode)
    f = fl.get_format(fmt)
    for i in range(n):
        exact = Fraction(float(x[i])) * Fraction(float(y[i])) + Fraction(float(z[i]))
        code, _ = round_rational(exact, f, mode, negative_zero=mode == "rdown" and exact == 0)
        want = fl.decode(code, f).value
        assert float(got[i]) == want, (x[i], y[i], z[i])
    # inf and NaN pass through as IEEE says
    special = fl.rounding.fma(
        np.array([np.inf, np.nan, 1.0], np.float32),
        np.array([1.0, 1.0, np.inf], np.float32),
        np.array([1.0, 0.0, -np.inf], np.float32),
    )
    assert special[0] == np.inf
    assert np.isnan(special[1])
    assert np.isnan(special[2])


def test_fma_refuses_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match="fma operand y of dtype float64: expected float32"):
        fl.rounding.fma(np.array([1.0], np.float32), np.array([1.0], np.float64), np.array([1.0], np.float32))
    with pytest.raises(ValueError, match="fma format float8_e4m3fn: expected an IEEE format"):
        fl.rounding.fma(
            np.array([1.0], np.float32), np.array([1.0], np.float32), np.array([1.0], np.float32), "e4m3fn"
        )
