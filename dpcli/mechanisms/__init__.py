"""Noise as functions over arrays.

Exact additive noise, permute-and-flip selection for top-k and mode, randomized response.
"""
