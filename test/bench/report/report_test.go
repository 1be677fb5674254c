package report

import (
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                         "0",
		1500 * time.Nanosecond:    "2µs",
		999 * time.Microsecond:    "999µs",
		1234 * time.Microsecond:   "1.23ms",
		12345 * time.Microsecond:  "12.3ms",
		123456 * time.Microsecond: "123ms",
		1500 * time.Millisecond:   "1.50s",
		90 * time.Second:          "90.0s",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", time.Duration(d), got, want)
		}
	}
}
