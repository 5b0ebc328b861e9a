"""Checkpoint mirror in object storage (``--mirror-url s3://...``) against a real S3 protocol server:
moto's standalone server on loopback, started here. Complete folders only (the marker last), the last K
kept, a cut upload ignored, and a fresh run directory resumes from the newest complete checkpoint."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO_ROOT
from tests.trainer.conftest import final_weights, make_config, read_events
from trainer import checkpoint, mirror, object_mirror
from trainer.loop import EXIT_CONFIG, EXIT_OK, train

BUCKET = "ckpts"
# A process that pushes one checkpoint and stops for good after its first file (until it is killed).
_PUSH_UNTIL_KILLED = """
import sys, time
from pathlib import Path
from trainer import object_mirror
store = object_mirror.ObjectStore(sys.argv[1])
real_put = store.fs.put_file
def put(local, remote, *args, **kwargs):
    real_put(local, remote, *args, **kwargs)
    Path(sys.argv[3]).write_text("one file up")
    time.sleep(3600)
store.fs.put_file = put
store.push(Path(sys.argv[2]), 2)
"""


@pytest.fixture(scope="module")
def _moto() -> Iterator[str]:
    """One moto S3 server on 127.0.0.1 (a free port) for this module's tests; its endpoint URL."""
    moto_server = pytest.importorskip("moto.server", reason="install the dev extra (moto[server])")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(_moto: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[object]:
    """The environment pointing at the server, and an empty bucket of this test's own."""
    import boto3

    for name, value in {
        "AWS_ENDPOINT_URL": _moto,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    try:
        yield client
    finally:  # the next test starts from an empty bucket
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
            for obj in page.get("Contents", []):
                client.delete_object(Bucket=BUCKET, Key=obj["Key"])
        client.delete_bucket(Bucket=BUCKET)


def _objects(client: object, prefix: str) -> dict[str, list[str]]:
    """Mirrored folders and their file names, read straight from the server (not through fsspec)."""
    out: dict[str, list[str]] = {}
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/")  # type: ignore[attr-defined]
    for page in pages:
        for obj in page.get("Contents", []):
            folder, name = obj["Key"][len(prefix) + 1 :].split("/", 1)
            out.setdefault(folder, []).append(name)
    return {k: sorted(v) for k, v in sorted(out.items())}


def test_push_keeps_complete_folders_and_a_cut_upload_is_ignored(
    tmp_path: Path, s3: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    for step in (2, 4, 6):  # real checkpoints in the trainer's format (files, then the marker), of a tiny state
        tmp = checkpoint.begin(run, step)
        checkpoint.write_main(tmp, {"w": torch.full((256,), float(step))}, {"state": {}}, None, {"step": step})
        checkpoint.finish(run, tmp, step, keep=3)
    ck2, ck4, ck6 = reversed(checkpoint.complete(run))
    url = f"s3://{BUCKET}/team/run-1"
    store = object_mirror.ObjectStore(url)  # one client for most steps (each new one takes a while to set up)
    uploaded: list[str] = []
    real_put = store.fs.put_file
    cut_after: list[int] = []  # set: the upload dies at that file (the spot host went away)

    def watching_put(local: str, remote: str, *a: object, **kw: object) -> None:
        if cut_after and len(uploaded) == cut_after[0]:
            raise ConnectionError("connection reset (the spot host went away)")
        uploaded.append(remote.rsplit("/", 1)[-1])
        real_put(local, remote, *a, **kw)

    def restore(name: str) -> Path | None:
        root = checkpoint.checkpoints_dir(tmp_path / name)
        root.mkdir(parents=True)
        return store.fetch_newest(root)

    monkeypatch.setattr(store.fs, "put_file", watching_put)
    store.push(ck2, keep=2)
    assert uploaded[-1] == checkpoint.MARKER and checkpoint.MARKER not in uploaded[:-1]
    assert sorted(uploaded) == _objects(s3, "team/run-1")["step-00000002"]
    mirror.push(ck4, url, keep=2)  # through the mirror's URL dispatch
    assert list(_objects(s3, "team/run-1")) == ["step-00000002", "step-00000004"]

    # An upload killed half-way: its first file reaches the bucket, the rest and the marker never do.
    uploaded.clear()
    cut_after.append(1)
    with pytest.raises(ConnectionError):
        store.push(ck6, keep=2)
    cut_after.clear()
    half = _objects(s3, "team/run-1")["step-00000006"]
    assert len(half) == 1 and checkpoint.MARKER not in half
    got = mirror.fetch_newest(url, tmp_path / "fresh")  # through the dispatch: a run directory's checkpoints/
    assert got is not None and got.name == "step-00000004" and checkpoint.is_valid(got)
    assert sorted(p.name for p in checkpoint.checkpoints_dir(tmp_path / "fresh").iterdir()) == ["step-00000004"]

    # The same step uploaded again completes; keep=2 prunes step 2 (never fewer than 2 kept).
    store.push(ck6, keep=1)
    listing = _objects(s3, "team/run-1")
    assert list(listing) == ["step-00000004", "step-00000006"]
    assert listing["step-00000006"] == sorted(p.name for p in ck6.iterdir())
    got = restore("fresh2")
    assert got is not None and got.name == "step-00000006" and checkpoint.is_valid(got)

    # A corrupted mirrored file fails its checksum: the previous complete checkpoint is restored.
    s3.put_object(Bucket=BUCKET, Key="team/run-1/step-00000006/model.pt", Body=b"broken")  # type: ignore[attr-defined]
    got = restore("fresh3")
    assert got is not None and got.name == "step-00000004"
    assert mirror.fetch_newest(f"s3://{BUCKET}/nothing-here", tmp_path / "fresh4") is None


def test_bad_object_urls_are_refused_in_one_line(
    tmp_path: Path, model_config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(object_mirror.MirrorUnavailable, match="names no bucket"):
        mirror.Mirror("s3:///prefix", 2)
    with pytest.raises(object_mirror.MirrorUnavailable, match="unsupported mirror URL"):
        mirror.Mirror("ftp://host/x", 2)
    if object_mirror.importlib.util.find_spec("adlfs") is None:
        with pytest.raises(object_mirror.MirrorUnavailable, match=r"needs adlfs: pip install 'gpuplanner\[azure\]'"):
            mirror.Mirror("az://container/x", 2)
    # the trainer stops at start with that one line and the configuration exit code, no traceback
    run = tmp_path / "run"
    assert train(make_config(run, model_config, mirror_url="s3:///prefix")) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "names no bucket" in err and "Traceback" not in err
    end = [e for e in read_events(run) if e["kind"] == "run_end"]
    assert end and end[0]["status"] == "failed" and "names no bucket" in end[0]["error"]


@pytest.mark.slow
def test_a_run_mirrored_to_s3_resumes_on_another_run_directory(tmp_path: Path, model_config: Path, s3: object) -> None:
    url = f"s3://{BUCKET}/runs/llm"
    common = dict(max_steps=6, checkpoint_every_steps=2, keep_checkpoints=2, record_sample_ids=True, mirror_url=url)
    ref = tmp_path / "spot-host"
    assert train(make_config(ref, model_config, **common)) == EXIT_OK
    assert list(_objects(s3, "runs/llm")) == ["step-00000004", "step-00000006"]
    # The spot host dies while uploading step 6 again: a process pushing it is killed (SIGKILL) once its
    # first file is in the bucket, so the marker never gets there.
    flag = tmp_path / "one-file-up"
    step6 = checkpoint.checkpoints_dir(ref) / "step-00000006"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    pusher = subprocess.Popen([sys.executable, "-c", _PUSH_UNTIL_KILLED, url, str(step6), str(flag)], env=env)
    try:
        while not flag.exists():  # the state to wait for: the first file uploaded
            assert pusher.poll() is None, "the pusher ended before uploading a file"
            time.sleep(0.05)
    finally:
        pusher.kill()
        pusher.wait()
    cut = _objects(s3, "runs/llm")["step-00000006"]
    assert len(cut) == 1 and checkpoint.MARKER not in cut
    other = tmp_path / "other-host"
    assert train(make_config(other, model_config, **common)) == EXIT_OK
    events = read_events(other)
    assert events[0]["resumed_from_step"] == 4
    ref_order = {e["step"]: e["sample_ids"] for e in read_events(ref) if e["kind"] == "step"}
    assert {e["step"]: e["sample_ids"] for e in events if e["kind"] == "step"} == {5: ref_order[5], 6: ref_order[6]}
    a, b = final_weights(ref), final_weights(other)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    listing = _objects(s3, "runs/llm")
    assert list(listing) == ["step-00000004", "step-00000006"] and checkpoint.MARKER in listing["step-00000006"]
