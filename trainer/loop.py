"""The training loop: exact resume, accumulation normalised by real token count, one agreed stop flag.

``train(config)`` returns the exit code: 0 finished (also budget or early stop), 75 checkpointed after
a stop signal or preemption notice, 1 failed. :class:`_Trainer` composes the run's parts (each in its
own module over ``trainer_core.TrainerCore``: ``building``, ``resuming``, ``saving``, ``evaluation``,
``run_records``) and owns the order: set up, the ``run_start`` record, the step loop with its stop
agreement and checkpoint schedule (the GPU sampler and notice watcher beside it, ``side_monitors``),
and the finish (last checkpoint, final model, ``run_end``). The arithmetic of one step is in
``step.py``.
"""

from __future__ import annotations

import contextlib
import sys
import time
import traceback
from pathlib import Path
from typing import Any, TextIO

import torch

from . import checkpoint, clock, dist, hold, losses, protocol, startup_budget
from . import data as data_mod
from . import fsdp as fsdp_mod
from .building import Building
from .config import TrainConfig, write_resolved
from .evaluation import Evaluating
from .final_model import save_final, save_merged
from .flops import peak_flops, set_tf32
from .model import QLoRAUnavailable, count_params, pick_device, training_flops
from .object_mirror import MirrorUnavailable
from .preemption import NONE, PREEMPTED, REASON_STATUS, SignalHandlers
from .resuming import Resuming
from .run_records import Reporting
from .run_state import BenchStats
from .saving import Saving
from .side_monitors import side_monitors
from .step import accumulate, lr_at, target_count, wrap_ddp
from .telemetry import StepRateLimiter, Telemetry, warn

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_RESUME = 0, 1, 2, 75


def train(config: TrainConfig, stdout: TextIO | None = None, bench: BenchStats | None = None) -> int:
    started = clock.started() or (time.time(), time.monotonic())  # the budget clock's zero
    info = dist.DistInfo.from_env()
    device = pick_device(config.device, info.local_rank)
    run_dir = Path(config.run_dir)
    dist.init(info, device)
    set_tf32(config.tf32 == "on")  # before any matmul: fp32 matmuls on TF32 tensor cores, or full fp32
    # The rank that writes this node's files (checkpoints, final/, token cache): rank 0 when every
    # node sees the same run directory (shared file system), else each node's local rank 0.
    writer = dist.storage_leader(info, run_dir) == info.rank
    if writer:
        run_dir.mkdir(parents=True, exist_ok=True)
        write_resolved(config, run_dir)
    events = None if bench is not None else run_dir / protocol.EVENTS_FILE
    tele = Telemetry(events, stdout=stdout if config.events_stdout else None, enabled=info.is_main)
    trainer = None
    try:
        trainer = _Trainer(config, info, device, run_dir, tele, bench, writer, started)
        return trainer.run()
    except (
        checkpoint.ResumeConflict,
        losses.UnsupportedLoss,
        QLoRAUnavailable,
        data_mod.TokenizerError,
        MirrorUnavailable,
        data_mod.DataError,
    ) as exc:
        warn(str(exc))
        phases = trainer.phase_fields() if trainer is not None else {}
        tele.emit("run_end", status="failed", error=str(exc), exit_code=EXIT_CONFIG, **phases)
        return EXIT_CONFIG
    except Exception as exc:
        warn(f"training failed: {exc}")
        traceback.print_exc(file=sys.stderr)
        phases = trainer.phase_fields() if trainer is not None else {}
        tele.emit("run_end", status="failed", error=f"{type(exc).__name__}: {exc}", exit_code=EXIT_FAILED, **phases)
        return EXIT_FAILED
    finally:
        startup_budget.hand_over()
        tele.close()
        dist.shutdown()


class _Trainer(Building, Resuming, Saving, Evaluating, Reporting):
    """One process's run, its parts in the order :meth:`run` calls them."""

    def run(self) -> int:
        c, info = self.config, self.info
        self._data()
        self._model()
        resumed = self._resume()
        self._carry_over()
        remaining = self._remaining_steps()
        self.total_steps = self.state.step + remaining
        self.warmup = c.warmup_steps if c.warmup_steps >= 0 else min(100, max(1, self.total_steps // 20))
        raw = self.model
        if info.distributed and not self.fsdp:
            self.model = wrap_ddp(raw, self.device)
        fwd_model = self.model
        self.autocast = (
            (lambda: torch.autocast(self.device.type, dtype=self.dtype))
            if self.precision.autocast
            else contextlib.nullcontext
        )
        n_params, n_trainable = count_params(raw)
        self.flops = training_flops(raw, c.seq_len, c.grad_checkpointing, c.selective_policy)
        fpt = self.flops.model
        dev_name = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"
        tf32 = c.tf32 == "on"
        peak = c.peak_tflops * 1e12 if c.peak_tflops else peak_flops(dev_name, self.dtype, tf32)
        gb = c.micro_batch * c.grad_accum * info.world
        start_step = self.state.step
        resumed_from = start_step if resumed else None
        self._emit_run_start(raw, dev_name, tf32, peak, n_params, n_trainable, resumed_from)
        if resumed is not None:
            self._announce_resume(resumed, start_step)
        if self.bench is not None:
            self._fill_bench(dev_name, tf32, peak, n_params, n_trainable, gb)
        monitors = side_monitors(
            c, info, self.device, self.run_dir, self.tele, self.activity, self.flag, sample=self.bench is None
        )
        with monitors, SignalHandlers(self.flag):
            reason = self._loop(fwd_model, remaining, gb, fpt, peak)
        return self._finish(reason)

    def _carry_over(self) -> None:
        """Start the spend clock from what earlier attempts spent: the checkpoint's totals, or the last ``run_end``
        of this run's events file where that is later (an attempt's final save, or a start-up stopped before any
        step, is paid after its checkpoint); the start-up watch prices the earlier attempts by the same record."""
        s = self.state
        ended = startup_budget.last_totals(str(self.run_dir / protocol.EVENTS_FILE)) if self.info.is_main else None
        for key in ("elapsed_s", "gpu_hours", "spend_usd"):
            value = (ended or {}).get(key)
            if isinstance(value, (int, float)) and value > (getattr(s, key) or 0.0):
                setattr(s, key, float(value))
        self.spend_clock.carry_over(s.elapsed_s, s.gpu_hours, s.spend_usd)

    def _loop(self, fwd_model: torch.nn.Module, remaining: int, gb: int, fpt: float, peak: float | None) -> int:
        c, info, s = self.config, self.info, self.state
        self.last_ckpt = time.monotonic()
        startup_budget.hand_over()  # from here the loop checks the caps, between steps
        if remaining == 0:
            return NONE
        # Start-up is paid time: a budget already spent by loading or resuming stops before a step.
        self._tick_budget()
        # A stop requested before the first step (e.g. SIGTERM during start-up): stop now, all ranks agreed.
        reason = dist.all_max([self.flag.reason], info, self.device)[0]
        if reason != NONE:
            return reason
        plan = data_mod.StepPlan(
            self.data,
            c.seed,
            data_mod.Position(s.epoch, s.offset),
            c.micro_batch,
            c.grad_accum,
            info.world,
            info.rank,
            remaining,
        )
        loader = data_mod.make_loader(plan, self.device, c.num_workers, info.local_world)
        batches = iter(loader)
        limiter = StepRateLimiter(c.log_every_steps, c.log_interval_s)
        params = [p for p in self.model.parameters() if p.requires_grad]
        win: dict[str, Any] = {
            "t": time.perf_counter(),
            "steps": 0,
            "wait": 0.0,
            "loss": torch.zeros((), device=self.device),
            "targets": 0,
        }
        sample_ids: list[int] = []
        reason = NONE
        agree = dist.AgreeSchedule(info, c.stop_sync_every_steps)
        self.agree = agree
        if self.bench is not None:
            self.bench.loop_start = time.perf_counter()
        for i in range(remaining):
            t0 = time.perf_counter()
            micro = []
            wait = 0.0
            self.phases.switch("data")
            for _ in range(c.grad_accum):
                tw = time.perf_counter()
                micro.append(next(batches))
                wait += time.perf_counter() - tw
            # --compile traces and compiles in the first step of the process: its excess is compilation
            self.phases.switch("compile" if self.compiled and self.steps_done == 0 else "train")
            if c.record_sample_ids:
                sample_ids = [int(x) for b in micro for x in b["sample_ids"]]
            # the step's loss targets over all ranks (prompts and document ends excluded): each rank knows them
            global_targets = max(1, plan.step_targets(i))
            lr = lr_at(s.step, c.lr, self.warmup, self.total_steps, c.min_lr_ratio)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            loss_sum = accumulate(
                fwd_model,
                micro,
                self.device,
                self.autocast,
                global_targets,
                info.world,
                self.scaler,
                loss_fn=self.loss_fn,
                defer_fsdp_sync=c.fsdp_defer_grad_sync,
            )
            hold.in_step(s.step + 1, self.run_dir, lambda: self.flag.set)  # tests' barriers (trainer/hold.py)
            if self.scaler is not None:
                self.scaler.unscale_(self.optimizer)
            if c.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(params, c.max_grad_norm)
            if self.scaler is not None:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.steps_done += 1
            if self.bench is not None and self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            step_time = time.perf_counter() - t0
            self.activity.add_busy(step_time - wait)
            self._count_compile(step_time - wait)
            # bookkeeping (cumulative across resumes)
            pos = plan.position_after(i)
            s.step, s.epoch, s.offset = s.step + 1, pos.epoch, pos.offset
            s.tokens_total += gb * c.seq_len
            s.samples_total += gb
            self._tick_budget()
            win["steps"] += 1
            win["wait"] += wait
            win["loss"] += loss_sum
            win["targets"] += sum(target_count(b) for b in micro)  # this rank's, as its loss sum
            if self.bench is not None:
                if s.step > self.bench.warmup_steps:
                    self.bench.step_times.append(step_time)
                    self.bench.data_waits.append(wait)
            last = i == remaining - 1
            evaluated = bool(c.eval_every_steps and (s.step % c.eval_every_steps == 0 or last))
            if evaluated:
                previous = self.phases.switch("eval")
                result = self.evaluate()
                if result is not None:
                    self._after_eval(*result)
                self.phases.switch(previous)
            now = time.monotonic()
            # Every rank knows alike whether a step-based checkpoint is due; the stop flag and the
            # time-based checkpoint are agreed by an all-reduce (a host sync), not after every step.
            ckpt_steps = self.bench is None and bool(
                c.checkpoint_every_steps and s.step % c.checkpoint_every_steps == 0
            )
            ckpt_time = self.bench is None and bool(
                c.checkpoint_every_minutes and now - self.last_ckpt >= c.checkpoint_every_minutes * 60
            )
            if last or ckpt_steps or evaluated or agree.due(s.step):
                reason, agreed_time = agree.agree(s.step, [self.flag.reason, int(ckpt_time)], self.device)
            else:
                reason, agreed_time = NONE, 0
            ckpt_due = ckpt_steps or bool(agreed_time)
            if info.is_main and limiter.due(s.step, now, force=c.record_sample_ids or last or reason != NONE):
                self._emit_step(win, gb, fpt, peak, lr, sample_ids if c.record_sample_ids else None)
            if self.bench is not None:
                self.bench.step_ends.append(time.perf_counter())
            if reason != NONE:
                break
            if ckpt_due and not last:
                self.save_checkpoint()
            hold.after_step(s.step, self.run_dir, lambda: self.flag.set)  # tests' barriers (trainer/hold.py)
        return reason

    def _finish(self, reason: int) -> int:
        status = REASON_STATUS.get(reason, "finished")
        self.phases.switch("checkpoint")  # what is left: the last checkpoint, the final model, the mirror
        self._tick()  # the last checkpoint carries the spend up to the stop
        if reason == PREEMPTED:
            self.tele.emit("preempted", step=self.state.step, reason=self.flag.detail or "stop requested")
        if self.compile_clock is not None:
            self.compile_clock.remove()
            if self.bench is not None:
                self.bench.info["compile_s"] = round(self.compile_clock.seconds, 3)
        if self.bench is not None:
            self.tele.emit("run_end", status=status, totals=self._totals(), exit_code=EXIT_OK, **self.phase_fields())
            return EXIT_OK
        if not (reason == PREEMPTED and self.steps_done == 0):  # stopped before any step: nothing to save
            self.save_checkpoint(blocking=True)  # nothing left to overlap: written at once, no host copy
        self.wait_checkpoint()  # exit 75 promises a complete checkpoint: wait for a background write
        if reason != PREEMPTED:
            # FSDP: gather the full weights (a collective on every rank); rank 0 writes them.
            full = fsdp_mod.full_model_state(self.model) if self.fsdp else None
            if full is not None:  # tied weights (GPT-2's lm_head) once, as save_pretrained does unsharded
                unique = {n for n, _ in self.model.named_parameters()} | {n for n, _ in self.model.named_buffers()}
                full = {k: v for k, v in full.items() if k in unique}
            if self.writer:  # every node's writer: each node's run directory gets the finished model
                final, dtype = self.run_dir / "final", self.precision.compute  # served in the training dtype
                save_final(self._raw_model(), self.tokenizer, final, state_dict=full, dtype=dtype)
                if self.config.merge_lora:
                    save_merged(self._raw_model(), self.tokenizer, final, dtype, self.config.model)
        if self.mirror is not None:
            self.mirror.wait(timeout=120)
        code = EXIT_RESUME if reason == PREEMPTED else EXIT_OK
        detail: dict[str, Any] = {"reason": self.flag.detail} if self.flag.detail else {}
        self._tick()  # saving is paid time too: the totals price the run up to this, its last record
        if self.compile_clock is not None:
            detail["compile_s"] = round(self.compile_clock.seconds, 3)
        if self.info.distributed and getattr(self, "agree", None) is not None:
            detail["rank_agreements"] = self.agree.count  # stop-flag all-reduces (host syncs) in this process
        self.tele.emit("run_end", status=status, totals=self._totals(), exit_code=code, **detail, **self.phase_fields())
        return code
