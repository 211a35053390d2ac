"""Formats as data: the derived constants against numpy.finfo, ml_dtypes.finfo and gfloat.

The oracles are independent implementations: numpy's and ml_dtypes' finfo for the formats
they ship, gfloat's FormatInfo (a separate derivation from the same primary parameters)
for user formats, and value sets enumerated through numpy/ml_dtypes views for contains().
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from oracles import ORACLE_TYPES, gfloat_info

import floatlab as fl
from floatlab.codec import decode, encode
from floatlab.formats import FloatFormat

# format name -> the numpy/ml_dtypes scalar type with the same bits
# user formats (not registered) that ml_dtypes also implements: IEEE-style inf and NaNs
USER_ORACLES: list[tuple[FloatFormat, Any]] = [
    (FloatFormat(4, 3), ml_dtypes.float8_e4m3),
    (FloatFormat(3, 4), ml_dtypes.float8_e3m4),
]
ALL_ORACLES = [(fl.get_format(n), t) for n, t in ORACLE_TYPES.items()] + USER_ORACLES
IDS = [f.name for f, _ in ALL_ORACLES]

# ml_dtypes reports precision 1 for these fp8 types, but numpy's definition of finfo.precision,
# int(-log10(eps)), gives 0 for their eps of 0.125 and 0.25: floatlab follows numpy's definition
ML_DTYPES_PRECISION_QUIRK = {"float8_e5m2", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2fnuz", "e4m3"}


def _finfo(t: Any) -> Any:
    return np.finfo(t) if t in (np.float16, np.float32, np.float64) else ml_dtypes.finfo(t)  # type: ignore[no-untyped-call]


def _epsneg(fmt: FloatFormat) -> float:
    """1 minus the value just below 1, read off the codes."""
    below = decode(encode(1, fmt), fmt).next_down
    assert below is not None
    return 1.0 - decode(below, fmt).value


@pytest.mark.parametrize(("fmt", "t"), ALL_ORACLES, ids=IDS)
def test_derived_constants_match_finfo(fmt: FloatFormat, t: Any) -> None:
    fi = _finfo(t)
    assert fmt.bits == fi.bits
    assert fmt.exponent_bits == fi.nexp
    assert fmt.mantissa_bits == fi.nmant
    assert fmt.eps == float(fi.eps)
    assert -fmt.mantissa_bits == fi.machep
    assert fmt.max == float(fi.max)
    assert -fmt.max == float(fi.min)
    assert fmt.smallest_normal == float(fi.smallest_normal) == float(fi.tiny)
    assert fmt.smallest_subnormal == float(fi.smallest_subnormal)
    assert fmt.emax + 1 == fi.maxexp  # finfo.maxexp is the first power of two that overflows
    assert fmt.emin == fi.minexp
    assert _epsneg(fmt) == float(fi.epsneg)
    assert math.log2(_epsneg(fmt)) == fi.negep


@pytest.mark.parametrize(("fmt", "t"), ALL_ORACLES, ids=IDS)
def test_precision_and_resolution(fmt: FloatFormat, t: Any) -> None:
    fi = _finfo(t)
    assert fmt.decimal_digits == int(-math.log10(fmt.eps))  # numpy's definition of finfo.precision
    if fmt.name in ML_DTYPES_PRECISION_QUIRK:
        assert fmt.decimal_digits == 0
        assert fi.precision in (0, 1)  # 1 today (the quirk); 0 once ml_dtypes follows numpy
    else:
        assert fmt.decimal_digits == fi.precision
    # finfo.resolution is 10^-precision rounded into the format, for finfo's own precision
    resolution = encode(Fraction(1, 10**fi.precision), fmt).decoded.value
    assert resolution == float(fi.resolution)


def test_fp16_constants_in_words() -> None:
    assert (fl.FP16.bias, fl.FP16.emin, fl.FP16.emax) == (15, -14, 15)
    assert fl.FP16.max_exact == 65504
    assert fl.FP16.smallest_subnormal_exact == Fraction(1, 2**24)
    assert fl.FP16.unit_roundoff == 2.0**-11
    assert fl.FP16.dynamic_range_log2 == 15 + 24


# ---- user formats against gfloat's independent derivation ---------------------------------------------


USER_FORMATS = [
    FloatFormat(6, 9),
    FloatFormat(3, 3),
    FloatFormat(7, 1),
    FloatFormat(4, 5, "fn"),
    FloatFormat(3, 4, "fn", has_nan=False),
    FloatFormat(5, 4, "fnuz"),
    FloatFormat(10, 20),
]


@pytest.mark.parametrize("fmt", USER_FORMATS, ids=[f.name for f in USER_FORMATS])
def test_user_formats_match_gfloat(fmt: FloatFormat) -> None:
    gi = gfloat_info(fmt)
    assert fmt.max == gi.max
    assert fmt.smallest_normal == gi.smallest_normal
    assert fmt.smallest_subnormal == gi.smallest_subnormal
    assert fmt.eps == gi.eps
    assert fmt.emax == gi.emax
    assert fmt.bias == gi.bias
    assert fmt.max_code == gi.code_of_max
    assert fmt.has_inf == (gi.num_posinfs > 0)
    assert fmt.has_negative_zero == gi.has_nz
    assert (fmt.nan_code is not None) == (gi.num_nans > 0)
    if fmt.nan_code is not None:
        assert fmt.is_nan_code(gi.code_of_nan)


def test_user_format_e6m9_in_numbers() -> None:
    f = FloatFormat(6, 9)
    assert f.name == "e6m9"
    assert (f.bits, f.bias, f.emin, f.emax, f.precision) == (16, 31, -30, 31, 10)
    assert f.max_exact == (2 - Fraction(1, 2**9)) * 2**31
    assert f.smallest_subnormal_exact == Fraction(1, 2 ** (30 + 9))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"exponent_bits": 0, "mantissa_bits": 3}, "exponent_bits=0"),
        ({"exponent_bits": 16, "mantissa_bits": 3}, "exponent_bits=16"),
        ({"exponent_bits": True, "mantissa_bits": 3}, "exponent_bits=True"),
        ({"exponent_bits": 5, "mantissa_bits": -1}, "mantissa_bits=-1"),
        ({"exponent_bits": 11, "mantissa_bits": 53}, "mantissa_bits=53"),
        ({"exponent_bits": 5, "mantissa_bits": 2.0}, "mantissa_bits=2.0"),
        ({"exponent_bits": 5, "mantissa_bits": 2, "encoding": "posit"}, "encoding='posit'"),
        ({"exponent_bits": 5, "mantissa_bits": 2, "has_nan": False}, "has_nan=False"),
        ({"exponent_bits": 1, "mantissa_bits": 4}, "at least 2 exponent bits"),
        ({"exponent_bits": 1, "mantissa_bits": 0, "encoding": "fn"}, "at least 2"),
    ],
)
def test_invalid_parameters_raise(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FloatFormat(**kwargs)


def test_formats_are_frozen_and_compare_by_parameters() -> None:
    assert FloatFormat(5, 10, name="half-again") == fl.FP16
    assert hash(FloatFormat(5, 10)) == hash(fl.FP16)
    with pytest.raises(AttributeError):
        fl.FP16.mantissa_bits = 3  # type: ignore[misc]


# ---- the registry -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("fp64", "fp64"), ("float64", "fp64"), ("double", "fp64"), ("binary64", "fp64"),
        ("fp32", "fp32"), ("float32", "fp32"), ("single", "fp32"), ("binary32", "fp32"),
        ("tf32", "tf32"), ("tensorfloat32", "tf32"),
        ("fp16", "fp16"), ("float16", "fp16"), ("half", "fp16"), ("binary16", "fp16"), ("FP16", "fp16"),
        (" Half ", "fp16"),
        ("bf16", "bf16"), ("bfloat16", "bf16"), ("BFloat16", "bf16"),
        ("e5m2", "float8_e5m2"), ("float8_e5m2", "float8_e5m2"), ("fp8-e5m2", "float8_e5m2"),
        ("e4m3", "float8_e4m3fn"), ("fp8", "float8_e4m3fn"), ("float8_e4m3fn", "float8_e4m3fn"),
        ("e4m3fnuz", "float8_e4m3fnuz"), ("e5m2fnuz", "float8_e5m2fnuz"),
        ("e2m3", "float6_e2m3fn"), ("e3m2", "float6_e3m2fn"), ("fp4", "float4_e2m1fn"),
    ],
)  # fmt: skip
def test_get_format_aliases(alias: str, name: str) -> None:
    assert fl.get_format(alias).name == name
    assert fl.get_format(alias) is fl.FORMATS[name]


def test_get_format_passes_formats_through_and_names_the_ml_dtypes_types() -> None:
    f = FloatFormat(6, 9)
    assert fl.get_format(f) is f
    for name in ORACLE_TYPES:
        if name not in ("fp64", "fp32", "fp16", "bf16"):
            assert fl.get_format(np.dtype(ORACLE_TYPES[name]).name).name == name


@pytest.mark.parametrize(("bad", "hint"), [("flaot16", "fp16"), ("bfloat61", "bf16"), ("flaot32", "fp32")])
def test_unknown_format_suggests_the_closest(bad: str, hint: str) -> None:
    with pytest.raises(ValueError, match=f"unknown format '{bad}': did you mean {hint}\\?"):
        fl.get_format(bad)


def test_unknown_format_without_a_close_match_lists_known_names() -> None:
    with pytest.raises(ValueError, match=r"unknown format 'zzzzzzzz': \(known: fp64, fp32"):
        fl.get_format("zzzzzzzz")
    with pytest.raises(ValueError, match="expected a format name or a FloatFormat"):
        fl.get_format(16)  # type: ignore[arg-type]


@pytest.fixture
def registry() -> Iterator[None]:
    """Remove the formats a test registers, with their aliases."""
    before = set(fl.FORMATS)
    yield
    for name in set(fl.FORMATS) - before:
        fl.FORMATS.remove(name)


@pytest.mark.usefixtures("registry")
def test_register_format() -> None:
    mine = FloatFormat(6, 9, name="e6m9", description="six and nine")
    assert fl.register_format(mine, "my-float", "MyHalf") is mine
    assert fl.get_format("E6M9") is mine
    assert fl.get_format("my_float") is mine
    assert fl.get_format("myhalf") is mine
    assert "e6m9" in fl.format_names()
    assert decode(0x3E00, "myhalf").value == 1.0  # 0 011111 000000000: 2^(31 - 31)


# ---- contains ---------------------------------------------------------------------------------------
def _value_set(t: Any) -> set[float]:
    """Every finite value of a <= 16-bit numpy/ml_dtypes type, enumerated through a view."""
    bits = np.dtype(t).itemsize * 8
    fi = _finfo(t)
    n = 1 << fi.bits if fi.bits < bits else 1 << bits
    codes = np.arange(n, dtype=np.uint8 if bits == 8 else np.uint16)
    with np.errstate(invalid="ignore"):  # ml_dtypes warns when it widens a signalling NaN
        values = codes.view(t).astype(np.float64)
    return set(values[np.isfinite(values)].tolist())


SMALL = [(f, t) for f, t in ALL_ORACLES if f.bits <= 16]


def test_contains_matches_value_sets_exhaustively() -> None:
    sets = {f.name: _value_set(t) for f, t in SMALL}
    for a, _ in SMALL:
        for b, _ in SMALL:
            assert a.contains(b) == (sets[b.name] <= sets[a.name]), (a.name, b.name)


@pytest.mark.parametrize(("fmt", "t"), SMALL, ids=[f.name for f, _ in SMALL])
def test_fp32_tf32_and_fp64_contain_by_float32_round_trips(fmt: FloatFormat, t: Any) -> None:
    values = np.array(sorted(_value_set(t)))
    as32 = values.astype(np.float32)
    in_fp32 = bool(np.all(as32.astype(np.float64) == values))
    assert fl.FP32.contains(fmt) == in_fp32
    # tf32 is fp32 with the low 13 fraction bits zero (same exponent range, subnormals included)
    in_tf32 = in_fp32 and bool(np.all(as32.view(np.uint32) & 0x1FFF == 0))
    assert fl.TF32.contains(fmt) == in_tf32
    assert fl.FP64.contains(fmt)
    assert not fmt.contains(fl.FP64)


def test_register_format_never_takes_a_name_silently() -> None:
    # a built-in name or alias keeps its meaning whatever is asked
    for name in ("FP16", "half", "bfloat16", "e4m3"):
        with pytest.raises(ValueError, match="is the built-in"):
            fl.register_format(FloatFormat(5, 2, name=name))
        with pytest.raises(ValueError, match="is the built-in"):
            fl.register_format(FloatFormat(5, 2, name=name), replace=True)
    assert fl.get_format("fp16") is fl.FP16
    assert fl.round_array(np.array([1 + 2**-10]), "fp16").tolist() == [1 + 2**-10]  # still e5m10
    # a user's name is taken over only on request
    first = fl.register_format(FloatFormat(6, 5, name="mine6"), "my-six")
    try:
        with pytest.raises(ValueError, match="is already"):
            fl.register_format(FloatFormat(6, 4, name="other"), "my-six")
        assert fl.register_format(first, "my-six") is first  # the same format again: harmless
        second = fl.register_format(FloatFormat(6, 4, name="mine6"), replace=True)
        assert fl.get_format("mine6") is second
    finally:
        fl.FORMATS.remove("mine6")
    with pytest.raises(ValueError, match="expected strings"):
        FloatFormat(5, 2, name=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="expected a non-empty string"):
        fl.register_format(FloatFormat(5, 2, name="e5m2x"), 7)  # type: ignore[arg-type]
    assert "e5m2x" not in fl.format_names()


# ---- names built by rule: eXmY and P3109 ---------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "dtype"),
    [
        ("e5m10", np.float16),
        ("e8m23", np.float32),
        ("e11m52", np.float64),
        ("e8m7", ml_dtypes.bfloat16),
        ("e5m2", ml_dtypes.float8_e5m2),
        ("e4m3fn", ml_dtypes.float8_e4m3fn),
        ("e4m3fnuz", ml_dtypes.float8_e4m3fnuz),
        ("e5m2fnuz", ml_dtypes.float8_e5m2fnuz),
        ("e3m4", ml_dtypes.float8_e3m4),
        ("float8_e4m3", ml_dtypes.float8_e4m3),
        ("E2M3FN", ml_dtypes.float6_e2m3fn),
    ],
)
def test_exmy_names_build_ml_dtypes_layouts(name: str, dtype: type) -> None:
    f = fl.get_format(name)
    info = ml_dtypes.finfo(dtype)  # type: ignore[no-untyped-call]
    assert f.max == float(info.max)
    assert f.smallest_subnormal == float(info.smallest_subnormal)
    assert f.bits == info.bits


def test_a_registered_name_or_layout_wins() -> None:
    assert fl.get_format("e5m2") is fl.get_format("float8_e5m2")
    assert fl.get_format("e4m3") is fl.get_format("float8_e4m3fn")  # the OCP format people mean
    assert fl.get_format("e5m10") is fl.FP16
    assert fl.get_format("e8m7") is fl.BF16
    assert fl.get_format("e8m0") is fl.get_format("float8_e8m0fnu")
    custom = fl.get_format("e6m9")
    assert (custom.name, custom.bias, custom.max) == ("e6m9", 31, float((2 - Fraction(1, 512)) * 2**31))
    assert "e6m9" not in fl.FORMATS  # read by rule, never added


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("e0m3", "exponent_bits=0: expected an integer from 1 to 15"),
        ("e16m3", "exponent_bits=16: expected an integer from 1 to 15"),
        ("e12m60", "mantissa_bits=60: expected an integer from 0 to 51 (64 bits in all)"),
        ("e1m1", "an 'ieee' format needs at least 2 exponent bits"),
        ("e1m0fn", "an 'fn' format with a NaN needs at least 2 exponent+mantissa bits"),
        ("float9_e4m3", "e4m3 has 8 bits, not 9"),
        ("p3109_k9p0se", "expected K from 3 to 16 and P from 1 to K-1 (signed) or to K (unsigned)"),
        ("p3109_k8p3", "expected p3109_kKpP[s|u][e|f]"),
    ],
)
def test_names_that_cannot_be_built_say_what_was_expected(name: str, expected: str) -> None:
    with pytest.raises(ValueError, match=re.escape(expected)) as err:
        fl.get_format(name)
    assert name in str(err.value)
    assert "\n" not in str(err.value)


def test_the_64_bit_edge() -> None:
    assert fl.get_format("e11m52") is fl.FP64
    assert fl.get_format("e15m48").bits == 64
    assert fl.get_format("p3109_k16p16uf").bits == 16
    with pytest.raises(ValueError, match="64 bits in all"):
        fl.get_format("e15m49")


def test_every_name_reaches_every_door() -> None:
    # the one lookup serves round_array, policies, block elements and the codec
    from floatlab.blocks import BlockFormat, mx_round

    x = np.array([0.1, -3.0, 1e-6])
    for name in ("e6m9", "p3109_k8p3se", "e3m4"):
        assert fl.round_array(x, name).tolist() == fl.round_array(x, fl.get_format(name)).tolist()
        assert fl.decode(int(fl.encode(1.0, name)), name).value == 1.0
    for name in ("p3109_k8p3se", "e3m4", "e2m2fnuz"):
        block = BlockFormat(f"mx_{name}", fl.get_format(name))
        assert mx_round(np.array([1.0, 0.5]), block).tolist() == [1.0, 0.5]
    with pytest.raises(ValueError, match="expected a signed format of at most 8 bits"):
        mx_round(np.ones(4), BlockFormat("mx_e8m0", fl.get_format("e8m0")))
    import floatlab.train as ft

    policy = ft.get_policy("mixed-bf16").replace(forward="e6m9", backward="P3109-K8P3SE")
    assert (policy.forward, policy.backward) == (fl.get_format("e6m9"), fl.get_format("p3109_k8p3se"))
