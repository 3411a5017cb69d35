#!/usr/bin/env bash
# The installed library (issue 17: "the README's 'link libstrata.a' line fails today without json-c,
# hwloc and OpenBLAS"): `cmake --install` of this build into a temporary prefix, then
# examples/allreduce.c built against the installed package the four ways docs/install.md gives
#   - pkg-config strata          (libstrata.so)
#   - pkg-config strata-static   (libstrata.a and everything it needs)
#   - find_package(strata), strata::strata and strata::strata_static
# and each run with 2 ranks under the installed `strata launch`, where it checks its own results.
# The static builds must not need libstrata.so, the shared ones must load the installed one. In a
# sanitizer build the example is compiled with the same sanitizer (its library is instrumented).
# Usage: install.sh path/to/strata (in the build tree to install)
set -euo pipefail
S=$(realpath "$1")
B=$(dirname "$S")
cd "$(dirname "$0")/../.."
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail=0
P=$W/prefix
cache() { sed -n "s/^$1:[A-Z]*=//p" "$B/CMakeCache.txt"; }
CC=$(cache CMAKE_C_COMPILER)
SAN=""
[ "$(cache STRATA_ASAN)" = ON ] && SAN="-fsanitize=address,undefined,float-cast-overflow"
[ "$(cache STRATA_TSAN)" = ON ] && SAN="-fsanitize=thread"
result() { printf '%-58s %s\n' "$1" "$2"; [ "$2" = ok ] || fail=1; }

cmake --install "$B" --prefix "$P" >"$W/install.log" || { cat "$W/install.log"; exit 1; }
missing=""
for f in include/strata/strata.h include/strata/comm.h include/strata/train.h lib/libstrata.a \
         lib/libstrata.so lib/pkgconfig/strata.pc lib/pkgconfig/strata-static.pc \
         lib/cmake/strata/strataConfig.cmake lib/cmake/strata/strataConfigVersion.cmake \
         lib/cmake/strata/strataTargets.cmake bin/strata; do
    [ -e "$P/$f" ] || missing="$missing $f"
done
[ -z "$missing" ] && result "cmake --install: headers, libraries, pkg-config, package" ok ||
    { cat "$W/install.log"; result "cmake --install: missing$missing" FAIL; }

# run NAME BINARY STATIC: 2 ranks under the installed launcher, both report ok; STATIC 1: the
# binary needs no libstrata.so, 0: it loads the installed one.
run() {
    local name=$1 bin=$2 static=$3 libs
    libs=$(ldd "$bin" | grep libstrata || true)
    if [ "$static" = 1 ] && [ -n "$libs" ]; then result "$name: links libstrata.so ($libs)" FAIL; return; fi
    if [ "$static" = 0 ] && [[ "$libs" != *"$P/"* ]]; then result "$name: not the installed libstrata.so ($libs)" FAIL; return; fi
    if "$P/bin/strata" launch -n 2 -- "$bin" >"$W/run.log" 2>&1 &&
       [ "$(grep -c 'allreduce avg 1.5, allgather of 2 shards ok' "$W/run.log")" = 2 ]; then
        result "$name: 2 ranks under strata launch" ok
    else
        cat "$W/run.log"; result "$name: 2 ranks under strata launch" FAIL
    fi
}

export PKG_CONFIG_PATH=$P/lib/pkgconfig
# shellcheck disable=SC2046 # the flags are words
"$CC" $SAN examples/allreduce.c -o "$W/pc_shared" $(pkg-config --cflags --libs strata) \
    -Wl,-rpath,"$(pkg-config --variable=libdir strata)" && run "pkg-config strata" "$W/pc_shared" 0 ||
    result "pkg-config strata: build" FAIL
# shellcheck disable=SC2046
"$CC" $SAN examples/allreduce.c -o "$W/pc_static" $(pkg-config --cflags --libs strata-static) &&
    run "pkg-config strata-static" "$W/pc_static" 1 || result "pkg-config strata-static: build" FAIL

for kind in shared static; do
    static=OFF; [ $kind = static ] && static=ON
    gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
    if cmake -S examples -B "$W/cmake_$kind" "${gen[@]}" -DCMAKE_PREFIX_PATH="$P" \
           -DCMAKE_C_COMPILER="$CC" -DCMAKE_C_FLAGS="$SAN" -DSTRATA_LINK_STATIC=$static \
           >"$W/cmake.log" 2>&1 && cmake --build "$W/cmake_$kind" >>"$W/cmake.log" 2>&1; then
        run "find_package(strata), $kind" "$W/cmake_$kind/allreduce" $([ $kind = static ] && echo 1 || echo 0)
    else
        cat "$W/cmake.log"; result "find_package(strata), $kind: build" FAIL
    fi
done

# The package refuses a version it is not (0.x: the same major.minor only).
v=$(cache CMAKE_PROJECT_VERSION)
minor=${v#*.}
want=${v%%.*}.$((${minor%%.*} + 1))
mkdir -p "$W/v"
printf 'cmake_minimum_required(VERSION 3.20)\nproject(v LANGUAGES C)\nfind_package(strata %s REQUIRED)\n' \
    "$want" >"$W/v/CMakeLists.txt"
if ! cmake -S "$W/v" -B "$W/v/b" -DCMAKE_PREFIX_PATH="$P" >"$W/v.log" 2>&1 &&
   grep -q "strataConfig.cmake, version: $v" "$W/v.log"; then
    result "find_package(strata $want) refused by $v's version file" ok
else
    cat "$W/v.log"; result "find_package(strata $want) refused by $v's version file" FAIL
fi
exit $fail
