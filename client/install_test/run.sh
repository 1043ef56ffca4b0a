#!/bin/sh
# Installs the client from build dir $1 into a scratch prefix, then builds and runs a C++ consumer
# (CMake package) and a C consumer (pkg-config) from $2, working in $3.
set -eu
build=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" --component client >/dev/null
cmake -S "$src" -B "$work/cxx" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cxx" >/dev/null
LD_LIBRARY_PATH="$prefix/lib:${LD_LIBRARY_PATH:-}" "$work/cxx/consumer_cxx"
libdir=$(dirname "$(find "$prefix" -name kvtier.pc)")
export PKG_CONFIG_PATH="$libdir"
cc -std=c11 -Wall -Werror $(pkg-config --cflags kvtier) "$src/consumer.c" -o "$work/consumer_c" \
  $(pkg-config --libs kvtier)
LD_LIBRARY_PATH="$(dirname "$libdir"):${LD_LIBRARY_PATH:-}" "$work/consumer_c"
echo "install consumer: ok"
