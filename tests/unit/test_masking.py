"""Secrets in a process's command line: which names say a value is a secret (judged on
every option of SGLang 0.5.23 and vLLM 0.34.0), the value masked with the flag kept, and
every view of a process (the record made from the agent's, the recording of an earlier
gpumon, ``snapshot``'s text and JSON, the doctor's venv users) showing it masked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from secret_corpus import ARGV, ARGV_SECRETS, PLAIN_NAMES, SECRET_NAMES

from gpumon.backends.masking import MASK, is_secret_name, mask_argv, mask_command
from gpumon.backends.model import GpuProcess, GpuSample, HostSample, ProcessSource, Source
from gpumon.backends.monitor.report import process_json
from gpumon.backends.parsers.processes import from_record, process_columns
from gpumon.backends.recording import sample_from_json, sample_to_json
from gpumon.backends.torchenv.checks import Facts
from gpumon.backends.torchenv.extras import check_processes
from gpumon.backends.torchenv.swap_steps import VenvUser

FIXTURES = Path(__file__).parents[1] / "fixtures"
SGLANG = "python3 -m sglang.launch_server --model-path /models/llama"


@pytest.mark.parametrize(
    ("release", "secret"),
    [
        ("sglang/0.5.23", {"--api-key", "--admin-api-key", "--ssl-keyfile-password"}),
        # --seed-token: "Shared secret for daemon-to-daemon requests" (cli/preload.py)
        ("vllm/0.34.0", {"--api-key", "--hf-token", "--seed-token"}),
    ],
)
def test_of_every_option_of_a_release_only_its_secrets_are_secret(
    release: str, secret: set[str]
) -> None:
    """SGLang's and vLLM's options (hundreds of --max-*-tokens, --tokenizer-*,
    --speculative-num-draft-tokens, --allow-credentials): exactly the secret ones."""
    names = (FIXTURES / release / "flags.txt").read_text().split()
    assert len(names) > 500
    assert {n for n in names if is_secret_name(n)} == secret


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_names_that_hold_no_secret(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize(
    ("command", "masked"),
    [
        (f"{SGLANG} --api-key SglKey01 --port 30000", f"{SGLANG} --api-key **** --port 30000"),
        (f"{SGLANG} --api-key=SglKey01 --port 30000", f"{SGLANG} --api-key=**** --port 30000"),
        # the words reach gpumon joined by spaces: a value's own spaces cannot be told
        # from the command's, so all of it up to the next option
        ("job --password correct horse --port 1", "job --password **** **** --port 1"),
        ("job --password=correct horse", "job --password=**** ****"),
        ("env HF_TOKEN=hf_x python3 train.py", "env HF_TOKEN=**** python3 train.py"),
        ("python3 train.py trainer.api_key=k1 trainer.max_steps=9",
         "python3 train.py trainer.api_key=**** trainer.max_steps=9"),
        ("java -Djavax.net.ssl.keyStorePassword=pw -jar x.jar",
         "java -Djavax.net.ssl.keyStorePassword=**** -jar x.jar"),
        ("vllm serve m --api-key --port 1", "vllm serve m --api-key --port 1"),  # no value
        ("vllm serve m --api-key", "vllm serve m --api-key"),
        ("x --api-key  two-spaces", "x --api-key  ****"),
    ],
)  # fmt: skip
def test_a_command_keeps_its_flags_and_loses_their_values(command: str, masked: str) -> None:
    assert mask_command(command) == masked
    assert mask_command(masked) == masked  # masking twice changes nothing


def test_what_only_looks_like_a_secret_stays() -> None:
    command = (
        f"{SGLANG} --tokenizer-path /models/llama --max-new-tokens 512 --tokens-per-step 8 "
        "--disable-custom-all-reduce --pass-through x --token-budget 4 --allow-credentials m "
        "--max-total-tokens 4096 MAX_TOKENS=9"
    )
    assert mask_command(command) == command


def test_an_argv_masks_exactly_its_value() -> None:
    """Where the words are known (the doctor's probe sends argv), a value with spaces is
    one word and the positional after it stays."""
    assert mask_argv(["serve", "--password", "a b", "model", "--token=t", "X_SECRET=s"]) == [
        "serve",
        "--password",
        MASK,
        "model",
        f"--token={MASK}",
        f"X_SECRET={MASK}",
    ]


def _record(command: str) -> dict[str, object]:
    return {
        "pid": 861, "host_pid": 52001, "container": "200", "user": "root", "command": command,
        "memory_mib": 30000, "gpu_uuid": "GPU-0", "cpu_pct": 1.0, "rss_mib": 10.0,
    }  # fmt: skip


def test_a_process_record_is_masked_where_it_becomes_a_process() -> None:
    """The agent's record (host side, and a device-file user): every view is made of the
    GpuProcess, so the dashboard's columns and snapshot's JSON say the flag, not the key."""
    command = f"{SGLANG} " + " ".join(ARGV)
    for source in (ProcessSource.HOST, ProcessSource.DEVICE_FILES):
        p = from_record(_record(command), source, 200)
        assert p.command is not None
        words = [process_columns(p, 200).command, json.dumps(process_json(p)), p.command]
        for text in words:
            assert not any(s in text for s in ARGV_SECRETS), text
            assert "--api-key **** --password=**** --hf-token ****" in text
            assert "--tokenizer-path /models/llama --max-total-tokens 4096" in text
        assert p.short_name in {"sglang.launch_server", "python3"}


def test_a_recording_of_an_earlier_gpumon_replays_masked() -> None:
    """A recording written before the masking holds the key: its replay does not show it."""
    command = f"{SGLANG} --api-key {ARGV_SECRETS[0]}"
    sample = HostSample(
        "ct200",
        1.0,
        Source.AGENT_SMI,
        (GpuSample(0),),
        (GpuProcess(7, "python3", 1, command=command),),
    )
    data = json.loads(json.dumps(sample_to_json(sample)))
    [back] = sample_from_json(data).processes
    assert back.command == f"{SGLANG} --api-key ****"


def test_the_doctors_venv_users_are_masked() -> None:
    argv = ["/venv/bin/python3", "-m", "sglang.launch_server", *ARGV]
    check = check_processes(Facts({"procs": [{"pid": 4242, "argv": argv}]}, "ct200"))
    described = VenvUser("SGLang server", 4242, tuple(argv)).describe()
    for text in (check.evidence, described):
        assert "--api-key ****" in text and ARGV_SECRETS[0] not in text, text
