#!/usr/bin/env python3
"""load.py - a load test of ntx-serve on the CPU (tests/cli/serve.bats runs it).

usage: load.py NTX_RUN MODEL URL SERVER_PID [--clients 32] [--per-client 4] [--rounds 3]

Each round: CLIENTS threads send PER_CLIENT requests each (completions and
chat completions, streamed and not, greedy), and every 5th streamed request
disconnects after its first events. Every completed text must equal the same
request run alone with ntx-run (-p / --chat -p, -n, --temp 0). After each
round /health must show every slot free and nothing queued; the server's
resident memory after the last round must not exceed the first round's by
more than 10% + 8 MiB (not checked with --no-memory-check: under
AddressSanitizer freed memory is held in quarantine). Prints one JSON summary
line; exit 1 on a failure."""
import http.client
import json
import subprocess
import sys
import threading
import time
import urllib.parse

PROMPTS = ["In the beginning", "The old man looked at the sea and", "Tell me a story",
           "What is the capital of France?", "Once upon a time", "And the LORD said unto Moses,"]
LENGTHS = [8, 16, 24]


def args():
    a = sys.argv[1:]
    opt = {"--clients": 32, "--per-client": 4, "--rounds": 3, "--no-memory-check": 0}
    pos = []
    i = 0
    while i < len(a):
        if a[i] == "--no-memory-check":
            opt[a[i]] = 1
            i += 1
        elif a[i] in opt:
            opt[a[i]] = int(a[i + 1])
            i += 2
        else:
            pos.append(a[i])
            i += 1
    return pos, opt


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def request_of(client, k):
    i = client * 7 + k * 3
    kind = "chat" if (client + k) % 2 else "completion"
    prompt = PROMPTS[i % len(PROMPTS)]
    n = LENGTHS[(client + 2 * k) % len(LENGTHS)]
    stream = (client + k) % 3 != 0
    drop = stream and (client * 4 + k) % 5 == 0
    return kind, prompt, n, stream, drop


def run_one(url, kind, prompt, n, stream, drop):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    if kind == "chat":
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]}
    else:
        path, body = "/v1/completions", {"prompt": prompt}
    body.update({"max_tokens": n, "temperature": 0, "stream": stream})
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:200]}")
    if not stream:
        d = json.loads(r.read())
        c.close()
        ch = d["choices"][0]
        return ch["message"]["content"] if kind == "chat" else ch["text"]
    text, events = "", 0
    while True:
        line = r.fp.readline()
        if not line:
            raise RuntimeError("stream ended without [DONE]")
        line = line.decode().rstrip("\r\n")
        if not line.startswith("data: "):
            continue
        if line == "data: [DONE]":
            break
        events += 1
        if drop and events == 2:
            c.sock.shutdown(2)
            c.close()
            return None
        ch = json.loads(line[6:])["choices"][0]
        text += (ch.get("delta", {}).get("content") or "") if kind == "chat" else ch["text"]
    c.close()
    return text


def alone(run, model, kind, prompt, n):
    cmd = [run, "-m", model, "-q", "-t", "2", "-p", prompt, "-n", str(n), "--temp", "0"]
    if kind == "chat":
        cmd.append("--chat")
    return subprocess.run(cmd, capture_output=True, check=True).stdout.decode()


def health(url):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    c.request("GET", "/health")
    d = json.loads(c.getresponse().read())
    c.close()
    return d


def main():
    (run, model, url, pid), opt = args()
    pid = int(pid)
    ref, fails, rounds = {}, [], []
    h0 = health(url)
    n_slots = h0["slots_idle"] + h0["slots_processing"]
    for rnd in range(opt["--rounds"]):
        results, lock = [], threading.Lock()

        def client(ci):
            for k in range(opt["--per-client"]):
                req = request_of(ci, k)
                try:
                    t = run_one(url, *req)
                except Exception as e:  # noqa: BLE001
                    with lock:
                        fails.append(f"round {rnd} client {ci} req {k}: {e}")
                    continue
                with lock:
                    results.append((req, t))

        t0 = time.time()
        th = [threading.Thread(target=client, args=(i,)) for i in range(opt["--clients"])]
        for t in th:
            t.start()
        for t in th:
            t.join()
        dt = time.time() - t0
        # cancelled sequences are let go within a step or two
        for _ in range(100):
            h = health(url)
            if h["slots_idle"] == n_slots and h["queued"] == 0:
                break
            time.sleep(0.1)
        if h["slots_idle"] != n_slots or h["queued"] != 0:
            fails.append(f"round {rnd}: slots leak: {h}")
        done = dropped = 0
        for (kind, prompt, n, stream, drop), text in results:
            if text is None:
                dropped += 1
                continue
            key = (kind, prompt, n)
            if key not in ref:
                ref[key] = alone(run, model, kind, prompt, n)
            if text != ref[key]:
                fails.append(f"round {rnd}: {key}: {text!r} != alone {ref[key]!r}")
            done += 1
        rounds.append({"round": rnd + 1, "completed": done, "disconnected": dropped,
                       "seconds": round(dt, 2), "rss_kib": rss_kib(pid), "health": h})
    first, last = rounds[0]["rss_kib"], rounds[-1]["rss_kib"]
    if not opt["--no-memory-check"] and last > first * 1.10 + 8192:
        fails.append(f"memory grew: {first} KiB after round 1, {last} KiB after round {len(rounds)}")
    print(json.dumps({"clients": opt["--clients"], "per_client": opt["--per-client"],
                      "slots": n_slots, "rounds": rounds, "failures": fails[:20],
                      "n_failures": len(fails)}))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
