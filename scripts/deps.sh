#!/usr/bin/env bash
# Installs the Debian packages strata needs to build and test, when any is missing.
# Usage: scripts/deps.sh [extra-package ...]   (bench/compare.sh adds the MPI and torch peers)
set -euo pipefail
# clang and libclang-rt-dev (libFuzzer, the sanitizer runtimes): the fuzz stage (scripts/fuzz.sh).
pkgs=(gcc cmake ninja-build pkg-config libcmocka-dev libjson-c-dev libhwloc-dev libopenblas-dev
      clang libclang-rt-dev "$@")
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
