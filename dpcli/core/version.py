"""The one version source: pyproject.toml reads it (dynamic), the CLI prints it, the sidecar records it."""

__version__ = "0.3.0"
