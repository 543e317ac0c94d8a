"""The data the lessons learn from: synthetic induction and agreement tasks, lesson 01's
two-relations task, and lesson 03's worked example.
"""

from .synthetic import *  # noqa: F401,F403 - the names of the old flat module
from .synthetic import __all__  # noqa: F401
