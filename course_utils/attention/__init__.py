"""Attention itself: masks, scaled dot-product attention, multi-head and grouped-query
attention (one forward path), the naive loop, the fused decode kernel, shapes and input checks.
"""

