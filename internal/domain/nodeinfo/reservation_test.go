package nodeinfo

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestReservationRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	r := Reservation{Pod: "ml/train", UID: "u-1", GPUs: []int{0, 2, 5}, Since: at, Ready: at.Add(time.Minute), Deadline: at.Add(3 * time.Minute)}
	s, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseReservation(s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("round trip: got %+v, want %+v", got, r)
	}
	if want := "GPUs 0, 2, 5 reserved for pod ml/train until 2026-12-02T18:03:00Z"; r.String() != want {
		t.Errorf("String() = %q, want %q", r.String(), want)
	}
	if !r.Active(at.Add(2*time.Minute)) || r.Active(at.Add(3*time.Minute)) {
		t.Error("Active: want true before the deadline, false from it")
	}
}

func TestParseReservationRejects(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"not JSON", "{", "is not a reservation"},
		{"unknown field", `{"pod":"a/b","gpus":[0],"deadline":"2026-12-02T18:00:00Z","node":"x"}`, "unknown field"},
		{"pod without namespace", `{"pod":"b","gpus":[0],"deadline":"2026-12-02T18:00:00Z"}`, `pod "b" is not namespace/name`},
		{"no GPU", `{"pod":"a/b","gpus":[],"deadline":"2026-12-02T18:00:00Z"}`, "holds no GPU"},
		{"negative GPU", `{"pod":"a/b","gpus":[-1],"deadline":"2026-12-02T18:00:00Z"}`, "negative"},
		{"unordered", `{"pod":"a/b","gpus":[2,1],"deadline":"2026-12-02T18:00:00Z"}`, "increasing order"},
		{"no deadline", `{"pod":"a/b","gpus":[0]}`, "no deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseReservation(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseReservation(%s) = %v, want an error with %q", tc.in, err, tc.want)
			}
		})
	}
	if _, err := (Reservation{Pod: "a/b"}).Encode(); err == nil {
		t.Error("Encode of a reservation without GPUs or deadline: no error")
	}
}
