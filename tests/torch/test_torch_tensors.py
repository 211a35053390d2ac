"""Torch tensors through floatlab.round_array / encode_array: torch's own casts are the oracle
where torch has the format (float32 inputs: torch rounds them once), floatlab's NumPy path for
every other format and mode (the same primitive on a view of the tensor's memory)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import floatlab as fl

torch = pytest.importorskip("torch")

TORCH_FORMATS = [
    ("fp16", torch.float16, torch.int16),
    ("bf16", torch.bfloat16, torch.int16),
    ("float8_e4m3fn", torch.float8_e4m3fn, torch.uint8),
    ("float8_e5m2", torch.float8_e5m2, torch.uint8),
]


def _float32_cases(fmt: str, rng: np.random.Generator) -> np.ndarray:
    """Random float32 bit patterns over every exponent, plus the values where rounding is decided:
    every midpoint between neighbouring values of ``fmt`` (halfway cases, found from the format's
    own codes with exact float64 arithmetic), those midpoints moved by one float32 step either
    way, the values around its largest finite value and overflow threshold, its subnormals."""
    f = fl.get_format(fmt)
    bits = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32)
    random32 = bits.view(np.float32)
    # the format's finite non-negative values, in order (its codes decode exactly into float64)
    codes = np.arange(2 ** (f.bits - 1), dtype=np.uint64)
    values = np.unique(fl.decode_array(codes, f))
    values = values[np.isfinite(values)]
    mid = (values[:-1] + values[1:]) / 2  # exact in float64, and in float32 (at most p + 1 bits)
    step = float(values[-1] - values[-2])
    edge = np.array([values[-1], values[-1] + step / 2, values[-1] + step, 2 * values[-1], 1e38])
    edge = edge[edge <= np.finfo(np.float32).max]  # (bf16's overflow threshold is float32's too)
    special = np.array([0.0, np.inf, np.nan], np.float32)
    m32 = mid.astype(np.float32)
    assert (m32.astype(np.float64) == mid).all()
    near = np.concatenate([m32, np.nextafter(m32, np.float32(np.inf)), np.nextafter(m32, np.float32(0))])
    tiny = rng.uniform(0, float(values[1]) * 4, 5000).astype(np.float32)  # subnormal and flush range
    x = np.concatenate([random32, near, edge.astype(np.float32), values.astype(np.float32), special, tiny])
    return np.concatenate([x, -x])


def _same(a: Any, b: Any) -> bool:
    """Equal element for element, NaN where NaN (torch tensors of one float dtype)."""
    an, bn = torch.isnan(a), torch.isnan(b)
    return bool(torch.equal(an, bn) and torch.equal(a[~an], b[~bn]))


def _bits(t: Any) -> np.ndarray:
    """A tensor's bits as a NumPy unsigned array."""
    signed = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    out: np.ndarray = t.view(signed).numpy().view(f"u{t.element_size()}")
    return out


@pytest.mark.parametrize(("fmt", "dtype", "bits"), TORCH_FORMATS)
def test_round_array_of_a_float32_tensor_is_torchs_own_cast(fmt: str, dtype: Any, bits: Any) -> None:
    x = torch.from_numpy(_float32_cases(fmt, np.random.default_rng(1)))
    # torch's overflow rule, read off its own cast: E4M3 casts saturate in recent torch (c10's
    # Float8_e4m3fn: finite overflow and inf become 448; older versions gave NaN), E5M2, fp16
    # and bf16 casts overflow to inf; floatlab is asked for the same rule
    saturate = bool(torch.isfinite(torch.tensor([1e38, float("inf")]).to(dtype).float()).all())
    with np.errstate(over="ignore", invalid="ignore"):
        ours = fl.round_array(x, fmt, saturate=saturate)
    assert ours.dtype == torch.float32
    assert ours.device == x.device
    assert ours.shape == x.shape
    theirs = x.to(dtype)
    assert _same(ours, theirs.float())
    codes = fl.encode_array(x, fmt, saturate=saturate)
    finite = ~torch.isnan(theirs.float())
    # the bits of the finite results are torch's (NaN codes may differ in sign and payload)
    assert torch.equal(codes.view(bits)[finite], theirs.view(bits)[finite])
    assert torch.isnan(codes.view(dtype).float()).eq(~finite).all()


def test_fp8_overflow_follows_saturate_as_torchs_casts_do() -> None:
    x = torch.tensor([464.0, 465.0, 479.0, 480.0, 1e6, float("inf"), -1e6])  # E4M3's largest: 448
    assert fl.round_array(x, "e4m3fn", saturate=True).tolist() == [448.0] * 6 + [-448.0]
    assert fl.round_array(x, "e4m3fn").isnan().tolist() == [False] + [True] * 6  # no inf in E4M3
    if torch.isfinite(x.to(torch.float8_e4m3fn).float()).all():  # a saturating torch
        assert _same(fl.round_array(x, "e4m3fn", saturate=True), x.to(torch.float8_e4m3fn).float())
    else:
        assert _same(fl.round_array(x, "e4m3fn"), x.to(torch.float8_e4m3fn).float())
    y = torch.tensor([57344.0, 61439.0, 61440.0, 1e9])  # E5M2: 57344, overflow from 61440
    assert fl.round_array(y, "e5m2").tolist() == y.to(torch.float8_e5m2).float().tolist()
    assert fl.round_array(y, "e5m2").tolist() == [57344.0, 57344.0, float("inf"), float("inf")]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode", ["rne", "rna", "rtz", "rup", "rdown", "rodd", "stochastic"])
@pytest.mark.parametrize("fmt", ["e2m1", "float8_e4m3fnuz", "e3m2", "fp16", "tf32"])
def test_every_mode_and_format_matches_the_numpy_path(dtype: Any, mode: str, fmt: str) -> None:
    rng = np.random.default_rng(7)
    base = np.concatenate([rng.standard_normal(3000) * 4.0 ** rng.integers(-12, 12, 3000), [0.0, 1e-30]])
    t = torch.from_numpy(base).to(dtype)
    a = t.float().numpy().astype(ml_dtypes.bfloat16) if dtype == torch.bfloat16 else t.numpy()
    f, src = fl.get_format(fmt), fl.get_format(str(a.dtype))
    if not (src.contains(f) or f.contains(src)):  # (neither holds the other: both paths refuse)
        for x in (a, t):
            with pytest.raises(ValueError, match="cannot hold"):
                fl.round_array(x, f, mode, rng=1)
        return
    with np.errstate(over="ignore"):
        want = fl.round_array(a, f, mode, rng=np.random.default_rng(3))
        got = fl.round_array(t, f, mode, rng=np.random.default_rng(3))
        want_codes = fl.encode_array(a, f, mode, rng=np.random.default_rng(4), saturate=True)
        got_codes = fl.encode_array(t, f, mode, rng=np.random.default_rng(4), saturate=True)
    assert got.dtype == dtype
    assert got.shape == t.shape
    assert (_bits(got) == want.view(f"u{want.itemsize}")).all()
    assert got_codes.numpy().dtype == want_codes.dtype
    assert (got_codes.numpy() == want_codes).all()


@pytest.mark.parametrize(
    ("fmt", "dtype"),
    [
        ("e4m3fn", torch.uint8),
        ("e2m1", torch.uint8),
        ("fp16", torch.uint16),
        ("bf16", torch.uint16),
        ("tf32", torch.uint32),
        ("fp32", torch.uint32),
        ("fp64", torch.uint64),
    ],
)
def test_codes_are_unsigned_tensors_of_the_numpy_width(fmt: str, dtype: Any) -> None:
    x = torch.tensor([0.5, -3.0, 1e-3], dtype=torch.float64)
    codes = fl.encode_array(x, fmt)
    assert codes.dtype == dtype
    assert codes.numpy().tolist() == fl.encode_array(x.numpy(), fmt).tolist()


def test_shapes_views_parameters_and_gradients() -> None:
    w = torch.nn.Parameter(torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7)
    out = fl.round_array(w, "bf16")
    assert not out.requires_grad
    assert out.shape == (3, 4)
    assert out.tolist() == w.detach().to(torch.bfloat16).float().tolist()
    view = w.detach().t()[1:]  # not contiguous
    assert fl.round_array(view, "fp16").tolist() == view.to(torch.float16).float().tolist()
    scalar = torch.tensor(1 / 3, dtype=torch.float64)
    assert fl.round_array(scalar, "bf16").shape == ()
    assert fl.round_array(scalar, "bf16").item() == 0.333984375
    empty = torch.empty(0, 3, dtype=torch.bfloat16)
    assert fl.round_array(empty, "e4m3fn").shape == (0, 3)
    # a result owns its memory: rounding never writes into the input
    before = w.detach().clone()
    fl.round_array(w, "e2m1")
    assert torch.equal(w.detach(), before)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_a_cpu_tensor_enters_the_door_as_a_view_of_its_memory(dtype: Any) -> None:
    from floatlab.torch.tensors import array_tensor, tensor_array

    x = torch.linspace(-3, 3, 12, dtype=dtype).reshape(3, 4)
    a = tensor_array(x, "e4m3fn", back=True)
    assert a.dtype.itemsize == x.element_size()
    assert a.__array_interface__["data"][0] == x.data_ptr()  # no copy
    back = array_tensor(a, x)
    assert back.dtype == dtype
    assert back.data_ptr() == x.data_ptr()  # and no copy on the way back either
    assert torch.equal(back, x)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: torch.arange(3), "torch.int64"),
        (lambda: torch.ones(2, dtype=torch.complex64), "torch.complex64"),
        (lambda: torch.ones(2, dtype=torch.bool), "torch.bool"),
        (lambda: torch.ones(2).to(torch.float8_e4m3fn), "torch.float8_e4m3fn"),
        (lambda: torch.ones(2, 2).to_sparse(), "torch.sparse_coo"),
        (lambda: torch.empty(2, device="meta"), "meta"),
    ],
)
def test_tensors_floatlab_cannot_take_are_refused_in_one_line(make: Any, words: str) -> None:
    t = make()
    for door in (fl.round_array, fl.encode_array):
        with pytest.raises(ValueError, match="expected") as e:
            door(t, "fp16")
        assert words in str(e.value)
        assert "\n" not in str(e.value)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_round_on_their_device() -> None:  # pragma: no cover - GPU machines
    x = torch.from_numpy(_float32_cases("fp16", np.random.default_rng(2)))
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match=r"pip install 'floatlab\[gpu\]'"):
            fl.round_array(x.cuda(), "fp16")
        return
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        xc = x.to(dtype).cuda()
        got = fl.round_array(xc, "e4m3fn", saturate=True)
        assert got.device == xc.device
        assert got.dtype == dtype
        assert _same(got.cpu(), fl.round_array(x.to(dtype), "e4m3fn", saturate=True))
        assert torch.equal(fl.encode_array(xc, "e5m2").cpu(), fl.encode_array(x.to(dtype), "e5m2"))


def test_import_floatlab_never_imports_torch_and_floatlab_torch_says_what_is_missing() -> None:
    probe = (
        "import sys, numpy as np, floatlab as fl\n"
        "fl.round_array(np.ones(2, np.float32), 'bf16'); fl.encode_array([1.0], 'fp16')\n"
        "print('torch' in sys.modules)\n"
        "sys.modules['torch'] = None  # torch not installed\n"
        "try:\n    import floatlab.torch\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "False"
    assert "floatlab.torch needs PyTorch" in lines[1]
    assert "pip install 'floatlab[torch]'" in lines[1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_with_flags_doors_take_tensors_as_round_array_does(dtype: Any) -> None:
    # 0.1 and 1e-3 inexact, 2^-18 below half of e5m2's smallest subnormal (2^-16): flushed, 1e5
    # above its largest finite value (57344): overflows to inf, as torch's cast does
    x = torch.tensor([0.1, -1e-3, 2.0**-18, 1e5, 1.0, 0.0], dtype=dtype)
    want = x.to(torch.float8_e5m2)  # torch's own cast: one rounding (bf16 and float32 alike)
    values, stats = fl.round_array_with_flags(x, "e5m2")
    assert isinstance(values, torch.Tensor)
    assert values.dtype == dtype
    assert values.device == x.device
    assert torch.equal(values, want.to(dtype))
    codes, code_stats = fl.encode_array_with_flags(x, "e5m2")
    assert isinstance(codes, torch.Tensor)
    assert codes.dtype == torch.uint8
    assert torch.equal(codes, want.view(torch.uint8))
    # the flags, counted from torch's cast: inexact where the cast changed the value, overflow
    # where a finite value became infinite
    assert stats.inexact == code_stats.inexact == int((want.float() != x.float()).sum()) == 4
    assert stats.overflow == code_stats.overflow == int(want.float().isinf().sum()) == 1
    assert stats.total == x.numel()


def test_the_with_flags_doors_read_a_parameter_that_requires_grad_detached() -> None:
    w = torch.nn.Parameter(torch.tensor([[1 / 3, 70000.0], [1e-9, -2.5]]))
    values, stats = fl.round_array_with_flags(w, "fp16")
    assert isinstance(values, torch.Tensor)
    assert not values.requires_grad
    assert torch.equal(values, w.detach().to(torch.float16).float())
    assert stats.overflow == 1
    codes, _ = fl.encode_array_with_flags(w, "fp16")
    assert torch.equal(codes, w.detach().to(torch.float16).view(torch.uint16))
    assert w.requires_grad  # (the parameter itself is left as it was)
    assert w.grad is None
