package nodeinfo

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// AnnotationReservation is where the planner writes the reservation it
// holds on a node (internal/planner/reserve): some of its GPUs kept for one
// pod that waits for several whole GPUs, as JSON (Reservation). The agent
// withholds those GPUs' free devices from every other pod (the device
// plugin from the kubelet; a DRA node with a NoSchedule device taint in
// its ResourceSlices) until the reservation's GPUs are all free and whole,
// then offers them at once; it honours
// the deadline itself, so a planner that stopped strands no node. The
// planner writes it under its own field manager for reservations and
// removes it when the reservation ends.
const AnnotationReservation = "migflex.io/reservation"

// Reservation is a node's GPUs held for one pod.
type Reservation struct {
	// Pod is the pod's namespace/name, UID its UID (empty where unknown).
	Pod string    `json:"pod"`
	UID types.UID `json:"uid,omitempty"`
	// GPUs are the indexes of the GPUs held, in order.
	GPUs []int `json:"gpus"`
	// Since is when the reservation was made, Ready when its GPUs were
	// expected free, Deadline when it lapses.
	Since    time.Time `json:"since"`
	Ready    time.Time `json:"ready"`
	Deadline time.Time `json:"deadline"`
}

// Encode is the annotation's value.
func (r Reservation) Encode() (string, error) {
	if err := r.validate(); err != nil {
		return "", err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("encoding the reservation: %w", err)
	}
	return string(b), nil
}

// ParseReservation reads the annotation's value; an error says what is
// wrong with it.
func ParseReservation(s string) (Reservation, error) {
	var r Reservation
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Reservation{}, fmt.Errorf("%s is not a reservation: %w", AnnotationReservation, err)
	}
	if err := r.validate(); err != nil {
		return Reservation{}, fmt.Errorf("%s: %w", AnnotationReservation, err)
	}
	return r, nil
}

// Active tells whether the reservation still holds at now: before its
// deadline.
func (r Reservation) Active(now time.Time) bool { return now.Before(r.Deadline) }

func (r Reservation) validate() error {
	var errs []error
	if ns, name, ok := strings.Cut(r.Pod, "/"); !ok || ns == "" || name == "" {
		errs = append(errs, fmt.Errorf("pod %q is not namespace/name", r.Pod))
	}
	if len(r.GPUs) == 0 {
		errs = append(errs, errors.New("it holds no GPU"))
	}
	for i, g := range r.GPUs {
		if g < 0 {
			errs = append(errs, fmt.Errorf("GPU index %d is negative", g))
		}
		if i > 0 && g <= r.GPUs[i-1] {
			errs = append(errs, fmt.Errorf("GPU indexes %v are not in increasing order", r.GPUs))
			break
		}
	}
	if r.Deadline.IsZero() {
		errs = append(errs, errors.New("it has no deadline"))
	}
	return errors.Join(errs...)
}

// Holds tells whether the reservation holds GPU index gpu.
func (r Reservation) Holds(gpu int) bool { return slices.Contains(r.GPUs, gpu) }

// String says what is reserved, for whom and until when, in words.
func (r Reservation) String() string {
	what := "GPU"
	if len(r.GPUs) > 1 {
		what = "GPUs"
	}
	gpus := make([]string, len(r.GPUs))
	for i, g := range r.GPUs {
		gpus[i] = fmt.Sprint(g)
	}
	return fmt.Sprintf("%s %s reserved for pod %s until %s", what, strings.Join(gpus, ", "), r.Pod, r.Deadline.UTC().Format(time.RFC3339))
}
