"""The bundle's scrubber: the config's and the environment's secrets by value, and a
corpus of secret shapes (tokens in URLs, headers, key blocks, service tokens) wherever
they come from, through every file of an archive."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from gpumon.backends.bundle.archive import BundleArchive
from gpumon.backends.bundle.scrub import REDACTED, Scrubber, config_secrets, env_secrets
from gpumon.backends.config.notify import NotifierConfig

# (text as a file would hold it, the secret part that must not survive)
CORPUS: list[tuple[str, str]] = [
    (
        "POST https://hooks.slack.com/services/T0AAA/B0BBB/XyZsecretSlackPath1",
        "XyZsecretSlackPath1",
    ),
    ("https://discord.com/api/webhooks/123456789/abcDEFsecret-token_42", "abcDEFsecret-token_42"),
    (
        "https://api.telegram.org/bot123456:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/sendMessage",
        "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw",
    ),
    ("url = https://alice:hunter2pass@alerts.example.org/hook", "hunter2pass"),
    ("GET /api/v1/alerts?token=s3cr3tT0ken&x=1", "s3cr3tT0ken"),
    ("https://ntfy.example.org/topic?auth=QmFzaWNBdXRoU2VjcmV0", "QmFzaWNBdXRoU2VjcmV0"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "eyJhbGciOiJIUzI1NiJ9"),
    ('{"headers": {"Authorization": "Basic dXNlcjpwYXNzd29yZA=="}}', "dXNlcjpwYXNzd29yZA=="),
    (
        "curl -H 'authorization: token ghp_abcdefghijklmnopqrstuvwxyz0123456789'",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    ),
    (
        "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyzABCD python train.py",
        "hf_abcdefghijklmnopqrstuvwxyzABCD",
    ),
    ("slack token xoxb-1234567890-abcdefghijkl", "xoxb-1234567890-abcdefghijkl"),
    ("aws_access_key_id = AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx", "sk-proj-abcdefghijklmnopqrstuvwx"),
    (
        "WANDB_API_KEY=0123456789abcdef0123456789abcdef01234567",
        "0123456789abcdef0123456789abcdef01234567",
    ),
    ('"routing_key": "R0UT1NGKEY0123456789abcdef"', "R0UT1NGKEY0123456789abcdef"),
    (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmU=\n"
        "-----END OPENSSH PRIVATE KEY-----\n",
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmU=",
    ),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAcutoff", "MIIEpAIBAAKCAQEAcutoff"),
]


@pytest.mark.parametrize(("text", "secret"), CORPUS)
def test_every_shape_is_redacted(text: str, secret: str) -> None:
    out = Scrubber().text(text)
    assert secret not in out
    assert REDACTED in out


def test_what_is_not_secret_stays() -> None:
    text = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        "http://127.0.0.1:30000/metrics\nGPU 6 memory 99% used; step 1200 loss=0.53\n"
        '"expect_tokens_per_s": null, "token_env": "NTFY_TOKEN", "max_tokens": 4096\n'
        "token throughput 1234.5 tok/s, #new-token: 12\n"
    )
    assert Scrubber.of({"abcdef"}).text(text) == text


def test_config_and_environment_secrets_by_value() -> None:
    env = {
        "SLACK_URL": "https://example.org/opaque/ABCDEFGHIJ",  # named by url_env
        "PD_KEY": "pdkey-0123456789",  # named by routing_key_env
        "MY_API_TOKEN": "tok-9876543210",  # a secret by its name alone
        "HOME": "/root",
        "LANG": "C.UTF-8",
    }
    notifiers = [
        NotifierConfig("slack", "slack", url_env="SLACK_URL"),
        NotifierConfig(
            "pd", "pagerduty", url="https://events.example.com/v2/enqueue", routing_key_env="PD_KEY"
        ),
        NotifierConfig(
            "hook",
            "webhook",
            url="https://h.example.com/in/opaque0xDEADBEEF",
            secret="hmac-secret-1",
        ),
    ]
    secrets = config_secrets(notifiers, env) | env_secrets(env)
    assert {"pdkey-0123456789", "tok-9876543210", "hmac-secret-1", env["SLACK_URL"]} <= secrets
    assert "/root" not in secrets and "C.UTF-8" not in secrets
    scrub = Scrubber.of(secrets)
    text = (
        f"sent to {env['SLACK_URL']} key pdkey-0123456789 and "
        "https://h.example.com/in/opaque0xDEADBEEF; home /root"
    )
    out = scrub.text(text)
    assert scrub.found(out) == []
    assert "opaque0xDEADBEEF" not in out and "/root" in out


def test_short_values_are_not_replaced_by_value() -> None:
    assert Scrubber.of({"1", "on", "abc"}).secrets == frozenset()


def test_the_corpus_through_every_file_of_an_archive(tmp_path: Path) -> None:
    secret_value = "configured-secret-value-42"
    archive = BundleArchive(Scrubber.of({secret_value}), "title")
    body = "\n".join(text for text, _ in CORPUS) + f"\nvalue {secret_value}\n"
    names = ["incident.json", "logs/00-job.log", "doctor.json", "sglang/30000-metrics.prom"]
    for name in names:
        archive.add(name, body, "a file")
    archive.missing("kernel.txt", f"failed: curl https://u:{secret_value}@x/ exited 7")
    path = archive.write(tmp_path / "b.tar.gz")
    with tarfile.open(path) as tar:
        texts = {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert sorted(texts) == sorted(["index.txt", *names])
    for name, text in texts.items():
        for _, secret in CORPUS:
            assert secret not in text, (name, secret)
        assert secret_value not in text, name
    assert "kernel.txt: failed: curl" in texts["index.txt"]


def test_gzip_files_are_scrubbed_inside(tmp_path: Path) -> None:
    import gzip

    archive = BundleArchive(Scrubber.of({"inner-secret-77"}), "title")
    archive.add("recording.jsonl.gz", gzip.compress(b'{"line": "inner-secret-77"}\n'), "rec")
    path = archive.write(tmp_path / "b.tar.gz")
    with tarfile.open(path) as tar:
        data = tar.extractfile("recording.jsonl.gz").read()  # type: ignore[union-attr]
    assert b"inner-secret-77" not in gzip.decompress(data)
    assert io.BytesIO(data).read(2) == b"\x1f\x8b"  # still gzip
