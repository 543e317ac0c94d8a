"""Interpretability: attention-pattern scores, ablation, activation patching and logit
attribution (hooks on the model's one forward path), heatmaps and notebook explorers.
"""
