package report

import (
	"errors"
	"io"
	"os"
	"path/filepath"
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

func TestWrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out") // created by Write
	r := struct{ N int }{N: 3}
	if err := Write(dir, "x", r, func(w io.Writer) error {
		_, err := io.WriteString(w, "| n |\n| 3 |\n")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"x.json": "{\n  \"N\": 3\n}\n", "x.md": "| n |\n| 3 |\n"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}

	failing := errors.New("table broke")
	if err := Write(dir, "y", r, func(io.Writer) error { return failing }); !errors.Is(err, failing) {
		t.Errorf("Write with a failing markdown writer = %v, want its error", err)
	}
}
