"""Reproduction of the paper's subject-verb agreement experiment (section 4, Tables 1 and 2)."""

from attnflow.reproduction.run import Reproduction, reproduce

__all__ = ["Reproduction", "reproduce"]
