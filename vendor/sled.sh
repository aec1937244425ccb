#!/usr/bin/env bash
# Rebuilds Wharf's copy of sled (vendor/sled, the package wharf-sled) from
# sled 0.34.7 as published on crates.io and the patch series in
# vendor/patches/sled, and checks that the copy in the tree is exactly that.
#
#   vendor/sled.sh check   the default: exits 1, with the difference, when
#                          vendor/sled is not 0.34.7 plus the patches
#   vendor/sled.sh apply   replaces vendor/sled with 0.34.7 plus the patches
#
# The published crate is downloaded once (checked against its SHA-256, the
# checksum crates.io lists) and kept under target/vendor/. To change the
# fork: make the change as a new numbered patch (git format-patch against a
# tree made by `apply`), run `apply`, then `check`; vendor/README.md says
# what each patch is for.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-check}
case "$mode" in
check | apply) ;;
*)
    echo "usage: vendor/sled.sh [check|apply]" >&2
    exit 2
    ;;
esac

say() { echo "vendor/sled.sh: $*" >&2; }

version=0.34.7
sha256=7f96b4737c2ce5987354855aed3797279def4ebf734436c6aa4552cf8e169935
url="https://static.crates.io/crates/sled/sled-$version.crate"
cache=target/vendor/sled-$version.crate
# What of the published crate the copy keeps: its sources, manifest,
# licences and documents (not its tests, art, CI files or lock file).
keep=(CHANGELOG.md Cargo.toml LICENSE-APACHE LICENSE-MIT README.md SAFETY.md SECURITY.md src)

if [ ! -f "$cache" ] || ! echo "$sha256  $cache" | sha256sum --check --status; then
    mkdir -p "$(dirname "$cache")"
    say "downloading sled $version from crates.io"
    if ! curl --fail --silent --show-error --location --max-time 120 -o "$cache.part" "$url"; then
        say "could not download $url"
        exit 1
    fi
    mv "$cache.part" "$cache"
fi
if ! echo "$sha256  $cache" | sha256sum --check --status; then
    say "$cache does not have the published checksum $sha256"
    rm -f "$cache"
    exit 1
fi

# Outside the repository: `git apply` in a subdirectory of a repository
# takes paths from the repository's root.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar xzf "$cache" -C "$work"
mkdir "$work/sled"
for item in "${keep[@]}"; do
    cp -r "$work/sled-$version/$item" "$work/sled/"
done
for p in vendor/patches/sled/*.patch; do
    if ! (cd "$work/sled" && git apply --whitespace=nowarn "$OLDPWD/$p"); then
        say "$p does not apply to sled $version plus the patches before it"
        exit 1
    fi
done

case "$mode" in
check)
    if ! diff -r "$work/sled" vendor/sled; then
        say "vendor/sled is not sled $version plus vendor/patches/sled (above: the difference); make the change a patch, then run vendor/sled.sh apply"
        exit 1
    fi
    say "vendor/sled is sled $version plus the $(ls vendor/patches/sled/*.patch | wc -l) patches of vendor/patches/sled"
    ;;
apply)
    rm -rf vendor/sled
    cp -r "$work/sled" vendor/sled
    say "vendor/sled rebuilt: sled $version plus vendor/patches/sled"
    ;;
esac
