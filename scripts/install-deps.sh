#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Install the Debian packages dlock needs to build and test. Idempotent and
# quick when everything is already there: apt runs only for what is missing.
#   scripts/install-deps.sh          what the build, the tests and the demo need
#   scripts/install-deps.sh peers    also the clients bench/peers/ measures dlock
#                                    against (scripts/test.sh asks for them:
#                                    peers_bench_test runs them)
#   scripts/install-deps.sh build    only what building dlock without its
#                                    client libraries and tests needs
#                                    (-DDLOCK_NO_CLIENT_LIBS=ON
#                                    -DBUILD_TESTING=OFF: scripts/demo.sh)
set -euo pipefail

packages=(
  build-essential cmake pkg-config        # the build
  clang libclang-rt-14-dev llvm           # libFuzzer, ASan/UBSan/TSan runtimes
  libcmocka-dev                           # unit and integration tests
  libhiredis-dev                          # the redis backends
  redis-server redis-sentinel redis-tools # real servers the redis tests start
  libzookeeper-mt-dev zookeeper           # the zk backend and the servers its tests start
  default-jre-headless                    # ZooKeeper's JVM
  libcurl4-openssl-dev libcjson-dev       # the etcd backend (libcurl is loaded at run time)
  etcd-server etcd-client                 # the etcd servers its tests start, and etcdctl
  openssl                                 # the etcd and mysql TLS tests' throwaway CA
  iproute2 nftables                       # etcd3n: members in network namespaces, one cut off
  libpq-dev postgresql                    # the postgres backend (libpq is loaded at run time) and its test server
  pgbouncer                               # the postgres tests' transaction-mode pooler
  libmariadb-dev mariadb-server           # the mysql backend (libmariadb is loaded at run time) and its test server
  memcached                               # the memcached backend's test servers (its client is ours)
  valgrind                                # memcheck run of the suite
  gdb                                     # a hanging test's stacks (tests/testlib.sh hang_guard)
  python3 util-linux procps               # test scripts parse JSON; flock(1) for comparisons
  python3-dev python3-setuptools python3-pip python3-venv  # the Python package (python/), built offline
  python3-pytest                          # its tests (tests/python_test.sh)
  man-db                                  # render the man page in tests
  dpkg-dev debhelper lintian              # the Debian packages (scripts/package.sh) and their check
)

# The peers of bench/peers/ (issue 24): Debian's clients, a JDK to compile
# the Curator worker, and node-redlock from npm into bench/peers/node.
peer_packages=(
  python3-kazoo python3-redis python3-psycopg2 python3-pymysql python3-pymemcache
  python3-tooz python3-fasteners
  libcurator-recipes-java libslf4j-java
)
if [ "${1:-}" = build ]; then
  packages=(build-essential cmake pkg-config)
fi
if [ "${1:-}" = peers ]; then
  packages+=("${peer_packages[@]}")
  # only when missing: a node or JDK from elsewhere (with its own npm) is fine
  command -v javac >/dev/null || packages+=(default-jdk-headless)
  command -v node >/dev/null || packages+=(nodejs)
  command -v npm >/dev/null || packages+=(npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "${1:-}" = peers ]; then
  node_dir="$(cd "$(dirname "$0")/.." && pwd)/bench/peers/node"
  if [ ! -d "$node_dir/node_modules/redlock" ]; then
    echo "install-deps: npm install in $node_dir (node-redlock, ioredis)"
    # the npm registry may be away: only the redlock peer needs it (its
    # test says it skipped it), not a reason to stop the suite
    (cd "$node_dir" && npm install --no-audit --no-fund --silent) ||
      echo "install-deps: npm install failed: the redlock peer will be skipped" >&2
  fi
fi
