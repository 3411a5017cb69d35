#!/usr/bin/env bash
# Installs the Debian packages strata needs to build and test, when any is missing.
# Usage: scripts/deps.sh [extra-package ...]   (bench/compare.sh adds the MPI and torch peers)
set -euo pipefail
# clang and libclang-rt-dev (libFuzzer, the sanitizer runtimes): the fuzz stage (scripts/fuzz.sh).
# libpmix-dev: meeting Open MPI's and Slurm's ranks through PMIx. The launchers strata's users run,
# for tests/cli/launchers.sh: torchrun (python3-torch), Open MPI, MPICH, Slurm (slurmctld, slurmd,
# munge); librsvg2-bin renders the pictures the tests look at; libucx-dev (and ucx-utils' ucx_info):
# the UCX transport (optional in the build, tested when present); libssl-dev: libcrypto's HMAC for
# the pool's handshake; iproute2 and nftables: the emulated cluster's namespaces, links and loss.
pkgs=(gcc cmake ninja-build pkg-config libcmocka-dev libjson-c-dev libhwloc-dev libopenblas-dev libdnnl-dev libssl-dev
      libpmix-dev libucx-dev ucx-utils clang libclang-rt-dev python3-torch openmpi-bin mpich slurm-wlm librsvg2-bin
      iproute2 nftables "$@")
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "strata: installing ${missing[*]}" >&2
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
