#!/usr/bin/env bash
# Loads 1M `orders` (the bench's rows) in 10 000-row COPY batches through psql, with the README
# tour's two materialized views maintained, into a fresh server; prints rows/s and the server's
# CPU seconds and peak RSS. SlateDB settings can be varied through ROCKSTREAM_SLATEDB_* variables
# in the environment (see crates/storage). With PERF=1, records a profile (perf, DWARF call graphs)
# of PERF_SECONDS (default 15) starting PERF_DELAY seconds (default 8) into the load.
#
# Usage: [SHARDS=n] scripts/copy-load.sh BINARY [ARRANGEMENT_CACHE]    e.g. target/release/rockstream 64MB
set -euo pipefail
binary=$1
cache=${2:-64MB}
work=${WORK:-/tmp/rockstream-copy-load}
port=${PORT:-6543}
mkdir -p "$work"
if [[ ! -f "$work/load.sql" ]]; then
    python3 - "$work" <<'PY'
import sys
work = sys.argv[1]
regions = ["eu", "us", "apac", "latam", "mea", "nordics", "dach", "uk"]
tiers = ["gold", "silver", "\\N"]
with open(f"{work}/customers.tsv", "w") as f:
    for i in range(1, 1001):
        f.write("%d\tcustomer %d\t%s\n" % (i, i, tiers[i % 3]))
with open(f"{work}/load.sql", "w") as script:
    for b in range(100):
        with open(f"{work}/o{b:04d}.tsv", "w") as f:
            for i in range(b * 10000 + 1, (b + 1) * 10000 + 1):
                a = (i * 7919) % 50000
                f.write("%d\t%d\t%d.%02d\t%s\t2024-01-01 00:00:00\n" % (i, i % 1000 + 1, a // 100, a % 100, regions[i % 8]))
        script.write(f"\\copy orders FROM '{work}/o{b:04d}.tsv'\n")
PY
fi
cat >"$work/schema.sql" <<SQL
CREATE TABLE customers (id BIGINT PRIMARY KEY, name TEXT NOT NULL, tier TEXT);
CREATE TABLE orders (id BIGINT PRIMARY KEY, customer_id BIGINT, amount NUMERIC(12,2), region TEXT, created_at TIMESTAMP);
CREATE MATERIALIZED VIEW revenue_by_region AS
  SELECT region, COUNT(*) AS orders, SUM(amount) AS revenue, AVG(amount) AS avg_amount,
         MIN(amount) AS smallest, MAX(amount) AS largest
  FROM orders GROUP BY region;
CREATE MATERIALIZED VIEW big_orders AS
  SELECT o.id, c.name, c.tier, o.amount FROM orders o JOIN customers c ON o.customer_id = c.id WHERE o.amount > 100;
\copy customers FROM '$work/customers.tsv'
SQL
rm -rf "$work/data"
"$binary" start --storage "$work/data" --listen "127.0.0.1:$port" --shards "${SHARDS:-1}" \
    --arrangement-cache "$cache" >"$work/server.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
url="host=127.0.0.1 port=$port user=rockstream dbname=default"
for _ in $(seq 1 100); do psql "$url" -c 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.2; done
psql -q "$url" -f "$work/schema.sql" >/dev/null
if [[ -n "${PERF:-}" ]]; then
    (sleep "${PERF_DELAY:-8}"; perf record -F 199 --call-graph dwarf,16384 -p "$pid" -o "$work/perf.data" -- sleep "${PERF_SECONDS:-15}" >/dev/null 2>&1) &
fi
start=$(date +%s.%N)
psql -q "$url" -f "$work/load.sql" >/dev/null
end=$(date +%s.%N)
cpu=$(awk '{print ($14 + $15) / 100}' "/proc/$pid/stat")
peak_rss_mib=$(awk '/VmHWM/ {print int($2 / 1024)}' "/proc/$pid/status")
psql -qt "$url" -c 'SHOW rockstream.arrangement_cache'
echo "rows/s $(echo "1000000 / ($end - $start)" | bc) server_cpu_s $cpu peak_rss_mib $peak_rss_mib"
