"""Character-level text: the shipped corpus and its checksum, the split into windows, encoding,
bits per character, the history's tidy table (CSV, pandas) and sampling.

The model here is :class:`BigramLM` (logits = a row of a table per character), small enough that
its loss, gradients and greedy text have exact float64 oracles; the CLI tests use it as a stand-in
for the transformer.
"""

from __future__ import annotations

import csv
import hashlib
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from toy_models import BigramLM

import floatlab
from floatlab.train import History, TrainConfig, Trainer
from floatlab.train.analysis.sampling import sample
from floatlab.train.data import get_data
from floatlab.train.data import text as tx
from floatlab.train.history import CSV_FIELDS, bits_per_char
from floatlab.train.optim import make_optimizer
from floatlab.train.precision import Array

CORPUS_FILE = Path(floatlab.__file__).parent / "data" / tx.CORPUS


def bigram_trainer(precision: str = "fp32", *, steps: int = 30, context: int = 16, **kw: Any) -> Trainer:
    data = tx.load_text(context=context)
    cfg = TrainConfig(
        data="text", precision=precision, optimizer="adamw", lr=0.05, steps=steps, context=context, **kw
    )
    model = BigramLM(context, data.n_classes)
    return Trainer(model, data, cfg.make_policy(), optimizer=make_optimizer("adamw", 0.05), config=cfg)


@pytest.fixture(scope="module")
def trained() -> Trainer:
    """A bigram model trained 30 steps, evaluated every 10 (not to be changed by the tests)."""
    tr = bigram_trainer(eval_every=10)
    tr.run()
    return tr


# ---- the corpus -------------------------------------------------------------------------------------
def test_the_shipped_corpus_matches_its_checksum_and_its_readme() -> None:
    data = CORPUS_FILE.read_bytes()
    assert hashlib.sha256(data).hexdigest() == tx.CORPUS_SHA256
    assert 600_000 <= len(data) <= 1_000_000
    assert data.isascii()
    assert b"\r" not in data
    readme = (CORPUS_FILE.parent / "README.md").read_text()
    assert tx.CORPUS_SHA256 in readme
    assert f"{len(data):,} bytes" in readme
    text = tx.read_text()
    assert text == data.decode("ascii")
    lines = text.split("\n")
    assert lines[:2] == ["Genesis 1", "In the beginning God created the heaven and the earth."]
    headings = [ln for ln in lines if re.fullmatch(r"(Genesis|Exodus|Leviticus|Numbers|Deuteronomy) \d+", ln)]
    assert len(headings) == 50 + 40 + 27 + 36 + 34  # the chapters of the five books
    assert not re.search(r"^\s*\d+ ", text, re.MULTILINE)  # no verse numbers left


def test_a_corrupted_corpus_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytearray(CORPUS_FILE.read_bytes())
    data[1000] ^= 0x20  # one letter's case
    bad = tmp_path / "copy.txt"
    bad.write_bytes(bytes(data))
    digest = hashlib.sha256(bytes(data)).hexdigest()
    expected = f"corpus file '{bad}' fails its checksum: sha256 {digest}, expected {tx.CORPUS_SHA256}"
    with pytest.raises(ValueError, match="fails its checksum") as e:
        tx.load_text(path=bad, sha256=tx.CORPUS_SHA256)
    assert str(e.value) == expected
    # the shipped file, against a digest it does not have
    monkeypatch.setattr(tx, "CORPUS_SHA256", "0" * 64)
    with pytest.raises(ValueError, match="fails its checksum") as e:
        get_data("text")
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"corpus file 'floatlab/data/{tx.CORPUS}' fails its checksum: sha256 ")
    assert message.endswith(f"expected {'0' * 64}")


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"caf\xe9 au lait\n" * 10, "is not UTF-8: byte 0xE9 at offset 3"),
        (b"x", "holds 1 characters: expected some text"),
        (b"abcdef" * 3, "must hold a window of context + 1 characters"),
    ],
)
def test_a_users_text_file_is_checked(tmp_path: Path, content: bytes, words: str) -> None:
    path = tmp_path / "mine.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(words)) as e:
        tx.load_text(path=path, context=8)
    assert str(path) in str(e.value) or "context" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_users_text_file_is_read_within_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "mine.txt"
    path.write_text("héllo wörld\n" * 100, encoding="utf-8")
    assert tx.read_text(path) == "héllo wörld\n" * 100  # any UTF-8, no checksum
    with pytest.raises(ValueError, match=r"holds 1,400 bytes, over the cap of 1,000: refused"):
        tx.read_text(path, max_bytes=1000)
    for missing, what in ((tmp_path / "none.txt", "no such file"), (tmp_path, "is a directory")):
        with pytest.raises(ValueError, match=what):
            tx.read_text(missing)


# ---- the split --------------------------------------------------------------------------------------
def unique_text(n: int, seed: int = 0) -> str:
    """Random text whose every 6 characters occur once: a window's text tells where it was cut."""
    rng = np.random.default_rng(seed)
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ .,;"
    text = "".join(letters[i] for i in rng.integers(0, len(letters), n))
    grams = [text[i : i + 6] for i in range(n - 5)]
    assert len(set(grams)) == len(grams)
    return text


@pytest.mark.parametrize(("context", "seed"), [(8, 0), (15, 3)])
def test_the_split_is_by_position_and_the_labels_are_the_next_characters(
    tmp_path: Path, context: int, seed: int
) -> None:
    text = unique_text(40_000)
    path = tmp_path / "u.txt"
    path.write_text(text)
    d = tx.load_text(path=path, context=context, val_fraction=0.25, seed=seed)
    split = 30_000  # the last quarter is validation
    assert d.vocab == "".join(sorted(set(text)))

    def starts(x: Array, y: Array) -> list[int]:
        assert x.shape == y.shape
        assert x.shape[1] == context
        assert (x[:, 1:] == y[:, :-1]).all()  # y is x shifted by one
        out = []
        for xr, yr in zip(x, y, strict=True):
            window = "".join(d.vocab[i] for i in xr) + d.vocab[yr[-1]]
            at = text.find(window)
            assert at >= 0
            assert text.find(window, at + 1) == -1
            out.append(at)
        return out

    train, val = starts(d.x_train, d.y_train), starts(d.x_test, d.y_test)
    assert max(train) + context + 1 <= split <= min(val)  # no window reaches into the other part
    assert np.diff(train).tolist() == [context] * (len(train) - 1)  # end to end: each label once
    assert train[0] < context
    assert len(train) >= (split - context) // context - 1
    assert np.all(np.diff(val) >= context + 1)  # validation windows do not overlap
    assert len(val) == min(tx.VAL_WINDOWS, 10_000 // (context + 1))
    assert val[-1] + context + 1 > len(text) - 2 * (context + 1)  # spread to the end of the text


def test_training_windows_move_with_the_seed_and_validation_does_not() -> None:
    a, b = tx.load_text(context=16, seed=0), tx.load_text(context=16, seed=5)
    assert (a.x_test == b.x_test).all()
    assert not np.array_equal(a.x_train[:10], b.x_train[:10])
    assert a.info()["kind"] == "text"
    assert a.info()["vocab_size"] == 72 == a.n_classes
    assert get_data("digits").info()["kind"] == "classes"


def test_encode_and_decode_round_trip() -> None:
    text = tx.read_text()
    vocab = tx.vocabulary(text)
    ids = tx.encode(text, vocab)
    assert ids.dtype == np.int64
    assert ids.shape == (len(text),)
    assert [vocab[i] for i in ids[:5]] == list(text[:5])
    assert tx.decode(ids, vocab) == text
    with pytest.raises(ValueError, match=r"characters 'é', '\\n' are not in the vocabulary \(3 characters"):
        tx.encode("aé\n", "abc")
    with pytest.raises(ValueError, match="ids from 0 to 3: expected 0 to 2"):
        tx.decode(np.array([0, 3]), "abc")


# ---- loss in bits per character ---------------------------------------------------------------------
def test_validation_loss_against_float64_and_bits_per_char(trained: Trainer) -> None:
    d = trained.data
    E = trained.params["E"].astype(np.float64)
    z = E[d.x_test]
    logp = z - z.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    oracle = -np.take_along_axis(logp, d.y_test[..., None], -1).mean()
    loss = trained.evaluate(d.x_test, d.y_test).loss
    assert loss == pytest.approx(oracle, rel=1e-5)
    s = trained.history.summary()
    assert s["test_loss"] == pytest.approx(oracle, rel=1e-5)
    assert s["bits_per_char"] == s["test_loss"] / math.log(2)
    assert 3.0 < s["bits_per_char"] < 5.5  # learned something: a uniform guess is log2(72) = 6.17
    assert bits_per_char(None) is None


def test_bits_per_char_only_for_text_and_old_histories_load() -> None:
    old = {"label": "x", "meta": {"data": {"name": "digits"}}, "steps": {"step": [], "loss": []}}
    h = History.from_dict(old)
    assert h.summary()["bits_per_char"] is None
    assert h.summary()["stopped"] == ""
    h.log_eval(epoch=1, step=0, train_loss=1.0, test_loss=2.0, test_accuracy=0.5)
    assert h.summary()["bits_per_char"] is None
    h.meta["data"]["kind"] = "text"
    h.meta["stopped"] = "step 3: the loss became nan"
    assert h.summary()["bits_per_char"] == 2.0 / math.log(2)
    assert h.summary()["stopped"] == "step 3: the loss became nan"


# ---- the tidy table ---------------------------------------------------------------------------------
def test_csv_round_trips_against_the_history(trained: Trainer, tmp_path: Path) -> None:
    h = History.from_dict(trained.history.to_dict())
    h.log_eval(epoch=9, step=10, train_loss=None, test_loss=float("inf"), test_accuracy=0.0)  # a 2nd at 10
    path = tmp_path / "h.csv"
    assert h.save(path) == path
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == CSV_FIELDS
    body = rows[1:]
    steps = [r for r in body if r[CSV_FIELDS.index("loss")] != ""]
    assert len(steps) == h.n_steps == 30
    for i, r in enumerate(steps):
        for k in ("step", "epoch"):
            assert int(r[CSV_FIELDS.index(k)]) == h.steps[k][i]
        for k in ("loss", "accuracy", "scale", "flushed", "swallowed", "lr"):
            assert float(r[CSV_FIELDS.index(k)]) == h.steps[k][i]  # exact
        assert r[CSV_FIELDS.index("skipped")] == str(h.steps["skipped"][i])
        assert r[CSV_FIELDS.index("grad_norm")] == ""
        assert r[CSV_FIELDS.index("fault")] == h.steps["fault"][i]
    evals = [r for r in body if r[CSV_FIELDS.index("test_loss")] != ""]
    assert h.evals["step"] == [10, 20, 30, 10]
    assert [int(r[0]) for r in evals] == [10, 10, 20, 30]  # in step order, each evaluation once
    for j, r in zip([0, 3, 1, 2], evals, strict=True):
        assert float(r[CSV_FIELDS.index("test_loss")]) == h.evals["test_loss"][j]
        assert int(r[CSV_FIELDS.index("eval_epoch")]) == h.evals["epoch"][j]
    assert len(body) == 31  # the second evaluation at step 10 has a row of its own, after step 10's
    assert [int(r[0]) for r in body[9:12]] == [10, 10, 11]
    assert body[10][CSV_FIELDS.index("loss")] == ""
    with pytest.raises(ValueError, match="a CSV holds the per-step table only"):
        History.load(path)


def test_to_pandas_matches_the_csv(trained: Trainer, tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    h = History.from_dict(trained.history.to_dict())
    h.log_eval(epoch=0, step=0, train_loss=None, test_loss=4.0, test_accuracy=0.1)  # before any step
    df = h.to_pandas()
    assert list(df.columns) == list(CSV_FIELDS)
    assert len(df) == h.n_steps + 1
    assert df["step"].tolist()[:2] == [0, 1]
    read = pd.read_csv(
        h.save(tmp_path / "h.csv"), keep_default_na=False, na_values=[""], dtype={"fault": str}
    )
    for k in CSV_FIELDS:
        if k == "fault":
            assert df[k].tolist() == read[k].fillna("").tolist()
        elif k == "skipped":
            assert df[k].tolist() == [bool(v) and v == v for v in read[k].tolist()]
        else:
            np.testing.assert_array_equal(df[k].to_numpy(float), read[k].to_numpy(float), err_msg=k)


def test_to_pandas_without_pandas_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_pandas(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "pandas":
            raise ImportError("No module named 'pandas'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pandas)
    with pytest.raises(ImportError, match=r"^History.to_pandas needs pandas: pip install pandas$"):
        History("x").to_pandas()


# ---- sampling ---------------------------------------------------------------------------------------
def test_greedy_sampling_follows_the_likeliest_bigram(trained: Trainer) -> None:
    vocab = trained.data.vocab
    E = trained.params["E"]
    state = trained.P.rng.bit_generator.state
    text = sample(trained, "And the", n_chars=60, temperature=0)
    assert len(text) == 60
    assert set(text) <= set(vocab)
    assert sample(trained, "And the", n_chars=60, temperature=0, seed=9) == text  # no randomness
    prev, oracle = vocab.index("e"), []
    for _ in range(60):
        prev = int(np.argmax(E[prev]))
        oracle.append(vocab[prev])
    assert text == "".join(oracle)
    assert trained.P.rng.bit_generator.state == state  # the trainer is left as it was


def test_sampling_draws_from_the_tempered_probabilities(trained: Trainer) -> None:
    a = sample(trained, n_chars=400, temperature=1.0, seed=1)
    assert a == sample(trained, n_chars=400, temperature=1.0, seed=1)
    assert a != sample(trained, n_chars=400, temperature=1.0, seed=2)
    assert len(a) == 400
    assert set(a) <= set(trained.data.vocab)
    assert len(set(a)) > len(set(sample(trained, n_chars=400, temperature=0.2, seed=1)))
    assert sample(trained, "In", n_chars=0) == ""


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"prompt": "naïve"}, "characters 'ï' are not in the vocabulary (72 characters:"),
        ({"temperature": -1.0}, "temperature=-1.0: expected a finite number >= 0"),
        ({"temperature": float("nan")}, "temperature=nan"),
        ({"n_chars": -5}, "n_chars=-5: expected an integer from 0 to 100,000"),
    ],
)
def test_bad_sampling_input_is_one_line(trained: Trainer, kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)) as e:
        sample(trained, **kwargs)
    assert words in str(e.value)
    assert "\n" not in str(e.value)


def test_sampling_a_diverged_model_says_so() -> None:
    tr = bigram_trainer(steps=1)
    tr.params["E"][:] = np.nan
    with pytest.raises(
        ValueError, match=r"logits are not finite .* at character 1: its weights have diverged"
    ):
        sample(tr, "In", n_chars=3)
