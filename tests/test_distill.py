"""Online distillation from an LSTM teacher (attnflow.reproduction.training.distill)."""

from __future__ import annotations

import hashlib

import pytest
import torch
from torch.nn import functional as F

from attnflow.reproduction.training.distill import (
    DistillSettings,
    LSTMTeacher,
    soft_target_loss,
)

torch.set_num_threads(1)

TINY = {"train": 192, "validation": 16, "test": 16, "unseen": 16}


def test_soft_target_loss_is_kl_plus_the_targets_entropy():
    """Oracle: CE(q, softmax(z / T)) = KL(q || softmax(z / T)) + H(q), with torch's kl_div."""
    gen = torch.Generator().manual_seed(0)
    z, t = torch.randn(7, 2, generator=gen), torch.randn(7, 2, generator=gen)
    for temperature in (1.0, 2.5):
        q = F.softmax(t / temperature, -1)
        kl = F.kl_div(F.log_softmax(z / temperature, -1), q, reduction="batchmean")
        entropy = -(q * q.log()).sum(-1).mean()
        assert torch.allclose(soft_target_loss(z, q, temperature), kl + entropy, atol=1e-6)


def test_teacher_reads_the_last_real_token_whatever_the_padding():
    """A sentence alone and the same sentence right-padded in a batch give the same logits (eval mode)."""
    torch.manual_seed(0)
    teacher = LSTMTeacher(vocab_size=20, pad_id=0, settings=DistillSettings(teacher_hidden=16, teacher_embedding=8)).eval()
    short = torch.tensor([[2, 5, 6, 3]])
    batch = torch.tensor([[2, 5, 6, 3, 0, 0], [2, 7, 8, 9, 10, 3]])
    mask = (batch != 0).long()
    with torch.no_grad():
        alone = teacher(short).logits
        padded = teacher(batch, attention_mask=mask).logits
        # the last position of the padded row is a pad: reading it would give another answer
        wrong = teacher(batch, attention_mask=torch.ones_like(batch)).logits
    assert torch.allclose(alone[0], padded[0], atol=1e-6)
    assert not torch.allclose(alone[0], wrong[0], atol=1e-4)


def test_teacher_dropout_is_one_mask_per_sequence_on_lstm_inputs():
    teacher = LSTMTeacher(vocab_size=20, pad_id=0).train()
    x = torch.ones(3, 5, 256)
    dropped = teacher._sequence_dropout(x)
    assert torch.equal(dropped, dropped[:, :1].expand_as(dropped))  # the same mask at every position
    kept = (dropped[:, 0] != 0).float().mean().item()
    assert 0.1 < kept < 0.3  # hidden dropout 0.8 keeps about a fifth
    assert torch.equal(teacher.eval()._sequence_dropout(x), x)


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_distilled_training_gives_bit_identical_weights_from_a_seed(tmp_path):
    """Trained twice on a tiny slice: the same bytes for student and teacher; another seed differs."""
    from attnflow.hf import load_model
    from attnflow.reproduction.training.agreement import train

    reports = [train(tmp_path / name, seed=seed, epochs=1, sizes=TINY, distill=True, curve_every=1, curve_examples=8)
               for name, seed in (("a", 4), ("b", 4), ("c", 5))]
    for part in ("model.safetensors", "teacher/model.safetensors"):
        a, b, c = (_digest(tmp_path / name / part) for name in "abc")
        assert a == b and a != c, part
    report = reports[0]
    assert report["recipe"] == "online distillation from an LSTM teacher"
    assert report["distillation"]["settings"]["distill_rate"] == 0.9
    assert len(report["curve"]) == TINY["train"] // 64  # one point per step
    assert {"teacher_loss", "student_distill_loss", "student_gold_loss", "teacher_validation"} <= set(report["curve"][0])
    assert 0 <= report["teacher"]["test"]["overall"] <= 1 and report["train_cpu_seconds"] > 0
    model, tokenizer = load_model(str(tmp_path / "a"))
    with torch.no_grad():
        assert model(**tokenizer(["the key"], return_tensors="pt")).logits.shape == (1, 2)


@pytest.mark.parametrize("distill", [False, True])
def test_curve_evaluation_does_not_change_the_weights(tmp_path, distill):
    """Recording validation accuracy every step draws no random numbers: the weights are those of a run
    that records nothing (so the bundled labels-only model stays bit-identical)."""
    from attnflow.reproduction.training.agreement import train

    train(tmp_path / "every", seed=2, epochs=1, sizes=TINY, distill=distill, curve_every=1)
    train(tmp_path / "never", seed=2, epochs=1, sizes=TINY, distill=distill, curve_every=0)
    assert _digest(tmp_path / "every" / "model.safetensors") == _digest(tmp_path / "never" / "model.safetensors")


def test_bundled_distilled_student_records_its_recipe_and_its_teacher():
    """The bundled student says how it was trained; its teacher is not shipped (it retrains with the student)."""
    import json

    from attnflow.models import bundled_model_path

    path = bundled_model_path("agreement_distilled")
    report = json.loads((path / "training.json").read_text())
    assert report["recipe"] == "online distillation from an LSTM teacher" and report["seed"] == 0
    assert report["distillation"]["settings"] == {**report["distillation"]["settings"], "temperature": 1.0,
                                                  "distill_rate": 0.9, "gold_rate": 0.1}
    assert report["teacher"]["test"]["overall"] >= 0.95 and report["curve"]
    assert not (path / "teacher").exists()
