"""Helpers the tests share: no tests here (fixtures are in tests/conftest.py)."""
