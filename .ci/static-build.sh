#!/usr/bin/env bash
# Builds the fully static Linux binary of Gantry (user guide, docs/book/src/deployment.md, "Without a Rust toolchain: the static binary").
#
# glibc, statically linked: `-C target-feature=+crt-static` on the x86_64-unknown-linux-gnu
# target links a static-pie executable against the libc.a of the build machine, so nothing
# is downloaded (no musl target to install). Naming the target explicitly keeps RUSTFLAGS
# away from build scripts and proc macros, which are built for the host without them.
# SQLite (bundled by sqlx), rustls/ring and jemalloc are compiled in.
#
# Prints the path of the binary on its last line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
target=x86_64-unknown-linux-gnu
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  cargo build --release --locked --target "$target" --bin gantry "$@"
echo "$root/target/$target/release/gantry"
