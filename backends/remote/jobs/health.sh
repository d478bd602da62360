# shellcheck shell=sh
# A server job's health: sh -c SCRIPT gpumon-job URL TIMEOUT. Prints the HTTP status of
# GET URL on the target (where the server listens on 127.0.0.1), or "000 WHY" when none
# came within TIMEOUT seconds. Python 3 is there (the agent runs on it); no proxy is asked.
exec python3 - "$1" "$2" <<'PY'
import sys
import urllib.error
import urllib.request

opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
try:
    with opener.open(sys.argv[1], timeout=float(sys.argv[2])) as answer:
        print(answer.status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception as e:  # refused, timed out: no answer
    print("000", str(e).replace("\n", " ")[:200])
PY
