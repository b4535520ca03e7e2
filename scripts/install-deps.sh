#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what usmc needs to build, test and demo, from Debian packages.
# Idempotent: does nothing (and needs no network) when all are present.
set -euo pipefail

packages=(
  # build
  g++ cmake make pkg-config clang-format
  # fuzzing (scripts/fuzz.sh): libFuzzer is clang's, and its runtime
  # (libclang_rt.fuzzer) ships in libclang-rt-dev, which clang only recommends
  clang libclang-rt-dev
  # libraries (README: why each one)
  libibverbs-dev libnl-3-dev libnl-genl-3-dev libnl-route-3-dev
  catch2 libfmt-dev libtomlplusplus-dev libcli11-dev libbenchmark-dev
  # the usmc CLI: its JSON (header-only) and `usmc ss`'s socket tables from
  # the kernel's sock_diag (libnl's idiag)
  nlohmann-json3-dev libnl-idiag-3-dev
  # the Debian package (scripts/package.sh, test it_package): scdoc turns
  # docs/man/*.scd into man pages; CPack's DEB generator takes the library
  # dependencies from dpkg-shlibdeps (dpkg-dev), and finds the binaries to ask
  # about with file; man-db renders the installed pages in the test; lintian
  # checks the package as Debian would; bash-completion says where the
  # completions go (pkg-config) and runs them in the test
  scdoc dpkg-dev file man-db lintian bash-completion
  # the real programs the tests, demo and benchmarks wrap
  nginx wrk curl redis-server redis-tools python3 iproute2 procps sockperf util-linux
  # it_postgres, it_proxy_chain and scripts/bench/{pgbench,proxy,iperf3}.py:
  # postgresql (Debian's supported major version: server, initdb, pgbench,
  # psql), haproxy in front of nginx, iperf3
  postgresql haproxy iperf3
  # it_ftp: pyftpdlib's FTP server against ftplib, and CPython's own
  # test_ftplib (with test.support) from the interpreter's test suite
  python3-pyftpdlib libpython3.11-testsuite
  # it_openssh: sshd (an instance of its own on a loopback port; the
  # package's service does not start, see below), ssh, scp, sftp, and the
  # SFTP server sshd runs for sftp and scp
  openssh-server openssh-client openssh-sftp-server
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
# Services (nginx, redis, postgresql, haproxy) must not start on install: the
# tests start their own instances on loopback ports of their choosing
# (postgresql-common still creates its default cluster; nothing uses it).
created_policy=0
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
  $sudo chmod 755 /usr/sbin/policy-rc.d
  created_policy=1
fi
trap '[[ $created_policy -eq 1 ]] && $sudo rm -f /usr/sbin/policy-rc.d' EXIT
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
