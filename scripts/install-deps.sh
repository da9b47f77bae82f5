#!/usr/bin/env bash
# Install the Debian packages dlock needs to build and test. Idempotent and
# quick when everything is already there: apt runs only for what is missing.
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
  python3 util-linux procps               # test scripts parse JSON; flock(1) for comparisons
  man-db                                  # render the man page in tests
)

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
