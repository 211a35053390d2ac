"""Lesson 01's control: :class:`BitToggler`, the bits of one code as buttons to click, with the
decoded value, class and neighbours redrawn on every change.

>>> BitToggler("fp16", 0x3C00).toggle(15).value
-1.0
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from floatlab.codec import Decoded, decode, encode
from floatlab.formats import FloatFormat, get_format
from floatlab.text.codec import FIELD_COLOURS
from floatlab.widgets.base import Interactive

__all__ = ["LESSON_FORMATS", "BitToggler"]

#: The formats the bit toggler offers: the four of lesson 01 and the other fp8.
LESSON_FORMATS: tuple[str, ...] = ("fp32", "fp16", "bf16", "float8_e4m3fn", "float8_e5m2")


class BitToggler(Interactive):
    """Click the bits of a code and watch its value, class and neighbours change.

    ``code`` (an integer bit pattern) or ``value`` (a number or a numeric string, rounded to
    nearest even) sets the start; the default is 1. :meth:`toggle` flips one bit (bit 0 is the
    last fraction bit), :meth:`set_format` converts the value into another format,
    :meth:`next_up` and :meth:`next_down` step to the neighbours.

    >>> t = BitToggler("fp16", value="65504")
    >>> t.hex, t.decoded.description
    ('0x7BFF', 'normal, the largest finite fp16')
    >>> t.toggle(0).value, t.next_up().value
    (65472.0, 65504.0)
    >>> BitToggler("fp16").toggle(16)
    Traceback (most recent call last):
    ...
    ValueError: bit 16 does not exist in fp16: expected a bit index from 0 to 15
    """

    def __init__(
        self,
        fmt: FloatFormat | str = "fp16",
        code: int | None = None,
        *,
        value: float | str | Fraction | None = None,
        formats: Sequence[str] = LESSON_FORMATS,
    ) -> None:
        super().__init__()
        self.fmt = get_format(fmt)
        self.formats = tuple(get_format(f).name for f in formats)
        if code is not None and value is not None:
            raise ValueError("BitToggler: give code= or value=, not both")
        if code is None:
            code = int(encode(1 if value is None else value, self.fmt))
        self.code = decode(code, self.fmt).code  # checks that the code fits the format
        self._bits: list[Any] = []
        self._bit_row: Any = None
        self._format_menu: Any = None
        self._value_box: Any = None
        self._message: Any = None

    @property
    def decoded(self) -> Decoded:
        """The current code taken apart (:func:`floatlab.decode`)."""
        return decode(self.code, self.fmt)

    @property
    def value(self) -> float:
        """The current value as a float64."""
        return self.decoded.value

    @property
    def hex(self) -> str:
        """The current code in hexadecimal."""
        return self.decoded.hex

    def toggle(self, bit: int) -> Decoded:
        """Flip ``bit`` (0 = the last fraction bit, ``bits - 1`` = the sign) and return the result.

        >>> BitToggler("fp16", 0x3C00).toggle(15).value
        -1.0
        """
        n = self.fmt.bits
        if isinstance(bit, bool) or not isinstance(bit, (int, np.integer)) or not 0 <= bit < n:
            raise ValueError(
                f"bit {bit!r} does not exist in {self.fmt.name}: expected a bit index from 0 to {n - 1}"
            )
        return self._set(self.code ^ (1 << int(bit)))

    def set_code(self, code: int) -> Decoded:
        """Show ``code`` (checked to fit the format).

        >>> BitToggler("bf16").set_code(0x3F80).value
        1.0
        """
        return self._set(decode(code, self.fmt).code)

    def set_value(self, value: float | str | Fraction) -> Decoded:
        """Store ``value`` in the current format (round to nearest even) and show it.

        >>> BitToggler("fp16").set_value("0.1").decimal
        '0.0999755859375'
        """
        return self._set(int(encode(value, self.fmt)))

    def set_format(self, fmt: FloatFormat | str) -> Decoded:
        """Switch to ``fmt``, carrying the current value over (round to nearest even; a NaN stays NaN).

        >>> BitToggler("fp32", value="0.1").set_format("fp16").decimal
        '0.0999755859375'
        """
        new = get_format(fmt)
        d = self.decoded
        if d.kind == "nan":
            code = new.nan_code
            if code is None:
                raise ValueError(
                    f"format {new.name} has no NaN: expected a format that can hold the NaN shown"
                )
        else:
            code = int(encode(d.exact if d.exact is not None else d.value, new))
        self.fmt = new
        return self._set(code)

    def next_up(self) -> Decoded:
        """Step to the next larger value (IEEE nextUp); stay put where there is none.

        >>> BitToggler("fp16", 0x7BFF).next_up().value
        inf
        """
        up = self.decoded.next_up
        return self._set(self.code if up is None else up)

    def next_down(self) -> Decoded:
        """Step to the next smaller value (IEEE nextDown); stay put where there is none.

        >>> BitToggler("fp16", 0x0000).next_down().hex
        '0x8001'
        """
        down = self.decoded.next_down
        return self._set(self.code if down is None else down)

    def _set(self, code: int) -> Decoded:
        self.code = code
        self._refresh()
        return self.decoded

    # ---- views ---------------------------------------------------------------------------------
    def html(self) -> str:
        """The decoded code: coloured bit boxes, the value with its formula, class, ulp and neighbours.

        >>> "65504" in BitToggler("fp16", 0x7BFF).html()
        True
        """
        return f'<div class="floatlab-decoded">{self.decoded._repr_html_()}</div>'

    def __repr__(self) -> str:
        return str(self.decoded)

    def _field_of(self, bit: int) -> str:
        m = self.fmt.mantissa_bits
        if bit == self.fmt.bits - 1:
            return "sign"
        return "fraction" if bit < m else "exponent"

    def _controls(self) -> list[Any]:
        import ipywidgets as w

        self._format_menu = w.Dropdown(
            options=list(dict.fromkeys([*self.formats, self.fmt.name])),
            value=self.fmt.name,
            description="format",
            layout=w.Layout(width="16em"),
        )
        self._format_menu.observe(self._on_format, names="value")
        self._value_box = w.Text(
            value="",
            placeholder="type a number, press Enter",
            description="value",
            continuous_update=False,
            layout=w.Layout(width="20em"),
        )
        self._value_box.observe(self._on_value, names="value")
        down = w.Button(
            description="next down", tooltip="the next smaller value", layout=w.Layout(width="7em")
        )
        up = w.Button(description="next up", tooltip="the next larger value", layout=w.Layout(width="7em"))
        down.add_class("floatlab-next-down")
        up.add_class("floatlab-next-up")
        down.on_click(lambda _b: self.next_down())
        up.on_click(lambda _b: self.next_up())
        self._message = w.HTML("")
        self._bit_row = w.HBox(layout=w.Layout(flex_flow="row wrap"))
        self._build_bits()
        head = w.HBox([self._format_menu, self._value_box, down, up])
        return [head, self._message, self._bit_row]

    def _build_bits(self) -> None:
        import ipywidgets as w

        buttons = []
        for bit in range(self.fmt.bits - 1, -1, -1):
            field = self._field_of(bit)
            b = w.Button(
                tooltip=f"bit {bit} ({field}): click to flip",
                layout=w.Layout(width="2.1em", height="2.2em", padding="0", margin="1px"),
            )
            b.style.button_color = FIELD_COLOURS[field][0]
            b.add_class("floatlab-bit")
            b.add_class(f"floatlab-bit-{bit}")
            b.on_click(self._flipper(bit))
            buttons.append(b)
        self._bits = buttons[::-1]  # self._bits[k] is bit k
        self._bit_row.children = tuple(buttons)
        self._paint_bits()

    def _flipper(self, bit: int) -> Callable[[Any], None]:
        def flip(_button: Any) -> None:
            self.toggle(bit)

        return flip

    def _paint_bits(self) -> None:
        for bit, b in enumerate(self._bits):
            on = (self.code >> bit) & 1
            b.description = str(on)
            b.style.font_weight = "bold" if on else "normal"

    def _refresh(self) -> None:
        if self._format_menu is not None:
            if len(self._bits) != self.fmt.bits:
                self._build_bits()
            else:
                self._paint_bits()
            if self._format_menu.value != self.fmt.name:
                self._format_menu.value = self.fmt.name
        super()._refresh()

    def _on_format(self, change: dict[str, Any]) -> None:
        if change["new"] != self.fmt.name:
            self._try(lambda: self.set_format(change["new"]))

    def _on_value(self, change: dict[str, Any]) -> None:
        text = str(change["new"]).strip()
        if text:
            self._try(lambda: self.set_value(text))

    def _try(self, action: Callable[[], object]) -> None:
        """Run ``action``; a bad input shows its message instead of raising into the front end."""
        try:
            action()
        except ValueError as e:
            self._message.value = f'<span style="color:#b00020">{html.escape(str(e))}</span>'
        else:
            self._message.value = ""
