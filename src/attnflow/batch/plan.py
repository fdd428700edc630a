"""Cutting a batch into shards: rows sorted by token length (so that each shard's forward passes pad
little), cut into shards of ``shard_size`` rows. The plan depends only on the input, the tokenizer and
``shard_size`` — never on the engine or the number of workers — so a rerun finds the same shards and
can skip the finished ones."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from attnflow.batch.inputs import Inputs


@dataclass(frozen=True)
class Shard:
    name: str  # "part-00000": the name of its files
    rows: tuple[int, ...]  # input rows, shortest first


def token_lengths(values: list, tokenizer: Any) -> list[int]:
    """Tokens per text (special tokens included); 0 for rows that will fail (not a text)."""
    texts = [(i, v) for i, v in enumerate(values) if isinstance(v, str) and v.strip()]
    lengths = [0] * len(values)
    step = 4096  # bounded memory on large inputs; fast tokenizers batch internally
    for start in range(0, len(texts), step):
        chunk = texts[start:start + step]
        ids = tokenizer([v for _, v in chunk], add_special_tokens=True)["input_ids"]
        for (i, _), seq in zip(chunk, ids):
            lengths[i] = len(seq)
    return lengths


def plan(lengths: list[int], shard_size: int) -> list[Shard]:
    """Shards of ``shard_size`` rows, grouped by length (stable: ties keep input order)."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    return [Shard(f"part-{k:05d}", tuple(order[s:s + shard_size]))
            for k, s in enumerate(range(0, len(order), shard_size))]


def fingerprint(inputs: Inputs, shard: Shard) -> str:
    """What a shard holds (rows, ids, values, labels): a rerun on changed input is refused, not mixed."""
    digest = hashlib.sha256()
    for i in shard.rows:
        value = inputs.values[i]
        value = value.hex() if isinstance(value, bytes) else value
        digest.update(json.dumps([i, inputs.ids[i], value, inputs.labels[i]], default=repr).encode("utf-8",
                                                                                                  "surrogatepass"))
        digest.update(b"\n")
    return digest.hexdigest()[:16]
