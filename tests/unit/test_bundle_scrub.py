"""The bundle's scrubber: the config's and the environment's secrets by value, and a
corpus of secret shapes (tokens in URLs, headers, key blocks, service tokens, values under
a secret's name: ``tests/support/secret_corpus.py``) wherever they come from, through
every file of an archive, inside the JSON strings of a recording too; and what only looks
like a secret (SGLang's token counts, every fixture gpumon reads) left readable."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest
from secret_corpus import ARGV, ARGV_SECRETS, CORPUS, PLAIN_NAMES, READABLE, SECRET_NAMES

from gpumon.backends.alerts.store import Alert
from gpumon.backends.bundle.archive import BundleArchive
from gpumon.backends.bundle.scrub import REDACTED, Scrubber, config_secrets, env_secrets
from gpumon.backends.config.notify import NotifierConfig
from gpumon.backends.model import GpuProcess, GpuSample, Health, HostSample, Source
from gpumon.backends.recording import FlightRecorder, load_recording

T0 = 1_800_000_000.0


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
    archive = BundleArchive(Scrubber.of({"inner-secret-77"}), "title")
    archive.add("recording.jsonl.gz", gzip.compress(b'{"line": "inner-secret-77"}\n'), "rec")
    path = archive.write(tmp_path / "b.tar.gz")
    with tarfile.open(path) as tar:
        data = tar.extractfile("recording.jsonl.gz").read()  # type: ignore[union-attr]
    assert b"inner-secret-77" not in gzip.decompress(data)
    assert io.BytesIO(data).read(2) == b"\x1f\x8b"  # still gzip


def test_binary_files_are_kept_byte_for_byte_or_left_out_with_a_secret(tmp_path: Path) -> None:
    """A flight-recorder dump (a pickle) scrubbed as text would lose its bytes >= 0x80:
    it is kept as it is, or, holding a secret, left out and said."""
    archive = BundleArchive(Scrubber.of({"inner-secret-77"}), "title")
    dump = bytes(range(256)) * 4
    assert archive.add("flight-recorder/trace_rank_0", dump, "rank 0", binary=True)
    token = b"HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"  # a secret by its name
    leak = b"\x80\x04\x95" + token + bytes(range(200, 256))
    for held in (b"\x80\x04" + b"inner-secret-77" + b"\xff", leak):
        assert not archive.add("flight-recorder/trace_rank_1", held, "rank 1", binary=True)
    path = archive.write(tmp_path / "b.tar.gz")
    with tarfile.open(path) as tar:
        kept = tar.extractfile("flight-recorder/trace_rank_0")
        assert kept is not None and kept.read() == dump
        index = tar.extractfile("index.txt")
        assert index is not None
        assert "trace_rank_1: left out: it holds a secret" in index.read().decode()


@pytest.mark.parametrize("text", READABLE)
def test_shaped_like_a_secret_but_none_stays(text: str) -> None:
    assert Scrubber().text(text) == text


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_the_value_under_every_secret_name_is_redacted(name: str) -> None:
    """The scrubber judges a name as the process command's masking does: a flag-shaped
    name as a flag (``--api-key VALUE``, ``=VALUE``), any other as a key (``name:
    value``, ``name = value``, ``name=value``)."""
    value = "Zq7SecretValue"
    if name.startswith("-"):
        shapes = [f"run {name} {value} --port 1", f"run {name}={value}"]
    else:
        shapes = [f"{name}: {value}", f"{name} = {value}", f"{name}={value} next"]
    for text in shapes:
        out = Scrubber().text(text)
        assert value not in out and name in out, out


@pytest.mark.parametrize("name", [n for n in PLAIN_NAMES if n])
def test_the_value_under_a_plain_name_stays(name: str) -> None:
    for text in (f"run {name} Zq7Value --port 1", f"{name}: Zq7Value", f"{name}=Zq7Value"):
        assert Scrubber().text(text) == text


FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_every_fixture_gpumon_reads_passes_unchanged() -> None:
    """SGLang's log lines of every release here (docs/formats.md: ``#token: 38``,
    ``#full token: 164000, full token usage: 0.41``), its /server_info and /metrics pages,
    nvidia-smi, the trainers' logs: none holds a secret, so a bundle keeps every number
    of them."""
    seen = 0
    for path in sorted(FIXTURES.rglob("*")):
        if not path.is_file() or path.name == "LICENSE":
            continue
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        try:
            text = data.decode()
        except UnicodeDecodeError:
            continue
        seen += 1
        assert Scrubber().text(text) == text, path
    assert seen > 100


@pytest.mark.parametrize(("text", "secret"), CORPUS)
def test_a_shape_inside_a_json_string_is_redacted_and_the_json_stays_valid(
    text: str, secret: str
) -> None:
    """The recording keeps a log's lines as JSON strings (``"export MY_PASSWORD=\\"...\\""``,
    a key block's lines one string each): the escaped quotes are quotes, the strings of a
    list are lines, and the JSON still decodes after the scrub, its next line kept."""
    after = "the next line."  # a word alone could be a cut key block's next line
    for lines in ([text, after], ["first", *text.splitlines(), after]):
        for line in (json.dumps({"lines": lines}), json.dumps({"lines": lines}, indent=2)):
            out = Scrubber().text(line)
            decoded = "\n".join(json.loads(out)["lines"])
            assert secret not in decoded and REDACTED in decoded, out
            assert decoded.endswith(f"\n{after}"), out


def test_a_recording_in_the_bundle_holds_no_secret_and_still_replays(tmp_path: Path) -> None:
    """A flight recording as the recorder writes it (a sample whose process command is an
    earlier gpumon's, unmasked; the corpus as a followed log's lines), through the
    archive: no secret is left in it, and it loads as a recording with every line that
    held none (a key block's lines become one ``<redacted>``)."""
    recorder = FlightRecorder("ct200", clock=lambda: T0)
    command = "python3 -m sglang.launch_server " + " ".join(ARGV)
    process = GpuProcess(4242, "python3", 8000, command=command)
    recorder.record(HostSample("ct200", T0, Source.AGENT_SMI, (GpuSample(0),), (process,)))
    # a line a string, as the agent follows a log (a key block's lines are strings too)
    lines = "\n".join([*(text for text, _ in CORPUS), *READABLE]).splitlines()
    recorder.record_log("log:/srv/sglang.log", "/srv/sglang.log", lines, T0)
    alert = Alert("memory:0", Health.CRITICAL, "memory", "ct200", 0, None, "99%", T0, T0)
    recorder.keep_alert(alert)
    written = recorder.write_window(alert, tmp_path / "r.jsonl.gz")
    assert written is not None
    archive = BundleArchive(Scrubber(), "title")
    archive.add("recording.jsonl.gz", written.read_bytes(), "rec")
    with tarfile.open(archive.write(tmp_path / "b.tar.gz")) as tar:
        data = tar.extractfile("recording.jsonl.gz").read()  # type: ignore[union-attr]
    text = gzip.decompress(data).decode()
    for secret in [*(s for _, s in CORPUS), *ARGV_SECRETS]:
        assert secret not in text, secret
    (tmp_path / "out.jsonl.gz").write_bytes(data)
    recording = load_recording(tmp_path / "out.jsonl.gz")
    kept = recording.logs[0]["lines"]
    assert all(line in kept for line in READABLE)
    assert "-----BEGIN OPENSSH PRIVATE KEY-----" not in kept and REDACTED in kept
    [replayed] = recording.samples[0].processes
    assert replayed.command is not None and "--api-key ****" in replayed.command


def test_a_secret_learned_midway_leaves_the_files_kept_before_it_too() -> None:
    """Issue 38 point 5: the bundle learns a vLLM server's ``--api-key`` from its command
    line (``masking.secret_values``: every word of a secret flag up to the next option,
    as vLLM's list-valued ``--api-key`` takes several) and scrubs it by value from the
    files already kept (text, inside a ``.gz``; a binary one that holds it is taken out)
    and from those to come: where it stands with no name that says it is a secret, only
    its value finds it."""
    from gpumon.backends.masking import secret_values

    argv = ["vllm", "serve", "m", "--api-key", "sk-first-key", "sk-second-key", "--port", "80"]
    assert secret_values(argv) == ["sk-first-key", "sk-second-key"]
    assert secret_values(["HF_TOKEN=hf_0123456", *argv[:3], "--api-key=sk-third-key"]) == [
        "hf_0123456",
        "sk-third-key",
    ]
    printed = "401 for sk-first-key, then sk-second-key\n"
    assert Scrubber().text(printed) == printed  # the shapes alone miss a bare value
    archive = BundleArchive(Scrubber(), "title")
    archive.add("logs/00-vllm.log", printed, "a log")
    archive.add("recording.jsonl.gz", gzip.compress(json.dumps([printed]).encode()), "a rec")
    archive.add("dump.bin", b"\x00\x01sk-second-key\xff", "a binary", binary=True)
    archive.add("plain.txt", "nothing to see\n", "plain")
    size = archive.size
    archive.learn(secret_values(argv))
    archive.add("later.txt", "key sk-first-key\n", "after")
    files = {f.name: f.data for f in archive.files}
    assert files["logs/00-vllm.log"].decode() == f"401 for {REDACTED}, then {REDACTED}\n"
    assert b"sk-" not in gzip.decompress(files["recording.jsonl.gz"])
    assert "dump.bin" not in files and "dump.bin" in dict(archive.missing_files)
    assert files["plain.txt"] == b"nothing to see\n" and files["later.txt"] == b"key <redacted>\n"
    assert archive.size == sum(len(d) for d in files.values()) != size
