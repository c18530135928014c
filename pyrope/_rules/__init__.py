"""Numerics of the frequency rules: correctly rounded powers and logarithms, and
transformers' dynamic-NTK length state."""
