"""The commands that spend.

The one paid-run protocol, the preparation step every command shares, release and randomize.
"""
