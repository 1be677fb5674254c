package sim

import (
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// supportedEvents are the event types the simulator can produce.
const supportedEvents = uint64(nvml.EventTypeXidCriticalError)

// eventSet is an nvml.EventSet. Events reach it only after a GPU registers
// with it, and queue until Wait takes them.
type eventSet struct {
	//lint:ignore U1000 every method is modelled today; the base answers any method a go-nvml upgrade adds
	unsupportedEventSet
	lib *Lib

	mu     sync.Mutex
	masks  map[int]uint64 // registered event types by GPU index
	queue  []nvml.EventData
	freed  bool
	wake   chan struct{} // capacity 1: an event was queued
	closed chan struct{} // closed by Free
}

var _ nvml.EventSet = (*eventSet)(nil)

func (l *Lib) EventSetCreate() (nvml.EventSet, nvml.Return) {
	if r := l.begin(); r != nvml.SUCCESS {
		return nil, r
	}
	defer l.mu.Unlock()
	s := &eventSet{lib: l, masks: map[int]uint64{}, wake: make(chan struct{}, 1), closed: make(chan struct{})}
	l.eventSets[s] = struct{}{}
	return s, nvml.SUCCESS
}

// RegisterEvents starts recording eventTypes of this GPU into set. Event
// types the simulator cannot produce make the call fail with
// ERROR_NOT_SUPPORTED and register nothing, as NVML documents; callers mask
// with GetSupportedEventTypes first.
func (h *gpuHandle) RegisterEvents(eventTypes uint64, set nvml.EventSet) nvml.Return {
	if _, _, r := h.begin(); r != nvml.SUCCESS {
		return r
	}
	defer h.lib.mu.Unlock()
	s, ok := set.(*eventSet)
	if !ok || s == nil || s.lib != h.lib || eventTypes == 0 {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if eventTypes&^supportedEvents != 0 {
		return nvml.ERROR_NOT_SUPPORTED
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freed {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	s.masks[h.index] |= eventTypes
	return nvml.SUCCESS
}

// Wait returns the oldest queued event, or waits up to timeoutMs for one and
// returns ERROR_TIMEOUT when none arrives. Wait on a freed set, or one freed
// while waiting, answers ERROR_INVALID_ARGUMENT. With nothing queued and a
// GPU registered with the set off the bus, it answers ERROR_GPU_IS_LOST, as
// nvml.h documents (the GPU's Xid 79 comes first).
func (s *eventSet) Wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	if r := s.lib.begin(); r != nvml.SUCCESS {
		return nvml.EventData{}, r
	}
	s.lib.mu.Unlock()
	var timeout <-chan time.Time
	for {
		s.mu.Lock()
		switch {
		case s.freed:
			s.mu.Unlock()
			return nvml.EventData{}, nvml.ERROR_INVALID_ARGUMENT
		case len(s.queue) > 0:
			e := s.queue[0]
			s.queue = s.queue[1:]
			s.mu.Unlock()
			return e, nvml.SUCCESS
		}
		gpus := make([]int, 0, len(s.masks))
		for g := range s.masks {
			gpus = append(gpus, g)
		}
		s.mu.Unlock()
		if s.lib.anyLost(gpus) {
			return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST
		}
		if timeout == nil {
			if timeoutMs == 0 {
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
			t := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-s.wake:
		case <-s.closed:
		case <-timeout:
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
	}
}

func (s *eventSet) Free() nvml.Return {
	l := s.lib
	if r := l.begin(); r != nvml.SUCCESS {
		return r
	}
	defer l.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freed {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	s.freed = true
	s.queue = nil
	close(s.closed)
	delete(l.eventSets, s)
	return nvml.SUCCESS
}

// anyLost reports whether a GPU of gpus is off the bus.
func (l *Lib) anyLost(gpus []int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, g := range gpus {
		if l.st.GPUs[g].Lost {
			return true
		}
	}
	return false
}

// push queues e if the set recorded its type for GPU gpu.
func (s *eventSet) push(gpu int, e nvml.EventData) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freed || s.masks[gpu]&e.EventType == 0 {
		return
	}
	s.queue = append(s.queue, e)
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
