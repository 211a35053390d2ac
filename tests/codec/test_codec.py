"""The codec against independent oracles.

* every code of fp16 (numpy), bf16 and the fp8/fp6/fp4 formats (ml_dtypes): views of all codes;
* fp32 and fp64: numpy views, hypothesis and strided sweeps over the code space;
* user formats: gfloat's decode_ndarray;
* neighbours and ulps: np.nextafter / np.spacing, or the sorted value set of the format;
* exact decimals: decimal.Decimal(float); parsing: float(), float.hex, Decimal;
* rounding of decimal strings: Python's correctly rounded float() for fp64 and an exact
  bracket-the-value search over the sorted value set (Fractions) for fp16 and fp32.
"""

from __future__ import annotations

import bisect
import copy
import html.parser
import json
import math
import pickle
import re
import struct
import subprocess
import sys
from decimal import Decimal, localcontext
from fractions import Fraction
from typing import Any

import gfloat
import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import gfloat_info

import floatlab as fl
from floatlab.codec import Decoded, Encoded, decode, decode_array, encode, parse_value
from floatlab.formats import FloatFormat
from floatlab.rounding import Flags
from floatlab.text import render

SETTINGS = settings(max_examples=300, deadline=None, derandomize=True, database=None)

SMALL: list[tuple[FloatFormat, Any]] = [
    (fl.FP16, np.float16),
    (fl.BF16, ml_dtypes.bfloat16),
    (fl.get_format("float8_e5m2"), ml_dtypes.float8_e5m2),
    (fl.get_format("float8_e4m3fn"), ml_dtypes.float8_e4m3fn),
    (fl.get_format("float8_e4m3fnuz"), ml_dtypes.float8_e4m3fnuz),
    (fl.get_format("float8_e5m2fnuz"), ml_dtypes.float8_e5m2fnuz),
    (fl.get_format("float6_e2m3fn"), ml_dtypes.float6_e2m3fn),
    (fl.get_format("float6_e3m2fn"), ml_dtypes.float6_e3m2fn),
    (fl.get_format("float4_e2m1fn"), ml_dtypes.float4_e2m1fn),
    (FloatFormat(4, 3), ml_dtypes.float8_e4m3),  # user formats ml_dtypes also implements
    (FloatFormat(3, 4), ml_dtypes.float8_e3m4),
]
SMALL_IDS = [f.name for f, _ in SMALL]


def all_codes(fmt: FloatFormat) -> npt.NDArray[Any]:
    return np.arange(1 << fmt.bits, dtype=np.uint16 if fmt.bits > 8 else np.uint8)


def oracle_values(codes: npt.NDArray[Any], t: Any) -> npt.NDArray[np.float64]:
    with np.errstate(invalid="ignore"):  # widening a signalling NaN raises "invalid"
        values: npt.NDArray[np.float64] = codes.view(t).astype(np.float64)
    return values


def float_bits(x: float) -> int:
    bits: int = struct.unpack("<Q", struct.pack("<d", x))[0]
    return bits


def bits64(a: npt.NDArray[np.float64]) -> npt.NDArray[np.uint64]:
    return a.view(np.uint64)


def assert_same_values(got: npt.NDArray[np.float64], want: npt.NDArray[np.float64]) -> None:
    """Equal values, the same zero signs, NaN exactly where the oracle has NaN."""
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    np.testing.assert_array_equal(bits64(got[finite]), bits64(want[finite]))


def landmark_codes(fmt: FloatFormat, radius: int = 40) -> npt.NDArray[np.uint64]:
    """Codes around zero, the subnormal/normal border, 1, the maximum and inf/NaN, both signs."""
    one = int(encode(1, fmt))
    centres = [0, fmt.mantissa_mask, 1 << fmt.mantissa_bits, one, fmt.max_code, fmt.exponent_mask]
    codes = {
        (c + d) & (fmt.sign_mask - 1) | s
        for c in centres
        for d in range(-radius, radius)
        for s in (0, fmt.sign_mask)
    }
    return np.array(sorted(codes), dtype=np.uint64)


# ---- decode: every code of every small format --------------------------------------------------
@pytest.mark.parametrize(("fmt", "t"), SMALL, ids=SMALL_IDS)
def test_every_code_decodes_like_numpy_and_ml_dtypes(fmt: FloatFormat, t: Any) -> None:
    codes = all_codes(fmt)
    want = oracle_values(codes, t)
    assert_same_values(decode_array(codes, fmt), want)
    for c, w in zip(codes.tolist(), want.tolist(), strict=True):
        d = decode(c, fmt)
        assert (d.kind == "nan") == math.isnan(w), hex(c)
        if d.kind == "nan":
            assert d.exact is None
            assert math.isnan(d.value)
            continue
        assert float_bits(d.value) == float_bits(w), hex(c)
        assert (d.kind == "infinity") == math.isinf(w)
        if math.isfinite(w):
            assert d.exact == Fraction(w)
            assert d.kind == ("zero" if w == 0 else "subnormal" if abs(w) < fmt.smallest_normal else "normal")


def test_fp16_nan_codes_widen_like_numpy_plus_the_quiet_bit() -> None:
    # numpy widens float16 NaNs in software, keeping sign and payload (a signalling NaN stays
    # signalling); floatlab keeps sign and payload too and, as IEEE 754 conversions do, sets the quiet bit
    codes = all_codes(fl.FP16)
    want = bits64(codes.view(np.float16).astype(np.float64)).copy()
    nan = np.isnan(codes.view(np.float16))
    want[nan] |= np.uint64(1 << 51)
    np.testing.assert_array_equal(bits64(decode_array(codes, fl.FP16)), want)
    np.testing.assert_array_equal(bits64(decode_array(codes[:1000], fl.FP16)), want[:1000])
    for c in (0x7C01, 0x7E00, 0xFE01, 0x7FFF, 0xFC01):
        assert float_bits(decode(c, fl.FP16).value) == int(want[c])


@pytest.mark.parametrize(
    ("fmt", "code", "bits"),
    [
        (fl.FP64, 0x7FF0_0000_0000_0001, 0x7FF8_0000_0000_0001),
        (fl.FP64, 0xFFF8_0000_0000_0000, 0xFFF8_0000_0000_0000),
        (fl.FP32, 0x7F80_0001, 0x7FF8_0000_2000_0000),
        (fl.FP32, 0xFFC0_0001, 0xFFF8_0000_2000_0000),
        (fl.FP16, 0x7C01, 0x7FF8_0400_0000_0000),
        (fl.BF16, 0xFF81, 0xFFF0_2000_0000_0000 | 1 << 51),
        (fl.get_format("e4m3fn"), 0xFF, 0xFFF8_0000_0000_0000),
        (fl.get_format("e4m3fnuz"), 0x80, 0xFFF8_0000_0000_0000),
    ],
)
def test_nan_codes_widen_to_quiet_nans_with_sign_and_payload(fmt: FloatFormat, code: int, bits: int) -> None:
    utype = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[fmt.bits]
    assert float_bits(decode(code, fmt).value) == bits
    assert int(bits64(decode_array(np.array([code], dtype=utype), fmt))[0]) == bits
    big = decode_array(np.full(1 << 16, code, dtype=utype), fmt)  # the kernel's path, when there is one
    np.testing.assert_array_equal(bits64(big), np.full(1 << 16, bits, dtype=np.uint64))


def test_quiet_bit_and_nan_kinds() -> None:
    assert [decode(c, "fp16").quiet for c in (0x7C01, 0x7E00, 0xFDFF, 0x3C00)] == [False, True, False, None]
    assert decode(0x7F, "float8_e4m3fn").quiet is True
    assert decode(0xFF, "float8_e4m3fn").kind == "nan"
    assert decode(0x80, "float8_e4m3fnuz").kind == "nan"
    assert decode(0x80, "float8_e5m2fnuz").kind == "nan"
    assert decode(0x3F, "float6_e2m3fn").kind == "normal"  # all finite: all-ones is a number


@pytest.mark.parametrize(
    ("fmt", "t", "utype"), [(fl.FP32, np.float32, np.uint32), (fl.FP64, np.float64, np.uint64)]
)
def test_wide_formats_on_strided_sweeps_and_landmarks(fmt: FloatFormat, t: Any, utype: Any) -> None:
    stride = 65_521 if fmt.bits == 32 else 0x0000_7FF1_0000_0001 * 3
    sweep = np.array(range(0, 1 << fmt.bits, stride), dtype=np.uint64)
    codes = np.concatenate([sweep, landmark_codes(fmt)]).astype(utype)
    want = oracle_values(codes, t)
    got = decode_array(codes, fmt)
    assert_same_values(got, want)
    got_bits = bits64(got).tolist()
    for i, c in list(enumerate(codes.tolist()))[::7]:  # the scalar reference agrees with its vectorised twin
        assert float_bits(decode(c, fmt).value) == got_bits[i]


@SETTINGS
@given(st.integers(0, 2**32 - 1))
def test_fp32_codes_decode_like_numpy(code: int) -> None:
    with np.errstate(invalid="ignore"):
        want = float(np.uint32(code).view(np.float32))
    d = decode(code, fl.FP32)
    if math.isnan(want):
        assert d.kind == "nan"
        assert math.isnan(d.value)
    else:
        assert float_bits(d.value) == float_bits(want)
        assert d.exact == (Fraction(want) if math.isfinite(want) else None)
    assert float_bits(float(decode_array([code], fl.FP32)[0])) == float_bits(d.value)


@SETTINGS
@given(st.integers(0, 2**64 - 1))
def test_fp64_codes_decode_to_their_own_bits(code: int) -> None:
    want = float(np.uint64(code).view(np.float64))
    d = decode(code, fl.FP64)
    # fp64 codes are their own value; a NaN keeps sign and payload and is quietened
    assert float_bits(d.value) == (code | 1 << 51 if math.isnan(want) else code)
    if math.isfinite(want):
        assert d.exact == Fraction(want)
        assert d.decimal == format(Decimal(want), "f")
    assert int(decode_array(np.array([code], dtype=np.uint64), fl.FP64).view(np.uint64)[0]) == float_bits(
        d.value
    )


def test_fp64_exact_decimals_match_decimal_module() -> None:
    rng = np.random.default_rng(64)
    codes = np.concatenate([rng.integers(0, 2**64, 2000, dtype=np.uint64), landmark_codes(fl.FP64, 8)])
    for c in codes.tolist():
        x = float(np.uint64(c).view(np.float64))
        if math.isfinite(x):
            assert decode(c, fl.FP64).decimal == format(Decimal(x), "f")
    assert decode(1, fl.FP64).decimal == format(Decimal(math.ulp(0.0)), "f")
    assert len(decode(1, fl.FP64).decimal) == 2 + 1074


def test_decimals_of_every_fp16_code() -> None:
    for c in range(1 << 16):
        d = decode(c, fl.FP16)
        if d.kind == "nan":
            assert d.decimal == "nan"
        elif d.kind == "infinity":
            assert d.decimal == ("-inf" if c & 0x8000 else "inf")
        else:
            assert d.decimal == format(Decimal(d.value), "f")


def test_decimal_of_a_format_beyond_python_int_str_limit() -> None:
    # 15 exponent bits: the largest value has ~4933 digits, above int's default 4300-digit str limit
    f = FloatFormat(15, 10)
    d = decode(f.max_code, f)
    assert d.decimal == str(Decimal(f.max_exact.numerator))
    assert d.value == math.inf
    assert decode(1, f).decimal.endswith("5")
    assert decode(1, f).value == 0.0


# ---- user formats against gfloat ---------------------------------------------------------------
USER = [FloatFormat(6, 9), FloatFormat(3, 3), FloatFormat(4, 5, "fn"), FloatFormat(5, 4, "fnuz")]


@pytest.mark.parametrize("fmt", USER, ids=[f.name for f in USER])
def test_user_formats_decode_like_gfloat(fmt: FloatFormat) -> None:
    codes = np.arange(1 << fmt.bits, dtype=np.uint64)
    want = np.asarray(gfloat.decode_ndarray(gfloat_info(fmt), codes), dtype=np.float64)
    got = decode_array(codes, fmt)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])
    for c in codes[:: max(1, len(codes) // 512)].tolist():
        assert float_bits(decode(c, fmt).value) == int(bits64(got)[c])


def test_wide_user_formats_and_tf32() -> None:
    # tf32 codes are fp32 codes without their 13 low fraction bits
    rng = np.random.default_rng(19)
    codes = np.concatenate([rng.integers(0, 1 << 19, 5000), landmark_codes(fl.TF32, 10).astype(np.int64)])
    want = oracle_values((codes.astype(np.uint32) << np.uint32(13)), np.float32)
    got = decode_array(codes, fl.TF32)
    assert_same_values(got, want)
    got_bits = bits64(got).tolist()
    for i, c in list(enumerate(codes.tolist()))[::10]:
        assert float_bits(decode(c, fl.TF32).value) == got_bits[i]
    # a 31-bit user format through the integer path, against gfloat
    f = FloatFormat(10, 20)
    wide = np.concatenate([rng.integers(0, 1 << 31, 3000, dtype=np.uint64), landmark_codes(f, 10)])
    want_g = np.asarray(gfloat.decode_ndarray(gfloat_info(f), wide), dtype=np.float64)
    assert_same_values(decode_array(wide, f), want_g)


# ---- decode_array: paths, dtypes, errors -------------------------------------------------------
def test_decode_array_keeps_shape_and_accepts_any_integer_dtype() -> None:
    rng = np.random.default_rng(7)
    codes = rng.integers(0, 1 << 16, (3, 4, 5))
    want = oracle_values(codes.astype(np.uint16), np.float16)
    for dtype in (np.uint16, np.int32, np.int64, np.uint64):
        got = decode_array(codes.astype(dtype), fl.FP16)
        assert got.dtype == np.float64
        assert got.shape == (3, 4, 5)
        assert_same_values(got, want)
    assert decode_array([0x3C00, 0xC000], "fp16").tolist() == [1.0, -2.0]
    assert decode_array(np.uint16(0x3C00), "fp16").shape == ()
    assert decode_array([], "fp16").shape == (0,)
    # a large array (the compiled kernel takes it when there is one) agrees with the small path
    big = rng.integers(0, 1 << 16, 200_000).astype(np.uint16)
    assert_same_values(decode_array(big, fl.FP16), oracle_values(big, np.float16))


@pytest.mark.parametrize(
    "fmt", [f for f, _ in SMALL] + [fl.TF32, FloatFormat(10, 20)], ids=[*SMALL_IDS, "tf32", "e10m20"]
)
def test_decode_array_paths_agree_bit_for_bit(fmt: FloatFormat) -> None:
    """Small arrays (lookup table, bit arithmetic) and large ones (the kernel, when built): the same bits."""
    rng = np.random.default_rng(fmt.bits)
    codes = rng.integers(0, 1 << fmt.bits, 1 << 17, dtype=np.uint64)
    codes[: 1 << min(fmt.bits, 16)] = np.arange(1 << min(fmt.bits, 16))  # every code of the small formats
    large = decode_array(codes, fmt)
    small = np.concatenate([decode_array(part, fmt) for part in np.array_split(codes, 64)])
    np.testing.assert_array_equal(bits64(large), bits64(small))
    large_bits = bits64(large)
    for i in range(0, len(codes), 1 << 9):
        assert float_bits(decode(int(codes[i]), fmt).value) == int(large_bits[i])


def test_decode_array_refuses_bad_codes_and_formats() -> None:
    with pytest.raises(ValueError, match=r"code 65536 does not fit fp16"):
        decode_array(np.array([1, 65536], dtype=np.uint32), "fp16")
    with pytest.raises(ValueError, match=r"code -1 does not fit fp16"):
        decode_array([-1, 5], "fp16")
    with pytest.raises(ValueError, match=r"code 256 does not fit float8_e4m3fn"):
        decode_array(np.array([256], dtype=np.uint16), "float8_e4m3fn")
    with pytest.raises(ValueError, match="expected an integer array"):
        decode_array(np.array([1.0]), "fp16")
    with pytest.raises(ValueError, match="cannot hold all its values"):
        decode_array([0], FloatFormat(15, 10))
    with pytest.raises(ValueError, match="cannot hold all its values"):
        decode_array([0], FloatFormat(8, 55))


def test_decode_refuses_bad_codes() -> None:
    with pytest.raises(
        ValueError, match=r"code 0x10000 does not fit fp16: expected an integer from 0x0 to 0xffff"
    ):
        decode(0x10000, "fp16")
    with pytest.raises(ValueError, match="code -1 does not fit"):
        decode(-1, "fp16")
    with pytest.raises(ValueError, match="expected an integer bit pattern"):
        decode(1.5, "fp16")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected an integer bit pattern"):
        decode("0x7c00", "fp16")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a bool"):
        decode(True, "fp16")
    assert decode(np.uint16(0x3C00), "fp16").value == 1.0


# ---- neighbours and ulp ------------------------------------------------------------------------
def _sorted_values(fmt: FloatFormat, t: Any) -> list[float]:
    values = oracle_values(all_codes(fmt), t)
    return sorted(set(values[~np.isnan(values)].tolist()))


@pytest.mark.parametrize(("fmt", "t"), SMALL[1:], ids=SMALL_IDS[1:])  # fp16: np.nextafter below
def test_neighbours_and_ulp_against_the_sorted_value_set(fmt: FloatFormat, t: Any) -> None:
    values = _sorted_values(fmt, t)  # -0.0 and 0.0 collapse into one entry
    top = max(v for v in values if math.isfinite(v))
    for c in range(0, 1 << fmt.bits, 3 if fmt.bits > 8 else 1):  # every code up to 8 bits, a third of bf16
        d = decode(c, fmt)
        if d.kind == "nan":
            assert d.next_up is None
            assert d.next_down is None
            assert d.ulp is None
            continue
        x = d.value
        i = bisect.bisect_right(values, x)
        if i < len(values):
            assert d.next_up is not None, hex(c)
            assert decode(d.next_up, fmt).value == values[i], hex(c)
        else:
            assert d.next_up is None
        j = bisect.bisect_left(values, x) - 1
        if j >= 0:
            assert d.next_down is not None, hex(c)
            assert decode(d.next_down, fmt).value == values[j], hex(c)
        else:
            assert d.next_down is None
        if math.isfinite(x):
            assert d.ulp is not None
            if abs(x) < top:  # the ulp is the gap to the next larger magnitude
                k = bisect.bisect_right(values, abs(x))
                assert d.ulp == Fraction(values[k]) - Fraction(abs(x)), hex(c)
            else:
                assert d.ulp == Fraction(top) - Fraction(values[-2 if math.isfinite(values[-1]) else -3])
        else:
            assert d.ulp is None


def _check_nextafter(fmt: FloatFormat, codes: list[int], t: Any, utype: Any) -> None:
    x = np.array(codes, dtype=utype).view(t)
    with np.errstate(invalid="ignore", over="ignore"):
        ups = np.nextafter(x, t(np.inf)).view(utype).tolist()
        downs = np.nextafter(x, t(-np.inf)).view(utype).tolist()
        # spacing of |x|: numpy's float16 spacing of a negative value is wrong (np.spacing of
        # float16(-1) is +2^-11, not -2^-10), and the ulp does not depend on the sign
        spacings = np.spacing(np.abs(x)).astype(np.float64).tolist()
    for c, up, down, spacing in zip(codes, ups, downs, spacings, strict=True):
        d = decode(c, fmt)
        if d.kind == "nan":
            assert d.next_up is None
            assert d.next_down is None
            continue
        assert d.next_up == (None if d.kind == "infinity" and not d.sign else up), hex(c)
        assert d.next_down == (None if d.kind == "infinity" and d.sign else down), hex(c)
        if d.kind != "infinity" and abs(d.value) < fmt.max:
            assert d.ulp == Fraction(spacing), hex(c)


def test_fp16_neighbours_and_ulp_like_nextafter_and_spacing_for_every_code() -> None:
    _check_nextafter(fl.FP16, list(range(1 << 16)), np.float16, np.uint16)


@pytest.mark.parametrize(
    ("fmt", "t", "utype"), [(fl.FP32, np.float32, np.uint32), (fl.FP64, np.float64, np.uint64)]
)
def test_wide_neighbours_and_ulp_like_nextafter_and_spacing(fmt: FloatFormat, t: Any, utype: Any) -> None:
    rng = np.random.default_rng(fmt.bits)
    codes = rng.integers(0, 1 << fmt.bits, 3000, dtype=np.uint64).tolist() + landmark_codes(fmt, 6).tolist()
    _check_nextafter(fmt, codes, t, utype)


def test_neighbours_at_the_edges() -> None:
    fp16 = fl.FP16
    assert decode(0x7BFF, fp16).next_up == 0x7C00
    assert decode(0xFC00, fp16).next_up == 0xFBFF
    assert decode(0x7C00, fp16).next_down == 0x7BFF
    assert decode(0x8001, fp16).next_up == 0x8000  # -min subnormal steps up to -0
    e4m3 = fl.get_format("e4m3fn")
    assert decode(0x7E, e4m3).next_up is None  # the max of a format without infinity
    assert decode(0xFE, e4m3).next_down is None
    fnuz = fl.get_format("e4m3fnuz")
    assert decode(0x81, fnuz).next_up == 0x00  # no -0: the unsigned zero
    assert decode(0x00, fnuz).next_down == 0x81
    assert decode(0x00, fnuz).ulp == Fraction(fnuz.smallest_subnormal)


# ---- encode ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("fmt", "t"), [*SMALL, (FloatFormat(6, 9), None)], ids=[*SMALL_IDS, "e6m9"])
def test_encode_inverts_decode_for_every_non_nan_code(fmt: FloatFormat, t: Any) -> None:
    for c in range(1 << fmt.bits):
        d = decode(c, fmt)
        if d.kind == "nan":
            continue
        assert encode(d.value, fmt) == c, hex(c)
        if d.exact and c % 7 == 0:  # the exact Fraction too (zeros need the float for their sign)
            assert encode(d.exact, fmt) == c


@pytest.mark.parametrize("fmt", [fl.FP32, fl.FP64, fl.TF32], ids=["fp32", "fp64", "tf32"])
def test_encode_inverts_decode_on_samples(fmt: FloatFormat) -> None:
    rng = np.random.default_rng(99)
    codes = rng.integers(0, 1 << fmt.bits, 2000, dtype=np.uint64).tolist() + landmark_codes(fmt, 4).tolist()
    for c in codes:
        d = decode(c, fmt)
        if d.kind != "nan":
            assert encode(d.value, fmt) == c
            assert encode(d.decimal, fmt) == c  # the exact decimal string parses back to the code


def test_encode_nan_gives_a_nan_code() -> None:
    for fmt, _ in SMALL:
        code = encode(math.nan, fmt)
        assert decode(code, fmt).kind == "nan" if fmt.nan_code is not None else code in (0, fmt.sign_mask)
    assert encode("nan", "fp16") == 0x7E00
    assert encode("-inf", "fp16") == 0xFC00


@SETTINGS
@given(
    st.integers(0, 10**25),
    st.integers(-360, 330),
    st.booleans(),
)
def test_fp64_decimal_strings_round_like_python_float(digits: int, exp10: int, negative: bool) -> None:
    s = f"{'-' if negative else ''}{digits}e{exp10}"
    want = float(s)  # CPython parses decimal strings with correct rounding (David Gay's algorithm)
    assert encode(s, fl.FP64) == float_bits(want)
    assert encode(s, fl.FP64).input_exact == Fraction(digits) * Fraction(10) ** exp10 * (
        -1 if negative else 1
    )


def test_the_classic_decimal_strings_in_fp64() -> None:
    for s in ("0.1", "0.2", "0.3", "1e23", "2.2250738585072011e-308", "4.9e-324", "2.4703282292062328e-324"):
        assert encode(s, fl.FP64) == float_bits(float(s)), s
    assert encode("2.4703282292062327e-324", fl.FP64) == 0  # just below half the smallest subnormal


class _Table:
    """An exact rounding oracle for a format of <= 16 bits: bracket the value in its sorted value set."""

    def __init__(self, fmt: FloatFormat, t: Any) -> None:
        codes = all_codes(fmt)
        values = oracle_values(codes, t)
        keep = np.isfinite(values) & ~((values == 0) & np.signbit(values))
        pairs = sorted(
            (Fraction(v), int(c)) for v, c in zip(values[keep].tolist(), codes[keep].tolist(), strict=True)
        )
        # IEEE overflow with an unbounded exponent: the next "value" above max is 2^(emax+1), coded as inf
        beyond = Fraction(2) ** (fmt.emax + 1)
        self.values = [-beyond] + [v for v, _ in pairs] + [beyond]
        self.codes = [fmt.sign_mask | fmt.exponent_mask] + [c for _, c in pairs] + [fmt.exponent_mask]

    def round(self, x: Fraction, mode: str) -> int:
        if abs(x) >= self.values[-1]:  # beyond the virtual 2^(emax+1): overflow
            to_inf = mode in ("rne", "rna") or (mode == "rup") == (x > 0)
            return self.codes[-1 if x > 0 else 0] if to_inf else self.codes[-2 if x > 0 else 1]
        i = bisect.bisect_left(self.values, x)
        if self.values[i] == x:
            return self.codes[i]
        lo, hi = i - 1, i
        if mode == "rup":
            return self.codes[hi]
        if mode == "rdown":
            return self.codes[lo]
        if mode == "rtz":
            return self.codes[lo] if x > 0 else self.codes[hi]
        dlo, dhi = x - self.values[lo], self.values[hi] - x
        if dlo != dhi:
            return self.codes[lo] if dlo < dhi else self.codes[hi]
        if mode == "rna":
            return self.codes[hi] if x > 0 else self.codes[lo]
        return self.codes[lo] if self.codes[lo] % 2 == 0 else self.codes[hi]  # ties to even


FP16_TABLE = _Table(fl.FP16, np.float16)


def _decimal_string(x: Fraction) -> str:
    """The exact decimal expansion of a dyadic fraction, through the decimal module."""
    with localcontext() as ctx:
        ctx.prec = 400  # enough digits to be exact for the fractions drawn here
        return format(Decimal(x.numerator) / Decimal(x.denominator), "f")


@SETTINGS
@given(
    st.fractions(min_value=-70000, max_value=70000, max_denominator=10**9)
    | st.integers(-(2**24), 2**24).map(lambda k: Fraction(k, 2**25))
    | st.integers(1, 65503 * 2).map(lambda k: Fraction(k, 2)),
    st.sampled_from(["rne", "rna", "rtz", "rup", "rdown"]),
)
def test_fp16_rounding_of_exact_values_and_strings(x: Fraction, mode: str) -> None:
    want = FP16_TABLE.round(x, mode)
    if x != 0:
        assert encode(x, fl.FP16, mode) == want
        assert encode(f"{x.numerator}/{x.denominator}", fl.FP16, mode) == want
    if x.denominator & (x.denominator - 1) == 0:  # dyadic: a finite decimal string, ties included
        assert encode(_decimal_string(x), fl.FP16, mode) == (want if x != 0 else 0)


def test_fp16_ties_and_overflow_boundary() -> None:
    for s, code in [("65519.99", 0x7BFF), ("65520", 0x7C00), ("-65520", 0xFC00), ("1.00048828125", 0x3C00)]:
        assert encode(s, "fp16") == FP16_TABLE.round(parse_value(s), "rne") == code  # type: ignore[arg-type]
    assert encode("65520", "fp16", saturate=True) == 0x7BFF
    assert encode("0.0001", "fp16") == 0x068E
    assert encode("0.0001", "fp16").decoded.decimal == "0.00010001659393310546875"


def _fp32_round_nearest_even(x: Fraction) -> int:
    """Exact RNE into fp32: numpy's (possibly double-rounded) guess and its neighbours, compared exactly."""
    with np.errstate(all="ignore"):
        guess = np.float32(float(x))
        candidates = {
            guess,
            np.nextafter(guess, np.float32(np.inf)),
            np.nextafter(guess, np.float32(-np.inf)),
        }
    finite = [c for c in candidates if np.isfinite(c)]
    best = min(finite, key=lambda c: (abs(Fraction(float(c)) - x), int(np.array(c).view(np.uint32)) % 2))
    return int(np.array(best).view(np.uint32))


@SETTINGS
@given(st.integers(1, 10**12), st.integers(-60, 26), st.booleans())
def test_fp32_decimal_strings_round_to_nearest_even(digits: int, exp10: int, negative: bool) -> None:
    x = Fraction(digits) * Fraction(10) ** exp10 * (-1 if negative else 1)
    s = f"{'-' if negative else ''}{digits}e{exp10}"
    assert encode(s, fl.FP32) == _fp32_round_nearest_even(x)


@SETTINGS
@given(st.integers(0, 2**32 - 1))
def test_numpy_float32_scalars_encode_to_their_own_bits(code: int) -> None:
    x = np.uint32(code).view(np.float32)
    if np.isnan(x):
        return
    assert encode(x, fl.FP32) == code
    with np.errstate(over="ignore"):
        assert encode(x, fl.FP16) == int(np.array(x.astype(np.float16)).view(np.uint16))


# ---- parse_value -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0.1", Fraction(1, 10)),
        ("1e-5", Fraction(1, 100_000)),
        ("-2.5E3", Fraction(-2500)),
        (".5", Fraction(1, 2)),
        ("5.", Fraction(5)),
        ("+7", Fraction(7)),
        ("  65504  ", Fraction(65504)),
        ("1/3", Fraction(1, 3)),
        ("-22 / 7", Fraction(-22, 7)),
        ("0x1.8p3", Fraction(12)),
        ("-0x1p-1074", -Fraction(1, 2**1074)),
        ("0X.8", Fraction(1, 2)),
        ("0x10", Fraction(16)),
        ("0", Fraction(0)),
    ],
)
def test_parse_value_is_exact(text: str, value: Fraction) -> None:
    got = parse_value(text)
    assert isinstance(got, Fraction)
    assert got == value


def test_parse_value_specials() -> None:
    for text, sign in (("-0", -1.0), ("-0.0e7", -1.0), ("-0x0p0", -1.0)):
        z = parse_value(text)
        assert isinstance(z, float)
        assert z == 0
        assert math.copysign(1.0, z) == sign
    assert parse_value("inf") == math.inf
    assert parse_value("-Infinity") == -math.inf
    assert parse_value("+inf") == math.inf
    assert math.isnan(parse_value("nan"))
    assert math.isnan(parse_value("-NaN"))


@pytest.mark.parametrize(
    "bad", ["", "   ", "abc", "1/0", "0x", "1e", "--1", "1.2.3", "1/2/3", "0x1p", "in f", "1e999999"]
)
def test_parse_value_refuses_garbage(bad: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        parse_value(bad)


@SETTINGS
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_parse_value_reads_hex_floats_and_reprs_exactly(x: float) -> None:
    assert parse_value(x.hex()) == Fraction(x)
    assert parse_value(repr(x)) == Fraction(Decimal(repr(x)))


# ---- Encoded -----------------------------------------------------------------------------------
def test_encoded_is_the_code_and_knows_its_history() -> None:
    e = encode("0.1", "fp16", "nearest")
    assert isinstance(e, int)
    assert isinstance(e, Encoded)
    assert e == 0x2E66
    assert hash(e) == hash(0x2E66)
    assert repr(e) == "11878"
    assert str(e) == "11878"
    assert f"{e:#06x}" == "0x2e66"
    assert hex(e) == "0x2e66"
    assert type(e + 1) is int
    assert e.fmt is fl.FP16
    assert e.rounding == "rne"
    assert e.input_exact == Fraction(1, 10)
    stored = Fraction(float(np.float16(0.1)))
    assert e.error == stored - Fraction(1, 10)
    assert e.relative_error == (stored - Fraction(1, 10)) / Fraction(1, 10)
    assert e.flags == Flags.INEXACT
    assert isinstance(e.decoded, Decoded)
    assert e.decoded.code == 0x2E66
    with pytest.raises(AttributeError):
        e.flags = Flags.NONE
    for clone in (pickle.loads(pickle.dumps(e)), copy.deepcopy(e)):
        assert clone == e
        assert clone.fmt == e.fmt
        assert clone.input_exact == e.input_exact
        assert clone.flags == e.flags


def test_encoded_flags_and_errors_at_the_edges() -> None:
    assert encode("0.5", "fp16").flags == Flags.NONE
    assert encode("0.5", "fp16").error == 0
    big = encode(1e5, "fp16")
    assert big == 0x7C00
    assert big.flags & Flags.OVERFLOW
    assert big.error is None
    tiny = encode(1e-8, "fp16")
    assert tiny == 0
    assert tiny.flags & Flags.UNDERFLOW
    assert tiny.relative_error == -1
    assert encode(math.inf, "fp16").input_exact is None
    assert encode(0, "fp16").relative_error is None
    sat = encode(1e5, "fp16", saturate=True)
    assert sat == 0x7BFF
    assert sat.error == 65504 - 100000


def test_encode_subnormals_off_flushes_and_treats_subnormal_inputs_as_zero() -> None:
    assert encode("1e-6", "fp16") == 0x0011
    assert encode("1e-6", "fp16", subnormals=False) == 0
    assert encode("-1e-6", "fp16", subnormals=False) == 0x8000
    assert encode(1e-310, "fp64") != 0
    assert encode(1e-310, "fp64", subnormals=False) == 0  # a float64 subnormal input counts as zero
    assert encode(np.float32(1e-40), "fp64", subnormals=False) == 0  # subnormal in its own float32
    assert encode(np.float64(1e-40), "fp64", subnormals=False) != 0


def test_encode_accepts_numbers_of_many_kinds() -> None:
    assert encode(1, "fp16") == encode(np.int64(1), "fp16") == encode(Fraction(1), "fp16") == 0x3C00
    assert encode(np.float16(0.1), "fp16") == 0x2E66
    assert encode(ml_dtypes.bfloat16(1.5), "bf16") == 0x3FC0
    assert encode(-0.0, "fp16") == 0x8000
    assert encode("-0", "bf16") == 0x8000
    assert encode(-0.0, "float8_e4m3fnuz") == 0  # no negative zero
    assert encode(2**70, "fp16") == 0x7C00


def test_encode_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="not a bool"):
        encode(True, "fp16")
    with pytest.raises(ValueError, match="not a bool"):
        encode(np.True_, "fp16")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected a float"):
        encode(np.complex128(1 + 2j), "fp16")
    with pytest.raises(ValueError, match="expected a float"):
        encode(None, "fp16")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected a float, an int, a Fraction or a numeric string"):
        encode([1.0], "fp16")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot parse 'one'"):
        encode("one", "fp16")
    with pytest.raises(ValueError, match="unknown rounding mode 'nearest_odd'"):
        encode(1.0, "fp16", "nearest_odd")
    with pytest.raises(ValueError, match="unknown format"):
        encode(1.0, "fp17")


def test_stochastic_rounding_needs_rng_and_picks_a_neighbour_with_the_right_odds() -> None:
    with pytest.raises(ValueError, match="needs rng"):
        encode("0.1", "fp16", "stochastic")
    with pytest.raises(ValueError, match="rng='x'"):
        encode("0.1", "fp16", "stochastic", rng="x")  # type: ignore[arg-type]
    down, up = FP16_TABLE.round(Fraction(1, 10), "rdown"), FP16_TABLE.round(Fraction(1, 10), "rup")
    for seed, x in enumerate(np.random.default_rng(8).standard_normal(30).tolist()):
        # the scalar draws its random bits as encode_array does for element 0
        want = int(fl.encode_array(np.array([x]), "bf16", "stochastic", rng=seed)[0])
        assert encode(x, "bf16", "stochastic", rng=seed) == want
    assert encode("0.1", "fp16", "stochastic", rng=5) == encode("0.1", "fp16", "stochastic", rng=5)
    assert encode("0.5", "fp16", "sr", rng=1) == 0x3800  # exact values never move
    gen = np.random.default_rng(2024)
    n = 4000
    ups = 0
    for _ in range(n):
        code = encode("0.1", "fp16", "stochastic", rng=gen)
        assert code in (down, up)
        ups += code == up
    p = (Fraction(1, 10) - decode(down, "fp16").exact) / decode(up, "fp16").ulp  # type: ignore[operator]
    assert abs(ups / n - float(p)) < 5 * math.sqrt(float(p) * (1 - float(p)) / n)


# ---- the displays ------------------------------------------------------------------------------
REPORT_7BFF = """\
0x7BFF as fp16 (IEEE 754 binary16 (half): 1 sign, 5 exponent, 10 fraction bits)

  sign  exponent  fraction
  0     11110     1111111111
  +     30 - 15   1 + 1023/1024

  value   (-1)^0 x 2^(30 - 15) x (1 + 1023/1024) = 65504 (exact)
  class   normal, the largest finite fp16
  ulp     32 = 2^5
  next    up +inf (0x7C00)   down 65472 (0x7BFE)"""


def test_report_of_the_largest_fp16() -> None:
    assert render(decode(0x7BFF, "fp16")) == REPORT_7BFF
    assert str(decode(0x7BFF, "fp16")) == REPORT_7BFF


def test_coloured_report_is_the_plain_one_plus_ansi_codes() -> None:
    coloured = render(decode(0x7BFF, "fp16"), color=True)
    assert "\x1b[" in coloured
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == REPORT_7BFF


ALL_KINDS = [
    ("fp16", 0x0000), ("fp16", 0x8000), ("fp16", 0x0001), ("fp16", 0x83FF), ("fp16", 0x3555),
    ("fp16", 0xFC00), ("fp16", 0x7E00), ("fp16", 0x7D01), ("float8_e4m3fn", 0xFF),
    ("float8_e4m3fnuz", 0x80), ("float8_e4m3fnuz", 0x00), ("float4_e2m1fn", 0x7), ("fp64", 0x1),
    ("fp64", 0x7FEF_FFFF_FFFF_FFFF), ("fp64", 0x3FB9_9999_9999_999A), ("fp32", 0x3DCC_CCCD),
]  # fmt: skip


@pytest.mark.parametrize(("name", "code"), ALL_KINDS, ids=[f"{n}-{c:#x}" for n, c in ALL_KINDS])
def test_every_kind_renders(name: str, code: int) -> None:
    d = decode(code, name)
    report = render(d)
    assert report.startswith(f"{d.hex} as {d.fmt.name} (")
    assert d.bits == d.sign_bits + d.exponent_bits + d.fraction_bits
    assert len(d.bits) == d.fmt.bits
    assert f"{d.sign_bits}  " in report
    assert d.exponent_bits in report
    assert d.description in report
    page = d._repr_html_()
    _assert_balanced_html(page)
    for colour in ("#cfe0ff", "#cdf2d2", "#ffd8cc"):
        assert colour in page
    assert d.hex in page
    assert page.count('title="bit ') == d.fmt.bits
    assert f'title="bit {d.fmt.bits - 1}">{d.sign_bits}<' in page
    assert f'title="bit 0">{d.bits[-1]}<' in page
    payload = json.loads(json.dumps(d.to_dict()))
    assert payload["kind"] == d.kind
    assert payload["code"] == d.hex
    assert payload["bits"] == d.bits
    if d.exact is not None:
        assert Fraction(payload["exact"]) == d.exact
        assert payload["decimal"] == d.decimal
        assert float(payload["value"]) == d.value
    assert repr(d).startswith(f"Decoded({d.fmt.name} {d.hex}")


def test_long_decimals_are_shortened_in_reports_only() -> None:
    d = decode(1, "fp64")
    report = render(d)
    assert "4.940656458412465441765687928682213723650...e-324" in report
    assert "751 significant digits" in report
    assert "5e-324" in report
    assert "2^-1074" in report
    assert d.decimal in d._repr_html_()  # the html keeps every digit (in a details element)


def test_reports_of_a_format_beyond_float64() -> None:
    f = FloatFormat(15, 10)  # values up to ~1.2e4932 and down to ~3e-4935: outside float64
    big, tiny = decode(f.max_code, f), decode(1, f)
    with localcontext() as ctx:
        ctx.prec = 60
        top = (2 - Decimal(2) ** -10) * Decimal(2) ** 16383  # the largest value, to 60 digits
        ulp = Decimal(2) ** 16373
    mantissa, exp10 = f"{top:.59e}".split("e")
    assert f"= {mantissa[:41]}...e{int(exp10):+d}" in render(big)
    assert f"2^16373 (about {f'{ulp:.16e}'[:18]}" in render(big)
    assert "4933 significant digits" in render(big)
    assert "float64 inf" in render(big)
    assert "e-4935" in render(tiny)
    assert f"\\approx {mantissa[:18]}" in big._repr_latex_()
    assert "\\times 10^{4932}" in big._repr_latex_()
    assert repr(tiny).startswith("Decoded(e15m10 0x0000001 = ~3.28330385")
    _assert_balanced_html(big._repr_html_())


def test_descriptions_name_the_landmarks() -> None:
    cases = {
        ("fp16", 0x7BFF): "normal, the largest finite fp16",
        ("fp16", 0xFBFF): "normal, the most negative finite fp16",
        ("fp16", 0x0400): "normal, the smallest positive normal fp16",
        ("fp16", 0x0001): "subnormal, the smallest positive fp16",
        ("fp16", 0x03FF): "subnormal, the largest subnormal fp16",
        ("fp16", 0x3C00): "normal, exactly 1",
        ("fp16", 0x3555): "normal",
        ("fp16", 0x8000): "zero (negative)",
        ("fp16", 0x0000): "zero (positive)",
        ("fp16", 0x7C00): "infinity (positive)",
        ("fp16", 0x7E00): "quiet NaN",
        ("fp16", 0x7C01): "signalling NaN, payload 0x1",
        ("float8_e4m3fnuz", 0x00): "zero (the only zero: float8_e4m3fnuz has no negative zero)",
    }
    for (name, code), text in cases.items():
        assert decode(code, name).description == text


_FORMULA = re.compile(r"\(-1\)\^([01]) x 2\^\((\d+) - (\d+)\) x \(([01]) \+ (\d+)/(\d+)\)")


@pytest.mark.parametrize(("fmt", "t"), SMALL[:3], ids=SMALL_IDS[:3])
def test_formula_evaluates_to_the_value(fmt: FloatFormat, t: Any) -> None:
    values = oracle_values(all_codes(fmt), t)
    for c in range(0, 1 << fmt.bits, 3 if fmt.bits > 8 else 1):
        if not math.isfinite(values[c]):
            continue
        match = _FORMULA.fullmatch(decode(c, fmt).formula())
        assert match, hex(c)
        s, e, b, lead, f, d = map(int, match.groups())
        assert (-1) ** s * Fraction(2) ** (e - b) * (lead + Fraction(f, d)) == Fraction(float(values[c]))


def test_latex_imports_sympy_only_when_asked() -> None:
    probe = (
        "import sys\n"
        "from floatlab.codec import decode\n"
        "from floatlab.text import render\n"
        "d = decode(0x7BFF, 'fp16')\n"
        "render(d); d.to_dict(); d._repr_html_()\n"
        "assert 'sympy' not in sys.modules, 'sympy imported early'\n"
        "latex = d._repr_latex_()\n"
        "assert 'sympy' in sys.modules\n"
        "print(latex)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert "30 - 15" in out
    assert "65504" in out
    assert r"\frac{1023}{1024}" in out
    assert "(-1" in out


def test_sympy_expression_evaluates_to_the_exact_value() -> None:
    import sympy

    rng = np.random.default_rng(3)
    for c in rng.integers(0, 1 << 16, 200).tolist():
        d = decode(c, "fp16")
        if d.exact is not None:
            assert d.sympy().doit() == sympy.Rational(d.exact.numerator, d.exact.denominator)
    assert decode(0x7C00, "fp16").sympy() == sympy.oo
    assert decode(0x7E00, "fp16").sympy() is sympy.nan
    assert r"\approx 5 \times 10^{-324}" in decode(1, "fp64")._repr_latex_()


def test_the_codec_imports_nothing_heavy() -> None:
    probe = (
        "import sys, numpy as np\n"
        "from floatlab.codec import decode, encode, decode_array\n"
        "from floatlab.text import render\n"
        "render(decode(0x3C00, 'fp16')); encode('0.1', 'fp16'); decode_array(np.arange(10), 'fp16')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'sympy', 'matplotlib', 'numba', 'cupy'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


class _TagChecker(html.parser.HTMLParser):
    VOID = frozenset({"br", "hr", "img", "input", "meta", "link"})

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        opened = self.stack.pop() if self.stack else None
        assert opened == tag, f"unbalanced </{tag}>"


def _assert_balanced_html(page: str) -> None:
    checker = _TagChecker()
    checker.feed(page)
    checker.close()
    assert checker.stack == []


@pytest.mark.parametrize("bits", [13_999, 14_000, 20_001, 65_536, 332_193])
def test_big_int_text_equals_str(bits: int) -> None:
    # oracle: Python's own int-to-str, with the digit limit (Python >= 3.11) lifted
    import random

    from floatlab.exact import int_str

    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    if limit:
        sys.set_int_max_str_digits(0)
    try:
        r = random.Random(bits)
        top = r.getrandbits(bits) | 1 << (bits - 1)
        for n in (top, (1 << bits) - 1, 10 ** (bits // 4), -(10 ** (bits // 4)) - 1):
            assert int_str(n) == str(n)
    finally:
        if limit:
            sys.set_int_max_str_digits(limit)
