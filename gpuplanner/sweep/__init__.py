"""Budgeted hyperparameter searches: plan one (pure estimate) and run one (an Optuna study over runs).

``schedule`` (the pruning schedule shared by both), ``estimate`` (the planner's search estimate),
``space`` (the TOML search space), ``budget`` (the live cap decisions), ``study`` (Optuna storage and
pruners), ``runner`` (the search loop over :class:`gpuplanner.launch.manager.RunManager`) and
``sizing`` (compute-optimal model size for a budget).
"""
