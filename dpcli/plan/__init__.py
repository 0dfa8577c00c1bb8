"""Everything that follows from the spec alone, with no data.

Budget shares, sensitivities, noise components, cells, limits, what-if answers.
"""
