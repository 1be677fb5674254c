package nvmlcalltest

import "sync"

// Blocker is a fake NVML call per key that counts its calls; a call on a
// blocked key waits until the test releases the key.
type Blocker[K comparable] struct {
	mu      sync.Mutex
	calls   map[K]int
	block   map[K]chan struct{}
	entered chan K
}

// NewBlocker returns a Blocker whose calls on the keys blocked wait.
func NewBlocker[K comparable](blocked ...K) *Blocker[K] {
	b := &Blocker[K]{calls: map[K]int{}, block: map[K]chan struct{}{}, entered: make(chan K, 100)}
	for _, k := range blocked {
		b.block[k] = make(chan struct{})
	}
	return b
}

// Call is the fake call on key: it is counted, said on Entered, and
// waits while key is blocked.
func (b *Blocker[K]) Call(key K) error {
	b.mu.Lock()
	b.calls[key]++
	ch := b.block[key]
	b.mu.Unlock()
	b.entered <- key
	if ch != nil {
		<-ch
	}
	return nil
}

// Entered gets the key of each call as it enters.
func (b *Blocker[K]) Entered() <-chan K { return b.entered }

// Release ends the waits of the calls on key, and of those to come.
func (b *Blocker[K]) Release(key K) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ch := b.block[key]; ch != nil {
		close(ch)
		delete(b.block, key)
	}
}

// Count is how many calls on key were made.
func (b *Blocker[K]) Count(key K) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[key]
}
