#!/bin/sh
# Prints the Debian version of the checkout (cwd) from `git describe`:
#   v1.2.3                -> 1.2.3
#   v1.3.0-rc.1           -> 1.3.0~rc.1        (sorts before 1.3.0)
#   4 commits after v1.2.3 -> 1.2.3+git4.<sha> (after 1.2.3, before 1.2.4)
#   no tag                -> 0.0.0~git<commits>.<sha> (before any release; snapshots ordered
#                            by commit count)
# and appends +dirty when tracked files have uncommitted changes.
set -eu

dirty=
git diff --quiet HEAD -- || dirty=+dirty
if desc=$(git describe --tags --match 'v[0-9]*' --abbrev=7 2>/dev/null); then
	echo "$desc" | sed -E \
		-e 's/^v//' \
		-e 's/-([0-9]+)-g([0-9a-f]+)$/+git\1.\2/' \
		-e 's/^([0-9.]+)-/\1~/' \
		-e "s/\$/$dirty/"
else
	echo "0.0.0~git$(git rev-list --count HEAD).$(git rev-parse --short=7 HEAD)$dirty"
fi
