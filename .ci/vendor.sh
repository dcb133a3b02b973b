#!/usr/bin/env bash
# vendor/ holds patched copies of crates.io releases (used through [patch.crates-io] in
# Cargo.toml; vendor/PATCHED.md says why and how to move to a new release). This script keeps
# each copy equal to its release, normalized, plus vendor/patches/<name>-<version>.patch, the
# release's .crate matching the SHA-256 pinned in vendor/patches/SHA256SUMS.
#
# Usage: .ci/vendor.sh [check]               download each release, apply its patch and fail,
#                                            naming the files, if vendor/<name> differs
#        .ci/vendor.sh write                 rewrite the patches (and pin a new release's
#                                            checksum) from vendor/ as it stands, then check
#        .ci/vendor.sh upgrade NAME VERSION  replace vendor/NAME by release VERSION with the
#                                            current patch applied (rejects left as .rej files)
# Env:   GANTRY_VENDOR_CACHE  where verified releases are kept (default ~/.cache/gantry-vendor)
#
# Normalization of a release: CRLF line endings become LF, and .cargo-ok, .cargo_vcs_info.json
# and Cargo.lock are left out. A crate's PATCHED.md is the one file of vendor/<name> that no
# patch records.
set -Eeuo pipefail
export LC_ALL=C
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

patches=vendor/patches
sums=$patches/SHA256SUMS
cache=${GANTRY_VENDOR_CACHE:-$HOME/.cache/gantry-vendor}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'echo "$0: failed at line $LINENO" >&2' ERR

die() { echo "$*" >&2; exit 1; }

# git without the user's or the system's configuration, so that a patch written here is the same
# on every machine (diff algorithm, prefixes, line endings).
git_() {
  GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 \
    git -c core.autocrlf=false -c user.name=vendor -c user.email=vendor@localhost "$@"
}

# The [package] field $2 of the manifest $1.
manifest_field() {
  awk -v key="$2" '/^\[/ { pkg = ($0 == "[package]") }
    pkg && $1 == key && $2 == "=" { gsub(/"/, "", $3); print $3; exit }' "$1"
}

# The vendored crates: "<name> <version>" for every vendor/*/Cargo.toml.
crates() {
  local manifest
  for manifest in vendor/*/Cargo.toml; do
    echo "$(manifest_field "$manifest" name) $(manifest_field "$manifest" version)"
  done
}

pinned_sum() { awk -v file="$1-$2.crate" '$2 == file { print $1 }' "$sums"; }

# Pins release $1 $2's checksum, taken from the crates.io index (the value cargo writes into a
# Cargo.lock), in place of any other version of that crate.
pin_release() {
  local name=$1 version=$2 n=${1,,} index sum
  [[ -n $(pinned_sum "$name" "$version") ]] && return 0
  case ${#n} in
    1 | 2) index="${#n}/$n" ;;
    3) index="3/${n:0:1}/$n" ;;
    *) index="${n:0:2}/${n:2:2}/$n" ;;
  esac
  sum=$(curl -sSfL --retry 3 "https://index.crates.io/$index" |
    grep -E "\"vers\": *\"${version//./\\.}\"" |
    sed -n 's/.*"cksum": *"\([0-9a-f]\{64\}\)".*/\1/p') || true
  [[ $sum =~ ^[0-9a-f]{64}$ ]] || die "the crates.io index has no checksum for $name $version"
  { grep -v -E "  $name-[0-9][^ ]*\.crate$" "$sums" || true; echo "$sum  $name-$version.crate"; } |
    sort -k 2 >"$work/sums"
  mv "$work/sums" "$sums"
  echo "pinned $name-$version.crate: $sum"
}

# Unpacks release $1 $2, normalized, into directory $3 (which must not exist). The .crate is
# downloaded once and kept in $cache; it is checked against its pinned SHA-256 on every use.
unpack_release() {
  local name=$1 version=$2 dest=$3 file="$1-$2.crate" sum
  sum=$(pinned_sum "$name" "$version")
  [[ -n $sum ]] || die "$sums pins no checksum for $file (run .ci/vendor.sh write)"
  if ! echo "$sum  $cache/$file" | sha256sum -c --status 2>/dev/null; then
    curl -sSfL --retry 3 --retry-connrefused -o "$work/$file" \
      "https://static.crates.io/crates/$name/$file" || die "cannot download $file from crates.io"
    echo "$sum  $work/$file" | sha256sum -c --status ||
      die "$file from crates.io does not match the SHA-256 pinned in $sums"
    mkdir -p "$cache"
    mv "$work/$file" "$cache/$file"
  fi
  mkdir "$work/unpack"
  tar -xzf "$cache/$file" -C "$work/unpack"
  mv "$work/unpack/$name-$version" "$dest"
  rmdir "$work/unpack"
  rm -f "$dest/.cargo-ok" "$dest/.cargo_vcs_info.json" "$dest/Cargo.lock"
  { grep -rlIZ $'\r' "$dest" || true; } | xargs -0 -r sed -i 's/\r$//'
}

check() {
  local name version patch tree expected failed=0
  while read -r -u 3 name version; do
    patch=$patches/$name-$version.patch
    tree="$work/release+patch/$name"
    mkdir -p "$work/release+patch"
    unpack_release "$name" "$version" "$tree"
    if [[ ! -f $patch ]]; then
      echo "vendor/$name: no patch $patch for $name $version (run .ci/vendor.sh write)"
      failed=1
      continue
    fi
    git_ -C "$tree" init -q
    if [[ -s $patch ]] && ! git_ -C "$tree" apply "$root/$patch"; then
      echo "vendor/$name: $patch does not apply to $name $version from crates.io"
      failed=1
      continue
    fi
    rm -rf "$tree/.git"
    if diff -rq -x PATCHED.md "$tree" "vendor/$name" >"$work/diff"; then
      echo "vendor/$name: $name $version from crates.io plus $patch"
    else
      echo "vendor/$name differs from $name $version plus $patch:"
      sed "s|$work/||g" "$work/diff"
      echo "(.ci/vendor.sh write records vendor/$name as the patch; the diff, abridged:)"
      diff -ru -x PATCHED.md "$tree" "vendor/$name" | sed "s|$work/||g" | head -n 60 || true
      failed=1
    fi
  done 3< <(crates)
  expected=$(crates | awk '{ print $1 "-" $2 ".patch" }')
  for patch in "$patches"/*.patch; do
    [[ -e $patch ]] || continue
    if ! grep -qxF "${patch##*/}" <<<"$expected"; then
      echo "$patch: no vendored crate at that version (a stale patch)"
      failed=1
    fi
  done
  if ((failed)); then
    echo "vendor/ is not its crates.io releases plus vendor/patches"
    exit 1
  fi
}

write() {
  local name version tree old
  mkdir -p "$patches"
  touch "$sums"
  while read -r -u 3 name version; do
    [[ -z $(find "vendor/$name" -name '*.rej') ]] || die "vendor/$name has .rej files left"
    pin_release "$name" "$version"
    tree="$work/$name"
    unpack_release "$name" "$version" "$tree"
    git_ -C "$tree" init -q
    git_ -C "$tree" add -A
    git_ -C "$tree" commit -q -m "$name $version from crates.io, normalized"
    find "$tree" -mindepth 1 -maxdepth 1 ! -name .git -exec rm -rf {} +
    cp -a "vendor/$name/." "$tree/"
    rm -f "$tree/PATCHED.md"
    git_ -C "$tree" add -A
    git_ -C "$tree" diff --cached --no-color --no-ext-diff --no-textconv --no-renames \
      --full-index --binary --diff-algorithm=myers --indent-heuristic -U3 \
      --src-prefix=a/ --dst-prefix=b/ >"$patches/$name-$version.patch"
    for old in "$patches/$name"-[0-9]*.patch; do
      [[ $old == "$patches/$name-$version.patch" ]] || rm -f "$old"
    done
    echo "wrote $patches/$name-$version.patch"
  done 3< <(crates)
  check
}

upgrade() {
  local name=${1:?usage: .ci/vendor.sh upgrade NAME VERSION} version=${2:?usage: .ci/vendor.sh upgrade NAME VERSION}
  local old patch
  [[ -f vendor/$name/Cargo.toml ]] || die "vendor/$name is not a vendored crate"
  old=$(manifest_field "vendor/$name/Cargo.toml" version)
  patch=$patches/$name-$old.patch
  pin_release "$name" "$version"
  unpack_release "$name" "$version" "$work/$name"
  cp vendor/"$name"/PATCHED.md "$work/$name/" 2>/dev/null || true
  rm -rf "vendor/$name"
  mv "$work/$name" "vendor/$name"
  echo "vendor/$name: $name $version from crates.io; applying $patch (made for $old)"
  if patch -p1 --forward --no-backup-if-mismatch -d "vendor/$name" -i "$root/$patch"; then
    echo "applied; now build, test, and run .ci/vendor.sh write"
  else
    echo "resolve the rejected hunks (vendor/$name/**/*.rej), delete the .rej files, then run .ci/vendor.sh write"
  fi
}

case ${1:-check} in
  check) check ;;
  write) write ;;
  upgrade) shift; upgrade "$@" ;;
  *) die "usage: .ci/vendor.sh [check | write | upgrade NAME VERSION]" ;;
esac
