#!/bin/sh
# Writes the release artifacts of the version in the file VERSION into DIST (`make release
# DIST=dir`; docs/releasing.md): for linux/amd64 and linux/arm64 a tarball of the static
# binaries with LICENSE, THIRD_PARTY_NOTICES (packaging/notices), README.md, CHANGELOG.md and the systemd units, and the Debian
# package (packaging/deb/build.sh); the Kubernetes manifests of packaging/kubernetes as one
# YAML file; and SHA256SUMS over them. Reproducible: the same commit gives the same bytes
# (test/packaging's TestRelease builds it twice and compares).
#
# Environment (make passes these): GO, NFPM, DIST, COMMIT and SOURCE_DATE_EPOCH (default
# from git; both must be given outside a git checkout), RELEASE_ARCHES [amd64 arm64].
set -eu

cd "$(dirname "$0")/.."
GO=${GO:-go}
NFPM=${NFPM:-nfpm}
DIST=${DIST:?DIST names the directory to write the release into}
RELEASE_ARCHES=${RELEASE_ARCHES:-amd64 arm64}
VERSION=$(sed -n 1p VERSION)
COMMIT=${COMMIT:-$(git rev-parse --short=7 HEAD)}
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
export SOURCE_DATE_EPOCH

# A release has its entry in the changelog.
if ! grep -q "^## \[$VERSION\] - [0-9]\{4\}-[0-9][0-9]-[0-9][0-9]$" CHANGELOG.md; then
	echo "release.sh: CHANGELOG.md has no entry \"## [$VERSION] - YYYY-MM-DD\" for VERSION $VERSION" >&2
	exit 1
fi
if git rev-parse --git-dir >/dev/null 2>&1 && ! git diff --quiet HEAD --; then
	echo "release.sh: warning: uncommitted changes; the artifacts are not commit $COMMIT's" >&2
fi

mkdir -p "$DIST"
DIST=$(cd "$DIST" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
$GO build -o "$WORK/tarball" ./test/tarball

# Debian versions have ~ where semver pre-releases have - (0.2.0-rc.1 -> 0.2.0~rc.1).
DEB_VERSION=$(echo "$VERSION" | sed 's/-/~/')
ARTIFACTS=
for arch in $RELEASE_ARCHES; do
	# The .deb's build makes the binaries (static, -trimpath, no build ID, stamped with
	# the version and commit); the tarball holds the same ones.
	deb=$(GO=$GO NFPM=$NFPM DIST=$WORK/$arch GOARCH=$arch DEB_VERSION=$DEB_VERSION COMMIT=$COMMIT \
		packaging/deb/build.sh)
	stage=$(dirname "$deb")/stage-$(dpkg-deb --field "$deb" Architecture)
	cp "$deb" "$DIST/"
	name=crishim-$VERSION-linux-$arch
	"$WORK/tarball" --out "$DIST/$name.tar.gz" --dir "$name" --mtime "$SOURCE_DATE_EPOCH" \
		"$stage/crishim" "$stage/crishimctl" LICENSE "$stage/THIRD_PARTY_NOTICES" README.md CHANGELOG.md \
		packaging/systemd/*
	ARTIFACTS="$ARTIFACTS $name.tar.gz $(basename "$deb")"
done

# The cluster's side (the CRDs, RBAC and admission policy, the notification controller's
# Deployment): one file for `kubectl apply -f`.
manifests=crishim-$VERSION-kubernetes.yaml
for f in packaging/kubernetes/*.yaml; do
	printf -- '---\n# Source: %s\n' "$f"
	sed '1{/^---$/d;}' "$f"
done >"$DIST/$manifests"
ARTIFACTS="$ARTIFACTS $manifests"

cd "$DIST"
# shellcheck disable=SC2086 # word splitting of the list is meant
sha256sum $(printf '%s\n' $ARTIFACTS | LC_ALL=C sort) >SHA256SUMS
printf '%s\n' $ARTIFACTS SHA256SUMS | LC_ALL=C sort
