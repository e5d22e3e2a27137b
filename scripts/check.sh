#!/usr/bin/env bash
# The static checks of every module: gofmt, go vet, staticcheck and
# go mod tidy without a diff, and the cyclomatic complexity of every
# function (gocyclo): at most 25 in the library's code, at most 40 anywhere
# (commands, demo, tests). .ci/run runs it before the tests; it prints
# what to fix and fails at the first module that needs a change.
# scripts/check.sh -w runs go mod tidy in every module instead of checking it.
#
# fencelock's modules require each other at v0.1.0, which is not published:
# development builds them together through go.work, whose replace lines map
# that version onto the working tree. go mod tidy ignores go.work, so it
# runs per module with GOWORK=off against a file-based module proxy that
# scripts/modproxy writes from the working tree (every fencelock module at
# v0.1.0), then the module cache for everything else.
# The go.sum lines of fencelock's own modules are not committed and are left
# out of the comparison: their hashes are those of this working tree, which
# change with every commit; in workspace mode those modules come from the
# tree and need none (the lines come with the first tagged release).
set -euo pipefail
cd "$(dirname "$0")/.."
# Every module of the workspace (go.work), as paths relative to the root.
mapfile -t modules < <(go list -m -f '{{.Dir}}' | sed "s|^$PWD/*||; s|^$|.|")
staticcheck="honnef.co/go/tools/cmd/staticcheck@v0.8.2"
write=false
if [ "${1:-}" = "-w" ]; then
	write=true
fi
gocyclo="github.com/fzipp/gocyclo/cmd/gocyclo@v0.6.0"
unformatted=$(gofmt -l . | grep -v '/testdata/' || true)
if [ -n "$unformatted" ]; then
	echo "check: gofmt -w these files:" >&2
	echo "$unformatted" >&2
	exit 1
fi
# What a library user downloads: the library's packages may import the
# standard library, go-redis and what go-redis imports, and nothing else
# (not the test harness under testing/, not pgx, SQLite or etcd).
library=(. ./driver ./redisbackend ./redlock ./memorybackend ./fence ./idempotency)
allowed=$(go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' github.com/redis/go-redis/v9)
extra=$(go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' "${library[@]}" |
	grep -vxF -f <(echo "$allowed") |
	grep -vE '^github\.com/fencelock/fencelock(/(driver|internal/[a-z]+|redisbackend|redlock|memorybackend|fence|idempotency))?$' || true)
if [ -n "$extra" ]; then
	echo "check: the library's packages (${library[*]}) import these; only the standard library and go-redis may be:" >&2
	echo "$extra" >&2
	exit 1
fi
# No module imports another module's internal packages (the go command
# allows it within one import-path tree; a user of a published module
# would then depend on what its author may change at will).
mods=$(go list -m -f '{{.Path}}')
crossing=$(for module in "${modules[@]}"; do
	(cd "$module" && go list -e -test -f '{{if .Module}}{{$m := .Module.Path}}{{range .Imports}}{{$m}} {{.}}{{"\n"}}{{end}}{{end}}' ./...)
done | sort -u | awk -v mods="$mods" '
	BEGIN { n = split(mods, m, "\n") }
	$2 ~ /^github\.com\/fencelock\// && ($2 ~ /\/internal\// || $2 ~ /\/internal$/) {
		owner = ""
		for (i = 1; i <= n; i++) {
			if (($2 == m[i] || index($2, m[i] "/") == 1) && length(m[i]) > length(owner)) owner = m[i]
		}
		if (owner != $1) print $1 " imports " $2 " (module " owner ")"
	}')
if [ -n "$crossing" ]; then
	echo "check: modules import internal packages of other modules:" >&2
	echo "$crossing" >&2
	exit 1
fi
# The module cache of the tidy runs is one of their own, kept between runs
# beside the build cache: the shared one would keep the first v0.1.0 it saw
# of each fencelock module, and tidy would then read a stale tree. So
# fencelock's own modules are removed from it before every run; the
# third-party ones stay, which saves extracting them again.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tidy_cache="$(go env GOCACHE)/fencelock-tidy-modcache"
if [ -d "$tidy_cache" ]; then
	chmod -R u+w "$tidy_cache"/github.com/fencelock "$tidy_cache"/cache/download/github.com/fencelock 2>/dev/null || true
	rm -rf "$tidy_cache"/github.com/fencelock "$tidy_cache"/cache/download/github.com/fencelock
fi
(cd scripts/modproxy && go run . -root ../.. -out "$tmp/proxy" >/dev/null)
# The go command's own proxy comes last, for a third-party module the module
# cache lacks (tidy loads the tests of dependencies, which a workspace build
# does not fetch): with a warm cache, tidy needs no network.
tidy_env=(GOWORK=off GOMODCACHE="$tidy_cache" "GOPROXY=file://$tmp/proxy,file://$(go env GOMODCACHE)/cache/download,$(go env GOPROXY)"
	GOFLAGS="-mod=mod -buildvcs=false" GONOSUMDB=github.com/fencelock GOSUMDB=off)
own_sum='^[+-]github\.com/fencelock/[^ ]+ v[^ ]+ h1:'
for module in "${modules[@]}"; do
	echo "check: $module"
	(
		cd "$module"
		if $write; then
			env "${tidy_env[@]}" go mod tidy
			sed -i '/^github\.com\/fencelock\//d' go.sum
			exit 0
		fi
		go vet ./...
		go run "$staticcheck" ./...
		if ! diff=$(env "${tidy_env[@]}" go mod tidy -diff 2>&1); then
			if ! grep -q '^+++ ' <<<"$diff"; then
				echo "$diff" >&2 # tidy failed, not a diff
				exit 1
			fi
			if grep -E '^[+-]' <<<"$diff" | grep -vE '^(\+\+\+|---) ' | grep -vE "$own_sum" >/dev/null; then
				echo "check: $module: go mod tidy (scripts/check.sh -w) would change:" >&2
				echo "$diff" >&2
				exit 1
			fi
		fi
	)
done
echo "check: cyclomatic complexity"
if ! go run "$gocyclo" -over 40 -ignore '/testdata/' .; then
	echo "check: split the functions above into named steps (at most 40 anywhere)" >&2
	exit 1
fi
library_code=(./*.go driver redisbackend redlock fence idempotency memorybackend etcdbackend/*.go fencelockprom fencelockotel redisbackend/rueidistransport)
if ! go run "$gocyclo" -over 25 -ignore '_test\.go$' "${library_code[@]}"; then
	echo "check: split the library functions above into named steps (at most 25 in library code)" >&2
	exit 1
fi
