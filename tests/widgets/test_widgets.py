"""The lesson controls: their state against independent oracles, their ipywidgets controls driven
as a front end would drive them, and their static views."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import floatlab as fl
import floatlab.simulate as sim
from floatlab.gradhist import histogram
from floatlab.widgets import BitToggler, RoundingExplorer, ScaleExplorer, UpdateExplorer, is_live

# the numpy / ml_dtypes type that reads the same bits as each format (the oracle for the toggler)
ORACLE_TYPES: dict[str, tuple[type[Any], Any]] = {
    "fp32": (np.uint32, np.float32),
    "fp16": (np.uint16, np.float16),
    "bf16": (np.uint16, ml_dtypes.bfloat16),
    "float8_e4m3fn": (np.uint8, ml_dtypes.float8_e4m3fn),
    "float8_e5m2": (np.uint8, ml_dtypes.float8_e5m2),
}


def _oracle_value(code: int, fmt: str) -> float:
    utype, ftype = ORACLE_TYPES[fmt]
    with np.errstate(invalid="ignore"):  # NaN codes raise "invalid" when widened
        return float(np.array([code], dtype=utype).view(ftype).astype(np.float64)[0])


def _same(a: float, b: float) -> bool:
    return (np.isnan(a) and np.isnan(b)) or (a == b and np.signbit(a) == np.signbit(b))


# ---- BitToggler ----------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", list(ORACLE_TYPES))
def test_toggling_any_bit_gives_the_value_of_the_flipped_bits(fmt: str) -> None:
    f = fl.get_format(fmt)
    rng = np.random.default_rng(1)
    for code in rng.integers(0, 1 << f.bits, size=40):
        t = BitToggler(fmt, int(code))
        for bit in range(f.bits):
            flipped = int(code) ^ (1 << bit)
            assert _same(t.toggle(bit).value, _oracle_value(flipped, fmt)), (fmt, hex(int(code)), bit)
            assert t.code == flipped
            t.toggle(bit)
        assert t.code == int(code)


def test_set_format_rounds_to_nearest_even_like_numpy_and_ml_dtypes() -> None:
    rng = np.random.default_rng(2)
    x32 = (rng.standard_normal(300) * np.exp2(rng.integers(-30, 20, 300))).astype(np.float32)
    with np.errstate(over="ignore"):
        as_fp16 = x32.astype(np.float16).astype(np.float64)
    as_bf16 = x32.astype(ml_dtypes.bfloat16).astype(np.float64)
    for x, h, b in zip(x32, as_fp16, as_bf16, strict=True):
        t = BitToggler("fp32", int(x.view(np.uint32)))
        assert t.set_format("fp16").value == h
        t = BitToggler("fp32", int(x.view(np.uint32)))
        assert t.set_format("bf16").value == b


def test_set_format_keeps_nan_and_infinity() -> None:
    t = BitToggler("fp16", 0x7E00)
    assert t.set_format("bf16").kind == "nan"
    assert t.set_format("float8_e4m3fn").kind == "nan"
    assert BitToggler("fp16", 0x7C00).set_format("fp32").value == np.inf
    with pytest.raises(ValueError, match="has no NaN"):
        BitToggler("fp16", 0x7E00).set_format("float4_e2m1fn")


def test_neighbours_step_like_nextafter() -> None:
    codes = np.arange(0, 0x7C00, 97, dtype=np.uint16)
    for c in codes:
        x = c.view(np.float16)
        up = np.nextafter(x, np.float16(np.inf))
        down = np.nextafter(x, np.float16(-np.inf))
        assert BitToggler("fp16", int(c)).next_up().value == float(up)
        assert BitToggler("fp16", int(c)).next_down().value == float(down)
    assert BitToggler("fp16", 0x7C00).next_up().hex == "0x7C00"  # +inf has no next value: it stays


def test_set_value_parses_exactly() -> None:
    assert BitToggler("fp16").set_value("0.1").hex == "0x2E66"
    assert BitToggler("fp16").set_value(65504).hex == "0x7BFF"
    assert BitToggler("fp16", value="-2").value == -2.0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: BitToggler("fp16").toggle(16), "bit 16 does not exist in fp16"),
        (lambda: BitToggler("fp16").toggle(-1), "bit -1 does not exist"),
        (lambda: BitToggler("bf16", 0x1_0000), "does not fit bf16"),
        (lambda: BitToggler("fp16", 1, value=1.0), "not both"),
        (lambda: BitToggler("fp16").set_value("0.1.2"), "cannot parse"),
        (lambda: BitToggler("fp61"), "unknown format 'fp61'"),
    ],
)
def test_bad_input_is_a_value_error_that_names_it(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_static_view_shows_the_decoded_code() -> None:
    page = BitToggler("fp16", 0x7BFF)._repr_html_()
    assert 'class="floatlab-static"' in page
    assert "65504" in page
    assert "(-1)^0 x 2^(30 - 15) x (1 + 1023/1024)" in page
    assert "0x7BFE" in page  # the neighbour below


def test_outside_a_kernel_the_bundle_is_static() -> None:
    assert not is_live()
    bundle = BitToggler("fp16")._repr_mimebundle_()
    assert set(bundle) == {"text/plain", "text/html"}
    assert bundle["text/plain"].startswith("0x3C00 as fp16")


# ---- the ipywidgets controls, driven as a front end drives them ------------------------------------
def test_clicking_a_bit_button_flips_the_bit_and_redraws() -> None:
    pytest.importorskip("ipywidgets")
    t = BitToggler("fp16", 0x3C00)
    w = t.widget()
    assert t.widget() is w
    view = t._view
    assert "0x3C00" in view.value
    t._bits[14].click()
    assert t.code == 0x7C00
    assert "infinity" in view.value
    assert t._bits[14].description == "1"
    t._bits[15].click()
    assert t.value == -np.inf
    assert [b.description for b in t._bits[::-1]] == list(t.decoded.bits)


def test_the_format_menu_and_value_box_of_the_control() -> None:
    pytest.importorskip("ipywidgets")
    t = BitToggler("fp16", value="0.1")
    t.widget()
    t._format_menu.value = "fp32"
    assert t.fmt.name == "fp32"
    assert len(t._bits) == 32
    assert t.decoded.decimal == "0.0999755859375"  # the fp16 value, carried over exactly
    t._value_box.value = "0.1"
    assert t.hex == "0x3DCCCCCD"
    t._value_box.value = "zero point one"
    assert "cannot parse" in t._message.value  # shown, not raised into the front end
    assert t.hex == "0x3DCCCCCD"
    t.set_format("float8_e4m3fn")  # a change made in code shows in the control too
    assert t._format_menu.value == "float8_e4m3fn"
    assert len(t._bit_row.children) == 8


# ---- RoundingExplorer --------------------------------------------------------------------------
def test_rounding_explorer_matches_the_neighbours_and_ml_dtypes() -> None:
    values = fl.decode_array(np.arange(256, dtype=np.uint8), "float8_e4m3fn")
    values = np.unique(values[np.isfinite(values)])
    rng = np.random.default_rng(3)
    r = RoundingExplorer("float8_e4m3fn", 1.0)
    for x in rng.uniform(-40, 40, 200).astype(np.float32):
        res = r.set_x(float(x))
        lo = values[np.searchsorted(values, x, side="right") - 1]
        hi = values[np.searchsorted(values, x, side="left")]
        assert (res["rdown"], res["rup"]) == (lo, hi)
        assert res["rtz"] == (lo if x >= 0 else hi)
        assert res["rne"] == float(np.float32(x).astype(ml_dtypes.float8_e4m3fn))
        p = r.p_up()
        assert p == (0.0 if hi == lo else (float(x) - lo) / (hi - lo))
    with pytest.raises(ValueError, match="expected a finite number within"):
        r.set_x(1000.0)


def test_rounding_explorer_control_and_views() -> None:
    pytest.importorskip("ipywidgets")
    r = RoundingExplorer("float8_e4m3fn", 2.3)
    r.widget()
    r._slider.value = 2.375
    assert r.x == 2.375
    assert r.results()["rne"] == 2.5
    assert r.results()["rtz"] == 2.25
    fig = r.figure()
    assert fig.axes[0].get_xlabel().startswith("value")
    assert "x = 2.375" in fig.axes[0].get_title()
    assert "x=2.375" in repr(r)
    with pytest.raises(ValueError, match="at most 16 bits"):
        RoundingExplorer("fp32")


# ---- UpdateExplorer ------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_update_explorer_agrees_with_numpy_addition(fmt: str) -> None:
    ftype = np.float16 if fmt == "fp16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(4)
    e = UpdateExplorer(1.0, 2048, fmt)
    for w, ratio in zip(rng.uniform(0.5, 8, 60), np.exp2(rng.uniform(6, 14, 60)), strict=True):
        e.set(weight=float(w), ratio=float(ratio))
        w_s = np.array([w]).astype(ftype)
        u_s = np.array([w / ratio]).astype(ftype)
        # the exact sum of a stored weight and a stored update needs at most 24 bits here: numpy's
        # float32 addition is exact, and its cast back is the one rounding
        kept = (w_s.astype(np.float32) + u_s.astype(np.float32)).astype(ftype) != w_s
        assert e.lost == (not bool(kept[0])), (fmt, w, ratio)
    assert e.lost == sim.swallowed_updates([e.weight], [e.update], fmt).lost[0]


def test_update_explorer_bad_input_and_views() -> None:
    with pytest.raises(ValueError, match=r"weight=0\.0"):
        UpdateExplorer(0.0)
    with pytest.raises(ValueError, match=r"ratio=0\.5"):
        UpdateExplorer(1.0, 0.5)
    e = UpdateExplorer(1.0, 2048, "fp16")
    assert "the update was swallowed" in repr(e)
    fig = e.figure()
    assert "the update is lost" in fig.axes[0].get_title()
    assert "<pre" in e.html()


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
def test_update_explorer_negative_updates_agree_with_numpy(fmt: str) -> None:
    ftype = np.float16 if fmt == "fp16" else ml_dtypes.bfloat16
    m = fl.get_format(fmt).mantissa_bits
    rng = np.random.default_rng(6)
    # powers of two (where the gap below is half the gap above) and weights between them
    weights = np.concatenate([np.exp2(rng.integers(-3, 4, 40)), rng.uniform(0.5, 8, 40)])
    ratios = np.exp2(rng.uniform(m + 0.5, m + 2.5, 80))  # between 2^(m+1) and 2^(m+2), mostly
    e = UpdateExplorer(1.0, 2048, fmt, sign=-1)
    for w, ratio in zip(weights, ratios, strict=True):
        e.set(weight=float(w), ratio=float(ratio))
        assert e.update == -w / ratio
        w_s = np.array([w]).astype(ftype)
        u_s = np.array([-w / ratio]).astype(ftype)
        kept = (w_s.astype(np.float32) + u_s.astype(np.float32)).astype(ftype) != w_s
        assert e.lost == (not bool(kept[0])), (fmt, w, ratio)
    # the asymmetry at w = 1: between 2^(m+1) and 2^(m+2) an update up is lost, one down survives
    r = 1.5 * 2.0 ** (m + 1)
    assert UpdateExplorer(1.0, r, fmt).lost
    assert not UpdateExplorer(1.0, r, fmt, sign=-1).lost
    # a negative weight: sign is the update's own sign, not relative to the weight
    assert UpdateExplorer(-1.0, 100, fmt, sign=1).update == 0.01
    with pytest.raises(ValueError, match="sign=0"):
        UpdateExplorer(1.0, 2048, fmt, sign=0)


def test_update_explorer_shows_the_tie() -> None:
    # 1 + 2^-11 in fp16 is halfway between 1 and 1 + 2^-10; numpy rounds it to the even 1
    assert np.float16(np.float32(1) + np.float32(2**-11)) == 1
    e = UpdateExplorer(1.0, 2048, "fp16")
    assert e.explanation().tie
    assert "1.00048828125 is exactly halfway between 1 (0x3C00) and 1.0009765625 (0x3C01): a tie." in repr(e)
    assert "(ties to even): 1 (0x3C00)." in repr(e)
    assert "a tie: ties to even" in e.figure().axes[0].get_title()
    # below 1 the gap is 2^-11: the downward tie is u = -2^-12, ratio 4096
    down = UpdateExplorer(1.0, 4096, "fp16", sign=-1)
    assert down.update == -(2.0**-12)
    assert down.lost
    assert down.explanation().tie
    assert "u = -|w| / 4096" in down.figure().axes[0].get_title()
    assert not UpdateExplorer(1.5, 2048, "fp16").explanation().tie


def test_update_explorer_sign_toggle_drives_the_state() -> None:
    pytest.importorskip("ipywidgets")
    e = UpdateExplorer(1.0, 3000, "fp16")
    w = e.widget()
    ratio, toggle = w.children[1].children
    assert e.explanation().swallowed  # 1 + 1/3000 rounds back to 1
    before = e._view.value
    toggle.value = -1
    assert e.sign == -1
    assert e.update == -1 / 3000
    assert not e.explanation().swallowed  # 1/3000 is more than 2^-12, half the gap below 1
    assert e._view.value != before
    ratio.value = 4096
    assert e.ratio == 4096
    assert e.explanation().swallowed


# ---- ScaleExplorer -------------------------------------------------------------------------------
def test_scale_explorer_verdict_is_the_histograms() -> None:
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(5000) * np.exp2(rng.normal(-20, 4, 5000))).astype(np.float32)
    h = histogram(x)
    s = ScaleExplorer(h, "fp16")
    assert s.log2_scale == h.recommend_scale("fp16").log2_scale
    for k in (-3, 0, 10, 30):
        v = s.set_scale(k)
        with np.errstate(over="ignore"):
            stored = (x * np.float32(2.0**k)).astype(np.float16)
        assert v.flushed == np.count_nonzero((x != 0) & (stored == 0))
        assert v.overflow == np.count_nonzero(np.isinf(stored))
    with pytest.raises(ValueError, match="log2_scale=100"):
        s.set_scale(100)


def test_scale_explorer_control_redraws() -> None:
    pytest.importorskip("ipywidgets")
    h = histogram(np.array([2.0**-30, 2.0**-10, 1.0], np.float32))
    s = ScaleExplorer(h, "fp16", log2_scale=0)
    w = s.widget()
    slider, menu = w.children[0].children
    before = s._view.value
    slider.value = 8
    assert s.log2_scale == 8
    assert s._view.value != before
    menu.value = "bf16"
    assert s.fmt.name == "bf16"
    assert "bf16, scale 2^8" in s._view.value


# ---- imports -------------------------------------------------------------------------------------
def test_importing_floatlab_or_its_widgets_loads_no_ipywidgets_or_matplotlib() -> None:
    probe = (
        "import json, sys, floatlab\n"
        "a = sorted(m for m in ('floatlab.widgets', 'ipywidgets') if m in sys.modules)\n"
        "import floatlab.widgets; b = sorted(m for m in ('ipywidgets', 'matplotlib') if m in sys.modules)\n"
        "print(json.dumps([a, b]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [[], []]
