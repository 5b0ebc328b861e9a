"""The GPU Planner training payload: runs on GPU hosts, depends on torch and transformers only."""

__version__ = "0.1.0"
