"""The Django admin."""
