"""Views: terminal tables, figures and files. They take results, never models."""
