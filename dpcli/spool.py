"""Moved to dpcli.inputs; this name stays only until dpcli/cli.py imports ``parse_size`` from there."""

from dpcli.inputs import parse_size

__all__ = ["parse_size"]
