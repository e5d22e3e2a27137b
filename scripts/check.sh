#!/usr/bin/env bash
# The static checks of every module: gofmt, go vet, staticcheck and
# go mod tidy without a diff. .ci/run runs it before the tests; it prints
# what to fix and fails at the first module that needs a change.
set -euo pipefail
cd "$(dirname "$0")/.."
staticcheck="honnef.co/go/tools/cmd/staticcheck@v0.8.2"
unformatted=$(gofmt -l . | grep -v '/testdata/' || true)
if [ -n "$unformatted" ]; then
	echo "check: gofmt -w these files:" >&2
	echo "$unformatted" >&2
	exit 1
fi
for module in . etcdbackend fencelockprom bench/peers; do
	echo "check: $module"
	(
		cd "$module"
		go vet ./...
		go run "$staticcheck" ./...
		go mod tidy -diff
	)
done
