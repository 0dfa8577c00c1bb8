"""The released table.

Its columns, its post-processing policies, the writers and sidecar, where a command writes, the report.
"""
