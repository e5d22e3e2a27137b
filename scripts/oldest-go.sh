#!/usr/bin/env bash
# Builds and vets every module of go.work with the oldest Go release its
# go.mod allows (the go line: go 1.26.0 builds with go1.26.0), so that code
# needing a newer Go than the go line says fails here, not at a user's.
# The go line is as low as the requirements allow: go-redis v9.23.0,
# golang.org/x/sys v0.49.0, modernc.org/sqlite v1.62.0 and etcd v3.7.3
# say go 1.26.0, so no module can say less while it requires them (and
# Go 1.26 is the older of the two Go releases still supported; the code
# itself needs Go 1.25 at least: testing/synctest, sync.WaitGroup.Go).
# The go command fetches that toolchain from the module proxy once
# (golang.org/toolchain, about 76 MB) and keeps it in the module cache.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t dirs < <(go work edit -json | sed -n 's/.*"DiskPath": "\(.*\)".*/\1/p')
for dir in "${dirs[@]}"; do
	v=$(awk '$1 == "go" { print $2; exit }' "$dir/go.mod")
	case "$v" in
	*.*.*) ;;
	*) v="$v.0" ;;
	esac
	echo "oldest-go: $dir with go$v"
	(cd "$dir" && GOTOOLCHAIN="go$v" go build -o /dev/null ./... && GOTOOLCHAIN="go$v" go vet ./...)
done
