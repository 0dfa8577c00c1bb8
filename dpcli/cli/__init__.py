"""The Typer command line and the human-facing rendering: rich lives here only."""
