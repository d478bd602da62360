"""Secrets as files and command lines carry them, for the bundle's scrubber and the masked
process commands: each entry is (text as a file would hold it, the secret part that must
not survive). ``READABLE`` is text shaped like a secret that must stay as it is.

``SHAPES`` are the first round's 17 (tokens in URLs, headers, key blocks, service tokens);
``NAMED`` the values under a secret's name (gpumon issue 34, point 2): a flag's
(``--api-key VALUE``, SGLang's and vLLM's own), a key's in any case and quoting (``key:
value`` of YAML and HTTP headers, ``key = value``, ``'key': 'value'``, ``export NAME=``).
The values are chosen so that no shape of the first round matches them (no ``sk-``,
``hf_`` or ``AKIA`` prefix): only the name gives them away.

``ARGV``: a stand-in SGLang server's arguments carrying secrets the way a user starts one,
and the secrets in them.
"""

from __future__ import annotations

SHAPES: list[tuple[str, str]] = [
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

NAMED: list[tuple[str, str]] = [
    # the seven of the issue
    (
        "launching: python3 -m sglang.launch_server --model-path /models/llama "
        "--api-key SglApiKeyValue01 --port 30000",
        "SglApiKeyValue01",
    ),
    ("vllm serve /models/llama --password PwFlagValue02 --port 8000", "PwFlagValue02"),
    # vLLM's list-valued --api-key as its non-default args line prints it (issue 38)
    (
        "(APIServer pid=7) INFO 12-07 14:00:00 [api_utils.py:272] non-default args: "
        "{'model_tag': 'm', 'api_key': ['VllmListKey05a', 'VllmListKey05b'], 'port': 8000}",
        "VllmListKey05b",
    ),
    (
        "aws_secret_access_key = wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY03",
        "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY03",
    ),
    ('export MY_PASSWORD="ExportedPw04 with spaces"', "ExportedPw04 with spaces"),
    ("database:\n  host: db.internal\n  password: YamlPwValue05\n", "YamlPwValue05"),
    ("GET /v1/models HTTP/1.1\r\nX-Api-Key: HeaderKeyValue06\r\n", "HeaderKeyValue06"),
    ("{'model': 'llama', 'api_key': 'DictKeyValue07', 'port': 30000}", "DictKeyValue07"),
    # the same shapes spelled otherwise
    ("sglang --api-key=SglEqualsValue08 --host 0.0.0.0", "SglEqualsValue08"),
    ("vllm serve m --hf-token HfFlagValue09 --seed-token SeedTokValue10", "HfFlagValue09"),
    ("vllm serve m --hf-token HfFlagValue09 --seed-token SeedTokValue10", "SeedTokValue10"),
    ("--ssl-keyfile-password PemPassValue11 --ssl-keyfile /k.pem", "PemPassValue11"),
    (
        "['python3', '-m', 'sglang.launch_server', '--api-key', 'ArgvListValue12']",
        "ArgvListValue12",
    ),
    ('["sglang", "serve", "--api-key", "JsonArgvValue13"]', "JsonArgvValue13"),
    ("API_KEY: UpperYamlValue14", "UpperYamlValue14"),
    ("[auth]\nPassword = IniPwValue15 # the admin's\n", "IniPwValue15"),
    ('{"api_key": "JsonKeyValue16", "admin_api_key": "JsonAdminValue17"}', "JsonKeyValue16"),
    ('{"api_key": "JsonKeyValue16", "admin_api_key": "JsonAdminValue17"}', "JsonAdminValue17"),
    (
        "server_args=ServerArgs(model_path='/m', api_key='ReprKeyValue18', port=30000)",
        "ReprKeyValue18",
    ),
    ("x-auth-token: HeaderTokValue19", "HeaderTokValue19"),
    ("Cookie: session=CookieValue20; theme=dark", "CookieValue20"),
    ("export PGPASSWORD=PgPwValue21", "PgPwValue21"),
    ("secret_key = 'SecretKeyValue22'", "SecretKeyValue22"),
    ("trainer.wandb.apiKey=CamelKeyValue23 trainer.max_steps=10", "CamelKeyValue23"),
    ("--db-pass DbPassValue24", "DbPassValue24"),
    ('--password "Quoted Flag Value25" --port 1', "Quoted Flag Value25"),
]

CORPUS: list[tuple[str, str]] = SHAPES + NAMED

# Shaped like a secret, but none: must come out of the scrubber unchanged.
READABLE: list[str] = [
    "password reset email sent to the admin",
    "Decode batch. #running-req: 1, #token: 38, token usage: 0.87, "
    "gen throughput (token/s): 6.28, #queue-req: 0",
    "Decode batch, #running-req: 18, #full token: 164000, full token usage: 0.41, "
    "#swa token: 152000, swa token usage: 0.63",
    "tokens: 1234",
    "max_tokens = 512",
    "MAX_TOKENS=512",
    "token_usage: 0.87",
    "--tokenizer-path /models/llama --max-new-tokens 512 --tokens-per-step 8 "
    "--disable-custom-all-reduce --pass-through x --token-budget 4 --allow-credentials",
    "server_args=ServerArgs(model_path='/m', tokenizer_path='/m', api_key=None, "
    "admin_api_key=None, ssl_keyfile_password=None)",
    '{"api_key": null, "admin_api_key": null, "hf_token": null}',
    '"key": "gpu_memory:ct200:6", "token_env": "NTFY_TOKEN", "secret_env": "HOOK_SECRET"',
    '"expect_tokens_per_s": null, "max_tokens": 4096',
    "http://127.0.0.1:30000/metrics",
    '[2026-11-02 06:45:10] INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 200 OK',
    "cache key: 3f2a9c, sort_key = started",
]

# A stand-in SGLang server's command line: its secrets in each argv shape, with words that
# must stay (the flags themselves).
ARGV_SECRETS = ("SglArgvKey0001", "PassArgvValue02", "HfArgvToken003", "PemArgvPw0004")
ARGV: tuple[str, ...] = (
    "--api-key",
    ARGV_SECRETS[0],
    f"--password={ARGV_SECRETS[1]}",
    "--hf-token",
    ARGV_SECRETS[2],
    "--ssl-keyfile-password",
    ARGV_SECRETS[3],
    "--tokenizer-path",
    "/models/llama",
    "--max-total-tokens",
    "4096",
    "--port",
    "30000",
)

# Names that say their value is a secret (flags, keys, variables, headers), and names that
# only hold a secret's word (masking.is_secret_name's rules).
SECRET_NAMES: list[str] = [
    "--api-key", "--api_key", "--apikey", "--apiKey", "X-Api-Key", "--password", "passwd",
    "--db-pass", "--pass", "--token", "--hf-token", "--auth-token", "HF_TOKEN",
    "aws_secret_access_key", "AWS_SECRET_ACCESS_KEY", "client_secret", "--secret",
    "PGPASSWORD", "--basic-auth", "Authorization", "Cookie", "SENTRY_DSN",
    "-Djavax.net.ssl.keyStorePassword", "trainer.wandb.api_key", "--ssl-keyfile-password",
]  # fmt: skip
PLAIN_NAMES: list[str] = [
    "--tokenizer-path", "--tokenizer", "--max-new-tokens", "--tokens-per-step",
    "--token-budget", "--disable-custom-all-reduce", "--pass-through", "--max-tokens",
    "--eos-token", "--pad-token", "--bucket-time-to-first-token", "new-token",
    "--kt-max-deferred-experts-per-token", "token_env", "secret_env", "--token-file",
    "--api-key-file", "--ssl-keyfile", "key", "--cache-key", "sort_key", "--allow-credentials",
    "--no-auth", "--disable-auth-token", "--port", "expect_tokens_per_s", "usage", "",
    "--keyboard", "--passes", "--first-pass", "--inductor-passes",
]  # fmt: skip
