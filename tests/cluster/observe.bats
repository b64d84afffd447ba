#!/usr/bin/env bats
# Watching a run: the summary for people, system metrics per rank,
# Prometheus output (parsed by the prometheus_client package), the cost
# against a hand calculation, whale-report rendered in headless Chromium,
# the layout a checkpoint records, trace span names, the process name.
# Every output comes from a real run under srun on the minicluster (or
# whale-run for the HTTP endpoint, which the plugin is not part of).

load train_helpers

TRAIN="$WHALE_BUILD_DIR/runtime/tools/train/whale-train"
RUN="$WHALE_BUILD_DIR/runtime/tools/run/whale-run"
REPORT="$WHALE_BUILD_DIR/runtime/tools/report/whale-report"
CKPT="$WHALE_BUILD_DIR/runtime/tools/ckpt/whale-ckpt"
CHECK="$WHALE_SRC_DIR/tests/report/render-check.py"

setup_file() {
  export TMPD=$(mktemp -d)
  chmod 755 "$TMPD"
  make_corpus "$TMPD"
  # 2 nodes, DP 4, 2 micro-batches per step, checkpoints, traces, per-rank
  # metrics, one Prometheus file per rank, priced by the flag
  WHALE_TRACE="$TMPD/trace.json" timeout 300 srun -N2 -n4 --whale-dp=4 "$TRAIN" \
    --model gpt-tiny --data "$TMPD/corpus.txt" --steps 12 --batch 8 --grad-accum 2 --seq 64 \
    --threads 1 --no-progress --metrics "$TMPD/run.jsonl" --rank-metrics \
    --prom-file "$TMPD/prom-%r.prom" --prom-every 4 --price-per-node-hour 3.6 \
    --whale-ckpt-dir "$TMPD/ck" --whale-ckpt-every 6 > "$TMPD/run.out" 2> "$TMPD/run.err"
  echo $? > "$TMPD/run.rc"
}
teardown_file() { rm -rf "$TMPD"; }

@test "the srun run trains to the end" {
  cat "$TMPD/run.err" | tail -30
  [ "$(cat "$TMPD/run.rc")" = 0 ]
}

@test "closing summary: aligned lines for people on stderr, then the JSON line as before" {
  run cat "$TMPD/run.err"
  [[ "$output" == *"whale-train summary"* ]]
  for k in "steps  " "wall time  " "tokens  " "loss  " "efficiency  " "data loader wait  " \
           "checkpoints  " "failures recovered  " "cost  " "per million tokens  " "per 0.1 of loss  "; do
    grep -q "^  $k" "$TMPD/run.err" || { echo "missing line: $k"; false; }
  done
  grep -q "^  steps  *12 on 4 ranks, 2 nodes" "$TMPD/run.err"
  grep -q "^  checkpoints  *2 saved" "$TMPD/run.err"
  # the keys of the JSON summary that existed before are all still there
  run python3 - "$TMPD/run.out" <<'PY'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"summary"')][-1]["summary"]
old = ["steps", "first_loss", "final_loss", "tokens_per_s", "mfu", "comm_overlap", "peak_rss_mb",
       "peak_gflops", "dp", "zero", "global_batch", "tp", "pp", "schedule", "recompute", "precision",
       "checkpoints"]
new = ["wall_s", "tokens", "nodes", "ranks", "data_wait_s", "recoveries", "cost"]
miss = [k for k in old + new if k not in s]
assert not miss, miss
assert s["steps"] == 12 and s["nodes"] == 2 and s["ranks"] == 4 and s["recoveries"] == 0
print("ok")
PY
  echo "$output"
  [ "$status" -eq 0 ]
}

@test "system metrics per rank: CPU, RSS, I/O wait, network by link class, data wait; no GPU fields without a GPU" {
  ls "$TMPD"/run-rank*.jsonl
  run python3 - "$TMPD" <<'PY'
import json, os, sys
d = sys.argv[1]
need = ["cpu_util", "rss_mb", "node_cpu_util", "iowait", "net_tcp_mb", "net_lo_mb", "data_wait_s"]
files = {0: os.path.join(d, "run.jsonl")}
files.update({r: os.path.join(d, "run-rank%d.jsonl" % r) for r in (1, 2, 3)})
nodes = set()
for r, p in files.items():
    recs = [json.loads(l) for l in open(p) if l.startswith('{"step"')]
    assert len(recs) == 12, (p, len(recs))
    for x in recs:
        miss = [k for k in need if k not in x]
        assert not miss, (p, x["step"], miss)
        assert x["rss_mb"] > 1 and x["cpu_util"] >= 0 and 0 <= x["iowait"] <= 1, x
        assert "gpu_util" not in x and "gpu_mem_mb" not in x, "GPU fields without a GPU"
        if r:
            assert x["rank"] == r and x["step_s"] > 0 and "compute_s" in x
            nodes.add(x["node"])
# ranks 1..3 sit on both nodes; tcp bytes flowed between them
assert len(nodes) == 2, nodes
tcp = sum(json.loads(l)["net_tcp_mb"] for l in open(files[1]) if l.startswith('{"step"'))
assert tcp > 0, tcp
print("ok: nodes", sorted(nodes), "tcp MiB on rank 1's node", round(tcp, 3))
PY
  echo "$output"
  [ "$status" -eq 0 ]
}

@test "Prometheus textfile of every rank parses with prometheus_client, names, labels, no temp file left" {
  run python3 - "$TMPD" <<'PY'
import glob, os, sys
from prometheus_client.parser import text_string_to_metric_families
d = sys.argv[1]
files = sorted(glob.glob(os.path.join(d, "prom-*.prom")))
assert len(files) == 4, files
assert not glob.glob(os.path.join(d, "*.tmp.*")), "temporary file left behind"
for p in files:
    rank = p.rsplit("-", 1)[1].split(".")[0]
    fams = {f.name: f for f in text_string_to_metric_families(open(p).read())}
    for name, typ in [("whale_tokens_per_second", "gauge"), ("whale_loss", "gauge"),
                      ("whale_step_seconds", "gauge"), ("whale_steps", "counter"),
                      ("whale_tokens", "counter"), ("whale_mfu_ratio", "gauge"),
                      ("whale_resident_memory_bytes", "gauge"), ("whale_cpu_utilization_cores", "gauge")]:
        assert name in fams, (p, name, sorted(fams))
        assert fams[name].type == typ, (name, fams[name].type)
    s = fams["whale_steps"].samples[0]
    assert s.value == 12, s
    lab = s.labels
    assert lab["rank"] == rank and lab["slurm_job_id"] == os.environ.get("SLURM_JOB_ID", lab["slurm_job_id"]) and lab["slurm_job_id"] != "", lab
    assert lab["node"] and lab["slurm_step_id"] != "", lab
    print(p, len(fams), "families", lab)
PY
  echo "$output"
  [ "$status" -eq 0 ]
}

@test "cost: flag price x nodes x wall time, per million tokens and per 0.1 of loss, by hand" {
  run python3 - "$TMPD/run.out" <<'PY'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"summary"')][-1]["summary"]
c = s["cost"]
usd = 3.6 * 2 * s["wall_s"] / 3600           # $3.6 per node-hour, 2 nodes
tokens = 12 * 8 * 64                          # steps x global batch x seq
assert s["tokens"] == tokens, s["tokens"]
assert abs(c["usd"] - usd) <= 1e-9 * usd, (c["usd"], usd)
assert abs(c["usd_per_hour"] - 7.2) < 1e-12
assert abs(c["usd_per_mtok"] - usd / (tokens / 1e6)) <= 1e-9 * c["usd_per_mtok"]
per = usd / ((s["first_loss"] - s["final_loss"]) / 0.1)
assert abs(c["usd_per_0.1_loss"] - per) <= 1e-9 * per, (c["usd_per_0.1_loss"], per)
print("ok", c)
PY
  echo "$output"
  [ "$status" -eq 0 ]
}

@test "cost from whale.conf's PricePerNodeHour for the step's nodes (no flag)" {
  run timeout 300 srun -N2 -n2 --whale-dp=2 "$TRAIN" --model gpt-tiny --data "$TMPD/corpus.txt" \
    --steps 3 --batch 4 --seq 32 --threads 1 --no-progress --metrics "$TMPD/conf.jsonl"
  [ "$status" -eq 0 ]
  run python3 - "$TMPD/conf.jsonl" <<'PY'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"summary"')][-1]["summary"]
c = s["cost"]
assert "whale.conf" in c["price"], c
assert abs(c["usd_per_hour"] - 2 * 2.40) < 1e-12, c    # NodeName=DEFAULT PricePerNodeHour=2.40
assert abs(c["usd"] - 4.8 * s["wall_s"] / 3600) <= 1e-9 * c["usd"]
print("ok", c)
PY
  echo "$output"
  [ "$status" -eq 0 ]
}

@test "whale-report: self-contained page, every figure rendered in headless Chromium" {
  run python3 "$REPORT" "$TMPD/run.jsonl" "$TMPD"/run-rank*.jsonl --trace "$TMPD"/trace-rank*.json \
    -o "$TMPD/report.html" --svg-dir "$TMPD/svg" --png "$TMPD/page.png"
  echo "$output"
  [ "$status" -eq 0 ]
  [ "$(head -c 8 "$TMPD/page.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]
  # nothing to fetch: no http(s) URL in any src/href
  ! grep -Eq '(src|href)="https?:' "$TMPD/report.html" || false
  for f in loss throughput mfu split memory system ranks events trace; do
    [ -s "$TMPD/svg/$f.svg" ]
  done
  run python3 "$CHECK" "$TMPD/report.html" "$TMPD/report.png" \
    loss throughput mfu split memory rss system network ranks events trace
  echo "$output"
  [ "$status" -eq 0 ]
  grep -q "Stragglers:" "$TMPD/report.html"
}

@test "whale-report: clear errors for a missing file and a file without steps; unknown fields tolerated" {
  run python3 "$REPORT" "$TMPD/nope.jsonl" -o "$TMPD/x.html"
  [ "$status" -ne 0 ]
  [[ "$output" == *"nope.jsonl: no such file"* ]]
  echo '{"hello": 1}' > "$TMPD/empty.jsonl"
  run python3 "$REPORT" "$TMPD/empty.jsonl" -o "$TMPD/x.html"
  [ "$status" -ne 0 ]
  [[ "$output" == *"no step records"* ]]
  # fields from other parts of Whale (and ones not invented yet) are ignored;
  # a validation loss and a recovery event are drawn
  head -3 "$TMPD/run.jsonl" | sed 's/{"step"/{"future_field":[1,2],"step"/' > "$TMPD/x.jsonl"
  echo '{"step":3,"val_loss":5.1}' >> "$TMPD/x.jsonl"
  echo '{"event":"recovery","kind":"replace","how":"crash","failed_rank":1,"node":"n2","failed_step":2,"total_s":1.5}' >> "$TMPD/x.jsonl"
  echo 'not json' >> "$TMPD/x.jsonl"
  run python3 "$REPORT" "$TMPD/x.jsonl" -o "$TMPD/x.html"
  echo "$output"
  [ "$status" -eq 0 ]
  grep -q "validation loss" "$TMPD/x.html"
  grep -q "recovery (replace, crash)" "$TMPD/x.html"
}

@test "whale-ckpt inspect: the checkpoint records the layout the run used" {
  run "$CKPT" inspect "$TMPD/ck/step-00000012"
  echo "$output"
  [ "$status" -eq 0 ]
  run python3 - "$output" <<'PY'
import json, sys
line = [l for l in sys.argv[1].splitlines() if l.startswith("plan ")][0]
p = json.loads(line.split(None, 1)[1])
assert p["global_batch"] == 8 and p["model"] == "gpt-tiny", p
assert p["num_micro_batches"] == 2 and p["micro_batch"] == 1 and p["dp"] == 4, p
print("ok")
PY
  [ "$status" -eq 0 ]
}

@test "trace span names are those docs/observability.md lists; selective recompute has spans and recompute_s" {
  run timeout 300 env WHALE_TRACE="$TMPD/sel.json" "$RUN" -n 1 --timeout 280 "$TRAIN" \
    --model gpt-tiny --data "$TMPD/corpus.txt" --steps 3 --batch 4 --seq 64 --threads 1 \
    --no-progress --recompute selective --metrics "$TMPD/sel.jsonl"
  [ "$status" -eq 0 ]
  run python3 - "$WHALE_SRC_DIR/docs/observability.md" "$TMPD" <<'PY'
import glob, json, re, sys
doc = open(sys.argv[1]).read()
after = doc.split("spans, by name")[1]
table = "\n".join(l for l in after.split("\n\n")[1].splitlines() if l.lstrip().startswith("|"))
documented = set(re.findall(r"`([a-z][a-z ()]*)`", table))
seen = set()
for p in glob.glob(sys.argv[2] + "/trace-rank*.json") + [sys.argv[2] + "/sel.json"]:
    t = json.load(open(p))
    evs = t["traceEvents"] if isinstance(t, dict) else t
    seen |= {e["name"] for e in evs if e.get("ph") == "X"}
extra = seen - documented
assert not extra, ("spans docs/observability.md does not list", extra)
assert "recompute" in seen and "dp wait" in seen, seen
rs = [json.loads(l)["recompute_s"] for l in open(sys.argv[2] + "/sel.jsonl") if l.startswith('{"step"')]
assert all(r > 0 for r in rs), rs
print("ok", sorted(seen))
PY
  echo "$output"
  [ "$status" -eq 0 ]
}

@test "Prometheus HTTP endpoint on rank 0: 127.0.0.1 only, GET /metrics parses, other paths 404" {
  WHALE_TRACE= timeout 300 "$RUN" -n 2 --timeout 280 "$TRAIN" --model gpt-tiny \
    --data "$TMPD/corpus.txt" --steps 100000 --batch 4 --seq 32 --threads 1 --no-progress \
    --metrics "$TMPD/http.jsonl" --prom-port 0 --prom-every 1 > /dev/null 2> "$TMPD/http.err" &
  pid=$!
  run python3 - "$TMPD/http.err" <<'PY'
import re, sys, time, urllib.request, urllib.error
from prometheus_client.parser import text_string_to_metric_families
port = None
for _ in range(600):
    m = re.search(r"prometheus metrics on http://127\.0\.0\.1:(\d+)/metrics", open(sys.argv[1]).read())
    if m:
        port = int(m.group(1)); break
    time.sleep(0.2)
assert port, open(sys.argv[1]).read()[-2000:]
text = ""
for _ in range(600):
    r = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10)
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = r.read().decode()
    if "whale_loss" in text:
        break
    time.sleep(0.2)
fams = {f.name for f in text_string_to_metric_families(text)}
assert {"whale_loss", "whale_tokens_per_second", "whale_step_seconds"} <= fams, fams
try:
    urllib.request.urlopen("http://127.0.0.1:%d/secret" % port, timeout=10)
    raise SystemExit("a path other than /metrics was served")
except urllib.error.HTTPError as e:
    assert e.code == 404
# bound to loopback only
listen = open("/proc/net/tcp").read()
hexport = "%04X" % port
rows = [l.split() for l in listen.splitlines()[1:] if l.split()[1].endswith(":" + hexport) and l.split()[3] == "0A"]
assert rows and all(r[1].startswith("0100007F:") for r in rows), rows
print("ok port", port, len(fams), "families")
PY
  echo "$output"
  kill -TERM $pid 2>/dev/null || true
  wait $pid || true
  [ "$status" -eq 0 ]
}

@test "whale-train is named whale-train in ps/pgrep (not exe)" {
  "$TRAIN" --model gpt-tiny --data "$TMPD/corpus.txt" --steps 100000 --batch 4 --seq 32 \
    --threads 1 --no-progress --metrics "$TMPD/ps.jsonl" > /dev/null 2>&1 &
  pid=$!
  for i in $(seq 600); do [ -s "$TMPD/ps.jsonl" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.2; done
  comm=$(cat /proc/$pid/comm)
  found=$(pgrep -x whale-train | grep -c "^$pid\$" || true)
  kill -TERM $pid; wait $pid || true
  echo "comm=$comm pgrep=$found"
  [ "$comm" = whale-train ]
  [ "$found" = 1 ]
}

@test "bad observability options: exit 2 naming the option and the range" {
  run "$TRAIN" --model gpt-tiny --data "$TMPD/corpus.txt" --prom-every 0
  [ "$status" -eq 2 ]
  [[ "$output" == *"--prom-every=0: expected an integer in 1..1000000000"* ]]
  run "$TRAIN" --model gpt-tiny --data "$TMPD/corpus.txt" --prom-port 70000
  [ "$status" -eq 2 ]
  [[ "$output" == *"--prom-port=70000: expected a number in 0..65535"* ]]
  run "$TRAIN" --model gpt-tiny --data "$TMPD/corpus.txt" --price-per-node-hour -3
  [ "$status" -eq 2 ]
  [[ "$output" == *"--price-per-node-hour=-3: expected a number in 0..1e+06"* ]]
  run "$TRAIN" --model gpt-tiny --data "$TMPD/corpus.txt" --prom-port 1 --prom-bind 10.1.2.3.4
  [ "$status" -eq 2 ]
  [[ "$output" == *"--prom-bind=10.1.2.3.4: expected an IPv4 address"* ]]
  # a well-formed address that is not this host's (TEST-NET-1): refused at the bind
  run "$TRAIN" --model gpt-tiny --data "$TMPD/corpus.txt" --steps 1 --prom-port 1 --prom-bind 192.0.2.1 \
    --metrics "$TMPD/bad.jsonl"
  [ "$status" -eq 1 ]
  [[ "$output" == *"--prom-port=1 --prom-bind=192.0.2.1: cannot listen"* ]]
}

@test "whale-plan --train-tokens: cost of the chosen plan, by hand (flag price and whale.conf's)" {
  PLAN="$WHALE_BUILD_DIR/runtime/tools/plan/whale-plan"
  run "$PLAN" -m gpt-1.7b -N 2 -g 8 -b 64 --train-tokens 1e9 --price-per-gpu-hour 2 -q
  echo "$output"
  [ "$status" -eq 0 ]
  run python3 - "$output" <<'PY'
import re, sys
out = sys.argv[1]
t = float(re.search(r"step ([0-9.e+-]+) s", out).group(1))
m = re.search(r"cost: 1e\+09 tokens = (\d+) steps x [0-9.e+-]+ s = [0-9.e+-]+ hours at \$32 per hour \(\$2 per GPU-hour x 16 GPUs\): \$([0-9.]+), \$([0-9.e+-]+) per million tokens", out)
assert m, out
steps = -(-10**9 // (64 * 2048))               # ceil(tokens / (batch x seq))
assert int(m.group(1)) == steps, (m.group(1), steps)
usd = steps * t / 3600 * 2 * 16                # $2 per GPU-hour x 16 GPUs
assert abs(float(m.group(2)) - usd) <= 0.006, (m.group(2), usd)   # printed to the cent; t to 4 digits
print("ok", steps, usd)
PY
  echo "$output"
  [ "$status" -eq 0 ]
  # the price of the nodes from the minicluster's whale.conf (PricePerNodeHour=2.40)
  run "$PLAN" -m gpt-tiny --conf "$WHALE_MC_DIR/whale.conf" --nodelist "node[1-2]" \
    -g 1 -b 8 --train-tokens 1e6 -q
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"whale.conf: \$4.8 per hour for 2 nodes"* ]]
  run "$PLAN" -m gpt-tiny -N 1 -g 1 -b 8 --train-tokens 1e6 -q
  [ "$status" -eq 1 ]
  [[ "$output" == *"--train-tokens needs a price"* ]]
  run "$PLAN" -m gpt-tiny -N 1 -b 8 --price-per-node-hour abc
  [ "$status" -eq 2 ]
  [[ "$output" == *"--price-per-node-hour=abc: expected a number in 0..1e+06"* ]]
}

@test "scaling tool under srun: measured beside predicted, strong and weak efficiency drawn" {
  run timeout 600 python3 "$WHALE_SRC_DIR/contrib/bench/scale.py" --build "$WHALE_BUILD_DIR" \
    --launcher srun --ranks 1,2 --max-nodes 2 --steps 4 --batch 8 -o "$TMPD/scale"
  echo "$output"
  [ "$status" -eq 0 ]
  run python3 - "$TMPD/scale/scale.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
key = {(r["mode"], r["ranks"]) for r in rows}
assert key == {("strong", 1), ("strong", 2), ("weak", 1), ("weak", 2)}, key
for r in rows:
    assert r["step_s"] > 0 and r["pred_step_s"] and r["pred_step_s"] > 0, r
    assert r["nodes"] == r["ranks"], r   # one rank per node under srun
assert [r for r in rows if r["mode"] == "weak" and r["ranks"] == 2][0]["batch"] == 16
print("ok")
PY
  [ "$status" -eq 0 ]
  run python3 "$CHECK" "$TMPD/scale/scale.html" "$TMPD/scale.png" strong-efficiency strong-time weak-efficiency weak-time
  echo "$output"
  [ "$status" -eq 0 ]
}
