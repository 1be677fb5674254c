#!/usr/bin/env bash
# Builds, without a registry, stand-ins for the Dockerfile's base images
# (which cannot be pulled on a machine that reaches only package
# registries) into the engine of hack/docker/up.sh:
#   migflex.local/golang:<GO_VERSION>-bookworm   BUILD_IMAGE: Debian 12 from
#       debootstrap with gcc, libc6-dev, make, git, and this machine's Go,
#       which must be the Dockerfile's GO_VERSION; GOPATH=/go as in the
#       golang image
#   migflex.local/base-debian12:nonroot          BASE_IMAGE: what the final
#       stage needs of distroless base: Debian 12's glibc, CA certificates,
#       and the users root and nonroot (65532)
# The Debian packages come from the mirror apt uses here. The root file
# system is cached in $CACHE_DIR/docker; images already in the engine are
# kept. Prints the --build-arg flags for docker build.
set -euo pipefail
# shellcheck source=hack/docker/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ $EUID -eq 0 ]] || die "needs root (debootstrap)"
# The build flags are this script's only output (on the caller's stdout,
# kept as fd 3); its progress, and what the tools it runs print, go to
# stderr, so that the first run, which builds, prints the same flags.
exec 3>&1 1>&2
d version >/dev/null 2>&1 || die "no engine at $DOCKER_SOCK: run hack/docker/up.sh first"

GO_VERSION=$(sed -n 's/^ARG GO_VERSION=//p' "$ROOT/Dockerfile")
[[ -n $GO_VERSION ]] || die "no ARG GO_VERSION in the Dockerfile"
have=$(go env GOVERSION)
[[ $have == "go$GO_VERSION" ]] || die "the Dockerfile builds with Go $GO_VERSION, this machine has $have: the stand-in would not be the image it replaces"
BUILD_IMAGE=migflex.local/golang:$GO_VERSION-bookworm
BASE_IMAGE=migflex.local/base-debian12:nonroot

work=$CACHE_DIR/docker
rootfs_tar=$work/bookworm-build-rootfs.tar
if [[ ! -s $rootfs_tar ]]; then
	command -v debootstrap >/dev/null || {
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
	}
	mirror=$(awk '$1 == "URIs:" {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
	[[ -n $mirror ]] || mirror=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
	[[ -n $mirror ]] || die "cannot tell the Debian mirror apt uses"
	dir=$(mktemp -d "$work/rootfs.XXXXXX")
	# debootstrap mounts /proc and /sys in the target while it works: never
	# descend into them.
	trap 'umount -R "$dir/proc" "$dir/sys" 2>/dev/null; rm -rf --one-file-system "$dir"' EXIT
	log "debootstrap bookworm (minbase, gcc, libc6-dev, make, git) from $mirror"
	debootstrap --variant=minbase --include=gcc,libc6-dev,make,git,ca-certificates \
		bookworm "$dir" "$mirror" >"$work/debootstrap.log" 2>&1 ||
		{ tail -n 20 "$work/debootstrap.log" >&2; die "debootstrap failed (log: $work/debootstrap.log)"; }
	rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
	tar -C "$dir" --numeric-owner -cf "$rootfs_tar.tmp" .
	mv "$rootfs_tar.tmp" "$rootfs_tar"
	rm -rf --one-file-system "$dir"
	trap - EXIT
fi

if ! d image inspect "$BUILD_IMAGE" >/dev/null 2>&1; then
	log "$BUILD_IMAGE: the Debian root file system and $(go env GOROOT)"
	goroot=$(go env GOROOT)
	# One layer: the root file system with Go added at /usr/local/go.
	tmp=$(mktemp -d "$work/golang.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	cp "$rootfs_tar" "$tmp/layer.tar"
	tar -C "$(dirname "$goroot")" --transform "s,^$(basename "$goroot"),./usr/local/go," \
		--numeric-owner --owner=0 --group=0 --exclude="$(basename "$goroot")/pkg/obj" \
		-rf "$tmp/layer.tar" "$(basename "$goroot")"
	mkdir -p "$tmp/go/bin" "$tmp/go/src"
	tar -C "$tmp" --transform 's,^go,./go,' --numeric-owner --owner=0 --group=0 -rf "$tmp/layer.tar" go
	d import \
		-c 'ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		-c 'ENV GOPATH=/go' -c 'ENV GOTOOLCHAIN=local' -c 'WORKDIR /go' \
		"$tmp/layer.tar" "$BUILD_IMAGE" >/dev/null
	rm -rf "$tmp"
	trap - EXIT
fi

if ! d image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
	log "$BASE_IMAGE: glibc and CA certificates from the same Debian"
	tmp=$(mktemp -d "$work/base.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	mkdir -p "$tmp/full" "$tmp/root"
	tar -C "$tmp/full" -xf "$rootfs_tar"
	# The files of libc6 (the dynamic loader, libc, libm, ...), as
	# distroless base carries them, and the CA bundle. Paths through the
	# merged-/usr links (/lib, /lib64) are copied as directories.
	mapfile -t files < <(grep -E '^/(lib|lib64|usr/lib)/' "$tmp/full/var/lib/dpkg/info/libc6:amd64.list" |
		while read -r f; do [[ -d $tmp/full$f && ! -L $tmp/full$f ]] || echo "${f#/}"; done)
	((${#files[@]})) || die "libc6's file list not found in the root file system"
	(cd "$tmp/full" && cp -a --parents "${files[@]}" etc/ssl/certs/ca-certificates.crt "$tmp/root/")
	[[ -L $tmp/root/lib64/ld-linux-x86-64.so.2 || -f $tmp/root/lib64/ld-linux-x86-64.so.2 ]] || die "no dynamic loader in the base image"
	mkdir -p "$tmp/root/etc" "$tmp/root/tmp" "$tmp/root/home/nonroot"
	chmod 1777 "$tmp/root/tmp"
	printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$tmp/root/etc/passwd"
	printf 'root:x:0:\nnonroot:x:65532:\n' >"$tmp/root/etc/group"
	chown 65532:65532 "$tmp/root/home/nonroot"
	tar -C "$tmp/root" --numeric-owner -cf "$tmp/layer.tar" .
	d import -c 'USER 65532' -c 'WORKDIR /home/nonroot' "$tmp/layer.tar" "$BASE_IMAGE" >/dev/null
	rm -rf "$tmp"
	trap - EXIT
fi
echo "--build-arg BUILD_IMAGE=$BUILD_IMAGE --build-arg BASE_IMAGE=$BASE_IMAGE" >&3
