#!/usr/bin/env bash
# Builds a kind node image for Kubernetes $K8S_VERSION without a registry,
# from what the project builds and Debian's packages, into the engine of
# hack/docker/up.sh: migflex.local/kind-node:<version>.
#
#   - Debian 12 (debootstrap from the mirror apt uses) with systemd, runc,
#     the CNI plugins, iptables and conntrack;
#   - containerd 2 (containerd, its runc shim and ctr) as the local cluster
#     runs it, built from the module proxy (hack/cluster/build.sh), and the
#     pinned kubeadm, kubelet and kubectl of the minor K8S_VERSION picks
#     (the default one when unset);
#   - the images kubeadm runs, as tarballs containerd imports at boot
#     (migflex-kind-images.service), made with hack/mkimage from the pinned
#     binaries: kube-apiserver, kube-controller-manager, kube-scheduler,
#     kube-proxy (with the host's iptables), etcd and CoreDNS at the
#     versions kubeadm asks for (built from the Go module proxy), a pause
#     image, and the image of the node's default CNI (files/default-cni.yaml,
#     which replaces kindnetd: not on the module proxy);
#   - files/: the entrypoint, the kubelet's units, containerd's config.
# kind reads /kind/version and /kind/manifests/default-cni.yaml from it.
set -euo pipefail
HACK_KIND=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=hack/docker/lib.sh
source "$HACK_KIND/../docker/lib.sh"
# shellcheck source=hack/cluster/lib.sh
source "$HACK_KIND/../cluster/lib.sh"
[[ $EUID -eq 0 ]] || die "needs root (debootstrap)"
d version >/dev/null 2>&1 || die "no engine at $DOCKER_SOCK: run hack/docker/up.sh first"

NODE_IMAGE=${NODE_IMAGE:-migflex.local/kind-node:$K8S_VERSION}
work=$CACHE_DIR/kind
mkdir -p "$work/bin"
cd "$ROOT"

"$HACK_CLUSTER/build.sh" kubeadm kube-proxy kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler containerd >/dev/null
K=$K8S_BIN
mapfile -t want < <("$K/kubeadm" config images list --kubernetes-version "$K8S_VERSION")
image_of() { printf '%s\n' "${want[@]}" | grep "/$1:" || die "kubeadm lists no $1 image"; }
etcd_ref=$(image_of etcd) coredns_ref=$(image_of coredns) pause_ref=$(image_of pause)
etcd_version=v${etcd_ref##*:}; etcd_version=${etcd_version%-*}
coredns_version=${coredns_ref##*:}

# etcd and CoreDNS at kubeadm's versions, from the module proxy.
if [[ ! -x $work/bin/etcd-$etcd_version ]]; then
	log "building etcd $etcd_version"
	tmp=$(mktemp -d "$work/etcd.XXXXXX")
	sed "s/$ETCD_VERSION/$etcd_version/g" "$HACK_CLUSTER/etcd/go.mod" >"$tmp/go.mod"
	cp "$HACK_CLUSTER/etcd/tools.go" "$tmp/"
	(cd "$tmp" && go mod tidy && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$work/bin/etcd-$etcd_version" go.etcd.io/etcd/server/v3)
	rm -rf "$tmp"
fi
if [[ ! -x $work/bin/coredns-$coredns_version ]]; then
	log "building CoreDNS $coredns_version"
	GOBIN=$work/bin.tmp CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$coredns_version"
	mv "$work/bin.tmp/coredns" "$work/bin/coredns-$coredns_version"
	rmdir "$work/bin.tmp"
fi

# The node's root file system.
rootfs_tar=$work/node-rootfs-bookworm-nocontainerd.tar
if [[ ! -s $rootfs_tar ]]; then
	mirror=$(awk '$1 == "URIs:" {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
	[[ -n $mirror ]] || mirror=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
	[[ -n $mirror ]] || die "cannot tell the Debian mirror apt uses"
	dir=$(mktemp -d "$work/rootfs.XXXXXX")
	trap 'umount -R "$dir/proc" "$dir/sys" 2>/dev/null; rm -rf --one-file-system "$dir"' EXIT
	log "debootstrap bookworm for the node from $mirror"
	debootstrap --variant=minbase \
		--include=systemd,systemd-sysv,dbus,runc,containernetworking-plugins,iptables,conntrack,iproute2,ethtool,util-linux,mount,kmod,ca-certificates,procps,socat,libseccomp2,jq,libcap2-bin \
		bookworm "$dir" "$mirror" >"$work/debootstrap.log" 2>&1 ||
		{ tail -n 20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
	rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
	tar -C "$dir" --numeric-owner -cf "$rootfs_tar.tmp" .
	mv "$rootfs_tar.tmp" "$rootfs_tar"
	rm -rf --one-file-system "$dir"
	trap - EXIT
fi

tmp=$(mktemp -d "$work/node.XXXXXX")
trap 'rm -rf --one-file-system "$tmp"' EXIT
root=$tmp/root
mkdir -p "$root"
tar -C "$root" -xf "$rootfs_tar"

# Images, as docker archives containerd imports.
tools=$CACHE_DIR/tools
go build -trimpath -o "$tools/mkimage" ./hack/mkimage
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tools/testbox" ./hack/testbox
imgs=$root/kind/images
mkdir -p "$imgs"
path=PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin
mk() { "$tools/mkimage" "$@" >/dev/null; }
mk -ref "$pause_ref" -out "$imgs/pause.tar" -add "$tools/testbox:/testbox" -entrypoint /testbox,pause
for c in kube-apiserver kube-controller-manager kube-scheduler; do
	mk -ref "$(image_of "$c")" -out "$imgs/$c.tar" -add "$K/$c:/usr/local/bin/$c" -env "$path"
done
proxy_adds=(-add "$K/kube-proxy:/usr/local/bin/kube-proxy" -add "$(command -v conntrack):/usr/sbin/conntrack")
for n in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
	proxy_adds+=(-add "/usr/sbin/xtables-nft-multi:/usr/sbin/$n")
done
xtables_adds=()
for so in /usr/lib/x86_64-linux-gnu/xtables/*.so; do xtables_adds+=(-add "$so:$so"); done
proxy_adds+=("${xtables_adds[@]}")
mk -ref "$(image_of kube-proxy)" -out "$imgs/kube-proxy.tar" "${proxy_adds[@]}" -env "$path"
mk -ref "$etcd_ref" -out "$imgs/etcd.tar" -add "$work/bin/etcd-$etcd_version:/usr/local/bin/etcd" -env "$path"
mk -ref "$coredns_ref" -out "$imgs/coredns.tar" -add "$work/bin/coredns-$coredns_version:/coredns" -entrypoint /coredns
mk -ref migflex.local/kind-cni:1 -out "$imgs/kind-cni.tar" -add "$(command -v bash):/bin/bash" \
	-add "$(command -v ip):/usr/sbin/ip" -add "$(command -v sleep):/usr/bin/sleep" -add "$(command -v mv):/usr/bin/mv" \
	-add "/usr/sbin/xtables-nft-multi:/usr/sbin/iptables" "${xtables_adds[@]}" \
	-add "$K/kubectl:/usr/local/bin/kubectl" -env "$path"

# Binaries, files, units.
install -m 0755 "$K/kubeadm" "$K/kubelet" "$K/kubectl" "$root/usr/bin/"
install -m 0755 "$HACK_KIND/files/entrypoint" "$root/usr/local/bin/entrypoint"
install -m 0755 "$HACK_DOCKER/runc-bounded.sh" "$root/usr/local/bin/runc-bounded"
install -m 0755 "$CONTAINERD_BIN/containerd" "$CONTAINERD_BIN/containerd-shim-runc-v2" "$CONTAINERD_BIN/ctr" "$root/usr/local/bin/"
mkdir -p "$root/etc/containerd"
sed "s|@PAUSE_IMAGE@|$pause_ref|" "$HACK_KIND/files/containerd-config.toml" >"$root/etc/containerd/config.toml"
install -D -m 0644 "$HACK_KIND/files/containerd.service" "$root/etc/systemd/system/containerd.service"
install -D -m 0644 "$HACK_KIND/files/kubelet.service" "$root/etc/systemd/system/kubelet.service"
install -D -m 0644 "$HACK_KIND/files/10-kubeadm.conf" "$root/etc/systemd/system/kubelet.service.d/10-kubeadm.conf"
install -D -m 0644 "$HACK_KIND/files/migflex-kind-images.service" "$root/etc/systemd/system/migflex-kind-images.service"
install -D -m 0644 "$HACK_KIND/files/default-cni.yaml" "$root/kind/manifests/default-cni.yaml"
echo "$K8S_VERSION" >"$root/kind/version"
mkdir -p "$root/etc/kubernetes/manifests" "$root/etc/cni/net.d" "$root/etc/systemd/system/multi-user.target.wants"
for u in kubelet.service migflex-kind-images.service containerd.service; do
	ln -sfn "/etc/systemd/system/$u" "$root/etc/systemd/system/multi-user.target.wants/$u"
done
ln -sfn /lib/systemd/system/multi-user.target "$root/etc/systemd/system/default.target"
# Nothing of a real machine's boot that a container must not do.
for u in systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket getty@tty1.service \
	systemd-binfmt.service systemd-modules-load.service sys-kernel-config.mount; do
	ln -sfn /dev/null "$root/etc/systemd/system/$u"
done
echo ReadKMsg=no >>"$root/etc/systemd/journald.conf"
printf 'net.ipv4.ip_forward=1\n' >"$root/etc/sysctl.d/10-kind.conf"
: >"$root/etc/machine-id"

log "importing $NODE_IMAGE"
tar -C "$root" --numeric-owner -cf - . | d import \
	-c 'ENTRYPOINT ["/usr/local/bin/entrypoint"]' -c 'ENV container=docker' \
	- "$NODE_IMAGE" >/dev/null
log "built $NODE_IMAGE"
