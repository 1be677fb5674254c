// Package deviceplugin serves a node's GPUs and MIG devices to the kubelet
// over the device-plugin API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1).
//
// The Manager is the node agent's server of the devices (agent.Server):
// it serves a GPU layout (Serve, Servable), drains devices before their
// GPU changes, says what it serves with each device's health (Served),
// gives the Node GPU feature discovery's labels (Labels), and tells
// whether the scheduler sees the layout yet (Visible: the kubelet
// publishes device-plugin resources in the Node's allocatable at its next
// node status update). The MIG strategy is its alone.
//
// It has three layers, each with one job:
//
//   - Resources (resources.go) is pure: it names the devices of a GPU
//     layout ([]mig.GPU) as Kubernetes resources under a MIG strategy.
//   - Manager (manager.go) diffs resource sets on every Update and runs one
//     server per resource; it re-registers everything when the kubelet
//     restarts (an fsnotify watch on the plugin directory) and feeds device
//     health from the node's HealthSource, which its owner runs, into the
//     servers.
//   - server (server.go) speaks the kubelet protocol for one resource on its
//     own socket: Register, GetDevicePluginOptions, ListAndWatch, Allocate
//     (allocate.go) and GetPreferredAllocation (preferred.go).
//
// Share (share.go) applies a sharing config in NVIDIA's format
// (internal/domain/sharing): a shared device is served as its replicas,
// <uuid>::<n>, which Allocate, health, draining and Served map back to the
// device underneath (Device.Underlying).
//
// A resource is never unregistered while the process lives: when a layout
// change removes its last device it keeps serving an empty list, so the
// kubelet sets its capacity to 0 at once instead of waiting out the grace
// period of a vanished plugin.
//
// The kubeletstub subpackage is a kubelet stand-in for tests over real unix
// sockets.
package deviceplugin
