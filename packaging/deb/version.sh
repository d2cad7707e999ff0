#!/bin/sh
# Prints the Debian version of the checkout (cwd). The release is the file VERSION (the
# version of the latest release, changed only by the commit that cuts the next one; a
# semver pre-release 0.2.0-rc.1 becomes 0.2.0~rc.1, which dpkg sorts before 0.2.0).
# No tag is read: not every clone carries them.
#   the commit that last changed VERSION  -> 0.1.0
#   N commits after it                    -> 0.1.0+git<N>.<sha> (after 0.1.0, before 0.1.1)
#   uncommitted changes                   -> +dirty appended
#   no git (a copy of the tree)           -> 0.1.0
set -eu

release=$(sed -n '1{s/-/~/;p;}' VERSION)
case $release in
[0-9]*.[0-9]*.[0-9]*) ;;
*) echo "version.sh: VERSION says \"$release\", not a version x.y.z" >&2; exit 1 ;;
esac
if ! git rev-parse --git-dir >/dev/null 2>&1; then
	echo "$release"
	exit 0
fi
dirty=
git diff --quiet HEAD -- || dirty=+dirty
# Commits since VERSION last changed (all of them when it is not committed yet).
if since=$(git log -1 --format=%H -- VERSION) && [ -n "$since" ]; then
	n=$(git rev-list --count "$since..HEAD")
else
	n=$(git rev-list --count HEAD)
fi
if [ "$n" -eq 0 ]; then
	echo "$release$dirty"
else
	echo "$release+git$n.$(git rev-parse --short=7 HEAD)$dirty"
fi
