"""The release spec.

Its schema library (fields) and v1 declaration (v1), the typed frozen model (model), its reader (load) and
builders with the cross-field rules (rules), a quantile's candidate grid (grid), the table of statistic kinds (kinds),
the JSON Schema (schema), and `dpcli randomize`'s spec (randomize).
"""
