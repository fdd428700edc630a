"""The paper's published numbers (Abnar & Zuidema 2020, Tables 1 and 2): Spearman's rho between the
CLS row of each method and an importance score, mean and std over 2000 test examples, layers 1-6.

Typed in from the paper for side-by-side display only; nothing in attnflow is tuned towards them.
"""

from __future__ import annotations

# {(method, importance): [(mean, std) for layers 1..6]}
PAPER: dict[tuple[str, str], list[tuple[float, float]]] = {
    ("raw", "blank_out"): [(0.69, 0.27), (0.10, 0.43), (-0.11, 0.49), (-0.09, 0.52), (0.20, 0.45), (0.29, 0.39)],
    ("rollout", "blank_out"): [(0.32, 0.26), (0.38, 0.27), (0.51, 0.26), (0.62, 0.26), (0.70, 0.25), (0.71, 0.24)],
    ("flow", "blank_out"): [(0.32, 0.26), (0.44, 0.29), (0.70, 0.25), (0.70, 0.22), (0.71, 0.22), (0.70, 0.22)],
    ("raw", "gradients"): [(0.53, 0.33), (0.16, 0.38), (-0.06, 0.42), (0.00, 0.47), (0.24, 0.40), (0.46, 0.35)],
    ("rollout", "gradients"): [(0.22, 0.31), (0.27, 0.32), (0.39, 0.32), (0.47, 0.32), (0.53, 0.32), (0.54, 0.31)],
    ("flow", "gradients"): [(0.22, 0.31), (0.31, 0.34), (0.54, 0.32), (0.61, 0.28), (0.60, 0.28), (0.61, 0.28)],
}
TABLES = {"blank_out": "Table 1: vs blank-out", "gradients": "Table 2: vs input gradients"}
