"""Verb-number prefixes from the Penn Treebank text (built at run time; nothing derived is committed)."""

import json

import pytest

from attnflow.data import ptb_agreement
from attnflow.errors import AttnflowError

TEXT = """the keys to the cabinet are on the table
 he said the company has n't been able to sell the unit and has no plans to have it
 the dow 's decline was not seen as a sign that investors would have to sell
 i have no idea whether you are right
 keys are here
 the man who owns the <unk> is here"""


def test_prefixes_stop_before_number_marked_finite_verbs():
    got = [(e.text, e.label) for e in ptb_agreement.examples_from_text(TEXT)]
    assert got == [
        ("the keys to the cabinet", 1),
        ("he said the company", 0),  # the second "has" follows "and"; "to have" is an infinitive
        ("the dow 's decline", 0),  # "would have" is not finite
        ("the man who owns the <unk>", 0),  # "i have" and "you are" do not follow number; "keys" is 1 word
    ]
    assert ptb_agreement.examples_from_text(" ".join(["w"] * 61) + " is", max_words=60) == []


@pytest.mark.skipif(not ptb_agreement.available(), reason="the treebank package is an optional extra")
def test_treebank_splits_are_deterministic_and_balanced_enough_to_learn():
    data = ptb_agreement.splits(0)
    assert {k: len(v) for k, v in data.items()} == {"train": 20349, "validation": 1559, "test": 1899}
    assert data["test"][:5] == ptb_agreement.splits(0)["test"][:5] != ptb_agreement.splits(1)["test"][:5]
    plural = sum(e.label for e in data["train"]) / len(data["train"])
    assert 0.3 < plural < 0.4  # natural text: mostly singular verbs, as in Linzen et al.'s corpus
    assert len(ptb_agreement.vocabulary()) == 9998  # Mikolov's 10,000 words without <unk> and the line end


@pytest.mark.skipif(not ptb_agreement.available(), reason="the treebank package is an optional extra")
def test_reproduce_on_a_tiny_ptb_model_end_to_end(tmp_path):
    """A few training steps on 128 treebank prefixes, then both protocols on 3 test prefixes; a model
    trained on one data set is refused on the other."""
    from attnflow.reproduction import reproduce
    from attnflow.reproduction.training.agreement import train

    tiny = {"train": 128, "validation": 16, "test": 16}
    report = train(tmp_path / "ptb", seed=0, epochs=1, data="ptb", sizes=tiny)
    assert report["data"] == "ptb" and json.loads((tmp_path / "ptb" / "training.json").read_text())["data"] == "ptb"
    for protocol in ("paper", "words"):
        run = reproduce(tmp_path / "ptb", 3, data="ptb", protocol=protocol)
        assert run.data == "ptb" and run.examples == 3 and run.summary[("flow", "blank_out")]["mean"].shape == (6,)
    with pytest.raises(AttnflowError, match="trained on --data ptb"):
        reproduce(tmp_path / "ptb", 3)
    with pytest.raises(AttnflowError, match="trained on the templated sentences"):
        reproduce("agreement_bert", 3, data="ptb")
