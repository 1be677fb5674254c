package agent

import (
	"maps"

	"github.com/migflex/migflex/internal/platform/textcut"
)

// The keys the agent reads and writes on its Node, their values and the
// annotations' JSON are the Node contract's (internal/domain/nodeinfo); the labels
// that describe the devices are the server's (Server.Labels).

// maxMessageLength bounds the reason annotation and Event messages: a
// document with many mistakes yields a long error, and a Node is read by
// every kubelet heartbeat watcher in the cluster.
const maxMessageLength = 4096

// truncate cuts s to maxMessageLength bytes on a rune boundary, saying so.
func truncate(s string) string { return textcut.Bytes(s, maxMessageLength, " ... (truncated)") }

// servedHealth is the health of every served device, by device ID.
func servedHealth(served map[string]map[string]bool) map[string]bool {
	out := map[string]bool{}
	for _, devs := range served {
		maps.Copy(out, devs)
	}
	return out
}
