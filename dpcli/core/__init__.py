"""What everything stands on.

Exact budget arithmetic, exact samplers, durable files, ledger locations, signals, process limits.
"""
