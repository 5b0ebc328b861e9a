"""The CUDA caching allocator's settings, chosen before torch touches the GPU.

``expandable_segments:True`` lets the allocator grow a segment in place instead of reserving a new
block for each odd-sized request, which cuts the fragmentation that a training run's changing shapes
(the last batch of an epoch, evaluation, chunked loss) otherwise leaves behind: PyTorch's own
documentation recommends it for exactly this case, and torchtitan sets it by default. The trainer sets
it unless the user already chose allocator settings (either variable name), which it leaves untouched.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

# PyTorch 2.9 renamed the variable; both names are read, the device-generic one first.
VARIABLES = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")
SET_BY_TRAINER = "PYTORCH_CUDA_ALLOC_CONF"
DEFAULT = "expandable_segments:True"


def configure(environ: MutableMapping[str, str] | None = None) -> tuple[str, str]:
    """Set the default allocator configuration unless one is set. Returns (setting, source) with source
    ``user`` (kept as found) or ``trainer`` (set here). Must run before the first CUDA allocation to
    take effect; child processes (DataLoader workers, torchrun ranks) inherit it."""
    env = os.environ if environ is None else environ
    for name in VARIABLES:
        value = env.get(name)
        if value:
            return f"{name}={value}", "user"
    env[SET_BY_TRAINER] = DEFAULT
    return f"{SET_BY_TRAINER}={DEFAULT}", "trainer"


def current(environ: MutableMapping[str, str] | None = None) -> str | None:
    """The allocator setting in force, as ``NAME=value`` (None when neither variable is set)."""
    env = os.environ if environ is None else environ
    for name in VARIABLES:
        if env.get(name):
            return f"{name}={env[name]}"
    return None
