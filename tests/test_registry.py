"""The Registry type behind every lookup by name, and the registries of the package."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from floatlab.registry import Registry


def _colours() -> Registry[str]:
    return Registry(
        "colour",
        {"red": "#f00", "light-green": "#9f9", "Blue": "#00f"},
        aliases={"scarlet": "red", "navy": "Blue"},
        alike="_",
        sep="-",
    )


# ---- lookups, aliases, spelling ------------------------------------------------------------------
def test_a_registry_is_a_mapping_of_its_canonical_names() -> None:
    r = _colours()
    assert list(r) == ["red", "light-green", "Blue"] == list(r.names)
    assert len(r) == 3
    assert r["Blue"] == "#00f"
    assert dict(r) == {"red": "#f00", "light-green": "#9f9", "Blue": "#00f"}
    assert "Blue" in r
    assert "blue" not in r  # the mapping is by canonical name; lookup reads any spelling
    assert "navy" not in r
    with pytest.raises(KeyError):
        r["navy"]


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("red", "red"),
        (" RED ", "red"),
        ("Scarlet", "red"),
        ("blue", "Blue"),
        ("NAVY", "Blue"),
        ("light_green", "light-green"),
        ("Light-Green", "light-green"),
    ],
)
def test_lookup_reads_case_spaces_aliases_and_alike_characters(text: str, name: str) -> None:
    r = _colours()
    assert r.name(text) == name
    assert r.find(text) == name
    assert r.lookup(text) == r[name]


def test_spelling_is_only_what_the_registry_says() -> None:
    plain = Registry("model", {"mlp-relu": 1})
    assert plain.find("MLP-RELU") == "mlp-relu"
    assert plain.find("mlp_relu") is None  # no alike characters: "_" is not "-"
    assert plain.find("mlp relu") is None
    spaced = Registry("format", {"float8_e4m3fn": 1}, alike="- ", sep="_")
    assert spaced.key(" Float8-E4M3 FN") == "float8_e4m3_fn"
    assert spaced.find("FLOAT8-E4M3FN") == "float8_e4m3fn"
    with pytest.raises(ValueError, match="expected the one character"):
        Registry("format", alike="-")


def test_aliases_and_find_of_what_is_not_a_name() -> None:
    r = _colours()
    assert r.aliases() == {"scarlet": "red", "navy": "Blue"}
    assert r.find("purple") is None
    assert r.find(3) is None
    assert r.find(None) is None


# ---- did you mean -----------------------------------------------------------------------------------
def test_an_unknown_name_gets_the_closest_canonical_name_and_the_listing() -> None:
    r = _colours()
    expected = "expected one of red, light-green, Blue"
    assert str(r.unknown("rde")) == f"unknown colour 'rde': did you mean red? {expected}"
    with pytest.raises(ValueError, match=r"^unknown colour 'rde': did you mean red\? "):
        r.lookup("rde")
    # a misspelt alias suggests the name it stands for, not the alias
    assert r.closest("scarlett") == "red"
    assert r.closest("NAVVY") == "Blue"
    assert str(r.unknown("zzzzzz")) == f"unknown colour 'zzzzzz': {expected}"


def test_the_listing_and_the_wrong_type_message_are_the_registrys() -> None:
    r = Registry(
        "format", {"fp16": 16}, listing=lambda names: f"(known: {', '.join(names)})", kind="a format"
    )
    assert str(r.unknown("fp61")) == "unknown format 'fp61': did you mean fp16? (known: fp16)"
    assert str(r.unknown(16)) == "format 16: expected a format"
    plain = Registry("model", {"mlp": 1})
    assert str(plain.unknown(None)) == "model None: expected a name, one of mlp"


def test_a_long_value_is_shown_on_one_line_and_cut() -> None:
    message = str(_colours().unknown("x\n" * 200))
    assert "\n" not in message
    assert len(message) < 200


# ---- homes ----------------------------------------------------------------------------------------
def test_a_home_is_imported_on_first_use_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = "floatlab_registry_home_probe"
    (tmp_path / f"{module}.py").write_text("VALUE = object()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    r: Registry[Any] = Registry("thing", {"here": 1}, homes={"there": f"{module}:VALUE"})
    assert list(r) == ["here", "there"]
    assert "there" in r
    assert r.find("THERE") == "there"
    assert module not in sys.modules  # names, membership and spelling need no import
    value = r.lookup("there")
    assert module in sys.modules
    assert r["there"] is value is sys.modules[module].VALUE
    with pytest.raises(ValueError, match=r"expected 'package\.module:attr'"):
        r.add_home("bad", "no-colon")


def test_the_registry_module_loads_nothing_until_a_name_is_missed() -> None:
    probe = (
        "import sys\nfrom floatlab.registry import Registry\n"
        "r = Registry('x', {'a': 1}); r.lookup('A')\nprint('difflib' in sys.modules)\n"
        "try:\n    r.lookup('b')\nexcept ValueError:\n    print('difflib' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


# ---- adding and removing ----------------------------------------------------------------------------
def test_add_alias_and_remove() -> None:
    r = _colours()
    r.add("green", "#0f0", aliases=["Lime"])
    assert r.lookup("lime") == "#0f0"
    r.alias("crimson", "red")
    assert r.name("CRIMSON") == "red"
    with pytest.raises(ValueError, match="expected a canonical name"):
        r.alias("teal", "cyan")
    with pytest.raises(ValueError, match="expected a non-empty string"):
        r.add("  ", "#000")
    r.remove("scarlet")  # any spelling of the entry
    assert "red" not in r
    assert r.find("crimson") is None
    assert r.find("scarlet") is None


def test_a_name_another_entry_goes_by_is_taken_over() -> None:
    r = Registry("thing", {"one": 1}, aliases={"uno": "one"})
    r.add("ONE", 2)  # the same key: the new entry takes the old one's place, aliases and all
    assert list(r) == ["ONE"]
    assert r.lookup("one") == 2
    assert r.find("uno") is None
    r.add("two", 3, aliases=["ONE"])  # an alias that is another entry's name removes that entry
    assert list(r) == ["two"]
    assert r.lookup("one") == 3


# ---- every registry of the package -------------------------------------------------------------------
def _registries() -> list[tuple[str, Registry[Any], str, str]]:
    """(address, registry, a misspelling, the canonical name it should suggest)."""
    from floatlab.blocks.formats import BLOCK_FORMATS
    from floatlab.formats import FORMATS
    from floatlab.rounding.spec import MODE_DESCRIPTIONS
    from floatlab.train.data.datasets import DATA_LOADERS
    from floatlab.train.models.base import MODEL_CLASSES
    from floatlab.train.precision.policy import ALL_POLICIES
    from floatlab.train.precision.presets import PRESETS
    from floatlab.train.precision.scaler import SCALER_PRESETS

    return [
        ("floatlab.formats.FORMATS", FORMATS, "flaot16", "fp16"),
        ("floatlab.blocks.BLOCK_FORMATS", BLOCK_FORMATS, "mxfp8-e4m4", "mxfp8_e4m3"),
        ("floatlab.rounding.MODE_DESCRIPTIONS", MODE_DESCRIPTIONS, "stochastc", "stochastic"),
        ("floatlab.train.precision.policy.ALL_POLICIES", ALL_POLICIES, "mixd_fp16", "mixed-fp16"),
        ("floatlab.train.precision.presets.PRESETS", PRESETS, "apex-O4", "apex-O3"),
        ("floatlab.train.precision.scaler.SCALER_PRESETS", SCALER_PRESETS, "fastia", "fastai"),
        ("floatlab.train.models.base.MODEL_CLASSES", MODEL_CLASSES, "transfomer", "transformer"),
        ("floatlab.train.data.datasets.DATA_LOADERS", DATA_LOADERS, "digts", "digits"),
    ]


@pytest.mark.parametrize("index", range(8), ids=lambda i: _registries()[i][0].rsplit(".", 1)[1])
def test_every_registry_is_a_registry_and_suggests_a_name(index: int) -> None:
    address, registry, misspelt, closest = _registries()[index]
    assert isinstance(registry, Registry), address
    assert registry.find(misspelt) is None
    assert registry.closest(misspelt) == closest
    with pytest.raises(
        ValueError, match=f"^unknown {registry.what} '{misspelt}': did you mean {closest}\\? "
    ):
        registry.lookup(misspelt)


def test_the_public_lookups_answer_through_their_registries() -> None:
    import floatlab as fl
    from floatlab.blocks import get_mx_format
    from floatlab.rounding import check_rounding
    from floatlab.train import get_data, get_model, get_policy, get_preset
    from floatlab.train.models import model_name
    from floatlab.train.precision.scaler import LossScaler

    lookups: list[tuple[Callable[[], object], str]] = [
        (lambda: fl.get_format("flaot16"), "did you mean fp16?"),
        (lambda: get_mx_format("nvfp5"), "did you mean nvfp4?"),
        (lambda: check_rounding("stochastc"), "did you mean stochastic?"),
        (lambda: get_policy("mixd-fp16"), "did you mean mixed-fp16?"),
        (lambda: get_preset("fastia"), "did you mean fastai?"),
        (lambda: LossScaler.preset("fastia"), "did you mean fastai?"),
        (lambda: get_model("transfomer", 4, 2), "did you mean transformer?"),
        (lambda: model_name("atention"), "did you mean attention?"),
        (lambda: get_data("digts"), "did you mean digits?"),
    ]
    for call, words in lookups:
        with pytest.raises(ValueError, match=re.escape(words)):
            call()
