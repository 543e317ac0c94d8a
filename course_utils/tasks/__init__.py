"""The data the lessons learn from: synthetic induction and agreement tasks, lesson 01's
two-relations task, and lesson 03's worked example.
"""

from .synthetic import AGREEMENT_VOCAB  # the agreement task's messages name it here

__all__ = ["AGREEMENT_VOCAB"]
