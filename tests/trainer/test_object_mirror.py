"""Checkpoint mirror in object storage (``--mirror-url s3://...``) against a real S3 protocol server:
moto's standalone server on loopback, started here. Complete folders only (the marker last), the last K
kept, a cut upload ignored, and a fresh run directory resumes from the newest complete checkpoint."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import final_weights, make_config, read_events
from trainer import checkpoint, mirror, object_mirror
from trainer.loop import EXIT_OK, train

BUCKET = "ckpts"


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A moto S3 server on 127.0.0.1 (a free port), a bucket in it, and the environment pointing at it."""
    moto_server = pytest.importorskip("moto.server", reason="install the dev extra (moto[server])")
    import boto3

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for name, value in {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
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
    finally:
        server.stop()


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
    tmp_path: Path, model_config: Path, s3: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    assert train(make_config(run, model_config, max_steps=6, checkpoint_every_steps=2, keep_checkpoints=3)) == EXIT_OK
    ck2, ck4, ck6 = reversed(checkpoint.complete(run))
    url = f"s3://{BUCKET}/team/run-1"
    store = object_mirror.ObjectStore(url)
    uploaded: list[str] = []
    real_put = store.fs.put_file

    def watching_put(local: str, remote: str, *a: object, **kw: object) -> None:
        uploaded.append(remote.rsplit("/", 1)[-1])
        real_put(local, remote, *a, **kw)

    monkeypatch.setattr(store.fs, "put_file", watching_put)
    store.push(ck2, keep=2)
    assert uploaded[-1] == checkpoint.MARKER and checkpoint.MARKER not in uploaded[:-1]
    assert sorted(uploaded) == _objects(s3, "team/run-1")["step-00000002"]
    mirror.push(ck4, url, keep=2)
    assert list(_objects(s3, "team/run-1")) == ["step-00000002", "step-00000004"]

    # An upload killed half-way: its first file reaches the bucket, the rest and the marker never do.
    cut = object_mirror.ObjectStore(url)
    calls = {"n": 0}
    real_cut_put = cut.fs.put_file

    def dying_put(local: str, remote: str, *a: object, **kw: object) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise ConnectionError("connection reset (the spot host went away)")
        real_cut_put(local, remote, *a, **kw)

    monkeypatch.setattr(cut.fs, "put_file", dying_put)
    with pytest.raises(ConnectionError):
        cut.push(ck6, keep=2)
    half = _objects(s3, "team/run-1")["step-00000006"]
    assert len(half) == 1 and checkpoint.MARKER not in half
    got = mirror.fetch_newest(url, tmp_path / "fresh")
    assert got is not None and got.name == "step-00000004" and checkpoint.is_valid(got)
    assert sorted(p.name for p in checkpoint.checkpoints_dir(tmp_path / "fresh").iterdir()) == ["step-00000004"]

    # The same step uploaded again completes; keep=2 prunes step 2 (never fewer than 2 kept).
    mirror.push(ck6, url, keep=1)
    listing = _objects(s3, "team/run-1")
    assert list(listing) == ["step-00000004", "step-00000006"]
    assert listing["step-00000006"] == sorted(p.name for p in ck6.iterdir())
    got = mirror.fetch_newest(url, tmp_path / "fresh2")
    assert got is not None and got.name == "step-00000006" and checkpoint.is_valid(got)

    # A corrupted mirrored file fails its checksum: the previous complete checkpoint is restored.
    s3.put_object(Bucket=BUCKET, Key="team/run-1/step-00000006/model.pt", Body=b"broken")  # type: ignore[attr-defined]
    got = mirror.fetch_newest(url, tmp_path / "fresh3")
    assert got is not None and got.name == "step-00000004"
    assert mirror.fetch_newest(f"s3://{BUCKET}/nothing-here", tmp_path / "fresh4") is None


def test_bad_object_urls_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="names no bucket"):
        mirror.Mirror("s3:///prefix", 2)
    with pytest.raises(ValueError, match="unsupported mirror URL"):
        mirror.Mirror("ftp://host/x", 2)
    if object_mirror.importlib.util.find_spec("adlfs") is None:
        with pytest.raises(ValueError, match=r"needs adlfs: pip install 'gpuplanner\[azure\]'"):
            mirror.Mirror("az://container/x", 2)


@pytest.mark.slow
def test_a_run_mirrored_to_s3_resumes_on_another_run_directory(tmp_path: Path, model_config: Path, s3: object) -> None:
    url = f"s3://{BUCKET}/runs/llm"
    common = dict(max_steps=6, checkpoint_every_steps=2, keep_checkpoints=2, record_sample_ids=True, mirror_url=url)
    ref = tmp_path / "spot-host"
    assert train(make_config(ref, model_config, **common)) == EXIT_OK
    assert list(_objects(s3, "runs/llm")) == ["step-00000004", "step-00000006"]
    # The spot host died while uploading step 6: its marker never reached the bucket.
    s3.delete_object(Bucket=BUCKET, Key=f"runs/llm/step-00000006/{checkpoint.MARKER}")  # type: ignore[attr-defined]
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
