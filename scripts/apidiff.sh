#!/usr/bin/env bash
# The API changes of every public module since its last release: each
# module of go.work but the tooling (bench/peers, examples, scripts/modproxy)
# and the test harnesses (a module in a testing/ directory), the list
# `scripts/modproxy -public` prints for the outside-user test too, is
# compared with the newest tag of its own (vX.Y.Z for the root module,
# DIR/vX.Y.Z for the module in DIR) by golang.org/x/exp/cmd/apidiff,
# package by package (packages added and removed included). A module
# without a tag is said to have no release to compare with.
# It reports and does not fail: before v1, a minor release may change the
# API (an incompatible change calls for the next minor version, v0.2.0
# after v0.1.x, and a line in CHANGELOG.md).
# Offline once apidiff is in the module cache (go run pkg@version, as
# check.sh runs staticcheck): both trees build in workspace mode.
set -euo pipefail
cd "$(dirname "$0")/.."
apidiff="golang.org/x/exp/cmd/apidiff@v0.0.0-20261113113407-e3970619a1a4"
root=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# packages prints the import paths of module $1's packages in the tree at
# the current directory (commands, internal packages and test harnesses
# left out).
packages() {
	go list -f '{{if and (eq .Module.Path "'"$1"'") (ne .Name "main")}}{{.ImportPath}}{{end}}' "$1/..." |
		grep -vE '(^|/)(internal|testing)(/|$)' || true
}

# An assignment, not a process substitution: set -e then stops on its error.
public=$(cd scripts/modproxy && go run . -root ../.. -public)
mapfile -t dirs <<<"$public"
for dir in "${dirs[@]}"; do
	prefix=""
	[ "$dir" != . ] && prefix="$dir/"
	mod=$(awk '$1 == "module" { print $2; exit }' "$dir/go.mod")
	tag=$(git tag --list "${prefix}v[0-9]*.[0-9]*.[0-9]*" --sort=-v:refname | head -n 1)
	if [ -z "$tag" ]; then
		echo "apidiff: $mod: no release tag (${prefix}vX.Y.Z) to compare with"
		continue
	fi
	old="$tmp/tree-${tag//\//_}"
	mkdir -p "$old"
	git archive "$tag" | tar -x -C "$old"
	(cd "$old/$dir" && packages "$mod") | sort >"$tmp/old"
	(cd "$dir" && packages "$mod") | sort >"$tmp/new"
	echo "apidiff: $mod: changes since $tag:"
	comm -23 "$tmp/old" "$tmp/new" | sed 's/^/  removed package /'
	comm -13 "$tmp/old" "$tmp/new" | sed 's/^/  new package /'
	mapfile -t both < <(comm -12 "$tmp/old" "$tmp/new")
	for pkg in "${both[@]}"; do
		x="$tmp/$(echo "$pkg" | tr / _)"
		(cd "$old/$dir" && go run "$apidiff" -w "$x.old" "$pkg")
		(cd "$root/$dir" && go run "$apidiff" -w "$x.new" "$pkg")
		changes=$(go run "$apidiff" "$x.old" "$x.new")
		if [ -n "$changes" ]; then
			echo "  $pkg:"
			echo "$changes" | sed 's/^/    /'
		fi
	done
	echo "apidiff: $mod: end of the changes since $tag"
	rm -rf "$old"
done
