"""Checks before a launch, in the launch dialog's words: what would make the trainer fail in its first seconds.

:meth:`RunManager.preflight <gpuplanner.launch.manager.RunManager.preflight>` runs them for the launch
dialog (before launching) and :meth:`RunManager.launch` runs them on every launch of the bundled trainer
(values from its flags, :func:`values_from_args`) and records the outcome in the run's ``preflight``
launcher event, so a run launched by the CLI, the window or a sweep carries the same record.
:func:`check_launch` takes the dialog's values, the host (with its last probe, when it was
probed) and two functions that look at the host's files (``exists(path)``, ``read_text(path)``), so the
same checks run for this machine (the local file system) and an SSH host (through its connection).

Checked: the model config file exists and is JSON; a model given as a path exists; a planner preset
name is not passed as a Hugging Face id; the sequence length fits the model's positions (from the
config file, a local model directory or the preset); each data path exists; the host's last probe found
torch and transformers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from gpuplanner.launch.host_reports import HostProbe
from gpuplanner.launch.hosts import Host
from gpuplanner.resources import resource_path

POSITION_KEYS = ("n_positions", "max_position_embeddings", "n_ctx", "max_seq_len", "seq_length")
HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


@lru_cache(maxsize=1)
def presets() -> dict[str, dict[str, Any]]:
    with open(resource_path("models", "presets.json"), encoding="utf-8") as fh:
        return dict(json.load(fh)["models"])


def preset_named(name: str) -> tuple[str, dict[str, Any]] | None:
    """The preset whose key, alias or Hugging Face id is ``name`` (case-insensitive)."""
    wanted = name.strip().lower()
    for key, cfg in presets().items():
        names = {key, *cfg.get("aliases", ()), cfg.get("hf_id") or ""}
        if wanted in {n.lower() for n in names if n}:
            return key, cfg
    return None


def hf_id_for(model: str) -> str:
    """A preset's Hugging Face id for its short name (anything else unchanged)."""
    found = preset_named(model)
    if found and found[1].get("hf_id"):
        return str(found[1]["hf_id"])
    return model


def positions(config: dict[str, Any]) -> tuple[int, str] | None:
    """The longest sequence a model config allows, and the key it comes from."""
    for key in POSITION_KEYS:
        value = config.get(key)
        if isinstance(value, int) and value > 0:
            return value, key
    return None


def _looks_like_path(text: str) -> bool:
    return text.startswith(("/", "./", "../", "~")) or text.endswith(".json") or "\\" in text


def check_launch(
    values: dict[str, Any],
    host_label: str,
    probe: HostProbe | None,
    exists: Callable[[str], bool],
    read_text: Callable[[str], str | None],
) -> list[str]:
    """Problems that would make the run fail at once, each naming the dialog's field; [] when none found."""
    problems: list[str] = []
    where = "this machine" if host_label == "This machine" else host_label
    config: dict[str, Any] | None = None
    source = ""
    model_config = (values.get("model_config") or "").strip()
    model = (values.get("model") or "").strip()
    if model_config:
        text = read_text(model_config)
        if text is None:
            problems.append(f"Model config: {model_config} does not exist on {where}.")
        else:
            try:
                loaded = json.loads(text)
            except json.JSONDecodeError as exc:
                problems.append(f"Model config: {model_config} is not valid JSON ({exc.msg}, line {exc.lineno}).")
            else:
                if isinstance(loaded, dict):
                    config, source = loaded, model_config.rsplit("/", 1)[-1]
                else:
                    problems.append(f"Model config: {model_config} holds no JSON object.")
    elif model:
        found = preset_named(model)
        if _looks_like_path(model):
            if not exists(model):
                problems.append(f"Model: the folder {model} does not exist on {where}.")
            else:
                text = read_text(model.rstrip("/") + "/config.json")
                if text is None:
                    problems.append(f"Model: {model} has no config.json (a saved Hugging Face model folder has one).")
                else:
                    try:
                        loaded = json.loads(text)
                        config = loaded if isinstance(loaded, dict) else None
                        source = f"{model}/config.json"
                    except ValueError:
                        problems.append(f"Model: {model}/config.json is not valid JSON.")
        elif found and found[1].get("hf_id") and model.lower() != str(found[1]["hf_id"]).lower():
            problems.append(
                f"Model: {model!r} is the planner's short name; the trainer loads models by their Hugging Face "
                f"id, here {found[1]['hf_id']}."
            )
        elif not HF_ID.match(model):
            problems.append(f"Model: {model!r} is neither a Hugging Face id (owner/name) nor a folder.")
        if found and config is None:
            config, source = found[1], f"the {found[0]} preset"
    seq_len = int(values.get("seq_len") or 0)
    limit = positions(config) if config else None
    if limit and seq_len > limit[0]:
        problems.append(
            f"Sequence length (tokens): {seq_len:,} is longer than the model's {limit[0]:,} positions "
            f"({limit[1]} in {source}); use {limit[0]:,} or less."
        )
    for path in values.get("data") or []:
        if not exists(str(path)):
            problems.append(f"Data: {path} does not exist on {where}.")
    if probe:
        missing = [m for m in probe.get("missing") or [] if m in ("torch", "transformers", "python")]
        if missing:
            hint = probe.get("install_hint")
            problems.append(
                f"Host: the last probe of {host_label} found no {', '.join(missing)}"
                + (f"; install with: {hint}" if hint else "")
                + " (probe it again in the Hosts pane after installing)."
            )
    return problems


def local_files() -> tuple[Callable[[str], bool], Callable[[str], str | None]]:
    """``exists`` and ``read_text`` on this machine."""
    import os

    def exists(path: str) -> bool:
        return os.path.exists(os.path.expanduser(path))

    def read_text(path: str) -> str | None:
        try:
            with open(os.path.expanduser(path), encoding="utf-8") as fh:
                return fh.read(4 * 1024 * 1024)
        except (OSError, UnicodeDecodeError):
            return None

    return exists, read_text


def backend_files(backend: Any) -> tuple[Callable[[str], bool], Callable[[str], str | None]]:
    """``exists`` and ``read_text`` through a launcher backend's ``read(path, offset, size)``.

    A file reads as b"" when it does not exist; a folder cannot be read as a file (the read raises), so
    a path that raises is taken to exist; only a path that reads as nothing at all is reported missing."""

    def read_bytes(path: str) -> bytes | None:
        try:
            data: bytes = backend.read(path, 0, 4 * 1024 * 1024)
        except Exception:
            return None
        finally:
            forget = getattr(backend, "forget_file", None)
            if forget is not None:
                forget(path)
        return data

    def exists(path: str) -> bool:
        try:
            data = backend.read(path, 0, 1)
        except Exception:
            return True  # a folder (or unreadable file): it is there
        finally:
            forget = getattr(backend, "forget_file", None)
            if forget is not None:
                forget(path)
        return bool(data)

    def read_text(path: str) -> str | None:
        data = read_bytes(path)
        if not data:
            return None
        return data.decode("utf-8", errors="replace")

    return exists, read_text


def check_on_host(host: Host, backend: Any, values: dict[str, Any]) -> list[str]:
    """:func:`check_launch` for a stored host: local files here, an SSH host's through ``backend`` (the
    launcher's connection to it); the host's last probe from its record."""
    if host.kind == "local":
        exists, read_text = local_files()
    else:
        exists, read_text = backend_files(backend)
    return check_launch(values, host.display_name, host.probe, exists, read_text)


def _flag(args: list[str], flag: str) -> list[str]:
    """Every value of ``flag`` in a trainer command line (``--flag value`` or ``--flag=value``)."""
    found: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            found.append(arg.split("=", 1)[1])
        elif arg == flag and i + 1 < len(args):
            found.append(args[i + 1])
    return found


def values_from_args(trainer_args: Sequence[str]) -> dict[str, Any]:
    """The launch dialog's values (``model_config``, ``model``, ``seq_len``, ``data``) of a trainer command line."""
    args = list(trainer_args)
    seq_len = next(iter(_flag(args, "--seq-len")), None)
    return {
        "model_config": next(iter(_flag(args, "--model-config")), ""),
        "model": next(iter(_flag(args, "--model")), ""),
        "seq_len": int(seq_len) if seq_len and seq_len.isdigit() else 0,
        "data": _flag(args, "--data"),
    }
