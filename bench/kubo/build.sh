#!/bin/sh
# Builds Kubo (ipfs) v0.43.1 for bench/tunnel_test.go's path=kubo, into a
# cache directory, and prints the binary's path on stdout (progress goes to
# stderr). Idempotent: a binary already in the cache is reused.
#
# Kubo's go.mod replaces go-libp2p by a fork the module proxy does not serve,
# so `go install github.com/ipfs/kubo/cmd/ipfs@v0.43.1` refuses. This copies
# the module, drops that replace, requires go-libp2p v0.52.0 instead and
# builds cmd/ipfs there (about 10 minutes on 2 cores, ~120 MB binary).
#
# Usage: bench/kubo/build.sh [cache-dir]
#   cache-dir defaults to ${XDG_CACHE_HOME:-$HOME/.cache}/overlayd-bench/kubo
#   KUBO_VERSION (default v0.43.1), LIBP2P_VERSION (default v0.52.0).
# Then: OVERLAYD_KUBO=$(bench/kubo/build.sh) go test -bench Tunnel ...
set -eu

version=${KUBO_VERSION:-v0.43.1}
libp2p=${LIBP2P_VERSION:-v0.52.0}
cache=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/overlayd-bench/kubo}
bin=$cache/ipfs-$version
if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi
mkdir -p "$cache"

# The tree to build in: a fresh copy every attempt (a half-edited copy from
# an interrupted run is removed first). The module cache's copy is
# read-only, hence chmod.
src=$cache/src-$version
rm -rf "$src"
echo "build.sh: downloading github.com/ipfs/kubo@$version" >&2
dir=$(cd "$cache" && GOFLAGS=-mod=mod go mod download -json "github.com/ipfs/kubo@$version" |
	sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
if [ -z "$dir" ] || [ ! -d "$dir" ]; then
	echo "build.sh: go mod download gave no Dir for github.com/ipfs/kubo@$version" >&2
	exit 1
fi
cp -R "$dir" "$src"
chmod -R u+w "$src"
cd "$src"
go mod edit -dropreplace github.com/libp2p/go-libp2p
echo "build.sh: requiring github.com/libp2p/go-libp2p@$libp2p" >&2
GOFLAGS=-mod=mod go get "github.com/libp2p/go-libp2p@$libp2p" >&2
echo "build.sh: building ./cmd/ipfs (about 10 minutes on 2 cores)" >&2
GOFLAGS="-mod=mod -buildvcs=false" go build -o "$bin.tmp" ./cmd/ipfs
mv "$bin.tmp" "$bin"
"$bin" version >&2
echo "$bin"
