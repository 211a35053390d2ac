"""Hostile input to the Python API: wrong dtypes, empty, 0-d, non-contiguous and big-endian arrays,
NaN payloads, signalling NaNs, negative zero, huge and tiny decimal strings. Each gives a ValueError
naming the bad value and what was expected, or the correct answer (checked against numpy,
ml_dtypes and exact Fraction arithmetic). Property-based tests drive the parser and the codec."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import floatlab as fl
from floatlab.codec import parse_value
from floatlab.formats import FORMATS
from floatlab.rounding import Flags

SETTINGS = settings(max_examples=300, deadline=None)
SMALL_FORMATS = [f for f in FORMATS.values() if f.bits <= 16]


# ---- the parser ---------------------------------------------------------------------------------
@SETTINGS
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_parse_value_reads_every_float_repr_exactly(x: float) -> None:
    # repr is the shortest decimal that rounds back to x: parsed exactly and rounded once, it must
    bits = struct.unpack("<Q", struct.pack("<d", x))[0]
    assert int(fl.encode(repr(x), "fp64")) == bits
    assert parse_value(x.hex()) == Fraction(x)  # hex floats are exact
    if x == 0:
        assert math.copysign(1.0, float(parse_value(repr(x)))) == math.copysign(1.0, x)


@SETTINGS
@given(st.decimals(allow_nan=False, allow_infinity=False))
def test_parse_value_reads_decimals_exactly(d: Decimal) -> None:
    text = str(d)
    if abs(d.adjusted()) > 90_000:
        return  # beyond the parser's exponent range: refused, tested below
    got = parse_value(text)
    assert Fraction(got) == Fraction(d)


@SETTINGS
@given(st.integers(), st.integers(min_value=1))
def test_parse_value_reads_fractions_exactly(p: int, q: int) -> None:
    assume(len(str(abs(p))) < 4000 and len(str(q)) < 4000)
    got = parse_value(f"{p}/{q}")
    assert Fraction(got) == Fraction(p, q)


@SETTINGS
@given(st.text(max_size=30))
@example("1e")
@example("0x")
@example("١٢")
@example("1_000")
@example("1/0")
@example("snan")
@example("\x00")
def test_parse_value_never_fails_any_other_way(s: str) -> None:
    # any string: a number (exactly what Fraction/float make of it) or one ValueError naming it
    message = ""
    try:
        got = parse_value(s)
    except ValueError as e:
        message = str(e)
    if message:
        assert repr(s)[:20] in message or "digits" in message or "exponent" in message
    else:
        assert isinstance(got, (Fraction, float))
        assert s.strip().isascii()


@pytest.mark.parametrize(
    ("text", "fmt", "code"),
    [
        ("1e100000", "fp16", 0x7C00),
        ("-1e100000", "bf16", 0xFF80),
        ("1e-100000", "fp64", 0),
        ("-1e-100000", "fp16", 0x8000),
        ("0." + "0" * 5000 + "1", "fp32", 0),
        ("9" * 5000, "fp32", 0x7F800000),
        ("9" * 5000 + "e-4990", "fp16", fl.encode("1e10", "fp16")),
        ("1" + "0" * 6000 + "/" + "3" + "0" * 6000, "fp64", fl.encode(1 / 3, "fp64")),
    ],
)
def test_huge_and_tiny_decimal_strings(text: str, fmt: str, code: int) -> None:
    assert int(fl.encode(text, fmt)) == int(code)


def test_huge_strings_beyond_the_limits_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match=r"exponent 100001 .* expected at most 100000"):
        parse_value("1e100001")
    with pytest.raises(ValueError, match=r"exponent 9999999999\.\.\. .* out of range"):
        parse_value("1e" + "9" * 5000)
    with pytest.raises(ValueError, match=r"has 100,001 digits: expected at most 100,000"):
        parse_value("7" * 100_001)
    with pytest.raises(ValueError, match=r"characters\) as a number"):
        parse_value("x" * 1000)
    with pytest.raises(ValueError, match="denominator is zero"):
        parse_value("1/0")


def test_exact_decimals_of_decode_parse_back_for_every_small_format() -> None:
    # the codec's own output is valid input: decode(c).decimal -> encode -> c, for every code
    for f in SMALL_FORMATS:
        for c in range(0, 1 << f.bits, max(1, (1 << f.bits) // 2048)):
            d = fl.decode(c, f)
            if d.kind in ("nan",):
                continue
            back = fl.encode(d.decimal, f)
            assert int(back) == c or (d.exact == 0 and not f.has_negative_zero), (f.name, c)


def test_a_long_exact_decimal_round_trips() -> None:
    # 2^-1074: 1074 decimals; parse it and land exactly on the smallest fp64 subnormal
    text = fl.decode(1, "fp64").decimal
    assert int(fl.encode(text, "fp64")) == 1
    assert int(fl.encode("-" + text, "fp64")) == 0x8000_0000_0000_0001


# ---- the codec: scalar and array agree with numpy and ml_dtypes -------------------------------------
@SETTINGS
@given(st.floats(allow_nan=False))
def test_encode_matches_numpy_float16_for_any_float64(x: float) -> None:
    with np.errstate(over="ignore"):
        want = int(np.array([x]).astype(np.float16).view(np.uint16)[0])  # numpy rounds float64 once
    assert int(fl.encode(x, "fp16")) == want
    assert int(fl.encode_array(np.array([x]), "fp16")[0]) == want


@SETTINGS
@given(st.integers(0, 2**32 - 1))
def test_encode_matches_ml_dtypes_for_any_float32(bits: int) -> None:
    x = np.array([bits], np.uint32).view(np.float32)
    assume(not np.isnan(x[0]))
    for name, t in (("bf16", ml_dtypes.bfloat16), ("float8_e4m3fn", ml_dtypes.float8_e4m3fn)):
        with np.errstate(over="ignore", invalid="ignore"):
            want = int(x.astype(t).view(np.uint16 if name == "bf16" else np.uint8)[0])
        assert int(fl.encode_array(x, name)[0]) == want, name
        assert int(fl.encode(x[0], name)) == want, name


@SETTINGS
@given(st.booleans(), st.integers(1, 2**52 - 1))
@example(False, 1)  # the smallest signalling NaN: its payload does not reach a narrower format
@example(True, 2**51)  # the default quiet NaN, negative
def test_any_float64_nan_payload_or_signalling_nan(negative: bool, fraction: int) -> None:
    bits = (int(negative) << 63) | (0x7FF << 52) | fraction
    x = np.array([bits], np.uint64).view(np.float64)
    sign = bits >> 63
    quiet_in = (bits >> 51) & 1
    for f in ("fp32", "fp16", "bf16"):
        fmt = fl.get_format(f)
        codes, stats = fl.encode_array_with_flags(x, f)
        c = int(codes[0])
        # IEEE 754: a quiet NaN of the same sign, carrying the top bits of the payload
        payload = (bits & ((1 << 51) - 1)) >> (51 - (fmt.mantissa_bits - 1))
        want = (sign << (fmt.bits - 1)) | fmt.exponent_mask | (1 << (fmt.mantissa_bits - 1)) | payload
        assert c == want, f
        assert stats.invalid == (0 if quiet_in else 1)
        assert int(fl.encode(float(x[0]), f)) == want
        assert fl.encode(float(x[0]), f).flags == (Flags.NONE if quiet_in else Flags.INVALID)


def test_negative_zero_everywhere() -> None:
    for f in FORMATS.values():
        # (a scale format, E8M0, has no zero: -0 is its NaN, as ml_dtypes' float8_e8m0fnu casts it)
        want = f.sign_mask if f.has_negative_zero else (0 if f.has_zero else f.nan_code)
        assert int(fl.encode(-0.0, f)) == want, f.name
        assert int(fl.encode("-0", f)) == want, f.name
        assert int(fl.encode_array(np.array([-0.0]), f)[0]) == want, f.name
        for mode in ("rne", "rtz", "rup", "rdown", "rna", "rodd"):
            # below every format's smallest subnormal: a zero of the input's sign, or the smallest
            # negative subnormal for the modes that move away from zero here
            # (an unsigned format has no negative values: its NaN)
            away = mode in ("rdown", "rodd") and f.signed
            assert int(fl.encode("-1e-400", f, mode)) == (f.sign_mask | 1 if away else want), (f.name, mode)
    y = fl.round_array(np.array([-0.0, -1e-30], np.float32), "fp16")
    assert np.signbit(y).tolist() == [True, True]
    assert y.tolist() == [0.0, 0.0]


# ---- arrays of every shape, layout and dtype ------------------------------------------------------
def _oracle_fp16(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x, dtype=np.float64).astype(np.float16).view(np.uint16)


LAYOUTS: dict[str, Callable[[np.ndarray], Any]] = {
    "empty": lambda a: a[:0],
    "empty2d": lambda a: a[:0].reshape(0, 1) if a.size else a.reshape(0, 1),
    "zero_d": lambda a: np.array(a[0]),
    "scalar": lambda a: a[1],
    "strided": lambda a: a[::3],
    "reversed": lambda a: a[::-1],
    "fortran": lambda a: np.asfortranarray(a[:60].reshape(6, 10)),
    "transposed": lambda a: a[:60].reshape(6, 10).T,
    "big_endian": lambda a: a.astype(a.dtype.newbyteorder(">")),
    "big_endian_strided": lambda a: a.astype(a.dtype.newbyteorder(">"))[1::2],
    "readonly": lambda a: np.frombuffer(a.tobytes(), dtype=a.dtype),
    "list": lambda a: a[:5].tolist(),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_any_layout_gives_the_plain_answer(layout: str, dtype: Any) -> None:
    rng = np.random.default_rng(1)
    with np.errstate(over="ignore"):
        base = (rng.standard_normal(300) * 2.0 ** rng.integers(-30, 18, 300)).astype(dtype)
    base[:4] = [np.nan, -0.0, np.inf, 6e-8]
    x = LAYOUTS[layout](base)
    want = _oracle_fp16(np.asarray(x))
    codes = fl.encode_array(x, "fp16")
    assert codes.shape == np.shape(x)
    assert codes.dtype == np.uint16
    nan = np.isnan(np.asarray(x, dtype=np.float64))
    np.testing.assert_array_equal(codes[~nan], want[~nan])
    assert np.all((codes[nan] & 0x7E00) == 0x7E00)
    if np.asarray(x).dtype != np.float16:
        r = fl.round_array(x, "fp16")
        assert r.shape == np.shape(x)
        assert r.dtype == np.asarray(x).dtype.newbyteorder("=")
        np.testing.assert_array_equal(
            np.asarray(r, np.float64)[~nan], want[~nan].view(np.float16).astype(np.float64)
        )
    h = fl.histogram(x)
    assert h.total == np.size(x)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (np.array([1 + 2j]), "dtype complex128: expected float64"),
        (np.array([1.0, None], dtype=object), "dtype object: expected float64"),
        (np.array(["1.0"]), "dtype <U3: expected float64"),
        (np.array(["2020-01-01"], dtype="datetime64[D]"), "dtype datetime64"),
        (np.zeros(2, dtype=[("a", "<f4")]), r"dtype \[\('a', '<f4'\)\]"),
        (np.array([0.1], dtype=np.longdouble), "expected float64"),
        (None, "dtype object"),
        ("1.0", "dtype <U3"),
        ([[1.0], [1.0, 2.0]], "x: expected an array of numbers"),
    ],
)
def test_wrong_dtypes_are_refused_by_name(value: Any, message: str) -> None:
    for fn in (fl.encode_array, fl.round_array):
        with pytest.raises(ValueError, match=message):
            fn(value, "fp16")


@pytest.mark.parametrize(
    ("codes", "message"),
    [
        (np.array([1.5]), "dtype float64: expected an integer array of fp16 codes"),
        (np.array([-1]), "code -1 does not fit fp16"),
        (np.array([70000]), "code 70000 does not fit fp16"),
        (np.array([2**63], dtype=np.uint64), "does not fit fp16"),
        (np.array([True]), "dtype bool"),
        (np.array([1, None], dtype=object), "dtype object"),
        ("0x3c00", "dtype <U6"),
    ],
)
def test_decode_array_refuses_bad_codes(codes: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fl.decode_array(codes, "fp16")


def test_decode_array_odd_layouts() -> None:
    c = np.arange(0, 65536, 7, dtype=np.uint16)
    want = c.view(np.float16).astype(np.float64)
    for x in (c.astype(">u2"), c[::2], np.asfortranarray(c[:100].reshape(10, 10)), np.uint16(0x3C00), c[:0]):
        got = fl.decode_array(x, "fp16")
        ref = np.asarray(x).astype(np.uint16).view(np.float16).astype(np.float64)
        assert got.shape == np.shape(x)
        np.testing.assert_array_equal(got, ref)
    assert want.size == c.size


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: fl.decode(1.0, "fp16"), "code 1.0: expected an integer"),  # type: ignore[arg-type]
        (lambda: fl.decode(True, "fp16"), "not a bool"),
        (lambda: fl.decode(-1, "fp16"), "code -1 does not fit"),
        (lambda: fl.decode(0x10000, "fp16"), "0x10000 does not fit fp16"),
        (lambda: fl.encode(None, "fp16"), "value None: expected"),  # type: ignore[arg-type]
        (lambda: fl.encode(1j, "fp16"), "value 1j"),  # type: ignore[arg-type]
        (lambda: fl.encode(True, "fp16"), "not a bool"),
        (lambda: fl.encode([1.0], "fp16"), r"value \[1.0\]"),  # type: ignore[arg-type]
        (lambda: fl.encode("0.1", "fp16", "stochastic"), "needs rng"),
        (lambda: fl.encode("0.1", "fp16", "stochastic", rng=-1), "rng=-1: expected .* non-negative"),
        (lambda: fl.encode("0.1", "fp16", "stochastic", rng="7"), "rng='7'"),  # type: ignore[arg-type]
        (lambda: fl.encode("0.1", "nope"), "unknown format 'nope'"),
        (lambda: fl.encode("0.1", "fp16", "sideways"), "unknown rounding mode 'sideways'"),
        (lambda: fl.get_format(None), "format None"),  # type: ignore[arg-type]
        (lambda: fl.get_format(16), "format 16"),  # type: ignore[arg-type]
        (lambda: fl.round_array([1.0], "fp16", "stochastic", rng=1, random_bits=0), "random_bits=0"),
        (lambda: fl.round_array([1.0], "fp16", "stochastic", rng=1, random_bits=33), "random_bits=33"),
        (lambda: fl.round_array([1.0], "fp16", "stochastic", rng="x"), "rng='x'"),  # type: ignore[arg-type]
        (lambda: fl.round_array([1.0], "fp16", "stochastic", rng=-3), "rng=-3: .* non-negative"),
        (lambda: fl.histogram(np.array([1j])), "dtype complex128"),
        (lambda: fl.histogram(np.array([1, 2])), "dtype int64"),
        (lambda: fl.histogram(np.ones(3)).verdict("fp16", scale=0), "scale=0"),
        (lambda: fl.histogram(np.ones(3)).verdict("fp16", scale=2**1100), "below 2\\^1024"),
        (lambda: fl.histogram(np.ones(3)).text("fp16", width=10**9), "width=1000000000"),
    ],
)
def test_bad_arguments_name_the_value(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_signalling_nans_in_every_input_dtype() -> None:
    snan32 = np.array([0x7F800001, 0xFF812345], np.uint32).view(np.float32)
    snan16 = np.array([0x7C01, 0xFD23], np.uint16).view(np.float16)
    snan64 = np.array([0x7FF0000000000001], np.uint64).view(np.float64)
    for x in (snan32, snan16, snan64):
        codes, stats = fl.encode_array_with_flags(x, "bf16")
        assert stats.invalid == x.size
        assert all(math.isnan(v) for v in fl.decode_array(codes, "bf16"))
        assert ((codes >> 15) == np.signbit(x)).all()
    assert fl.histogram(snan32).nan == 2
    assert struct.pack(">f", float(snan32[0]))  # still a float to Python


def test_round_array_keeps_a_zero_d_array_zero_d() -> None:
    y = fl.round_array(np.float32(0.1), "fp16")
    assert np.shape(y) == ()
    assert float(y) == float(np.float16(0.1))
    assert fl.encode_array(np.array(0.1), "fp16").shape == ()


# ---- the code parser and the codec's round trip, property-based -------------------------------------
@SETTINGS
@given(st.integers(0, 2**32 - 1))
def test_any_fp32_code_survives_decode_then_encode(code: int) -> None:
    d = fl.decode(code, "fp32")
    if d.kind == "nan":
        assert int(fl.encode(d.value, "fp32")) == code | 0x00400000  # quietened, payload kept
        return
    assert int(fl.encode(d.decimal, "fp32")) == code  # the exact decimal, parsed exactly
    assert int(fl.encode(d.value, "fp32")) == code
    assert d.value == float(np.array([code], np.uint32).view(np.float32)[0])


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**64 - 1))
def test_any_fp64_code_survives_decode_then_encode(code: int) -> None:
    d = fl.decode(code, "fp64")
    if d.kind == "nan":
        return
    assert int(fl.encode(d.decimal, "fp64")) == code
    assert struct.unpack("<Q", struct.pack("<d", d.value))[0] == code


@SETTINGS
@given(st.text(max_size=24), st.sampled_from([None, "fp16", "bf16", "e4m3", "fp32", "fp64", "e2m1"]))
@example("0x7bff", None)
@example("0b0_01111_0000000000", None)
@example("9" * 30, "fp64")
def test_parse_code_gives_a_fitting_code_or_one_error(text: str, fmt: str | None) -> None:
    from floatlab.cli._common import parse_code

    try:
        code, f = parse_code(text, fmt)
    except ValueError:
        return  # (one ValueError, with its message: what the command line prints)
    assert 0 <= code <= f.code_mask
    body = text.strip().replace("_", "").lower()
    base = 16 if body.startswith("0x") else 2 if body.startswith("0b") else 10
    assert code == int(body[2:] if base != 10 else body, base)
    assert fl.decode(code, f).code == code
