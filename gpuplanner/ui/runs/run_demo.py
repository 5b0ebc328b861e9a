"""The demo run: the shipped tiny GPT-2 config and corpus trained on this machine with fast telemetry, so
a new user sees live plots (and can try Stop, Simulate preemption and Resume) within a minute."""

from __future__ import annotations

from gpuplanner.ui.runs.launch_memory import settings_store
from gpuplanner.ui.runs.launch_request import LaunchRequest, demo_dir

DEMO_STEPS_KEY = "demo/steps"
# Under a minute on one CPU thread (measured for 1,000 steps, trainer start included: 26 s elapsed in the
# window, 51-82 s standalone at load 9 on 2 cores; 3,000 steps took 2.7-4.8 minutes there, which the
# welcome's old "a minute or two" did not hold):
# time to try Stop and Simulate preemption, with a checkpoint every 250 steps for Resume.
DEMO_STEPS = 1000
DEMO_ENV = {"OMP_NUM_THREADS": "1"}  # the demo trains on one CPU thread (see demo_request)
DEMO_PROMISE = "under a minute on a free CPU core"  # what the welcome and the button say; true of DEMO_STEPS


def demo_steps() -> int:
    """How many steps the demo run trains (the settings' ``demo/steps``, else :data:`DEMO_STEPS`)."""
    try:
        stored = settings_store().value(DEMO_STEPS_KEY, DEMO_STEPS)
        steps = int(stored) if isinstance(stored, (int, float, str)) else DEMO_STEPS
    except (TypeError, ValueError):
        return DEMO_STEPS
    return max(10, steps)


def demo_request(max_steps: int | None = None) -> LaunchRequest:
    """The demo run: the shipped tiny GPT-2 config and corpus on this machine, fast telemetry; it trains
    ``max_steps`` (default :func:`demo_steps`), checkpointing every 250 steps so Resume has one to use."""
    if max_steps is None:
        max_steps = demo_steps()
    every = str(max(10, min(250, max_steps // 4)))
    demo = demo_dir()
    args = [
        "--model-config",
        str(demo / "tiny-gpt2.json"),
        "--data",
        str(demo / "corpus"),
        "--seq-len",
        "64",
        "--micro-batch",
        "8",
        "--max-steps",
        str(max_steps),
        "--lr",
        "2e-3",
        "--warmup-steps",
        "20",
        "--eval-every-steps",
        every,
        "--eval-batches",
        "2",
        "--checkpoint-every-steps",
        every,
        "--checkpoint-every-minutes",
        "0",
        "--log-interval-s",
        "0.25",
        "--gpu-interval-s",
        "0.5",
    ]
    # one CPU thread: the tiny model gains nothing from more, and on a busy machine torch's default of a
    # thread per core was 14x slower (189 steps in 6 minutes against 1,000 steps in 53 s, measured at load 9
    # on 2 cores), which broke the promise below
    return LaunchRequest(host_name="local", trainer_args=args, name="Demo run (tiny GPT-2)", gpus=1, env=dict(DEMO_ENV))
