"""Online distillation of the agreement model from an LSTM teacher (the recipe of the paper's checkpoint).

    python -m attnflow.reproduction.training.agreement --distill --seed 0 --out DIR

The checkpoint the paper's notebook evaluates (samiraabnar/Reflect, ``notebooks/attention_flow.ipynb``)
is the student of an online distillation, ``online_dstl_6_crs_slw_teacher_cl_lstm_..._small_lstm_v4_...
_student_cl_bert_..._small_gpt_v9``: Abnar, Dehghani & Zuidema (2020), "Transferring Inductive Biases
through Knowledge Distillation". Teacher and student are trained together, one batch at a time:

1. the teacher (an LSTM classifier) takes one step on the batch's labels;
2. its logits from that same training-mode pass (dropout on), divided by the temperature ``T`` and
   soft-maxed, are the soft targets (no gradient flows into the teacher);
3. the student takes one step on ``T**2 * distill_rate * CE(soft targets, softmax(student / T))
   + gold_rate * CE(labels, student)``.

What is taken from Reflect and what is our choice (and why) is in ``docs/reproduction.md``, section
"Online distillation from an LSTM teacher"; ``REFLECT`` records the values read from its configs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class DistillSettings:
    """The distillation recipe. Defaults: Reflect's ``dstl_6_crs_slw`` loss and ``small_lstm_v4`` teacher."""

    temperature: float = 1.0  # distill_temp
    distill_rate: float = 0.9  # student_distill_rate
    gold_rate: float = 0.1  # student_gold_rate
    teacher_embedding: int = 256  # small_lstm_v4 embedding_dim
    teacher_hidden: int = 256  # hidden_dim
    teacher_depth: int = 2  # depth
    teacher_input_dropout: float = 0.2  # input_dropout_rate
    teacher_hidden_dropout: float = 0.8  # hidden_dropout_rate
    teacher_lr: float = 1e-3  # ours (Reflect: 1e-4 over far more steps; see the docs)
    teacher_decay_steps: int = 10000  # teacher_decay_steps, decay rate 0.96 (exponential, no warm-up)


#: Where each default comes from (samiraabnar/Reflect paths).
REFLECT = {
    "distill config": "dstl_6_crs_slw (util/distill_params.py), named by the checkpoint in notebooks/attention_flow.ipynb",
    "teacher config": "small_lstm_v4 (printed by notebooks/attention_flow.ipynb; model cl_lstm, tf2_models/lm_lstm.py)",
    "loss": "distill/online_distiller.py student_train_step; tf2_models/metrics.py distill_loss",
}


class LSTMTeacher(nn.Module):
    """Reflect's ``ClassifierLSTM``: embedding, stacked LSTMs, a dense layer on the last real token.

    Input ``(batch, n)`` token ids padded on the right (``attention_mask`` marks the real tokens); the
    state of the last real token (our ``[EOS]``) is classified, as Reflect reads its last non-padding
    position. Dropout as Keras applies it there: ``input_dropout`` element-wise on the embeddings,
    ``hidden_dropout`` on every LSTM layer's input with one mask per sequence (Keras' ``LSTM(dropout=)``),
    and element-wise on the outputs. Keras' recurrent dropout on the hidden state is not reproduced
    (PyTorch's fused LSTM has none). Initialised like Keras' defaults (Glorot-uniform input kernels,
    orthogonal recurrent kernels, zero biases with a forget-gate bias of 1, uniform(-0.05, 0.05)
    embeddings, Glorot-uniform head).
    """

    def __init__(self, vocab_size: int, pad_id: int, settings: DistillSettings = DistillSettings(), labels: int = 2):
        super().__init__()
        s = settings
        self.input_dropout, self.hidden_dropout = s.teacher_input_dropout, s.teacher_hidden_dropout
        self.embed = nn.Embedding(vocab_size, s.teacher_embedding, padding_idx=pad_id)
        sizes = [s.teacher_embedding] + [s.teacher_hidden] * s.teacher_depth
        self.layers = nn.ModuleList(nn.LSTM(sizes[i], sizes[i + 1], batch_first=True) for i in range(s.teacher_depth))
        self.head = nn.Linear(s.teacher_hidden, labels)
        with torch.no_grad():
            nn.init.uniform_(self.embed.weight, -0.05, 0.05)
            for lstm in self.layers:
                nn.init.xavier_uniform_(lstm.weight_ih_l0)
                for gate in lstm.weight_hh_l0.chunk(4, 0):  # Keras: one orthogonal matrix per gate block
                    nn.init.orthogonal_(gate)
                lstm.bias_ih_l0.zero_()
                lstm.bias_hh_l0.zero_()
                h = lstm.hidden_size
                lstm.bias_ih_l0[h : 2 * h] = 1.0  # PyTorch's gate order is input, forget, cell, output
            nn.init.xavier_uniform_(self.head.weight)
            self.head.bias.zero_()

    def _sequence_dropout(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.hidden_dropout == 0:
            return x
        keep = 1 - self.hidden_dropout
        mask = torch.bernoulli(torch.full((x.shape[0], 1, x.shape[2]), keep)) / keep
        return x * mask

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **_) -> SimpleNamespace:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        x = F.dropout(self.embed(input_ids), self.input_dropout, self.training)
        for lstm in self.layers:
            x, _ = lstm(self._sequence_dropout(x))  # right padding never reaches an earlier position
        x = F.dropout(x, self.hidden_dropout, self.training)
        last = attention_mask.sum(1) - 1
        return SimpleNamespace(logits=self.head(x[torch.arange(len(x)), last]))


def soft_target_loss(student_logits: torch.Tensor, soft_targets: torch.Tensor, temperature: float) -> torch.Tensor:
    """Mean over the batch of the cross-entropy ``-sum_c q_c log softmax(z / T)_c`` (Reflect's distill_loss)."""
    return -(soft_targets * F.log_softmax(student_logits / temperature, dim=-1)).sum(-1).mean()


class OnlineDistiller:
    """One teacher step, then one student step, per batch (Reflect's ``OnlineDistiller.distill_loop``)."""

    def __init__(self, student: nn.Module, teacher: LSTMTeacher, student_opt, student_sched,
                 settings: DistillSettings = DistillSettings()):
        self.student, self.teacher, self.settings = student, teacher, settings
        self.student_opt, self.student_sched = student_opt, student_sched
        # Reflect: RAdam, epsilon 1e-8, clipnorm 1.0, exponential decay 0.96 every teacher_decay_steps.
        self.teacher_opt = torch.optim.RAdam(teacher.parameters(), lr=settings.teacher_lr, eps=1e-8)
        self.teacher_sched = torch.optim.lr_scheduler.LambdaLR(
            self.teacher_opt, lambda step: 0.96 ** (step / settings.teacher_decay_steps))

    def step(self, enc: dict, labels: torch.Tensor) -> dict[str, float]:
        s = self.settings
        self.teacher.train()
        teacher_logits = self.teacher(**enc).logits
        teacher_loss = F.cross_entropy(teacher_logits, labels)
        self.teacher_opt.zero_grad()
        teacher_loss.backward()
        torch.nn.utils.clip_grad_norm_(self.teacher.parameters(), 1.0)
        self.teacher_opt.step()
        self.teacher_sched.step()
        soft = F.softmax(teacher_logits.detach() / s.temperature, dim=-1)

        self.student.train()
        logits = self.student(**enc).logits
        distill = soft_target_loss(logits, soft, s.temperature)
        gold = F.cross_entropy(logits, labels)
        loss = s.temperature**2 * s.distill_rate * distill + s.gold_rate * gold
        self.student_opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.student.parameters(), 1.0)
        self.student_opt.step()
        self.student_sched.step()
        return {"teacher_loss": teacher_loss.item(), "student_distill_loss": distill.item(),
                "student_gold_loss": gold.item(), "student_loss": loss.item()}


def now() -> float:
    """CPU seconds of this process (training time is stated in CPU time, not wall time)."""
    return time.process_time()
