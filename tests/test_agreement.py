"""The agreement generator (determinism, balance, attractor counts) and the bundled model."""

import json
from collections import Counter

import pytest
import torch

from attnflow.data import agreement
from attnflow.data.agreement_lexicon import NOUNS
from attnflow.errors import AttnflowError

SMALL = {"train": 400, "validation": 40, "test": 200, "unseen": 100}
NUMBER = {form: plural for pair in NOUNS for plural, form in enumerate(pair)}


def test_same_seed_same_splits_other_seed_other_splits():
    assert agreement.splits(3, SMALL) == agreement.splits(3, SMALL)
    assert agreement.splits(3, SMALL)["train"] != agreement.splits(4, SMALL)["train"]


def test_splits_are_balanced_disjoint_and_templates_held_out():
    data = agreement.splits(0, SMALL)
    for name, examples in data.items():
        assert len(examples) == SMALL[name]
        assert Counter(e.label for e in examples) == {0: SMALL[name] // 2, 1: SMALL[name] // 2}
    texts = [{e.text for e in v} for v in data.values()]
    assert sum(map(len, texts)) == len(set().union(*texts))  # no sentence in two splits, none twice
    assert {e.template for e in data["unseen"]} == set(agreement.UNSEEN_TEMPLATES)
    seen = {e.template for k in ("train", "validation", "test") for e in data[k]}
    assert seen == set(agreement.SEEN_TEMPLATES)


def test_subject_label_and_attractors_match_the_words():
    for e in agreement.splits(1, SMALL)["test"] + agreement.splits(1, SMALL)["unseen"]:
        words = e.text.split()
        assert NUMBER[words[e.subject]] == e.label
        # Linzen et al.: attractors are later nouns of the other number.
        later = [NUMBER[w] for w in words[e.subject + 1 :] if w in NUMBER]
        assert e.attractors == sum(n != e.label for n in later), e.text


def test_odd_sizes_are_refused():
    with pytest.raises(AttnflowError, match="even"):
        agreement.splits(0, {"test": 3})


@pytest.mark.parametrize(("arch", "last"), [("gpt2-blocks", "[EOS]"), ("bert", None)])
def test_tokenizer_knows_every_generated_word(arch, last):
    from attnflow.reproduction.training.agreement import build_tokenizer

    tok = build_tokenizer(arch)
    texts = [e.text for e in agreement.splits(0, SMALL)["train"]]
    ids = tok(texts)["input_ids"]
    assert all(tok.unk_token_id not in row and row[0] == tok.cls_token_id for row in ids)
    assert tok("The KEY")["input_ids"] == tok("the key")["input_ids"]
    ends = {tok.convert_ids_to_tokens(row[-1]) for row in ids}
    assert ends == {last} if last else all(len(row) == len(t.split()) + 1 for row, t in zip(ids, texts))


@pytest.mark.parametrize(("name", "architecture"), [("agreement", "MegatronBertForSequenceClassification"),
                                                    ("agreement_distilled", "MegatronBertForSequenceClassification"),
                                                    ("agreement_bert", "BertForSequenceClassification")])
def test_bundled_model_loads_offline_and_reaches_its_reported_accuracy(name, architecture):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from attnflow.models import bundled_model_path
    from attnflow.reproduction.training.agreement import accuracy

    path = bundled_model_path(name)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert type(model).__name__ == architecture and not model.config.is_decoder  # bidirectional
    assert (path / "model.safetensors").stat().st_size < 6_000_000
    assert model.config.num_hidden_layers == 6 and model.config.num_attention_heads == 8
    assert model.config.hidden_size == 128 and model.config.id2label == {0: "singular", 1: "plural"}
    report = json.loads((path / "training.json").read_text())
    test = agreement.splits(report["seed"])["test"][:1000]
    got = accuracy(model, tokenizer, test)
    assert got["overall"] >= 0.95
    assert abs(got["overall"] - report["test_first_1000"]) < 2e-3
    with torch.no_grad():
        logits = model(**tokenizer(["the key to the cabinets", "the keys to the cabinet"], return_tensors="pt")).logits
    assert logits.argmax(-1).tolist() == [0, 1]


def test_training_script_writes_a_folder_that_loads_back(tmp_path):
    """Both architectures of the table train end to end (a few steps on a tiny split) and reload offline."""
    from attnflow.hf import load_model
    from attnflow.reproduction.training.agreement import train

    tiny = {"train": 128, "validation": 16, "test": 16, "unseen": 16}
    for arch in ("gpt2-blocks", "bert"):
        report = train(tmp_path / arch, seed=3, epochs=1, arch=arch, sizes=tiny)
        assert report["arch"] == arch and report["sizes"] == tiny and len(report["validation_by_epoch"]) == 1
        model, tokenizer = load_model(str(tmp_path / arch))
        with torch.no_grad():
            assert model(**tokenizer(["the key"], return_tensors="pt")).logits.shape == (1, 2)


def test_unknown_bundled_model_is_an_actionable_error():
    from attnflow.models import bundled_model_path

    with pytest.raises(AttnflowError, match="available: agreement"):
        bundled_model_path("gpt5")
