"""The exact codec: bit patterns to values and back.

:func:`decode` takes a code (the bit pattern as an integer) and returns a :class:`Decoded`
holding its three fields, its class, its exact value as a :class:`~fractions.Fraction`, its
exact decimal expansion, its ulp and its neighbours; it prints as a terminal report and shows
as coloured bit boxes in a notebook (both drawn by :mod:`floatlab.text.codec`) and as a LaTeX
formula. :func:`encode` rounds a value (a float, an int, a Fraction or a string parsed exactly)
into a format with the rounding reference of :mod:`floatlab.rounding` and returns the code.
:func:`decode_array` is the vectorised twin of :func:`decode` for NumPy arrays of codes.

One idea a module: ``decoded`` (the :class:`Decoded` value and its exact facts), ``encoded``
(:func:`encode` and the :class:`Encoded` code it returns) and ``arrays`` (:func:`decode_array`).

>>> d = decode(0x7BFF, "fp16")
>>> d.kind, d.decimal, hex(d.next_up)
('normal', '65504', '0x7c00')
>>> print(d.formula())
(-1)^0 x 2^(30 - 15) x (1 + 1023/1024)
>>> from floatlab.codec import decode_array, encode
>>> code = encode("0.1", "fp16")
>>> code == 0x2E66, code.decoded.decimal
(True, '0.0999755859375')
>>> decode_array([0x3C00, 0x7BFF, 0xFC00], "fp16").tolist()
[1.0, 65504.0, -inf]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from floatlab._lazy import lazy_exports
from floatlab.codec.decoded import Decoded, Kind, decode
from floatlab.exact import parse_value

if TYPE_CHECKING:
    from floatlab.codec.arrays import decode_array
    from floatlab.codec.encoded import Encoded, encode

# loaded on first use: decode_array needs NumPy and encode the rounding package, which together
# take most of floatlab's import time, while decode needs neither (`floatlab decode` starts fast)
_LAZY = {
    "arrays": "floatlab.codec.arrays",
    "encoded": "floatlab.codec.encoded",
    "decode_array": "floatlab.codec.arrays",
    "Encoded": "floatlab.codec.encoded",
    "encode": "floatlab.codec.encoded",
}


__getattr__, __dir__ = lazy_exports(globals(), __name__, _LAZY)


__all__ = [
    "Decoded",
    "Encoded",
    "Kind",
    "decode",
    "decode_array",
    "encode",
    "parse_value",
]
