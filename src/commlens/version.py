"""The version of commlens, written into every run it makes."""

__version__ = "0.1.0"
