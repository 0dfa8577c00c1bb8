"""The release spec.

Its schema library and v1 declaration, the typed frozen model, the table of statistic kinds, the JSON Schema.
"""
