"""Generation results without a model: token lookup, ranking with and without common words, JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnflow import AttnflowError, Generation
from attnflow.views.words import is_content


def make() -> Generation:
    prompt = ["The", " keys", " to", " the", " cabinet", ","]
    rows = np.zeros((2, 3, 8))
    rows[:, :, :6] = [0.40, 0.10, 0.20, 0.05, 0.15, 0.10]  # every layer alike
    rows[1, :, 5] = 0.05
    rows[1, :, 6] = 0.05  # the second generated token also draws on the first
    return Generation(model="m", prompt="".join(prompt), prompt_tokens=prompt, generated_tokens=[" are", " old"],
                      completion=" are old", rows=rows, generated_ids=[1, 2])


def test_is_content():
    assert [is_content(t) for t in ["The", " keys", " to", ",", "Ġcabinet", "?!", " 42", "\n"]] == \
        [False, True, False, False, True, False, True, False]


def test_top_and_content_only():
    gen = make()
    assert [t for _, t, _ in gen.top(0, 3)] == ["The", " to", " cabinet"]
    assert [t for _, t, _ in gen.top(0, 3, content_only=True)] == [" cabinet", " keys"]
    assert gen.M.shape == (2, 6, 3) and gen.M[1, 5, 0] == pytest.approx(0.05)


def test_token_index_by_position_or_text():
    gen = make()
    assert [gen.token_index(x) for x in (0, -1, "1", " old", "are")] == [0, 1, 1, 1, 0]
    for bad, msg in [(2, "outside"), ("-3", "outside"), ("new", "no generated token"), (1.5, "index or")]:
        with pytest.raises(AttnflowError, match=msg):
            gen.token_index(bad)


def test_json_schema_keys():
    data = json.loads(make().to_json())
    assert {"kind", "model", "prompt", "prompt_tokens", "generated_tokens", "method", "M", "rows"} <= set(data)
    assert data["kind"] == "generation" and data["method"] == "rollout"
    assert np.asarray(data["M"]).shape == (2, 6, 3) and np.asarray(data["rows"]).shape == (2, 3, 8)
