"""Run a search: an Optuna study whose trials are runs of the bundled trainer, under a hard cap.

One loop on the calling thread (the run manager's watcher threads ingest each trial's telemetry into
the history; this loop only reads it):

1. every trial's new ``eval`` records are reported to its Optuna trial; below the last step the
   study's pruner decides, and a pruned trial is stopped gracefully (``RunManager.stop``: the trainer
   checkpoints and exits);
2. a trial that reached the last milestone its allowance pays for is stopped the same way (budget);
3. a run that ended is told to the study (complete with its final eval loss, pruned, or failed);
4. free slots (``--host a,b,b``: one trial at a time per name given) get new trials while the caps
   leave room for a first milestone (:mod:`gpuplanner.sweep.budget`).

What a trial is and where its run is are kept in the study (trial user attributes ``run_id``,
``host``, ``allowance_usd``, ``allowance_gpu_hours``, ``reach_step``, ``end``, ``judged``) and in the
run's name (``sweep STUDY trial N``), so a search whose process was killed continues when run again
under the same study name: running trials are attached to (they went on by themselves, within their
allowances), none is started twice, none is lost. Why the search stopped is the study's user
attribute ``stop_reason``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplanner.export.human import human_money
from gpuplanner.history.db import connect
from gpuplanner.history.runs import update_run
from gpuplanner.launch.hosts import get_host
from gpuplanner.launch.manager import FINAL_STATES, RunError, RunManager
from gpuplanner.plan.setup import PlanInputError
from gpuplanner.sweep.budget import (
    TRAINER_SHARE,
    Allowance,
    Amount,
    Caps,
    TrialBudget,
    new_trial_allowance,
    spent,
    trial_budget,
)
from gpuplanner.sweep.lookback import SWEEP_TAG, run_spend
from gpuplanner.sweep.schedule import Schedule
from gpuplanner.sweep.space import Space
from gpuplanner.sweep.study import eval_every, open_study, running_study

ENDED = (*FINAL_STATES, "preempted")
MAX_LAUNCH_FAILURES = 3


def run_name(study: str, number: int) -> str:
    return f"sweep {study} trial {number}"


@dataclass(frozen=True)
class SweepSettings:
    study: str
    hosts: tuple[str, ...]
    space: Space
    trials: int
    schedule: Schedule  # resource in optimizer steps
    caps: Caps
    trainer_flags: tuple[str, ...]
    step_seconds: float | None = None
    sampler: str = "tpe"
    seed: int | None = None
    poll_s: float = 0.25
    env: tuple[tuple[str, str], ...] = ()  # extra environment variables of every trial
    tags: tuple[tuple[str, str], ...] = ()  # the search's tags, stored on every trial's run (with sweep=STUDY)

    def run_tags(self) -> dict[str, str]:
        """The tags of every trial's run: the search's own and ``sweep=<study>`` (History groups by it)."""
        return {**dict(self.tags), SWEEP_TAG: self.study}

    @property
    def max_steps(self) -> int:
        return int(self.schedule.max_resource)

    def fingerprint(self) -> dict[str, Any]:
        """What must not change when a search is continued under the same name."""
        s = self.schedule
        return {
            "space": [
                [p.name, p.type, p.flag, p.low, p.high, p.log, p.step, list(p.choices)] for p in self.space.params
            ],
            "pruner": [s.pruner, s.max_resource, s.min_resource, s.reduction_factor, s.prune_percent, s.prune_at],
            "trainer_flags": list(self.trainer_flags),
        }


@dataclass
class _Active:
    trial: Any  # optuna.trial.Trial
    run_id: int
    slot: int
    allowance: Amount
    reach_step: int | None
    reported: set[int] = field(default_factory=set)
    decided: str | None = None  # "pruned" | "budget": told to the study, the run is stopping


@dataclass
class SweepResult:
    study: str
    stop_reason: str
    trials: list[dict[str, Any]]
    spent_usd: float
    spent_gpu_hours: float
    best: dict[str, Any] | None


class SweepRunner:
    """Runs one search to its end (all trials done, or a cap reached) on the calling thread."""

    def __init__(
        self,
        db_path: Path,
        settings: SweepSettings,
        manager: RunManager,
        say: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.db_path = db_path
        self.settings = settings
        self.manager = manager
        self.say = say
        self.active: dict[int, _Active] = {}  # by trial number
        self.pending: list[Any] = []  # trials asked before a crash whose run never started
        self.launch_failures = 0
        self.every = eval_every(settings.schedule)
        self.prices = {h: self._host_rate(h) for h in settings.hosts}
        self._stop_requested = threading.Event()
        self._detach_requested = threading.Event()
        self._stopping = False

    def request_detach(self) -> None:
        """Leave the search (from any thread) without stopping its trials: the loop ends, the study records
        that it was interrupted, and running the search again attaches to the trials still going."""
        self._detach_requested.set()

    def request_stop(self) -> None:
        """Ask the search to end (from any thread): running trials are stopped at a checkpoint, none starts,
        and the study records ``stopped by the user``. A later run with the same name continues it."""
        self._stop_requested.set()

    # -- setup -----------------------------------------------------------------------------------
    def _host_rate(self, host_name: str) -> float:
        return float(get_host(self.db_path, host_name).price_usd_per_gpu_hour or 0.0)

    def estimated_step_cost(self) -> Amount | None:
        """A step's cost from ``--step-seconds`` (at the dearest host), before anything is measured."""
        if self.settings.step_seconds is None:
            return None
        hours = self.settings.step_seconds / 3600.0
        return Amount(hours * max(self.prices.values()), hours)

    def check_first_trial_fits(self) -> None:
        """Bad input before anything starts: the cap cannot pay one trial's first milestone."""
        cost = self.estimated_step_cost()
        if cost is None:
            return
        allowance = new_trial_allowance(self.settings.caps, [], cost, self._stops(), self.settings.max_steps)
        if allowance.amount is None:
            field_name = "max-gpu-hours" if (allowance.reason or "").startswith("max_gpu_hours") else "budget-usd"
            raise PlanInputError(field_name, f"the cap is smaller than one trial's first milestone: {allowance.reason}")

    def _stops(self) -> list[int]:
        return [int(m) for m in self.settings.schedule.milestones()]

    # -- the loop -------------------------------------------------------------------------------------
    def run(self) -> SweepResult:
        """Run the search; a study another process is running is refused (:func:`running_study`)."""
        with running_study(self.db_path, self.settings.study):
            return self._run()

    def _run(self) -> SweepResult:
        study = open_study(
            self.db_path, self.settings.study, self.settings.schedule, self.settings.sampler, self.settings.seed
        )
        self._check_same_search(study)
        study.set_user_attr("stop_reason", None)
        # for looking back (`sweep show`): the caps and tags of the latest process running the search
        study.set_user_attr(
            "caps", {"budget_usd": self.settings.caps.usd, "max_gpu_hours": self.settings.caps.gpu_hours}
        )
        study.set_user_attr("tags", dict(self.settings.tags))
        self._recover(study)
        db = connect(self.db_path)
        reason = ""
        try:
            while True:
                if self._detach_requested.is_set():
                    reason = "interrupted: the search process was stopped; running trials go on"
                    break
                if self._stop_requested.is_set() and not self._stopping:
                    self._stopping = True
                    for item in list(self.active.values()):
                        if item.decided is None:
                            self._stop(study, item, "stopped", "stopped by the user")
                for item in list(self.active.values()):
                    self._poll(study, db, item)
                self._reap(study, db)
                if self._stopping:
                    if not self.active:
                        reason = "stopped by the user"
                        break
                    time.sleep(self.settings.poll_s)
                    continue
                blocked = self._fill_slots(study, db)
                if not self.active and not self.pending:
                    done = len(study.get_trials(deepcopy=False))
                    if done >= self.settings.trials:
                        reason = f"done: all {self.settings.trials} trials ran"
                        break
                    if blocked:
                        reason = blocked
                        break
                time.sleep(self.settings.poll_s)
        except KeyboardInterrupt:
            study.set_user_attr("stop_reason", "interrupted: the search process was stopped; running trials go on")
            raise
        finally:
            db.close()
        return self._finish(study, reason)

    def _check_same_search(self, study: Any) -> None:
        mine = self.settings.fingerprint()
        stored = study.user_attrs.get("settings")
        if stored is None:
            study.set_user_attr("settings", mine)
        elif stored != mine:
            changed = ", ".join(k for k in mine if stored.get(k) != mine[k])
            raise PlanInputError(
                "study",
                f"{self.settings.study!r} was started with another {changed}; continue it with the same "
                "settings or give a new --study name",
            )

    # -- recovery ---------------------------------------------------------------------------------------
    def _recover(self, study: Any) -> None:
        """Attach to the runs of trials a previous process left running; queue trials it never launched."""
        optuna = _optuna()
        running = optuna.trial.TrialState.RUNNING
        db = connect(self.db_path)
        try:
            for frozen in study.get_trials(deepcopy=False):
                run_id = frozen.user_attrs.get("run_id")
                if run_id is None:
                    row = db.execute(
                        "SELECT id FROM runs WHERE name = ? AND status != 'failed' ORDER BY id DESC",
                        [run_name(self.settings.study, frozen.number)],
                    ).fetchone()
                    run_id = row[0] if row else None
                if run_id is None:
                    if frozen.state == running:
                        self.pending.append(optuna.trial.Trial(study, frozen._trial_id))
                    continue
                status = db.execute("SELECT status FROM runs WHERE id = ?", [run_id]).fetchone()
                if frozen.state != running and (status is None or status[0] != "running"):
                    continue
                try:
                    self.manager.attach(run_id)
                except RunError:
                    # the earlier process died between creating the run and recording its launch: the run is
                    # marked failed and the trial launched again (a process started in that instant is not
                    # known to the history, so it cannot be followed or stopped from here)
                    update_run(db, run_id, status="failed", ended_at=time.time())
                    if frozen.state == running:
                        trial = optuna.trial.Trial(study, frozen._trial_id)
                        trial.set_user_attr("abandoned_run_id", run_id)
                        trial.set_user_attr("run_id", None)
                        self.pending.append(trial)
                        self.say(f"trial {frozen.number}: run {run_id} was never recorded as launched; starting again")
                    continue
                slot = self._free_slot(frozen.user_attrs.get("host"))
                if slot is None:
                    slot = len(self.settings.hosts) + len(self.active)  # over the slots: it ends soon
                item = _Active(
                    optuna.trial.Trial(study, frozen._trial_id),
                    run_id,
                    slot,
                    Amount(
                        frozen.user_attrs.get("allowance_usd") or 0.0,
                        frozen.user_attrs.get("allowance_gpu_hours") or 0.0,
                    ),
                    frozen.user_attrs.get("reach_step"),
                    set(frozen.intermediate_values),
                    None if frozen.state == running else "told",
                )
                if frozen.user_attrs.get("run_id") is None:
                    item.trial.set_user_attr("run_id", run_id)
                self.active[frozen.number] = item
                self.say(f"trial {frozen.number}: attached to run {run_id} left running by an earlier process")
        finally:
            db.close()

    # -- telemetry ----------------------------------------------------------------------------------------
    def _poll(self, study: Any, db: Any, item: _Active) -> None:
        if item.decided is not None:
            return
        rows = db.execute(
            "SELECT step, eval_loss FROM evals WHERE run_id = ? AND step IS NOT NULL AND eval_loss IS NOT NULL"
            " ORDER BY seq",
            [item.run_id],
        ).fetchall()
        last = self.settings.max_steps
        judged = list(item.trial.user_attrs.get("judged") or [])
        if any(j["pruned"] for j in judged):  # decided by a process that died before telling the study
            self._stop(study, item, "pruned", f"pruned at step {judged[-1]['step']} (decided before a restart)")
            return
        done = {j["step"] for j in judged}
        for step, loss in rows:
            step = int(step)
            if step not in item.reported:
                item.trial.report(float(loss), step)
                item.reported.add(step)
            if step >= last:
                continue
            if step in self._judged_steps() and step not in done:
                pruned = item.trial.should_prune()
                judged.append({"step": step, "value": float(loss), "pruned": bool(pruned), "t": time.time()})
                done.add(step)
                item.trial.set_user_attr("judged", judged)
                if pruned:
                    self._stop(study, item, "pruned", f"pruned at step {step} (eval_loss {loss:.4f})")
                    return
            if item.reach_step is not None and step >= item.reach_step:
                self._stop(study, item, "budget", f"stopped at step {step}: the next milestone would cross the cap")
                return

    def _judged_steps(self) -> set[int]:
        """Steps at which the pruner may decide (every milestone of every hyperband bracket)."""
        schedule = self.settings.schedule
        if schedule.pruner == "hyperband":
            return {int(m) for bracket, _ in schedule.brackets() for m in schedule.halving_milestones(bracket)}
        return {int(m) for m in schedule.milestones()}

    def _stop(self, study: Any, item: _Active, end: str, message: str) -> None:
        optuna = _optuna()
        item.trial.set_user_attr("end", end)
        study.tell(item.trial, state=optuna.trial.TrialState.PRUNED)
        item.decided = end
        try:
            self.manager.stop(item.run_id, by="sweep", reason=end)  # the search's decision: "stopped", not preempted
        except RunError as exc:
            self.say(f"trial {item.trial.number}: could not stop run {item.run_id}: {exc}")
        self.say(f"trial {item.trial.number}: {message}")

    # -- ended runs -----------------------------------------------------------------------------------------
    def _reap(self, study: Any, db: Any) -> None:
        optuna = _optuna()
        for number, item in list(self.active.items()):
            state = self.manager.status(item.run_id).state
            if state not in ENDED:
                continue
            self._poll(study, db, item)  # the last records arrived before the state changed
            del self.active[number]
            if item.decided is not None:
                continue
            row = db.execute("SELECT status FROM runs WHERE id = ?", [item.run_id]).fetchone()
            values = dict(
                db.execute(
                    "SELECT step, eval_loss FROM evals WHERE run_id = ? AND eval_loss IS NOT NULL ORDER BY seq",
                    [item.run_id],
                ).fetchall()
            )
            last_value = values.get(self.settings.max_steps)
            if state == "finished" and last_value is not None:
                item.trial.set_user_attr("end", "complete")
                study.tell(item.trial, float(last_value))
                self.say(f"trial {number}: complete, eval_loss {last_value:.4f}")
            elif state == "finished" and row and row[0] == "budget_stop":
                item.trial.set_user_attr("end", "budget")
                study.tell(item.trial, state=optuna.trial.TrialState.PRUNED)
                self.say(f"trial {number}: stopped by its allowance (the cap)")
            else:
                item.trial.set_user_attr("end", "failed")
                study.tell(item.trial, state=optuna.trial.TrialState.FAIL)
                self.say(f"trial {number}: run {item.run_id} ended {state} ({row[0] if row else 'no record'})")

    # -- budget and new trials -------------------------------------------------------------------------------
    def _budgets(self, study: Any, db: Any) -> tuple[list[TrialBudget], Amount | None]:
        """Every launched trial's spend and allowance, and the cost of a step: the dearest rate of the trials
        that passed a milestone's worth of steps (step times differ between trials on a busy host), else
        the pooled rate of those that started, else ``--step-seconds``."""
        budgets, pooled, pooled_steps, rates = [], Amount(), 0, []
        for frozen in study.get_trials(deepcopy=False):
            run_id = frozen.user_attrs.get("run_id")
            if run_id is None:
                continue
            spend, steps = self._spend(db, run_id)
            attrs = frozen.user_attrs
            budgets.append(
                TrialBudget(
                    spend,
                    Amount(attrs.get("allowance_usd") or 0.0, attrs.get("allowance_gpu_hours") or 0.0),
                    frozen.number in self.active,
                    steps,
                )
            )
            if steps > 0:
                pooled, pooled_steps = pooled + spend, pooled_steps + steps
            if steps >= self.every:
                rates.append(spend.scaled(1.0 / steps))
        if rates:
            return budgets, Amount(max(r.usd for r in rates), max(r.gpu_hours for r in rates))
        if pooled_steps:
            return budgets, pooled.scaled(1.0 / pooled_steps)
        # Nothing measured yet: the room is shared by the free slots. ``--step-seconds`` cannot stand in for a
        # measurement here, because a trial's spend includes its start-up (the trainer's budget clock starts
        # with the process), which no step time says; it still decides whether the cap can pay a first milestone.
        return budgets, None

    def _spend(self, db: Any, run_id: int) -> tuple[Amount, int]:
        usd, gpu_hours, step = run_spend(db, run_id)
        return Amount(usd or 0.0, gpu_hours), step  # no price: only a GPU-hour cap can bind

    def _startup_floor(self, study: Any, db: Any) -> Amount | None:
        """The most a trial spent that its allowance stopped before its first step (a lower bound of what a
        trial's start-up costs), or None when no trial ended that way."""
        floor: Amount | None = None
        for frozen in study.get_trials(deepcopy=False):
            run_id = frozen.user_attrs.get("run_id")
            if run_id is None or frozen.user_attrs.get("end") != "budget" or frozen.number in self.active:
                continue
            spend, steps = self._spend(db, run_id)
            if steps == 0 and (floor is None or spend.usd > floor.usd or spend.gpu_hours > floor.gpu_hours):
                floor = Amount(
                    max(spend.usd, floor.usd if floor else 0.0), max(spend.gpu_hours, floor.gpu_hours if floor else 0.0)
                )
        return floor

    def _free_slot(self, host: str | None = None) -> int | None:
        taken = {item.slot for item in self.active.values()}
        for slot, name in enumerate(self.settings.hosts):
            if slot not in taken and (host is None or name == host):
                return slot
        return None

    def _fill_slots(self, study: Any, db: Any) -> str | None:
        """Start trials on free slots; returns why no more can start (None while some still may)."""
        while True:
            slot = self._free_slot()
            if slot is None:
                return None
            if not self.pending and len(study.get_trials(deepcopy=False)) >= self.settings.trials:
                return None
            if self.launch_failures >= MAX_LAUNCH_FAILURES:
                return f"failed: {self.launch_failures} trials in a row could not be launched"
            budgets, step_cost = self._budgets(study, db)
            taken = {item.slot for item in self.active.values()}
            free = sum(1 for i in range(len(self.settings.hosts)) if i not in taken)
            allowance = new_trial_allowance(
                self.settings.caps, budgets, step_cost, self._stops(), self.settings.max_steps, free
            )
            if allowance.amount is None:
                return f"cap reached: {allowance.reason}"
            overshoot = self._overshoot(study, db)
            budget = trial_budget(allowance.amount, overshoot)
            caps = self.settings.caps
            if (caps.usd is not None and budget.usd <= 0) or (caps.gpu_hours is not None and budget.gpu_hours <= 0):
                return (
                    f"cap reached: a trial's stop passed its budget by {human_money(overshoot.usd, 4)} "
                    f"({overshoot.gpu_hours:.6f} GPU-hours), all of a new trial's allowance"
                )
            floor = self._startup_floor(study, db)
            if floor is not None and not floor.fits_in(budget, self.settings.caps):
                # a trial the cap stopped in its start-up spent at least that much before a step: a smaller
                # allowance only pays for another start-up cut short (issue 27 item 10)
                return (
                    f"cap reached: a trial's start-up costs at least {human_money(floor.usd, 4)} ({floor.gpu_hours:.6f} "
                    f"GPU-hours), more than a new trial's allowance"
                )
            trial = self.pending.pop(0) if self.pending else study.ask()
            self._launch(study, trial, slot, allowance, budget)

    def _overshoot(self, study: Any, db: Any) -> Amount:
        """The most an ended trial's recorded spend passed the budget it was told to stop at (its stop latency at
        its price: the step that crossed it, a checkpoint, a command's exit), or nothing."""
        worst = Amount()
        for frozen in study.get_trials(deepcopy=False):
            attrs = frozen.user_attrs
            if attrs.get("run_id") is None or frozen.number in self.active:
                continue
            spend, _ = self._spend(db, attrs["run_id"])
            given = Amount(attrs.get("allowance_usd") or 0.0, attrs.get("allowance_gpu_hours") or 0.0)
            given = Amount(
                attrs.get("budget_usd", given.usd * TRAINER_SHARE) or 0.0,
                attrs.get("budget_gpu_hours", given.gpu_hours * TRAINER_SHARE) or 0.0,
            )
            worst = Amount(
                max(worst.usd, spend.usd - given.usd), max(worst.gpu_hours, spend.gpu_hours - given.gpu_hours)
            )
        return worst

    def _launch(self, study: Any, trial: Any, slot: int, allowance: Allowance, budget: Amount) -> None:
        optuna = _optuna()
        host = self.settings.hosts[slot]
        values = self.settings.space.suggest(trial)
        flags = [
            *self.settings.trainer_flags,
            *self.settings.space.flags(values),
            "--max-steps",
            str(self.settings.max_steps),
            "--eval-every-steps",
            str(self.every),
            "--checkpoint-every-steps",
            str(self.every),
        ]
        caps = self.settings.caps
        assert allowance.amount is not None
        if caps.gpu_hours is not None:
            flags += ["--max-gpu-hours", repr(float(budget.gpu_hours))]
        trial.set_user_attr("host", host)
        trial.set_user_attr("allowance_usd", allowance.amount.usd if caps.usd is not None else None)
        trial.set_user_attr("allowance_gpu_hours", allowance.amount.gpu_hours if caps.gpu_hours is not None else None)
        trial.set_user_attr("reach_step", allowance.reach_step)
        trial.set_user_attr("budget_usd", budget.usd if caps.usd is not None else None)
        trial.set_user_attr("budget_gpu_hours", budget.gpu_hours if caps.gpu_hours is not None else None)
        try:
            run_id = self.manager.launch(
                host,
                flags,
                name=run_name(self.settings.study, trial.number),
                env=dict(self.settings.env),
                budget_usd=budget.usd if caps.usd is not None else None,
                tags=self.settings.run_tags(),
            )
        except (RunError, OSError, ValueError) as exc:
            self.launch_failures += 1
            trial.set_user_attr("end", "failed")
            trial.set_user_attr("error", str(exc))
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self.say(f"trial {trial.number}: could not start on {host}: {exc}")
            return
        self.launch_failures = 0
        trial.set_user_attr("run_id", run_id)
        reach = allowance.reach_step
        self.active[trial.number] = _Active(
            trial,
            run_id,
            slot,
            allowance.amount,
            reach if reach is not None and reach < self.settings.max_steps else None,
        )
        shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())
        self.say(f"trial {trial.number}: run {run_id} on {host}: {shown}")

    # -- the end ----------------------------------------------------------------------------------------------
    def _finish(self, study: Any, reason: str) -> SweepResult:
        db = connect(self.db_path)
        try:
            budgets, _ = self._budgets(study, db)
            rows = []
            for frozen in study.get_trials(deepcopy=False):
                run_id = frozen.user_attrs.get("run_id")
                spend = self._spend(db, run_id)[0] if run_id is not None else Amount()
                rows.append(
                    {
                        "number": frozen.number,
                        "state": frozen.state.name.lower(),
                        "end": frozen.user_attrs.get("end"),
                        "run_id": run_id,
                        "host": frozen.user_attrs.get("host"),
                        "params": dict(frozen.params),
                        "value": frozen.value,
                        "last_step": frozen.last_step,
                        "spend_usd": round(spend.usd, 6),
                        "gpu_hours": round(spend.gpu_hours, 9),
                    }
                )
        finally:
            db.close()
        total = spent(budgets)
        study.set_user_attr("stop_reason", reason)
        study.set_user_attr("spent_usd", total.usd)
        study.set_user_attr("spent_gpu_hours", total.gpu_hours)
        complete = [r for r in rows if r["state"] == "complete" and r["value"] is not None]
        best = min(complete, key=lambda r: r["value"]) if complete else None
        self.say(f"search stopped: {reason}")
        return SweepResult(self.settings.study, reason, rows, total.usd, total.gpu_hours, best)


def _optuna() -> Any:
    import optuna

    return optuna
