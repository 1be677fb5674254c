package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/migflex/migflex/internal/domain/nodeinfo"
	"github.com/migflex/migflex/internal/domain/sharing"
)

// Sharer is a Server that can share devices between pods (the device
// plugin: time-slicing and MPS replicas). The agent finds it on its
// Server by type assertion.
type Sharer interface {
	// Share serves the devices under cfg (nil shares nothing). When cfg
	// cannot apply to the devices served now it returns why, and what
	// was served stays served.
	Share(ctx context.Context, cfg *sharing.Config) error
}

// replicaServer is a Server that serves shared devices as replicas (the
// device plugin): Replicas says, by device ID, the resource and the number
// of each shared device's replicas.
type replicaServer interface {
	Replicas() map[string]nodeinfo.Shared
}

// sharedDevices is how each device the server shares is served, with
// how many of its replicas pods hold (byID, the kubelet's assignments by
// the device IDs served); nil when the server shares none.
func sharedDevices(srv Server, byID map[string][]string) map[string]nodeinfo.Shared {
	rs, ok := srv.(replicaServer)
	if !ok {
		return nil
	}
	shared := rs.Replicas()
	for id := range byID {
		if dev, _, ok := sharing.SplitReplicaID(id); ok {
			if s, ok := shared[dev]; ok {
				s.InUse++
				shared[dev] = s
			}
		}
	}
	return shared
}

// Event reasons of the sharing config.
const (
	// ReasonSharingApplied: the devices are served under a (new) sharing
	// config.
	ReasonSharingApplied = "SharingConfigApplied"
	// ReasonSharingInvalid: the sharing config could not be read, parsed,
	// selected or applied; the node keeps serving what it served.
	ReasonSharingInvalid = "SharingConfigInvalid"
)

// sharingInput is what one read of the sharing config found: the config
// (nil on error), the error, and a key that changes when either does.
type sharingInput struct {
	name string
	cfg  *sharing.Config
	err  error
	key  string
}

// readSharing reads Options.SharingConfig for node: a file is the config
// itself; a directory (a mounted ConfigMap) holds named configs, one per
// file, of which the node's nvidia.com/device-plugin.config label, else
// Options.SharingDefault, else NVIDIA's fallbacks (a config named
// "default", the only config) picks one, as NVIDIA's config manager does.
func (a *Agent) readSharing(node *corev1.Node) sharingInput {
	path := a.opts.SharingConfig
	label := node.Labels[sharing.LabelConfig]
	fi, err := os.Stat(path)
	if err != nil {
		return sharingErr(fmt.Errorf("reading the sharing config: %w", err))
	}
	if !fi.IsDir() {
		data, err := os.ReadFile(path)
		if err != nil {
			return sharingErr(fmt.Errorf("reading the sharing config: %w", err))
		}
		cfg, err := sharing.Parse(data)
		if err != nil {
			return sharingErr(fmt.Errorf("%s: %w", path, err))
		}
		return sharingInput{name: filepath.Base(path), cfg: cfg, key: "file:" + digest(data)}
	}
	name, cfg, err := sharing.Load(os.DirFS(path), label, sharing.Selector{Default: a.opts.SharingDefault, Fallbacks: sharing.DefaultFallbacks})
	if err != nil {
		return sharingErr(fmt.Errorf("%s: %w", path, err))
	}
	data, _ := os.ReadFile(filepath.Join(path, name)) // already read by Load; only for the key
	return sharingInput{name: name, cfg: cfg, key: "dir:" + name + ":" + digest(data)}
}

func sharingErr(err error) sharingInput { return sharingInput{err: err, key: "error:" + err.Error()} }

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// applySharing serves the devices under the sharing config node selects
// when it changed since the last call. A config that cannot be read,
// parsed, selected or applied is logged and recorded as a Warning Event
// once per change, and the node keeps serving what it served: a bad edit
// never takes devices away from pods. Without Options.SharingConfig, or
// with a Server that cannot share, it does nothing.
func (a *Agent) applySharing(ctx context.Context, node *corev1.Node) {
	sh, ok := a.opts.Server.(Sharer)
	if a.opts.SharingConfig == "" || !ok {
		return
	}
	in := a.readSharing(node)
	if in.key == a.sharingKey {
		return
	}
	a.sharingKey = in.key
	err := in.err
	if err == nil {
		if err = sh.Share(ctx, in.cfg); err == nil {
			a.log.Info("Serving under the sharing config", "config", in.name, "strategy", in.cfg.Strategy, "resources", len(in.cfg.Resources))
			a.recordEvent(ctx, node, event{Type: corev1.EventTypeNormal, Reason: ReasonSharingApplied,
				Message: fmt.Sprintf("serving the devices under sharing config %q (%s, %d shared resources)", in.name, in.cfg.Strategy, len(in.cfg.Resources))})
			return
		}
	}
	a.countError(stageSharing)
	a.log.Error(err, "Sharing config not applied; the node keeps serving what it served")
	a.recordEvent(ctx, node, event{Type: corev1.EventTypeWarning, Reason: ReasonSharingInvalid,
		Message: fmt.Sprintf("sharing config not applied, the node keeps serving what it served: %v", err)})
}

// sharingStartTimeout bounds the read of the Node at start (see
// applySharingAtStart).
const sharingStartTimeout = 5 * time.Second

// applySharingAtStart applies the sharing config before the first Serve,
// so that a restarted agent serves the replicas pods hold at once instead
// of the devices whole until its first reconcile. The config may depend
// on the Node's label: without the Node (API server unreachable) it waits
// for that reconcile.
func (a *Agent) applySharingAtStart(ctx context.Context) {
	if _, ok := a.opts.Server.(Sharer); a.opts.SharingConfig == "" || !ok {
		return
	}
	ctx2, cancel := context.WithTimeout(ctx, sharingStartTimeout)
	defer cancel()
	node, err := a.opts.Client.CoreV1().Nodes().Get(ctx2, a.opts.NodeName, metav1.GetOptions{})
	if err != nil {
		a.log.Info("Reading the Node for its sharing config; it applies at the first reconcile", "err", err)
		return
	}
	a.applySharing(ctx, node)
}
