#!/usr/bin/env bash
# The static checks of every module: gofmt, go vet, staticcheck and
# go mod tidy without a diff, and the cyclomatic complexity of every
# function (gocyclo): at most 25 in the library's code, at most 40 anywhere
# (commands, demo, tests). .ci/run runs it before the tests; it prints
# what to fix and fails at the first module that needs a change.
set -euo pipefail
cd "$(dirname "$0")/.."
staticcheck="honnef.co/go/tools/cmd/staticcheck@v0.8.2"
gocyclo="github.com/fzipp/gocyclo/cmd/gocyclo@v0.6.0"
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
echo "check: cyclomatic complexity"
if ! go run "$gocyclo" -over 40 -ignore '/testdata/' .; then
	echo "check: split the functions above into named steps (at most 40 anywhere)" >&2
	exit 1
fi
library=(./*.go driver redisbackend redlock fence idempotency internal/memorybackend etcdbackend/*.go fencelockprom)
if ! go run "$gocyclo" -over 25 -ignore '_test\.go$' "${library[@]}"; then
	echo "check: split the library functions above into named steps (at most 25 in library code)" >&2
	exit 1
fi
