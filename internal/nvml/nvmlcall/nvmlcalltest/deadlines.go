// Package nvmlcalltest has what tests of guarded NVML calls share: the
// deadlines they give nvmlcall.Options.After, which pass when the test
// says so, never by the wall clock, and a fake call that blocks until the
// test releases it.
package nvmlcalltest

import (
	"sync"
	"time"
)

// Deadlines are deadlines that pass when the test says so (Pass). The
// zero value is ready.
type Deadlines struct {
	mu  sync.Mutex
	chs []chan time.Time
}

// After is nvmlcall.Options.After.
func (d *Deadlines) After(time.Duration) <-chan time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	ch := make(chan time.Time, 1)
	d.chs = append(d.chs, ch)
	return ch
}

// Pass ends every deadline set so far.
func (d *Deadlines) Pass() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ch := range d.chs {
		ch <- time.Now()
	}
	d.chs = nil
}

// Waiting is how many deadlines are set and not passed.
func (d *Deadlines) Waiting() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.chs)
}
