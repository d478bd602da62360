"""A process's environment as the detail view's ``e`` shows it: the variables an on-call
checks on a hung rank, in that order, scrubbed as a bundle is."""

from __future__ import annotations

from gpumon.backends.bundle.process_env import environment_lines
from gpumon.backends.bundle.scrub import REDACTED


def test_the_gpu_and_nccl_variables_first_secrets_scrubbed() -> None:
    environ = [
        "PATH=/usr/bin",
        "NCCL_DEBUG=INFO",
        "HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz012345",
        "CUDA_VISIBLE_DEVICES=2,3",
        "NCCL_IB_AUTH_TOKEN=s3cr3t-value-123",
        "MASTER_ADDR=https://ops:hunter2hunter2@10.0.0.1",
        "RANK=1",
        "HOME=/root",
    ]
    lines = environment_lines(environ)
    assert lines[:3] == ["CUDA_VISIBLE_DEVICES=2,3", "RANK=1", lines[2]]
    assert lines[2].startswith("MASTER_ADDR=") and "hunter2hunter2" not in lines[2]
    assert lines[3:5] == ["NCCL_DEBUG=INFO", f"NCCL_IB_AUTH_TOKEN={REDACTED}"]
    assert lines[-1] == "(3 other variables not shown)"
    assert not any("hf_abc" in line or "s3cr3t" in line for line in lines)


def test_a_value_with_a_newline_stays_one_line() -> None:
    lines = environment_lines(["NCCL_SOCKET_IFNAME=eth0", "second line", "TORCH_X=1"])
    assert lines == ["NCCL_SOCKET_IFNAME=eth0\\nsecond line", "TORCH_X=1"]


def test_none_set_is_said() -> None:
    assert environment_lines(["PATH=/bin"]) == [
        "no CUDA_VISIBLE_DEVICES, NCCL_* or TORCH_* variable set",
        "(1 other variable not shown)",
    ]
