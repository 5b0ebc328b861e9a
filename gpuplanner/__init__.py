"""GPU Planner: plan, launch and watch GPU training runs and what they cost."""

__version__ = "0.1.0"
