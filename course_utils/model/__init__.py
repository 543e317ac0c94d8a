"""The tiny transformer the lessons train: its blocks, checkpoints, training loop and KV caches.
"""
