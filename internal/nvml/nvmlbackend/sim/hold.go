package sim

import (
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// holdPoll is how often a held change looks for the hold file. Nothing
// signals the file across processes; a test hook need not be faster.
const holdPoll = 20 * time.Millisecond

// hold implements Config.HoldFile: it counts changes and blocks those past
// the first `after` until the file exists or the simulator is closed.
type hold struct {
	file  string
	after int64

	changes  atomic.Int64
	waiting  atomic.Int32
	released atomic.Bool
	closed   chan struct{}
	once     sync.Once
}

func newHold(file string, after int) *hold {
	return &hold{file: file, after: int64(after), closed: make(chan struct{})}
}

// wait returns at once for the first `after` changes, then only once the
// hold file exists or close was called.
func (h *hold) wait() {
	if h.changes.Add(1) <= h.after || h.released.Load() {
		return
	}
	h.waiting.Add(1)
	defer h.waiting.Add(-1)
	logged := false
	for {
		if _, err := os.Stat(h.file); err == nil {
			h.released.Store(true)
			return
		}
		if !logged {
			logger().Info("Holding MIG change until the hold file exists", "file", h.file, "changesLetThrough", h.after)
			logged = true
		}
		select {
		case <-h.closed:
			return
		case <-time.After(holdPoll):
		}
	}
}

func (h *hold) close() { h.once.Do(func() { close(h.closed) }) }
