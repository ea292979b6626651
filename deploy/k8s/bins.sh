#!/usr/bin/env bash
# Builds kube-apiserver, etcd and kwok from their published Go modules (through the Go module
# proxy) into a versioned cache outside the repository, and prints the folder that holds them.
# A no-op when that version set is already built, so CI on the same machine reuses it.
#   bash deploy/k8s/bins.sh               build or reuse; print the bin folder
#   bash deploy/k8s/bins.sh --print-dir   print the bin folder only (nothing is built)
# DLSCHED_K8S_CACHE moves the cache (default ~/.cache/dlsched-k8s). Nothing is vendored or
# committed: apiserver/ and etcd/ hold only wrapper go.mod/go.sum files (dependency manifests).
set -euo pipefail
K8S=1.36.3 ETCD=3.6.13 KWOK=0.8.0
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${DLSCHED_K8S_CACHE:-$HOME/.cache/dlsched-k8s}
OUT="$CACHE/bin/k8s-$K8S.etcd-$ETCD.kwok-$KWOK.$(go env GOVERSION)"
if [ "${1:-}" = --print-dir ]; then echo "$OUT"; exit 0; fi
built() { [ -x "$OUT/kube-apiserver" ] && [ -x "$OUT/kube-scheduler" ] && [ -x "$OUT/etcd" ] && [ -x "$OUT/kwok" ] \
          && "$OUT/kube-apiserver" --version | grep -q "v$K8S"; }
if built; then echo "$OUT"; exit 0; fi
# One build at a time per cache: two would share $OUT.tmp and move it under each other (a test
# fixture, `dlsched k8s up` and a hand-started build can all call this). A second caller waits
# here, then finds the binaries built and returns at once.
mkdir -p "$CACHE"
if command -v flock >/dev/null 2>&1; then exec 9>"$CACHE/bins.lock"; flock 9; fi
if built; then echo "$OUT"; exit 0; fi
export GOTOOLCHAIN=local GOMODCACHE="$CACHE/gomod" GOCACHE="$CACHE/gobuild" CGO_ENABLED=0 GOFLAGS=-mod=mod
rm -rf "$OUT.tmp" && mkdir -p "$OUT.tmp"   # a killed build's leftovers are not reused
log() { echo "[bins.sh $(date +%T)] $*" >&2; }
# Our replace list must cover every staging module of this Kubernetes release.
KMOD=$(cd "$(mktemp -d)" && go mod download -json "k8s.io/kubernetes@v$K8S" \
       | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
need=$(sed -n 's|^[[:space:]]*\(k8s.io/[^ ]*\) => \./staging/.*|\1|p' "$KMOD" | sort)
have=$(sed -n 's|^[[:space:]]*\(k8s.io/[^ ]*\) => k8s.io/.*|\1|p' "$HERE/apiserver/go.mod" | sort)
miss=$(comm -23 <(echo "$need") <(echo "$have"))
[ -z "$miss" ] || { echo "deploy/k8s/apiserver/go.mod lacks replaces for: $miss" >&2; exit 1; }
# Without these the binaries call themselves v0.0.0-master, which breaks version checks.
MINOR=${K8S#1.}; MINOR=${MINOR%%.*}
LD="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LD="$LD -X $p.gitVersion=v$K8S -X $p.gitMajor=1 -X $p.gitMinor=$MINOR -X $p.gitTreeState=clean"
done
log "kube-apiserver v$K8S"
( cd "$HERE/apiserver" && go build -trimpath -ldflags "$LD" -o "$OUT.tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver )
log "kube-scheduler v$K8S"
( cd "$HERE/apiserver" && go build -trimpath -ldflags "$LD" -o "$OUT.tmp/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler )
log "etcd v$ETCD"
( cd "$HERE/etcd" && go build -trimpath -ldflags "-s -w" -o "$OUT.tmp/etcd" go.etcd.io/etcd/server/v3 )
log "kwok v$KWOK"
GOBIN="$OUT.tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK"
"$OUT.tmp/kube-apiserver" --version | grep -q "v$K8S"
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT" && log "built into $OUT" && echo "$OUT"
