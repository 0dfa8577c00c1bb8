"""Noise as functions over arrays.

Exact additive noise, partition selection of open keys, permute-and-flip selection for quantiles, top-k and mode,
randomized response.
"""
