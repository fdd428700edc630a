"""Data sets attnflow generates itself (no downloads)."""
