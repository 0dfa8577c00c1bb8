"""Noisy integers to released numbers, spending nothing: values and intervals, variances, consistency."""
