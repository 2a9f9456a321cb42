"""The kit's version, apart so that every module can quote it without an import cycle."""

__version__ = "0.1.0"
