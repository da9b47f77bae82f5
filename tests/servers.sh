#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# servers.sh — start real servers on spare loopback ports for the tests, and
# stop them afterwards. Source it from a test script, or run a command with
# servers around it:
#
#   tests/servers.sh run redis redlock sentinel cluster -- CMD ARGS...
#
# (the kinds start at once, each in a subshell; pgbouncer after the rest)
#
# exports, for what it started:
#   DLOCK_TEST_REDIS      redis://127.0.0.1:P           one master
#                         DLOCK_TEST_REDIS_KEY (the same, ?key=lock:{name})
#   DLOCK_TEST_REDLOCK    redlock://127.0.0.1:P1,...P5  five independent masters
#   DLOCK_TEST_REDIS6     redis://127.0.0.1:P  (kind redis6) a master that
#                         answers FUNCTION and FCALL like Redis 6 does (both
#                         renamed away: "unknown command"), for the fallback
#                         to scripts
#   DLOCK_TEST_SENTINEL   redis+sentinel://127.0.0.1:S1,S2,S3/dlockmaster
#                         (a master and two replicas watched by three sentinels)
#   DLOCK_TEST_CLUSTER    redis+cluster://127.0.0.1:C1,C2,C3  (three masters)
#                         DLOCK_TEST_CLUSTER_KEY (the same, ?key=lock:{name})
#   DLOCK_TEST_ZK         zk://127.0.0.1:P?session=2000&op_timeout_ms=5000  one ZooKeeper server
#   DLOCK_TEST_ZK_CURATOR the same server with ?layout=curator under /curator (zk)
#   DLOCK_TEST_ZK3        zk://127.0.0.1:P1,P2,P3?session=2000&op_timeout_ms=5000 (zk3): a
#                         three-member ensemble (zk3-1..3)
#   DLOCK_TEST_ZK3P       the same for zk3p: a three-member ensemble whose members
#                         reach each other through relays (NAME.links: their pids;
#                         SIGSTOP cuts a member off from the others)
#                         ZooKeeper runs with tickTime=500: sessions of 1–10 s,
#                         so that expiry tests take a second or two.
#   DLOCK_TEST_ETCD       etcd://127.0.0.1:P?ttl=2           one etcd member
#                         DLOCK_TEST_ETCD_ETCDCTL (the same, &layout=etcdctl)
#   DLOCK_TEST_ETCD3      etcd://127.0.0.1:P1,P2,P3?ttl=2 (etcd3): a three-member
#                         cluster (etcd3-1..3)
#   DLOCK_TEST_ETCD3N     etcd://A1:P1,A2:P2,A3:P3?ttl=2 (etcd3n): a three-member
#                         cluster (etcd3n-1..3), each member in a network
#                         namespace of its own on a bridge (addresses in
#                         NAME.host); NAME.partition on|off cuts a member off
#                         from the others (not from clients). Root only.
#   DLOCK_TEST_ETCDS      etcds://dlock:s3cret@127.0.0.1:P?cacert=CA&ttl=2 (etcds):
#                         one member with TLS on the client port (a throwaway
#                         CA: DLOCK_TEST_ETCDS_CA) and authentication on (users
#                         root:rootpw and dlock:s3cret, the latter read-write
#                         on every key); DLOCK_TEST_ETCDS_ENDPOINT=https://127.0.0.1:P
#   DLOCK_TEST_POSTGRES   postgres://dlock:s3cret@127.0.0.1:P/dlock  one PostgreSQL
#                         server (fsync off unless DLOCK_SERVERS_DURABLE), password auth over TCP;
#                         role dlock owns database dlock. Beside it:
#                         DLOCK_TEST_POSTGRES_LEASE (the same, ?mode=lease),
#                         DLOCK_TEST_POSTGRES_ROW (?mode=rowlock),
#                         DLOCK_TEST_POSTGRES_RO (role dlock_ro: may connect, may
#                         not create tables) and DLOCK_TEST_POSTGRES_ADMIN (the
#                         superuser postgres)
#   DLOCK_TEST_PGBOUNCER  postgres://dlock:s3cret@127.0.0.1:P/dlock (pgbouncer, after
#                         postgres): PgBouncer in transaction pool mode before it
#   DLOCK_TEST_MYSQL      mysql://dlock:s3cret@127.0.0.1:P/dlock  (kind mariadb) one
#                         MariaDB server (no flush per commit), user dlock with
#                         all privileges on database dlock. Beside it:
#                         DLOCK_TEST_MYSQL_LEASE (the same, ?mode=lease),
#                         DLOCK_TEST_MYSQL_ROW (?mode=rowlock),
#                         DLOCK_TEST_MYSQL_RO (user dlock_ro:ro, only SELECT on
#                         dlock: may connect, may not create tables),
#                         DLOCK_TEST_MYSQL_ADMIN (root:rootpw over TCP, every
#                         privilege: may KILL anyone's connection),
#                         DLOCK_TEST_MYSQL_CA (TLS on the same port, a throwaway
#                         CA; the certificate names IP 127.0.0.1) and
#                         DLOCK_TEST_MYSQL_SOCKET (its socket, where root needs
#                         no password: mariadb --socket=... -uroot).
#                         performance_schema.metadata_locks lists GET_LOCK's
#                         holders (GRANTED) and waiters (PENDING), for root
#                         (dlock may not read it).
#   DLOCK_TEST_MEMCACHED  memcached://127.0.0.1:P  (memcached) one server, 64 MB;
#                         DLOCK_TEST_MEMCACHED2 memcached://127.0.0.1:P,127.0.0.1:P2 (names
#                         spread over two servers: memcached, memcached2) and
#                         DLOCK_TEST_MEMCACHED_SMALL (memcached-small: 2 MB, for
#                         eviction)
#   DLOCK_TEST_SERVERS    the scratch directory: DIR/NAME.pid, DIR/NAME.port, DIR/NAME.cmd
#                         (DIR/NAME.host when the server is not on 127.0.0.1;
#                         DIR/*.down: scripts that undo what is not a process)
# DLOCK_SERVERS_DURABLE=1 starts ZooKeeper, PostgreSQL and MariaDB with their
# default durability (a flush per write or commit), as production runs them;
# by default they skip it: tests measure the protocol, not this disk.
# Every server gets its own directory under DLOCK_TEST_SERVERS; only the
# processes started here are ever signalled, by pid.
set -u

srv_dir=""
if [ -n "${DLOCK_SERVERS_DURABLE:-}" ]; then
  pg_durability=(-c fsync=on -c full_page_writes=on -c synchronous_commit=on)
  my_durability=(--innodb-flush-log-at-trx-commit=1 --innodb-doublewrite)
else
  pg_durability=(-c fsync=off -c full_page_writes=off)
  my_durability=(--innodb-flush-log-at-trx-commit=2 --skip-innodb-doublewrite)
fi

# A free port whose +10000 neighbour is free too (a cluster node also
# listens there for its bus), both below the kernel's ephemeral range: a
# client connecting to a stopped server on an ephemeral port can be given
# that very port as its own and connect to itself, and then the server
# cannot start there again.
srv_free_port() {
  local p
  while :; do
    p=$(srv_pick_port) || return 1
    # Kinds start at once (below): a port two of them picked before either
    # bound it goes to the first to claim it here.
    [ -z "$srv_dir" ] || mkdir "$srv_dir/.port-$p" 2>/dev/null || continue
    echo "$p"
    return 0
  done
}
srv_pick_port() {
  python3 - <<'PY'
import random, socket
try:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    low = 32768
top = max(low - 10001, 2024)
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()
while True:
    p = random.randint(1024, top)
    if free(p) and free(p + 10000):
        print(p)
        break
PY
}

srv_init() {
  [ -n "$srv_dir" ] && return 0
  srv_dir=$(mktemp -d /tmp/dlock-servers-XXXXXX)
  export DLOCK_TEST_SERVERS=$srv_dir
  # If this shell is killed outright (a test runner's timeout), no trap runs:
  # a watcher in its own session then stops the servers within a second.
  setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done
    for f in "$2"/*.pid; do [ -e "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
    for f in "$2"/*.down; do [ -e "$f" ] && bash "$f"; done
    rm -rf "$2"' srv-watch "$$" "$srv_dir" </dev/null >/dev/null 2>&1 &
  disown $! # srv_cleanup's wait must not wait for the watcher
  trap srv_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

srv_cleanup() {
  local status=$? pidf pid log
  [ -n "$srv_dir" ] || return 0
  # A failed run shows the servers' own account of it (CI keeps nothing else).
  if [ "$status" != 0 ]; then
    for log in "$srv_dir"/*/log; do
      [ -e "$log" ] || continue
      echo "--- last lines of ${log#"$srv_dir"/} ---" >&2
      tail -n 12 "$log" >&2
    done
    # ZooKeeper's JVMs: their longest stops (GC and other safepoints), to
    # tell a server that stood still from a client that did
    for log in "$srv_dir"/*/gc.log; do
      [ -e "$log" ] || continue
      echo "--- longest JVM stops of ${log#"$srv_dir"/} ---" >&2
      sed -n 's/^\[\([0-9.]*s\)\] Safepoint "\([^"]*\)".* Total: \([0-9]*\) ns$/\3 \1 \2/p' "$log" |
        sort -rn | head -n 3 | awk '{printf "%.1f ms at %s (%s)\n", $1 / 1e6, $2, $3}' >&2
    done
    if [ -s "$srv_dir/failed" ]; then
      echo "--- what failed (said again after the logs) ---" >&2
      cat "$srv_dir/failed" >&2
    fi
  fi
  for pidf in "$srv_dir"/*.pid; do
    [ -e "$pidf" ] || continue
    pid=$(cat "$pidf")
    kill -CONT "$pid" 2>/dev/null
    kill -KILL "$pid" 2>/dev/null
  done
  wait 2>/dev/null
  # what is not a process (network namespaces, a bridge)
  for pidf in "$srv_dir"/*.down; do
    [ -e "$pidf" ] && bash "$pidf"
  done
  rm -rf "$srv_dir"
  srv_dir=""
}

# srv_wait_redis PORT: until it answers PING (at most ~10 s)
srv_wait_redis() {
  local i
  for i in $(seq 100); do
    [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ] && return 0
    sleep 0.1
  done
  echo "servers.sh: redis on port $1 did not start" >&2
  return 1
}

# srv_redis NAME [redis-server args...]: start one server, print its port
srv_redis() {
  local name=$1; shift
  local port; port=$(srv_free_port)
  local d=$srv_dir/$name
  mkdir -p "$d"
  # no delay before a full resync: a failover test waits for one
  local cmd=(redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no
             --repl-diskless-sync-delay 0
             --dir "$d" --logfile "$d/log" "$@")
  printf '%q ' "${cmd[@]}" >"$srv_dir/$name.cmd"
  "${cmd[@]}" </dev/null >/dev/null 2>&1 &
  echo $! >"$srv_dir/$name.pid"
  echo "$port" >"$srv_dir/$name.port"
  srv_wait_redis "$port" >&2 || return 1
  echo "$port"
}

# srv_restart NAME [DOWN_SECS]: kill -9 (with its child processes: a
# PostgreSQL's backends, all stopped first so that none writes after that
# moment) and start again with the same command after DOWN_SECS (default
# 0.05) (data lost for Redis; ZooKeeper keeps its data directory)
srv_restart() {
  local name=$1 pid kids
  pid=$(cat "$srv_dir/$name.pid")
  kids=$(ps -o pid= --ppid "$pid" 2>/dev/null)
  # shellcheck disable=SC2086 # a list of pids
  kill -STOP "$pid" $kids 2>/dev/null
  # shellcheck disable=SC2086
  kill -KILL "$pid" $kids 2>/dev/null
  sleep "${2:-0.05}"
  eval "$(cat "$srv_dir/$name.cmd") </dev/null >>$srv_dir/$name/out 2>&1 &"
  echo $! >"$srv_dir/$name.pid"
  if [ -e "$srv_dir/$name/zoo.cfg" ]; then
    srv_wait_zk "$(cat "$srv_dir/$name.port")"
  elif [ -d "$srv_dir/$name/data/mysql" ]; then
    srv_wait_mariadb "$srv_dir/$name" "$(cat "$srv_dir/$name.port")"
  elif [ -e "$srv_dir/$name/start.sh" ]; then
    srv_wait_postgres "$srv_dir/$name" "$(cat "$srv_dir/$name.port")"
  elif [ -d "$srv_dir/$name/etcd" ]; then
    srv_wait_etcd "$(cat "$srv_dir/$name.host" 2>/dev/null || echo 127.0.0.1):$(cat "$srv_dir/$name.port")"
  elif grep -q '^memcached ' "$srv_dir/$name.cmd"; then
    srv_wait_memcached "$(cat "$srv_dir/$name.port")"
  else
    srv_wait_redis "$(cat "$srv_dir/$name.port")"
  fi
}

# srv_zk_ask PORT WORD: a ZooKeeper four-letter word's answer ("" if none)
srv_zk_ask() {
  timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$1 && printf %s "$2" >&3 && cat <&3' \
    zk-ask "$1" "$2" 2>/dev/null
}

# srv_wait_zk PORT: until the server serves clients — standalone, or in an
# ensemble with a leader (at most ~30 s: the JVM starts slowly on a busy
# machine)
srv_wait_zk() {
  local i
  for i in $(seq 300); do
    srv_zk_ask "$1" srvr | grep -q '^Mode: ' && return 0
    sleep 0.1
  done
  echo "servers.sh: zookeeper on port $1 did not start" >&2
  srv_diag_port "$1"
  return 1
}

# srv_diag_port PORT: what the process of the server on PORT is doing (a
# JVM once wrote nothing for 50 s while others started beside it: seen once
# in CI, not understood), and the machine's load.
srv_diag_port() {
  local f pid
  echo "servers.sh: load: $(cat /proc/loadavg)" >&2
  for f in "$srv_dir"/*.port; do
    [ "$(cat "$f" 2>/dev/null)" = "$1" ] || continue
    pid=$(cat "${f%.port}.pid" 2>/dev/null) || continue
    echo "servers.sh: ${f##*/}: pid $pid, log $(wc -c <"${f%.port}/log" 2>/dev/null) bytes" >&2
    ps -o pid,stat,etime,time,wchan:24,nlwp -p "$pid" >&2 2>/dev/null ||
      echo "servers.sh: pid $pid is gone" >&2
    grep -E '^(State|Threads|SigPnd|ShdPnd|SigBlk|voluntary|nonvoluntary)' \
      "/proc/$pid/status" 2>/dev/null | tr '\n' ' ' >&2
    echo >&2
  done
}

# srv_zk NAME CLIENTPORT [server.N lines...]: start one ZooKeeper JVM
# (small heap, serial GC: several share a 2-core machine; its stops in
# gc.log, shown when a run fails), not waiting.
srv_zk() {
  local name=$1 port=$2; shift 2
  local d=$srv_dir/$name
  mkdir -p "$d/data"
  {
    echo "tickTime=500"
    echo "initLimit=20"
    echo "syncLimit=10"
    echo "dataDir=$d/data"
    echo "clientPort=$port"
    echo "clientPortAddress=127.0.0.1"
    echo "admin.enableServer=false"
    echo "4lw.commands.whitelist=*"
    echo "maxClientCnxns=0"
    [ -n "${DLOCK_SERVERS_DURABLE:-}" ] || echo "forceSync=no"
    echo "minSessionTimeout=1000"
    echo "maxSessionTimeout=60000"
    printf '%s\n' "$@"
  } >"$d/zoo.cfg"
  local cmd=(java -Xmx128m -Xms32m -XX:+UseSerialGC -Xlog:gc,safepoint:file="$d/gc.log":uptime -Dzookeeper.log.dir="$d"
             -Dzookeeper.root.logger=INFO,CONSOLE
             -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar
             org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/zoo.cfg")
  printf '%q ' "${cmd[@]}" >"$srv_dir/$name.cmd"
  "${cmd[@]}" </dev/null >"$d/log" 2>&1 &
  echo $! >"$srv_dir/$name.pid"
  disown $! 2>/dev/null || true # stopped by pid; no "Killed" notice from bash
  echo "$port" >"$srv_dir/$name.port"
}

srv_start_zk() {
  local p; p=$(srv_free_port)
  srv_zk zk "$p"
  srv_wait_zk "$p" || return 1
  # Requests get 5 s, as on the ensemble: under a sanitizer, three tests at
  # a time on 2 cores, a try's create has gone unanswered for 2 s (the
  # default op_timeout_ms) once in CI (conformance_zk under TSan).
  export DLOCK_TEST_ZK="zk://127.0.0.1:$p?session=2000&op_timeout_ms=5000"
  # the same server in Curator's InterProcessMutex layout (zk.md, issue 27)
  export DLOCK_TEST_ZK_CURATOR="zk://127.0.0.1:$p/curator?session=2000&op_timeout_ms=5000&layout=curator"
}

srv_start_zk3() {
  local i p ports=() lines=() hosts=""
  for i in 1 2 3; do
    ports+=("$(srv_free_port)")
    lines+=("server.$i=127.0.0.1:$(srv_free_port):$(srv_free_port)")
  done
  for i in 1 2 3; do
    p=${ports[$((i - 1))]}
    mkdir -p "$srv_dir/zk3-$i/data"
    echo "$i" >"$srv_dir/zk3-$i/data/myid"
    srv_zk "zk3-$i" "$p" "${lines[@]}"
    hosts="$hosts${hosts:+,}127.0.0.1:$p"
  done
  for p in "${ports[@]}"; do srv_wait_zk "$p" || return 1; done
  # A freshly formed ensemble on a busy 2-core machine has been seen to
  # hold a write for 2 s once: requests get 5 s here.
  export DLOCK_TEST_ZK3="zk://$hosts?session=2000&op_timeout_ms=5000"
}

# zk3p: a three-member ensemble (zk3p-1..3) whose members talk to each other
# through relays, one process per pair of members (tests/tcp_relay.py:
# zk3p-link12, -link13, -link23). Each member's zoo.cfg names the others by
# its relays' ports. NAME.links lists the relays of a member's links:
# SIGSTOP of them cuts it off from the others (its clients still reach it),
# as `dlock check --scenario partition-member` does. Not for leader faults:
# after the leader's death the election through the relays has taken 10 s
# (initLimit) where zk3 takes half a second.
srv_start_zk3p() {
  local i j p q=() e=() ports=() hosts="" lines pid
  declare -A rq re lpid
  for i in 1 2 3; do
    ports+=("$(srv_free_port)"); q+=("$(srv_free_port)"); e+=("$(srv_free_port)")
  done
  for i in 1 2 3; do
    for j in 1 2 3; do
      [ "$i" != "$j" ] || continue
      rq[$i$j]=$(srv_free_port); re[$i$j]=$(srv_free_port) # i's way to j
    done
  done
  for link in 12 13 23; do
    i=${link:0:1}; j=${link:1:1}
    python3 "$(dirname "${BASH_SOURCE[0]}")/tcp_relay.py" \
      "${rq[$i$j]}" "${q[$((j - 1))]}" "${re[$i$j]}" "${e[$((j - 1))]}" \
      "${rq[$j$i]}" "${q[$((i - 1))]}" "${re[$j$i]}" "${e[$((i - 1))]}" \
      </dev/null >/dev/null 2>&1 &
    lpid[$link]=$!
    echo $! >"$srv_dir/zk3p-link$link.pid"
    disown $! 2>/dev/null || true
  done
  for i in 1 2 3; do
    lines=()
    for j in 1 2 3; do
      if [ "$i" = "$j" ]; then
        lines+=("server.$j=127.0.0.1:${q[$((j - 1))]}:${e[$((j - 1))]}")
      else
        lines+=("server.$j=127.0.0.1:${rq[$i$j]}:${re[$i$j]}")
      fi
    done
    p=${ports[$((i - 1))]}
    mkdir -p "$srv_dir/zk3p-$i/data"
    echo "$i" >"$srv_dir/zk3p-$i/data/myid"
    srv_zk "zk3p-$i" "$p" "${lines[@]}"
    pid=""
    for link in 12 13 23; do
      case $link in *$i*) pid="$pid${pid:+ }${lpid[$link]}" ;; esac
    done
    echo "$pid" >"$srv_dir/zk3p-$i.links"
    hosts="$hosts${hosts:+,}127.0.0.1:$p"
  done
  for p in "${ports[@]}"; do srv_wait_zk "$p" || return 1; done
  export DLOCK_TEST_ZK3P="zk://$hosts?session=2000&op_timeout_ms=5000"
}

# srv_etcd_healthy [HOST:]PORT [SCHEME CA]: does the member there know a
# leader? (python3: curl may not be installed; the status call needs no
# token, also with authentication on)
srv_etcd_healthy() {
  python3 - "$1" "${2:-http}" "${3:-}" <<'PY' >/dev/null 2>&1
import json, ssl, sys, urllib.request
port, scheme, ca = sys.argv[1], sys.argv[2], sys.argv[3]
if ":" not in port:
    port = "127.0.0.1:" + port
ctx = ssl.create_default_context(cafile=ca) if scheme == "https" else None
req = urllib.request.Request(f"{scheme}://{port}/v3/maintenance/status", data=b"{}",
                             headers={"Content-Type": "application/json"})
d = json.load(urllib.request.urlopen(req, timeout=1, context=ctx))
sys.exit(0 if int(d.get("leader", "0")) != 0 else 1)
PY
}

# srv_wait_etcd [HOST:]PORT [SCHEME CA]: until the member serves with a leader (~30 s)
srv_wait_etcd() {
  local i
  for i in $(seq 300); do
    srv_etcd_healthy "$@" && return 0
    sleep 0.1
  done
  echo "servers.sh: etcd on port $1 did not start" >&2
  return 1
}

# srv_etcd NAME CLIENTPORT PEERPORT CLUSTER [etcd args...]: start one member,
# not waiting; CLUSTER is its --initial-cluster list. Its data directory
# stays: NAME.cmd again (a restart) rejoins the cluster it formed. With
# srv_etcd_ns=NS and srv_etcd_host=A set, it runs in network namespace NS
# at address A (ip netns exec execs etcd: NAME.pid is etcd's).
srv_etcd() {
  local name=$1 port=$2 peer=$3 cluster=$4; shift 4
  local d=$srv_dir/$name scheme=http host=${srv_etcd_host:-127.0.0.1} pre=()
  mkdir -p "$d/etcd"
  case " $* " in *" --cert-file "*) scheme=https ;; esac
  [ -n "${srv_etcd_ns:-}" ] && pre=(ip netns exec "$srv_etcd_ns")
  local cmd=("${pre[@]}" etcd --name "$name" --data-dir "$d/etcd"
             --listen-client-urls "$scheme://$host:$port"
             --advertise-client-urls "$scheme://$host:$port"
             --listen-peer-urls "http://$host:$peer"
             --initial-advertise-peer-urls "http://$host:$peer"
             --initial-cluster "$cluster" --initial-cluster-state new
             --initial-cluster-token "dlock-$(basename "$srv_dir")"
             --log-outputs stderr "$@")
  printf '%q ' "${cmd[@]}" >"$srv_dir/$name.cmd"
  "${cmd[@]}" </dev/null >"$d/log" 2>&1 &
  echo $! >"$srv_dir/$name.pid"
  disown $! 2>/dev/null || true
  echo "$port" >"$srv_dir/$name.port"
  [ "$host" = 127.0.0.1 ] || echo "$host" >"$srv_dir/$name.host"
}

srv_start_etcd() {
  local p q; p=$(srv_free_port); q=$(srv_free_port)
  srv_etcd etcd "$p" "$q" "etcd=http://127.0.0.1:$q"
  srv_wait_etcd "$p" || return 1
  export DLOCK_TEST_ETCD="etcd://127.0.0.1:$p?ttl=2"
  export DLOCK_TEST_ETCD_ETCDCTL="etcd://127.0.0.1:$p?ttl=2&layout=etcdctl"
}

srv_start_etcd3() {
  local i p ports=() peers=() cluster="" hosts=""
  for i in 1 2 3; do
    ports+=("$(srv_free_port)")
    peers+=("$(srv_free_port)")
    cluster="$cluster${cluster:+,}etcd3-$i=http://127.0.0.1:${peers[$((i - 1))]}"
  done
  for i in 1 2 3; do
    srv_etcd "etcd3-$i" "${ports[$((i - 1))]}" "${peers[$((i - 1))]}" "$cluster"
    hosts="$hosts${hosts:+,}127.0.0.1:${ports[$((i - 1))]}"
  done
  for p in "${ports[@]}"; do srv_wait_etcd "$p" || return 1; done
  export DLOCK_TEST_ETCD3="etcd://$hosts?ttl=2"
}

# srv_netns_subnet: a /24 of 10.0.0.0/8 no address or route of this
# machine uses yet ("10.A.B"). Called under srv_start_etcd3n's lock, until
# its bridge holds the subnet, so two instances never pick the same one.
srv_netns_subnet() {
  local a b used
  used=$(ip -4 -o addr show; ip -4 route show table all)
  for _ in $(seq 200); do
    a=$((RANDOM % 150 + 100)); b=$((RANDOM % 254 + 1))
    grep -q "10\.$a\.$b\." <<<"$used" || { echo "10.$a.$b"; return 0; }
  done
  return 1
}

# etcd3n: three etcd members (etcd3n-1..3), each in a network namespace of
# its own (dlock-ID-N, ID from this instance's directory), on a veth pair
# whose other end is on a bridge (dlb-ID) in this namespace, at 10.A.B.2-4
# of a /24 nobody here uses; the bridge is 10.A.B.1, the clients' address.
# Members dial the peer URLs they advertise, the same for everyone, so a
# relay per pair (zk3p) cannot cut one member's links: NAME.partition on
# drops, in that member's namespace, every packet from or to the other
# members (nftables); its clients still reach it; NAME.partition off lets
# them through again. etcd3n.down removes the namespaces and the bridge
# (srv_cleanup runs it after the members are killed). Root only.
srv_start_etcd3n() {
  local id=${srv_dir##*-} net i j ns host ports=() peers=() cluster="" hosts="" others
  local br=dlb-$id down=$srv_dir/etcd3n.down
  {
    # (a veth pair goes with its namespace only once the killed member
    # has exited: deleted here by hand)
    for i in 1 2 3; do echo "ip link del dlv-$id$i 2>/dev/null; ip netns del dlock-$id-$i 2>/dev/null"; done
    echo "ip link del $br 2>/dev/null"
    echo "true"
  } >"$down"
  exec 9>>/tmp/dlock-netns.lock
  flock -w 60 9 || { echo "servers.sh: etcd3n: /tmp/dlock-netns.lock stays locked" >&2; return 1; }
  net=$(srv_netns_subnet) || { exec 9>&-; echo "servers.sh: etcd3n: no free subnet" >&2; return 1; }
  ip link add "$br" type bridge && ip addr add "$net.1/24" dev "$br" && ip link set "$br" up ||
    { exec 9>&-; echo "servers.sh: etcd3n: cannot make bridge $br" >&2; return 1; }
  exec 9>&-
  for i in 1 2 3; do
    ns=dlock-$id-$i
    ip netns add "$ns" &&
      ip link add "dlv-$id$i" type veth peer name eth0 netns "$ns" &&
      ip link set "dlv-$id$i" master "$br" up &&
      ip -n "$ns" link set lo up &&
      ip -n "$ns" addr add "$net.$((i + 1))/24" dev eth0 &&
      ip -n "$ns" link set eth0 up ||
      { echo "servers.sh: etcd3n: cannot make network namespace $ns" >&2; return 1; }
    ports+=("$(srv_free_port)")
    peers+=("$(srv_free_port)")
    cluster="$cluster${cluster:+,}etcd3n-$i=http://$net.$((i + 1)):${peers[$((i - 1))]}"
  done
  for i in 1 2 3; do
    ns=dlock-$id-$i host=$net.$((i + 1)) others=""
    for j in 1 2 3; do
      [ "$i" = "$j" ] || others="$others${others:+, }$net.$((j + 1))"
    done
    cat >"$srv_dir/etcd3n-$i.partition" <<SH
#!/bin/sh
# etcd3n-$i cut off from the other members (on), or not (off); its clients
# ($net.1) still reach it. Established connections stall, as a cable cut.
case "\$1" in
on) exec ip netns exec $ns nft -f - <<EOF ;;
table inet dlock_partition
delete table inet dlock_partition
table inet dlock_partition {
  chain in {
    type filter hook input priority 0;
    ip saddr { $others } drop
  }
  chain out {
    type filter hook output priority 0;
    ip daddr { $others } drop
  }
}
EOF
off) ip netns exec $ns nft list table inet dlock_partition >/dev/null 2>&1 || exit 0
     exec ip netns exec $ns nft delete table inet dlock_partition ;;
*) echo "usage: \$0 on|off" >&2; exit 64 ;;
esac
SH
    chmod +x "$srv_dir/etcd3n-$i.partition"
    # --pre-vote (etcd 3.5's default): a member that was cut off does not
    # depose the leader when it comes back, so partition-member's member
    # stays a follower for its next cut.
    srv_etcd_ns=$ns srv_etcd_host=$host \
      srv_etcd "etcd3n-$i" "${ports[$((i - 1))]}" "${peers[$((i - 1))]}" "$cluster" --pre-vote
    hosts="$hosts${hosts:+,}$host:${ports[$((i - 1))]}"
  done
  for i in 1 2 3; do srv_wait_etcd "$net.$((i + 1)):${ports[$((i - 1))]}" || return 1; done
  export DLOCK_TEST_ETCD3N="etcd://$hosts?ttl=2"
}

# srv_tls_ca DIR: a throwaway CA (DIR/ca.pem) and a certificate it signed
# for the server at 127.0.0.1 (DIR/server.pem, key DIR/server.key, with the
# IP in subjectAltName as clients check it there)
srv_tls_ca() {
  local d=$1
  mkdir -p "$d"
  (
    cd "$d" || exit 1
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 \
      -subj "/CN=dlock test CA" >/dev/null 2>&1 &&
    openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr \
      -subj "/CN=127.0.0.1" >/dev/null 2>&1 &&
    printf 'subjectAltName=IP:127.0.0.1\n' >san.ext &&
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
      -out server.pem -days 2 -extfile san.ext >/dev/null 2>&1
  ) || { echo "servers.sh: openssl could not make the test CA" >&2; return 1; }
}

# One member with TLS on the client port and authentication on.
srv_start_etcds() {
  local p q d=$srv_dir/etcds-ca
  p=$(srv_free_port); q=$(srv_free_port)
  srv_tls_ca "$d" || return 1
  srv_etcd etcds "$p" "$q" "etcds=http://127.0.0.1:$q" \
    --cert-file "$d/server.pem" --key-file "$d/server.key"
  srv_wait_etcd "$p" https "$d/ca.pem" || return 1
  local ctl=(env ETCDCTL_API=3 etcdctl --endpoints "https://127.0.0.1:$p" --cacert "$d/ca.pem")
  { "${ctl[@]}" user add root:rootpw &&
    "${ctl[@]}" user add dlock:s3cret &&
    "${ctl[@]}" role add dlockrw &&
    "${ctl[@]}" role grant-permission dlockrw --prefix=true readwrite '' &&
    "${ctl[@]}" user grant-role dlock dlockrw &&
    "${ctl[@]}" auth enable; } >"$srv_dir/etcds/auth.log" 2>&1 ||
    { cat "$srv_dir/etcds/auth.log" >&2; return 1; }
  export DLOCK_TEST_ETCDS="etcds://dlock:s3cret@127.0.0.1:$p?cacert=$d/ca.pem&ttl=2"
  export DLOCK_TEST_ETCDS_CA=$d/ca.pem
  export DLOCK_TEST_ETCDS_ENDPOINT=https://127.0.0.1:$p
}

# srv_wait_postgres DIR PORT: until it accepts connections (at most ~20 s)
srv_wait_postgres() {
  local i
  for i in $(seq 200); do
    pg_isready -q -h "$1" -p "$2" -U postgres 2>/dev/null && return 0
    sleep 0.1
  done
  echo "servers.sh: postgres on port $2 did not start" >&2
  return 1
}

# One PostgreSQL server from Debian's package, run by the package's
# postgres user (it refuses root), on a spare port and a private socket
# directory, fsync off. NAME.cmd is a script that waits, after a kill -9 of
# the postmaster, until the killed server's backends have let go of its
# shared memory (they exit as they notice) — else the restart is refused.
srv_start_postgres() {
  local name=postgres port bin d
  port=$(srv_free_port)
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  d=$srv_dir/$name
  mkdir -p "$d"
  local as=()
  if [ "$(id -u)" = 0 ]; then
    chmod o+x "$srv_dir"
    chown postgres: "$d"
    as=(setpriv --reuid=postgres --regid=postgres --init-groups --)
  fi
  # DLOCK_SERVERS_PG_AUTH=md5 (the valgrind runs): a SCRAM login costs ~0.9 s
  # of CPU in libpq under valgrind, md5 next to nothing; our code is the same.
  local auth=${DLOCK_SERVERS_PG_AUTH:-scram-sha-256}
  case $auth in
    scram-sha-256 | md5) ;;
    *) echo "servers.sh: DLOCK_SERVERS_PG_AUTH is scram-sha-256 or md5, not $auth" >&2; return 1 ;;
  esac
  printf 'pgpw\n' >"$d/pwfile"
  [ "$(id -u)" = 0 ] && chown postgres: "$d/pwfile"
  "${as[@]}" "$bin/initdb" -D "$d/data" -U postgres --pwfile="$d/pwfile" \
    --auth-local=trust --auth-host="$auth" >"$d/initdb.log" 2>&1 ||
    { cat "$d/initdb.log" >&2; return 1; }
  {
    echo '#!/usr/bin/env bash'
    echo "pidfile=$(printf %q "$d/data/postmaster.pid")"
    echo "socklock=$(printf %q "$d/.s.PGSQL.$port.lock")"
    echo "exec >>$(printf %q "$d/log") 2>&1 </dev/null"
    cat <<'SH'
for i in $(seq 200); do
  [ -e "$pidfile" ] || break
  id=$(sed -n 7p "$pidfile" | awk '{print $2}')
  [ -n "$id" ] && ipcs -m -i "$id" 2>/dev/null | grep -q 'nattch=[1-9]' || break
  sleep 0.05
done
# A killed postmaster nobody reaped (its parent was not us) is a zombie,
# which postgres takes for a live server holding its lock files.
for f in "$pidfile" "$socklock"; do
  old=$(head -n 1 "$f" 2>/dev/null)
  if [ -n "$old" ] && { [ ! -e "/proc/$old" ] || [ "$(awk '{print $3}' "/proc/$old/stat" 2>/dev/null)" = Z ]; }; then
    rm -f "$f"
  fi
done
SH
    printf 'exec'
    printf ' %q' "${as[@]}" "$bin/postgres" -D "$d/data" -p "$port" -k "$d" \
      -c listen_addresses=127.0.0.1 "${pg_durability[@]}" \
      -c max_connections=300 -c shared_buffers=32MB -c password_encryption="$auth"
    echo
  } >"$d/start.sh"
  printf 'bash %q' "$d/start.sh" >"$srv_dir/$name.cmd"
  bash "$d/start.sh" &
  echo $! >"$srv_dir/$name.pid"
  echo "$port" >"$srv_dir/$name.port"
  srv_wait_postgres "$d" "$port" || return 1
  psql -q -h "$d" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 \
    -c "CREATE ROLE dlock LOGIN PASSWORD 's3cret'" \
    -c "CREATE DATABASE dlock OWNER dlock" \
    -c "CREATE ROLE dlock_ro LOGIN PASSWORD 'ro'" >/dev/null || return 1
  export DLOCK_TEST_POSTGRES="postgres://dlock:s3cret@127.0.0.1:$port/dlock"
  export DLOCK_TEST_POSTGRES_LEASE="postgres://dlock:s3cret@127.0.0.1:$port/dlock?mode=lease"
  export DLOCK_TEST_POSTGRES_ROW="postgres://dlock:s3cret@127.0.0.1:$port/dlock?mode=rowlock"
  export DLOCK_TEST_POSTGRES_RO="postgres://dlock_ro:ro@127.0.0.1:$port/dlock"
  export DLOCK_TEST_POSTGRES_ADMIN="postgres://postgres:pgpw@127.0.0.1:$port/dlock"
}

# PgBouncer in transaction pool mode in front of the postgres kind (start
# that first), as user postgres (it refuses root); the role dlock's password
# in its auth file, which it also uses towards the server.
srv_start_pgbouncer() {
  local name=pgbouncer port pgport d
  pgport=$(cat "$srv_dir/postgres.port") || { echo "servers.sh: pgbouncer needs postgres first" >&2; return 1; }
  port=$(srv_free_port)
  d=$srv_dir/$name
  mkdir -p "$d"
  printf '"dlock" "s3cret"\n' >"$d/users.txt"
  cat >"$d/pgbouncer.ini" <<INI
[databases]
dlock = host=127.0.0.1 port=$pgport dbname=dlock
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = ${DLOCK_SERVERS_PG_AUTH:-scram-sha-256}
auth_file = $d/users.txt
pool_mode = transaction
max_client_conn = 200
default_pool_size = 4
logfile = $d/log
INI
  local as=()
  if [ "$(id -u)" = 0 ]; then
    chown -R postgres: "$d"
    as=(setpriv --reuid=postgres --regid=postgres --init-groups --)
  fi
  "${as[@]}" pgbouncer "$d/pgbouncer.ini" </dev/null >>"$d/out" 2>&1 &
  echo $! >"$srv_dir/$name.pid"
  echo "$port" >"$srv_dir/$name.port"
  for _ in $(seq 100); do
    PGPASSWORD=s3cret psql -h 127.0.0.1 -p "$port" -U dlock -d dlock -Atqc 'SELECT 1' \
      >/dev/null 2>&1 && break
    sleep 0.1
  done
  export DLOCK_TEST_PGBOUNCER="postgres://dlock:s3cret@127.0.0.1:$port/dlock"
}

# srv_mariadb_cli DIR [mariadb args...]: the mariadb client as root over the
# server's private socket (no option files: /etc/mysql names another socket)
srv_mariadb_cli() {
  local d=$1; shift
  mariadb --no-defaults --socket="$d/sock" -uroot "$@"
}

# srv_wait_mariadb DIR PORT: until it answers over its socket (at most ~30 s:
# after a kill -9, InnoDB recovers first)
srv_wait_mariadb() {
  local i
  for i in $(seq 300); do
    mariadb-admin --no-defaults --connect-timeout=1 --socket="$1/sock" -uroot ping \
      >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "servers.sh: mariadb on port $2 did not start" >&2
  return 1
}

# One MariaDB server from Debian's package, on a spare port (loopback only)
# and a private socket (DIR/sock), with TLS from a throwaway CA on the same
# port; no option files are read. It runs as root when this script does
# (mariadbd then wants --user=root), else as the current user. NAME.cmd is a
# script that, after a kill -9, waits until the killed server is gone (it
# holds InnoDB's file locks until then), then starts the same server on the
# same data directory: InnoDB recovers from its log.
srv_start_mariadb() {
  local name=mariadb port d
  port=$(srv_free_port)
  d=$srv_dir/$name
  mkdir -p "$d"
  srv_tls_ca "$d/tls" || return 1
  # Both run as the current user without --user (given one, a non-root
  # mariadb-install-db tries to chown the PAM plugin's files).
  local user=()
  [ "$(id -u)" = 0 ] && user=(--user=root)
  # Sizes both commands must agree on; the rest is the server's.
  # A temporary directory of its own: two bootstraps at once shared /tmp's
  # '#sql-temptable-*' names and one failed ("Could not remove temporary
  # table", then "Unknown table 'mysql.tmp_proxies_priv'").
  mkdir -p "$d/tmp"
  local common=(--innodb-buffer-pool-size=32M --innodb-log-file-size=32M --tmpdir="$d/tmp")
  # --cross-bootstrap: no accounts for this machine's host name (they are
  # only warned about under --skip-name-resolve); no test database; root
  # without a password (over the socket: root@127.0.0.1 gets one below).
  # About half a second.
  mariadb-install-db --no-defaults --cross-bootstrap --datadir="$d/data" "${user[@]}" \
    --auth-root-authentication-method=normal --skip-test-db --skip-name-resolve \
    "${common[@]}" >"$d/install.log" 2>&1 ||
    { cat "$d/install.log" >&2; return 1; }
  # Tests and benchmarks measure the protocol, not this disk: no binary
  # log, no flush per commit, no doublewrite (a kill -9 tears no pages)
  # unless DLOCK_SERVERS_DURABLE is set (my_durability, above).
  # max_connections: benchmarks hold hundreds of waiters' connections.
  # The performance schema is on for performance_schema.metadata_locks,
  # where GET_LOCK's holders are GRANTED and its waiters PENDING (the mdl
  # instrument is off by default). Its default sizes for 1200 connections
  # would take ~140 MB (RSS 240 MB instead of 100 MB); with the history,
  # digest and summary tables sized to nothing it costs ~18 MB (118 MB).
  local cmd=(mariadbd --no-defaults "${user[@]}" --datadir="$d/data" --port="$port"
             --bind-address=127.0.0.1 --socket="$d/sock" --pid-file="$d/mariadbd.pid"
             --skip-name-resolve --skip-log-bin --sync-binlog=0
             "${my_durability[@]}"
             "${common[@]}" --max-connections=1200
             --table-open-cache=400 --table-open-cache-instances=1
             --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci
             --ssl-ca="$d/tls/ca.pem" --ssl-cert="$d/tls/server.pem" --ssl-key="$d/tls/server.key"
             --performance-schema=ON
             --performance-schema-instrument='wait/lock/metadata/sql/mdl=ON'
             --performance-schema-consumer-global-instrumentation=ON
             --performance-schema-digests-size=0 --performance-schema-max-digest-length=0
             --performance-schema-max-sql-text-length=0
             --performance-schema-events-statements-history-long-size=0
             --performance-schema-events-statements-history-size=0
             --performance-schema-events-stages-history-long-size=0
             --performance-schema-events-stages-history-size=0
             --performance-schema-events-waits-history-long-size=0
             --performance-schema-events-waits-history-size=0
             --performance-schema-events-transactions-history-long-size=0
             --performance-schema-events-transactions-history-size=0
             --performance-schema-accounts-size=0 --performance-schema-hosts-size=0
             --performance-schema-users-size=0 --performance-schema-max-statement-classes=0
             --performance-schema-max-memory-classes=0 --performance-schema-max-stage-classes=0
             --performance-schema-max-index-stat=0 --performance-schema-max-table-lock-stat=0
             --performance-schema-session-connect-attrs-size=0
             --performance-schema-max-prepared-statements-instances=0
             --performance-schema-max-program-instances=0)
  # Its log goes to stderr, hence DIR/log (--log-error=DIR/log would write
  # DIR/log.err).
  {
    echo '#!/usr/bin/env bash'
    echo "pidfile=$(printf %q "$d/mariadbd.pid")"
    echo "sock=$(printf %q "$d/sock")"
    echo "exec >>$(printf %q "$d/log") 2>&1 </dev/null"
    cat <<'SH'
# The server this one replaces (killed: gone, or a zombie nobody reaped yet)
# must have let go of InnoDB's and Aria's locks on the data files.
old=$(head -n 1 "$pidfile" 2>/dev/null)
if [ -n "$old" ] && [ "$old" != $$ ]; then
  for i in $(seq 200); do
    [ -e "/proc/$old" ] && [ "$(awk '{print $3}' "/proc/$old/stat" 2>/dev/null)" != Z ] || break
    sleep 0.05
  done
fi
rm -f "$sock"
echo $$ >"$pidfile" # this shell's pid is the server's: it execs
SH
    printf 'exec'
    printf ' %q' "${cmd[@]}"
    echo
  } >"$d/start.sh"
  printf 'bash %q' "$d/start.sh" >"$srv_dir/$name.cmd"
  bash "$d/start.sh" &
  echo $! >"$srv_dir/$name.pid"
  disown $! 2>/dev/null || true
  echo "$port" >"$srv_dir/$name.port"
  srv_wait_mariadb "$d" "$port" || return 1
  srv_mariadb_cli "$d" -e "
    CREATE DATABASE dlock;
    CREATE USER 'dlock'@'127.0.0.1' IDENTIFIED BY 's3cret';
    GRANT ALL PRIVILEGES ON dlock.* TO 'dlock'@'127.0.0.1';
    CREATE USER 'dlock_ro'@'127.0.0.1' IDENTIFIED BY 'ro';
    GRANT SELECT ON dlock.* TO 'dlock_ro'@'127.0.0.1';
    CREATE OR REPLACE USER 'root'@'127.0.0.1' IDENTIFIED BY 'rootpw';
    GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;" >&2 || return 1
  local url=mysql://dlock:s3cret@127.0.0.1:$port/dlock
  export DLOCK_TEST_MYSQL=$url
  export DLOCK_TEST_MYSQL_LEASE="$url?mode=lease"
  export DLOCK_TEST_MYSQL_ROW="$url?mode=rowlock"
  export DLOCK_TEST_MYSQL_RO="mysql://dlock_ro:ro@127.0.0.1:$port/dlock"
  export DLOCK_TEST_MYSQL_ADMIN="mysql://root:rootpw@127.0.0.1:$port/dlock"
  export DLOCK_TEST_MYSQL_CA=$d/tls/ca.pem
  export DLOCK_TEST_MYSQL_SOCKET=$d/sock
}

srv_start_redis() {
  local p; p=$(srv_redis single) || return 1
  export DLOCK_TEST_REDIS=redis://127.0.0.1:$p
  # the SET NX layout of redis-py, node-redlock and redsync (docs/redis.md)
  export DLOCK_TEST_REDIS_KEY="redis://127.0.0.1:$p?key=lock:{name}"
}

srv_start_redis6() {
  local p; p=$(srv_redis redis6 --rename-command FUNCTION '' --rename-command FCALL '') || return 1
  export DLOCK_TEST_REDIS6=redis://127.0.0.1:$p
}

srv_start_redlock() {
  local hosts="" i p
  for i in 1 2 3 4 5; do
    p=$(srv_redis "redlock$i") || return 1
    hosts="$hosts${hosts:+,}127.0.0.1:$p"
  done
  export DLOCK_TEST_REDLOCK=redlock://$hosts
}

srv_start_sentinel() {
  local m r1 r2 i s hosts=""
  m=$(srv_redis smaster) || return 1
  r1=$(srv_redis sreplica1 --replicaof 127.0.0.1 "$m") || return 1
  r2=$(srv_redis sreplica2 --replicaof 127.0.0.1 "$m") || return 1
  for i in 1 2 3; do
    s=$(srv_free_port)
    mkdir -p "$srv_dir/sentinel$i"
    cat >"$srv_dir/sentinel$i/sentinel.conf" <<EOF
port $s
bind 127.0.0.1
dir $srv_dir/sentinel$i
logfile $srv_dir/sentinel$i/log
sentinel monitor dlockmaster 127.0.0.1 $m 2
sentinel down-after-milliseconds dlockmaster 1000
sentinel failover-timeout dlockmaster 3000
EOF
    echo "redis-sentinel $srv_dir/sentinel$i/sentinel.conf" >"$srv_dir/sentinel$i.cmd"
    redis-sentinel "$srv_dir/sentinel$i/sentinel.conf" </dev/null >/dev/null 2>&1 &
    disown $! 2>/dev/null || true
    echo $! >"$srv_dir/sentinel$i.pid"
    echo "$s" >"$srv_dir/sentinel$i.port"
    srv_wait_redis "$s" || return 1
    hosts="$hosts${hosts:+,}127.0.0.1:$s"
  done
  # Until the replicas are in sync, a failover could not promote anyone.
  for i in $(seq 100); do
    [ "$(redis-cli -p "$m" info replication | grep -c 'state=online')" -ge 2 ] && break
    sleep 0.1
  done
  export DLOCK_TEST_SENTINEL=redis+sentinel://$hosts/dlockmaster
}

srv_start_cluster() {
  local i p ports=() hosts=""
  for i in 1 2 3; do
    p=$(srv_redis "cluster$i" --cluster-enabled yes \
        --cluster-config-file "$srv_dir/cluster$i/nodes.conf" --cluster-node-timeout 2000) || return 1
    ports+=("$p")
    hosts="$hosts${hosts:+,}127.0.0.1:$p"
  done
  echo yes | redis-cli --cluster create "${ports[@]/#/127.0.0.1:}" --cluster-replicas 0 \
    >"$srv_dir/cluster-create.log" 2>&1 || { cat "$srv_dir/cluster-create.log" >&2; return 1; }
  # Every master must see the cluster up, not just the first: a client
  # sent to another one early gets CLUSTERDOWN.
  local ok
  for i in $(seq 150); do
    ok=0
    for p in "${ports[@]}"; do
      redis-cli -p "$p" cluster info | grep -q 'cluster_state:ok' && ok=$((ok + 1))
    done
    [ "$ok" = "${#ports[@]}" ] && break
    sleep 0.1
  done
  [ "$ok" = "${#ports[@]}" ] || { echo "servers.sh: the cluster did not come up" >&2; return 1; }
  export DLOCK_TEST_CLUSTER=redis+cluster://$hosts
  # key= in a cluster: the keys beside a lock must share its slot
  export DLOCK_TEST_CLUSTER_KEY="redis+cluster://$hosts?key=lock:{name}"
}

# srv_wait_memcached PORT: until it answers the meta no-op (at most ~10 s)
srv_wait_memcached() {
  local i
  for i in $(seq 100); do
    timeout 1 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$1 && printf "mn\r\n" >&3 &&
          head -c 2 <&3' mc-ask "$1" 2>/dev/null | grep -q '^MN' && return 0
    sleep 0.1
  done
  echo "servers.sh: memcached on port $1 did not start" >&2
  return 1
}

# srv_memcached NAME [memcached args...]: start one server, print its port
srv_memcached() {
  local name=$1; shift
  local port; port=$(srv_free_port)
  local d=$srv_dir/$name
  mkdir -p "$d"
  local cmd=(memcached -l 127.0.0.1 -p "$port" -U 0 "$@")
  [ "$(id -u)" = 0 ] && cmd+=(-u root)
  printf '%q ' "${cmd[@]}" >"$srv_dir/$name.cmd"
  "${cmd[@]}" </dev/null >"$d/log" 2>&1 &
  echo $! >"$srv_dir/$name.pid"
  echo "$port" >"$srv_dir/$name.port"
  srv_wait_memcached "$port" || return 1
  echo "$port"
}

# Two servers (a name maps to one of them), and a third with 1 MB of memory
# for the eviction tests (the smallest it takes).
srv_start_memcached() {
  local p1 p2 p3
  p1=$(srv_memcached memcached -m 64) || return 1
  p2=$(srv_memcached memcached2 -m 64) || return 1
  p3=$(srv_memcached memcached-small -m 2) || return 1
  export DLOCK_TEST_MEMCACHED=memcached://127.0.0.1:$p1
  export DLOCK_TEST_MEMCACHED2=memcached://127.0.0.1:$p1,127.0.0.1:$p2
  export DLOCK_TEST_MEMCACHED_SMALL=memcached://127.0.0.1:$p3
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -e
  [ "${1:-}" = run ] || { echo "usage: $0 run KIND... -- CMD ARGS..." >&2; exit 64; }
  shift
  srv_init
  kinds=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    case $1 in
      redis|redlock|redis6|sentinel|cluster|zk|zk3|zk3p|etcd|etcd3|etcd3n|etcds|postgres|pgbouncer|mariadb|memcached)
        kinds+=("$1") ;;
      *) echo "servers.sh: unknown server kind $1" >&2; exit 64 ;;
    esac
    shift
  done
  [ "${1:-}" = -- ] && shift
  # pgbouncer fronts the postgres of this run: it starts after the rest.
  later=()
  for i in "${!kinds[@]}"; do
    [ "${kinds[$i]}" = pgbouncer ] && { later+=(pgbouncer); unset "kinds[$i]"; }
  done
  kinds=("${kinds[@]}")
  if [ ${#kinds[@]} = 1 ]; then
    "srv_start_${kinds[0]}"
  elif [ ${#kinds[@]} -gt 1 ]; then
    # Every kind at once, each in a subshell: a test waits for its slowest
    # server, not for the sum of them (they mostly wait: a JVM, initdb, an
    # etcd election). A subshell's exports come back through a file: the
    # lines of `export -p` it added.
    before=$(export -p)
    starters=()
    for k in "${kinds[@]}"; do
      (
        "srv_start_$k"
        export -p | { grep -vxF -f <(printf '%s\n' "$before") || true; } >"$srv_dir/.env-$k"
      ) &
      starters+=($!)
    done
    failed=0
    for p in "${starters[@]}"; do wait "$p" || failed=1; done
    [ $failed = 0 ] || exit 1
    for k in "${kinds[@]}"; do . "$srv_dir/.env-$k"; done
  fi
  for k in "${later[@]}"; do "srv_start_$k"; done
  set +e
  "$@"
  status=$?
  exit $status
fi
