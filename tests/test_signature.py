"""Functions shown with their options spelled out, and the error for an option they do not take.

The names a function takes come from its shown signature (``inspect.signature``), the list that
help() and the API reference show; the expected messages are built from it here.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import floatlab as fl
import floatlab.simulate as sim
import floatlab.sweeps as sweeps
from floatlab._signature import spelled_out, unexpected_keyword
from floatlab.blocks.arrays import mx_quantize, mx_round
from floatlab.cli.simulate_cmds import add_view, round_value_view
from floatlab.perf import measure_train, step_phases
from floatlab.rounding.arrays import running_sums
from floatlab.rounding.flushed import round_flushed, round_owned
from floatlab.rounding.integers import round_integers
from floatlab.train.precision.accumulate import accumulate_matmul, accumulate_matmul_reference

X32 = np.array([1.0, 0.1, 3.0], np.float32)

#: public functions that pass their options on, each called with valid arguments and the options
CALLS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "round_array": (fl.round_array, lambda **o: fl.round_array(X32, "fp16", **o)),
    "encode_array": (fl.encode_array, lambda **o: fl.encode_array(X32, "fp16", **o)),
    "round_array_with_flags": (
        fl.round_array_with_flags,
        lambda **o: fl.round_array_with_flags(X32, "bf16", **o),
    ),
    "encode_array_with_flags": (
        fl.encode_array_with_flags,
        lambda **o: fl.encode_array_with_flags(X32, "e4m3fn", **o),
    ),
    "running_sums": (running_sums, lambda **o: running_sums(np.ones(4), "fp16", **o)),
    "round_flushed": (round_flushed, lambda **o: round_flushed(X32.copy(), "bf16", **o)),
    "round_owned": (round_owned, lambda **o: round_owned(X32.copy(), "fp16", **o)),
    "round_integers": (round_integers, lambda **o: round_integers(np.arange(5), "fp16", **o)),
    "add": (sim.add, lambda **o: sim.add(1.0, 1e-4, "fp16", **o)),
    "sub": (sim.sub, lambda **o: sim.sub(1.0, 1e-4, "fp16", **o)),
    "mul": (sim.mul, lambda **o: sim.mul(3.0, 0.1, "bf16", **o)),
    "fma": (sim.fma, lambda **o: sim.fma(3.0, 0.1, 1.0, "bf16", **o)),
    "div": (sim.div, lambda **o: sim.div(1.0, 3.0, "fp16", **o)),
    "sqrt": (sim.sqrt, lambda **o: sim.sqrt(2.0, "fp16", **o)),
    "mx_quantize": (mx_quantize, lambda **o: mx_quantize(np.linspace(-1, 1, 32), "mxfp8_e4m3", **o)),
    "mx_round": (mx_round, lambda **o: mx_round(np.linspace(-1, 1, 32), "mxfp4_e2m1", **o)),
}

SWEEP: dict[str, Any] = {"data": "underflow", "hidden": (4,), "steps": 1}
#: public functions whose options are settings of their own, passed on with passing_on (valid calls
#: of the sweeps would train: only the refused ones run here)
OWN: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "accumulate_matmul": (
        accumulate_matmul,
        lambda **o: accumulate_matmul(np.ones((2, 3)), np.ones((3, 2)), **o),
    ),
    "accumulate_matmul_reference": (
        accumulate_matmul_reference,
        lambda **o: accumulate_matmul_reference(np.ones((2, 3)), np.ones((3, 2)), **o),
    ),
    "add_view": (add_view, lambda **o: add_view("1", "1/2048", "fp16", **o)),
    "round_value_view": (round_value_view, lambda **o: round_value_view("0.1", "bf16", **o)),
    "sweep": (sweeps.sweep, lambda **o: sweeps.sweep({"seed": [0]}, SWEEP, **o)),
    "run_grid": (sweeps.run_grid, lambda **o: sweeps.run_grid(sweeps.Grid({"seed": [0]}, SWEEP), **o)),
    "measure_train": (measure_train, lambda **o: measure_train("numpy", ["fp32"], **o)),
    "step_phases": (step_phases, lambda **o: step_phases("numpy", "fp32", **o)),
    "run_histories": (
        sweeps.run_histories,
        lambda **o: sweeps.run_histories(sweeps.Grid({"seed": [0]}, SWEEP), **o),
    ),
}


def _keyword_only(fn: Callable[..., Any]) -> list[str]:
    return [p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY]


def _by_keyword(fn: Callable[..., Any]) -> list[str]:
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in inspect.signature(fn).parameters.values() if p.kind in kinds]


def _message(call: Callable[..., Any], **options: Any) -> str:
    with pytest.raises(TypeError) as caught:
        call(**options)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__  # one error, not one raised while handling another
    return str(caught.value)


@pytest.mark.parametrize("public", list(CALLS))
def test_the_calls_run_with_valid_options(public: str) -> None:
    fn, call = CALLS[public]
    assert "saturate" in _keyword_only(fn) or "block_size" in _keyword_only(fn)
    call()


@pytest.mark.parametrize("public", [*CALLS, *OWN])
def test_a_misspelt_option_names_the_public_function_and_the_closest_option(public: str) -> None:
    fn, call = {**CALLS, **OWN}[public]
    options = _keyword_only(fn)
    assert options, "the options are spelled out in the shown signature"
    for name in options:
        typo = name[0] + name[2:] + name[1]  # "saturate" -> "sturatea"
        assert typo not in _by_keyword(fn)
        expected = f"{public}() got an unexpected keyword argument {typo!r}: did you mean {name}?"
        assert _message(call, **{typo: 1}) == expected


@pytest.mark.parametrize("public", ["round_array", "add", "mx_round"])
def test_an_option_like_none_lists_what_the_function_takes(public: str) -> None:
    fn, call = CALLS[public]
    message = _message(call, zzzzqq=True)
    head = f"{public}() got an unexpected keyword argument 'zzzzqq': expected one of "
    assert message.startswith(head)
    assert message[len(head) :].split(", ") == _by_keyword(fn)
    assert "\n" not in message


def test_the_message_names_the_function_called_not_one_it_calls() -> None:
    # add hands its knobs to round_array; round_integers hands them to round_array_with_flags
    assert _message(CALLS["add"][1], rnd=1).startswith("add() got")
    assert _message(CALLS["round_integers"][1], rnd=1).startswith("round_integers() got")
    assert re.fullmatch(
        r"round_flushed\(\) got .*'sturate': did you mean saturate\?",
        _message(lambda **o: round_flushed(np.ones(3), "fp16", **o), sturate=True),
    )


def test_the_torch_simulation_names_simulate() -> None:
    torch = pytest.importorskip("torch")
    from floatlab.torch import simulate

    message = _message(lambda **o: simulate(torch.nn.Linear(2, 2), "bf16", **o), plicy="fp16")
    assert message.startswith("simulate() got an unexpected keyword argument 'plicy': ")


def test_a_refused_call_leaves_rng_as_it_was() -> None:
    rng = np.random.default_rng(5)
    state = rng.bit_generator.state
    with pytest.raises(TypeError, match="did you mean random_bits"):
        fl.round_array(X32, "fp16", "stochastic", rng=rng, random_bit=8)  # type: ignore[call-arg]
    assert rng.bit_generator.state == state


# ---- the building blocks, on functions of the test's own -----------------------------------------
def _take(*, scale: float = 1.0, shift: int = 0) -> float:
    if scale < 0:
        raise TypeError("scale: a negative scale is a type error here")
    return scale + shift


@spelled_out(_take)
def _shown(x: float, **options: Any) -> float:
    try:
        return x * _take(**options)
    except TypeError as e:
        raise unexpected_keyword(e) from None


def test_a_shown_function_has_its_options_spelled_out() -> None:
    assert list(inspect.signature(_shown).parameters) == ["x", "scale", "shift"]
    assert _shown(2.0, scale=3.0) == 6.0


def test_a_type_error_of_another_cause_is_left_as_it_is() -> None:
    with pytest.raises(TypeError, match=r"^scale: a negative scale is a type error here$"):
        _shown(1.0, scale=-1.0)


def test_a_misspelt_option_of_a_shown_function() -> None:
    with pytest.raises(
        TypeError, match=r"^_shown\(\) got an unexpected keyword argument 'shfit': did you mean shift\?$"
    ):
        _shown(1.0, shfit=2)


def test_a_wrong_name_passed_on_inside_is_not_blamed_on_the_caller() -> None:
    @spelled_out(_take)
    def inner_bug(x: float, **options: Any) -> float:
        try:
            return x * _take(**options, scael=2.0)  # type: ignore[call-arg]
        except TypeError as e:
            raise unexpected_keyword(e) from None

    with pytest.raises(TypeError, match=r"^_take\(\) got an unexpected keyword argument 'scael'$"):
        inner_bug(1.0, scale=2.0)
