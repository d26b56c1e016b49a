"""Attention: `minijit.attention.api` (torch's scaled_dot_product_attention on numpy arrays and the
`AttentionPlan` it runs) and `minijit.attention.model` (seed 001's IO-cost model: the tiles, the
thread split and the printed derivation). Import the submodules; this package imports nothing."""
