#!/usr/bin/env bash
# Builds dist/berth_<VERSION>_amd64.deb from bin/berth with nfpm and
# packaging/nfpm.yaml, and prints its path on stdout.
#
#   VERSION=1.2.3 test/vm/deb.sh      (default VERSION: git describe)
#
# nfpm v2.45.2 is installed with go install into $GOBIN (default
# ~/go/bin) when missing. Exit status 2 when bin/berth is missing (make build).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$REPO"
[ -x bin/berth ] || die "bin/berth missing: run make build first"
NFPM=${NFPM:-$(command -v nfpm || echo "$(go env GOPATH)/bin/nfpm")}
if [ ! -x "$NFPM" ]; then
	log "installing nfpm v2.45.2"
	go install github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
	NFPM=$(go env GOBIN)
	NFPM=${NFPM:-$(go env GOPATH)/bin}/nfpm
fi
# A Debian version starts with a digit and has no "-" outside the revision
# (deb-version(7)): v1.2.3-4-gabc becomes 1.2.3+4+gabc, and the bare hash
# of an untagged tree 0.0~git<hash>.
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
VERSION=${VERSION#v}
VERSION=${VERSION//-/+}
[[ $VERSION =~ ^[0-9]+\. ]] || VERSION=0.0~git$VERSION
export VERSION
mkdir -p dist
# Man pages and shell completion are generated from the binary being
# packaged, so they cannot be stale; dated by the last commit for a
# reproducible build.
stage=dist/stage
rm -rf "$stage"
mkdir -p "$stage/completion"
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
bin/berth gendocs --man "$stage/man"
gzip -9n "$stage"/man/*
bin/berth completion bash >"$stage/completion/berth"
bin/berth completion zsh >"$stage/completion/_berth"
bin/berth completion fish >"$stage/completion/berth.fish"
out=dist/berth_${VERSION}_amd64.deb
"$NFPM" package --config packaging/nfpm.yaml --packager deb --target "$out" >&2
echo "$out"
