"""The one tolerance for comparing floats: resource amounts, rates and seconds that went through arithmetic.

Two amounts closer than `EPSILON` are equal; an amount fits when it is at most the room plus `EPSILON`.
"""

EPSILON = 1e-9
