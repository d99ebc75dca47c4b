#!/usr/bin/env bash
# Peak RSS and CPU of the real vramfit-agent binary (see agent/BENCHMARKS.md).
#   1. `--once --print --fixture` run many times under /usr/bin/time -v;
#   2. the long-running agent (1 s refresh) against examples/fake_apiserver for DURATION s,
#      reading VmRSS/VmHWM and CPU ticks from /proc.
# Usage: agent/benches/measure_binary.sh [RUNS] [DURATION]   (from the workspace root)
set -euo pipefail
RUNS=${1:-200}
DURATION=${2:-60}
BIN=target/release/vramfit-agent
FAKE=target/release/examples/fake_apiserver
FIXTURE=agent/fixtures/h100-x8.yaml
cargo build --release -p vramfit-agent --bin vramfit-agent --example fake_apiserver >&2

echo "== --once --print, ${RUNS} runs"
start=$(date +%s.%N)
for _ in $(seq "$RUNS"); do "$BIN" --once --print --fixture "$FIXTURE" >/dev/null 2>&1; done
end=$(date +%s.%N)
echo "wall per run: $(echo "($end - $start) * 1000 / $RUNS" | bc -l | cut -c1-6) ms"
/usr/bin/time -v "$BIN" --once --print --fixture "$FIXTURE" 2>&1 >/dev/null \
  | grep -E "Maximum resident set size|User time|System time"

echo "== --once --print without fixture (NVML path)"
/usr/bin/time -v "$BIN" --once --print 2>&1 >/dev/null | grep -E "Maximum resident set size"

echo "== long-running agent, 1 s refresh, ${DURATION} s, against the fake API server"
KUBECONFIG_FILE=$(mktemp)
PORT=18080
FAKE_LOG=$(mktemp)
"$FAKE" "$PORT" "$KUBECONFIG_FILE" bench-node 2>"$FAKE_LOG" &
FAKE_PID=$!
sleep 1
KUBECONFIG="$KUBECONFIG_FILE" RUST_LOG=warn "$BIN" --fixture "$FIXTURE" --node-name bench-node \
  --interval-seconds 1 --listen 127.0.0.1:19102 &
AGENT_PID=$!
sleep 2
curl -s -o /dev/null -w "readyz: %{http_code}\n" http://127.0.0.1:19102/readyz || true
sleep "$DURATION"
curl -s http://127.0.0.1:19102/metrics | grep -E "^vramfit_agent_(gpus|label_writes_total) " || true
grep -E "VmRSS|VmHWM|Threads" "/proc/$AGENT_PID/status"
TICKS=$(awk '{print $14 + $15}' "/proc/$AGENT_PID/stat")
echo "CPU: ${TICKS} ticks ($(getconf CLK_TCK)/s) over ${DURATION} s + start-up"
kill -TERM "$AGENT_PID"; wait "$AGENT_PID" && echo "agent exited 0 on SIGTERM"
kill -INT "$FAKE_PID"; wait "$FAKE_PID" 2>/dev/null || true
echo "requests the API server received:"; grep -E "^(GET|PATCH) " "$FAKE_LOG" || true
rm -f "$KUBECONFIG_FILE" "$FAKE_LOG"
