#!/bin/sh
# Builds dist/crishim_<version>_<arch>.deb (`make deb`): reproducible binaries, the files
# generated from them (default config, shell completions), then nfpm with
# packaging/deb/nfpm.yaml, which lists everything the package holds.
#
# Environment (make passes these): NFPM (the nfpm binary), GO, DIST (output directory),
# GOARCH (target, default the host's), DEB_VERSION (default packaging/deb/version.sh: the
# file VERSION, plus the commits since it),
# COMMIT and SOURCE_DATE_EPOCH (default from git; all three must be given to build outside
# a git checkout), DEB_MAINTAINER.
set -eu

cd "$(dirname "$0")/../.."
GO=${GO:-go}
NFPM=${NFPM:-nfpm}
DIST=${DIST:-dist}
GOARCH=${GOARCH:-$($GO env GOARCH)}
HOSTARCH=$($GO env GOHOSTARCH)

if [ -z "${DEB_VERSION:-}" ]; then
	DEB_VERSION=$(packaging/deb/version.sh)
fi
COMMIT=${COMMIT:-$(git rev-parse --short=7 HEAD 2>/dev/null || echo unknown)}
# Every mtime in the package (nfpm reads SOURCE_DATE_EPOCH) and the changelog's date.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
fi
DEB_MAINTAINER=${DEB_MAINTAINER:-crishim maintainers <maintainers@users.noreply.a-seed-c38cc2e5.example>}
case $GOARCH in
386) DEB_ARCH=i386 ;;
arm) DEB_ARCH=armhf GOARM=7 && export GOARM ;;
*) DEB_ARCH=$GOARCH ;;
esac
case $DEB_VERSION in
[0-9]*) ;;
*) echo "build.sh: version $DEB_VERSION does not start with a digit (Debian policy 5.6.12)" >&2; exit 1 ;;
esac

STAGE=$DIST/stage-$DEB_ARCH
rm -rf "$STAGE"
mkdir -p "$STAGE/completions"

# Stripped (-s -w) as Debian strips binaries; panics still name functions.
# Reproducible: no paths of this machine (-trimpath), no random build ID (-buildid=), no VCS
# stamp (the version says it; a copy of the tree without .git builds the same bytes), no
# cgo (a static binary, independent of the build machine's libc).
for cmd in crishim crishimctl; do
	CGO_ENABLED=0 GOOS=linux GOARCH=$GOARCH $GO build -trimpath -buildvcs=false \
		-ldflags "-s -w -buildid= -X main.version=$DEB_VERSION -X main.commit=$COMMIT" \
		-o "$STAGE/$cmd" "./cmd/$cmd"
done

# Files the binaries generate are made by binaries of the build machine.
GEN=$STAGE
if [ "$GOARCH" != "$HOSTARCH" ]; then
	GEN=$STAGE/host
	mkdir -p "$GEN"
	for cmd in crishim crishimctl; do
		CGO_ENABLED=0 GOARCH=$HOSTARCH $GO build -trimpath -buildvcs=false -o "$GEN/$cmd" "./cmd/$cmd"
	done
fi

# The default configuration (a conffile): every key commented out at its default.
"$GEN/crishim" config default >"$STAGE/config.toml"

# Shell completions, where bash-completion, zsh and fish look for those of packages.
for cmd in crishim crishimctl; do
	"$GEN/$cmd" completion bash >"$STAGE/completions/$cmd.bash"
	"$GEN/$cmd" completion zsh >"$STAGE/completions/_$cmd"
	"$GEN/$cmd" completion fish >"$STAGE/completions/$cmd.fish"
done

# The unit as shipped in packaging/systemd (no flags: every setting is in the conffile), with
# the package's binary path.
sed 's#^ExecStart=/usr/local/bin/crishim$#ExecStart=/usr/bin/crishim#' \
	packaging/systemd/crishim.service >"$STAGE/crishim.service"
grep -q '^ExecStart=/usr/bin/crishim$' "$STAGE/crishim.service"

# The kubelet's drop-ins, shipped for the operator to copy, not enabled
# (packaging/kubelet/<dir>/<file> keeps its <dir>).
mkdir -p "$STAGE/kubelet"
cp -R packaging/kubelet/. "$STAGE/kubelet/"

# The licence and notice files of every module the binaries link (a static binary carries
# their code): in the tarballs as they are, compressed in the package (Debian policy 12.3).
GOARCH=$HOSTARCH $GO run ./packaging/notices --go "$GO" --out "$STAGE/THIRD_PARTY_NOTICES" \
	"$STAGE/crishim" "$STAGE/crishimctl"
gzip -9nc "$STAGE/THIRD_PARTY_NOTICES" >"$STAGE/THIRD_PARTY_NOTICES.gz"

# A native package's changelog (lintian wants one); its entry is this build.
cat >"$STAGE/changelog" <<CHANGELOG
crishim ($DEB_VERSION) unstable; urgency=medium

  * Built from commit $COMMIT; CHANGELOG.md in this directory lists the changes.

 -- $DEB_MAINTAINER  $(date -u -R -d "@$SOURCE_DATE_EPOCH")
CHANGELOG
gzip -9nf "$STAGE/changelog"

OUT=$DIST/crishim_${DEB_VERSION}_$DEB_ARCH.deb
STAGE=$STAGE DEB_VERSION=$DEB_VERSION DEB_ARCH=$DEB_ARCH DEB_MAINTAINER=$DEB_MAINTAINER \
	SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH \
	"$NFPM" package --config packaging/deb/nfpm.yaml --packager deb --target "$OUT" >&2
echo "$OUT"
