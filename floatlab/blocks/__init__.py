"""Block-scaled formats: the OCP Microscaling (MX) formats, where a block of 32 small floats
shares one power-of-two scale, and NVIDIA's NVFP4, where a block of 16 shares an E4M3 scale
under one float32 scale per tensor.

An fp8 number alone has a narrow range (E4M3: 2^-9 to 448); a block format widens it by giving
every block of ``k`` values its own scale. The OCP Microscaling Formats (MX) v1.0 specification
defines five floating-point kinds, named by their element format, with an E8M0 scale (an 8-bit
exponent: codes 0..254 are 2^-127..2^127, 255 is NaN); NVFP4 (NVIDIA, "Pretraining Large
Language Models with NVFP4", arXiv 2509.25149) has E2M1 elements:

=============  ==================  ==============================  ===============
format         element             scale                           bits per value
=============  ==================  ==============================  ===============
mxfp8_e5m2     float8_e5m2         E8M0 per 32                     8.25
mxfp8_e4m3     float8_e4m3fn       E8M0 per 32                     8.25
mxfp6_e3m2     float6_e3m2fn       E8M0 per 32                     6.25
mxfp6_e2m3     float6_e2m3fn       E8M0 per 32                     6.25
mxfp4_e2m1     float4_e2m1fn       E8M0 per 32                     4.25
nvfp4          float4_e2m1fn       E4M3 per 16, fp32 per tensor    4.5
=============  ==================  ==============================  ===============

The MX scale (:func:`mx_quantize`, ``scale_mode``), from the block's largest magnitude amax,
read from its bit fields, never from ``log2``:

* ``"floor"``, the specification's conversion (as its reference implementation,
  microsoft/microxcaling, and torchao's ``ScaleCalculationMode.FLOOR`` compute it): the shared
  exponent is ``floor(log2(amax)) - emax``, ``emax`` the exponent of the element format's largest
  normal value, so that amax lands in the element format's top binade; the values between the
  element's largest and the top of that binade (E4M3: 448 to 512) saturate;
* ``"rceil"``, NVIDIA's (cuBLAS, "Computing scaling and conversion factors for FP8 with UE8M0
  scales"; torchao's ``ScaleCalculationMode.RCEIL``): amax / (element max) rounded up to a power
  of two, one binade above "floor" exactly when amax's significand exceeds the element max's, so
  that nothing saturates and the smallest values lose one more binade.

The shared exponent is clamped below at -127 (a block of zeros, or of values too small for any
scale, gets the smallest scale); above 127 it is the NaN scale ("floor") or 127 ("rceil", as the
hardware's saturating conversion). A block holding a NaN or an infinity gets the NaN scale and
every value of that block decodes as NaN. Each ``v / 2^shared`` is rounded into the element
format, saturating, by the element function of the one rounding primitive (the loop behind
:func:`floatlab.encode_array`), applied to ``v`` itself with the element format's exponent range
shifted by ``shared``: the same code, with no scaled value ever formed, so nothing can underflow
on the way.

NVFP4's scales follow NVIDIA's recipe in float32 arithmetic, operation for operation as torchao's
``nvfp4_quantize`` (torchao/prototype/mx_formats/nvfp4_tensor.py) computes it: the tensor scale
is t = amax / (6 x 448) (torchao's ``per_tensor_amax_to_scale``), so that the block holding the
tensor's largest value gets the largest E4M3 scale; a block's scale is the E4M3 rounding (to
nearest) of (amax_block / 6) / t, clamped to E4M3's normal range 2^-6..448; each value is
multiplied by the float32 reciprocal (1 / t) / scale and rounded into E2M1, saturating at 6.
With ``tensor_scale=1.0`` this is torchao's one-level scaling (``per_tensor_scale=None``). A
block holding a NaN or an infinity gets E4M3's NaN as its scale (torchao gives an infinity's
block the scale 448 and saturates it); the tensor scale is taken over the finite values.
Dequantized values (element x block scale x tensor scale) are exact in float64.

The element rounding takes every rounding mode of floatlab (the MX specification leaves the mode
to the implementation; microxcaling's default rounds ties away from zero, floatlab's ``"rna"``;
NVIDIA's recipe rounds gradients stochastically).

>>> import numpy as np
>>> q = mx_quantize([1.0, 0.1, 1e-4, 300.0], "mxfp8_e4m3")
>>> int(q.scale_codes[0]) - 127          # max 300 is in binade 2^8, E4M3's top binade is 2^8
0
>>> q.dequantize().tolist()              # 1e-4 is below E4M3's smallest subnormal 2^-9: flushed
[1.0, 0.1015625, 0.0, 288.0]
>>> mx_round(np.float32([300.0, 1.0]), "nvfp4", tensor_scale=1.0).tolist()  # 300 / 6 = 50 -> E4M3 48
[288.0, 0.0]

(50 is halfway between E4M3's 48 and 52 and rounds to the even 48; then 300 / 48 = 6.25
saturates to E2M1's 6.)

MXINT8 (``"mxint8"``) has integer elements: two's complement k / 64, k from -128 to 127, as gfloat's
``format_info_mxint8``; its codes are those bytes (:meth:`BlockArray.elements` reads them).
"""

from __future__ import annotations

from floatlab.blocks import arrays, formats, reference
from floatlab.blocks.arrays import *  # noqa: F403
from floatlab.blocks.formats import *  # noqa: F403
from floatlab.blocks.reference import *  # noqa: F403

# every public name of the modules, each listed once, in its own module
__all__ = [*formats.__all__, *arrays.__all__, *reference.__all__]
